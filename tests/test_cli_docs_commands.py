"""Every ``slics …`` command shown in README.md and docs/*.md parses: the docs show only options the command
line takes (issue 30, item 4).

Commands are read from code blocks (continuation lines joined, comments cut): each is given to the real
parser (``slics_core.cli.build_parser``) and only parsed, never run. Inline code spans that start with
``slics`` name a command in prose (``slics align --workspace``), often without its required parts:
their command and every option they name must exist. Synopsis brackets are read as optional parts:
``[--cache-dir DIR]`` is parsed as given, ``[same options]`` is left out; ``…`` stands for arguments left
out.
"""
import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from slics_core.cli import build_parser
from slics_core.commands import COMMANDS

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: Words that stand for something left out in a synopsis.
_ELLIPSIS = {"…", "...", "[…]", "[...]"}
_ENV = re.compile(r"^[A-Z_][A-Z0-9_]*=")


def _snippets(text: str):
    """``(shell text, whole)`` of the code blocks' lines (whole commands) and of the inline code spans of
    ``text`` (named in prose)."""
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.S | re.M)
    for block in blocks:
        yield from ((line, True) for line in re.sub(r"\\\n\s*", " ", block).splitlines())
    prose = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.S | re.M)
    yield from ((span, False) for span in re.findall(r"`([^`\n]+)`", prose))


def _command(line: str):
    """The arguments after ``slics`` of the command on ``line`` (None when it runs no ``slics`` command)."""
    line = re.split(r"\s#|^#", line)[0]
    for part in re.split(r"&&|;|\|\||\||\$\(|\)", line):
        try:
            words = shlex.split(part.replace("[", " [ ").replace("]", " ] "))
        except ValueError:
            continue
        while words and _ENV.match(words[0]):
            words = words[1:]
        if words[:1] != ["slics"]:
            continue
        out, i = [], 1
        while i < len(words):
            if words[i] == "[":  # an optional part: kept when it is options, else left out
                j = words.index("]", i)
                if words[i + 1].startswith("-"):
                    out += [w for w in words[i + 1:j] if w not in _ELLIPSIS]
                i = j + 1
                continue
            if words[i] in (">", "2>", "<") or words[i].startswith((">", "2>")):
                break
            if words[i] not in _ELLIPSIS:
                out.append(words[i])
            i += 1
        return out
    return None


def _documented_commands():
    found = []
    for path in DOCS:
        for snippet, whole in _snippets(path.read_text(encoding="utf-8")):
            args = _command(snippet)
            if args is not None:
                found.append(pytest.param(args, whole, id=f"{path.relative_to(ROOT)}: slics {' '.join(args)}"[:120]))
    return found


COMMANDS_SHOWN = _documented_commands()


def test_the_docs_show_commands():
    shown = {p.values[0][0] for p in COMMANDS_SHOWN if p.values[1] and p.values[0]}
    assert {"emoji-build", "embed", "workspace", "align", "download", "reproduce", "evaluate"} <= shown


def test_reader_cuts_what_is_not_the_command():
    assert _command("SLICS_EMOJI_SCALE=0.2 slics reproduce --dataset emoji --out-dir /tmp/r  # note") == [
        "reproduce", "--dataset", "emoji", "--out-dir", "/tmp/r"]
    assert _command("slics emoji-build [--cache-dir DIR] [same options] > log") == ["emoji-build", "--cache-dir", "DIR"]
    assert _command("slics download …") == ["download"]
    assert _command("pip install slics-explorer") is None


def _subparser(name):
    parser = build_parser()
    return next(a for a in parser._actions if a.dest == "command").choices[name]


@pytest.mark.parametrize("args,whole", COMMANDS_SHOWN)
def test_documented_command_parses(args, whole):
    shown = f"`slics {' '.join(args)}`"
    if args and args[0] in COMMANDS and COMMANDS[args[0]].passthrough:
        return  # `slics app` hands its options to Streamlit
    if args and args[0].isupper():
        return  # `slics CMD`: a placeholder for any command
    if args and args[0] not in COMMANDS and not args[0].startswith("-"):
        pytest.fail(f"{shown}: no command {args[0]!r}")
    if not whole:  # named in prose: the command and its options exist
        top = not args or args[0].startswith("-")
        known = (build_parser() if top else _subparser(args[0]))._option_string_actions
        unknown = [w.split("=")[0] for w in args[int(not top):] if w.startswith("-") and w.split("=")[0] not in known]
        assert not unknown, f"{shown}: {args[0]} has no option {unknown}"
        return
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            build_parser().parse_args(args)
        except SystemExit as exc:
            assert exc.code == 0, f"{shown}: {err.getvalue().strip().splitlines()[-1]}"


#: Options whose value is a file or folder the command writes.
_WRITES = ("--out-dir", "--cache", "--out", "-o", "--output", "--cache-dir", "--contact-sheet")


def _written_paths():
    paths = set()
    for p in COMMANDS_SHOWN:
        args = p.values[0]
        for option, value in zip(args, args[1:]):
            if option in _WRITES and not value.startswith(("/", "~", "$")) and not value.isupper():
                paths.add(value.rstrip("/"))
    return sorted(paths)


def test_what_documented_commands_write_in_a_checkout_is_ignored():
    """Run in a checkout, README's and the docs' commands leave nothing untracked (their output is ignored)."""
    import shutil
    import subprocess

    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    paths = _written_paths()
    assert "emoji-run" in paths  # README's offline reproduce run
    # a file inside each written folder (or the file itself) is ignored
    probe = [f"{p}/x" for p in paths] + paths
    res = subprocess.run(["git", "check-ignore", "--no-index", *probe], cwd=ROOT, capture_output=True, text=True)
    ignored = set(res.stdout.split())
    assert [p for p in paths if p not in ignored and f"{p}/x" not in ignored] == []

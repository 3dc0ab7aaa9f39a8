"""``slics --version``, ``models``, ``download``, every ``--help``, bad options and missing weights answer
without heavy imports.

Each case runs the real command line in a fresh interpreter with
``python -X importtime`` and reads, from that report, which modules were
imported: torch, open_clip, transformers, scikit-learn, SciPy and pandas must
not be among them. No timing is asserted (speed is measured in the README).
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures_models import fake_hub_file

from slics_core import weights
from slics_core.cli import build_parser, check_encoder_weights, main
from slics_core.commands import COMMANDS, CLIError, command_function

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "open_clip", "transformers", "sklearn", "scipy", "pandas", "diffusers", "ray", "numba")
_IMPORT_LINE = re.compile(r"^import time:\s+\d+\s+\|\s+\d+\s+\|\s*(\S+)\s*$")


def _run_cli(args, tmp_path):
    """Run ``python -X importtime -m slics_core ARGS`` offline with an empty weight cache.

    Returns (exit code, stdout, stderr without the import report, imported top-level packages).
    """
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = dict(os.environ, HF_HUB_OFFLINE="1", HOME=str(home), HF_HOME=str(home / "hf"),
               HF_HUB_CACHE=str(home / "hf" / "hub"), PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "slics_core", *args], cwd=ROOT, env=env,
                          check=False, capture_output=True, text=True, timeout=300)
    imported, other = set(), []
    for line in proc.stderr.splitlines():
        m = _IMPORT_LINE.match(line)
        if m:
            imported.add(m.group(1).split(".")[0])
        elif not line.startswith("import time:"):
            other.append(line)
    return proc.returncode, proc.stdout, "\n".join(other), imported


def test_importtime_report_is_read(tmp_path):
    """The parser of ``-X importtime`` sees heavy imports when there are some (so the tests below can fail)."""
    code, _, _, imported = _run_cli(["fit", "--cache", str(tmp_path / "none"), "--out", "m.npz"], tmp_path)
    assert code == 2  # no cache there, reported after the fit command's module (scikit-learn, SciPy) was imported
    assert "slics_core" in imported and "numpy" in imported and "scipy" in imported and "sklearn" in imported


@pytest.mark.parametrize("command", [None, *sorted(COMMANDS)])
def test_help_imports_nothing_heavy(command, tmp_path):
    """``slics --help`` and ``slics COMMAND --help`` are as light as ``--version``."""
    code, out, err, imported = _run_cli([c for c in (command, "--help") if c], tmp_path)
    assert code == 0, err
    assert out.startswith(f"usage: slics {command or ''}".rstrip()), out[:200]
    assert not set(HEAVY) & imported, sorted(set(HEAVY) & imported)


@pytest.mark.parametrize("args,culprit", [
    (["embed", "--dataset", "emoji", "--cache", "c", "--batch-size", "0"], "--batch-size must be at least 1; got 0"),
    (["embed", "--dataset", "emoji", "--cache", "c", "--encoder", "no such encoder"], "unknown encoder 'no such"),
    (["embed", "--dataset", "emoji", "--cache", "c", "--backend", "ray", "--concurrency", "0"],
     "--concurrency must be at least 1; got 0"),
    (["embed", "--dataset", "emoji", "--cache", "c", "--address", "auto"], "--address: only with --backend ray"),
    (["reproduce", "--dataset", "emoji", "--out-dir", "o", "--embed-batch-size", "-3"], "--embed-batch-size must"),
    (["reproduce", "--dataset", "emoji", "--out-dir", "o", "--encoder", "nonsense"], "unknown encoder 'nonsense'"),
    (["workspace", "--cache", "tests", "--align-encoder", "nonsense", "--generator", "sd-1.5"],
     "--align-encoder: unknown"),
    (["evaluate", "--cache", "c", "--k", "0"], "--k must be at least 1; got 0"),
    (["emoji-build", "--n-pool", "0"], "--n-pool must be at least 1; got 0"),
    (["fit", "--cache", "c", "--out", "m.npz", "--batch-size", "0"], "--batch-size must be at least 1; got 0"),
    (["fit", "--cache", "c", "--out", "m.npz", "--n-jobs", "0"], "--n-jobs must be a non-zero int"),
    # paths, names and combinations (issue 40: these waited for scikit-learn, SciPy, numba, pandas or torch)
    (["embed", "--dataset", "folder", "--images", "no-such-folder", "--cache", "c", "--encoder", "emoji-small"],
     "--images 'no-such-folder': no such folder"),
    (["embed", "--dataset", "folder", "--images", "tests", "--cache", "c", "--encoder", "NoSuch/xyz"],
     "unknown open_clip model 'NoSuch'"),
    (["embed", "--dataset", "folder", "--images", "tests", "--cache", "c", "--encoder", "ViT-B-31/openai"],
     "did you mean ViT-B-32"),
    (["embed", "--dataset", "folder", "--images", "tests", "--cache", "c", "--encoder", "ViT-B-32/no-such.pt"],
     "checkpoint file"),
    (["embed", "--dataset", "folder", "--images", "tests", "--cache", "c"], "--dataset folder needs --encoder"),
    (["embed", "--dataset", "coco", "--images", "tests", "--cache", "c"], "--dataset coco needs --annotations"),
    (["embed", "--dataset", "folder", "--images", "tests", "--labels", "tests", "--cache", "c", "--encoder",
      "emoji-small"], "--labels 'tests' is a folder, not a label file"),
    (["embed", "--dataset", "emoji", "--cache", "c", "--transfer", "jpeg", "--backend", "ray"],
     "--transfer jpeg (decoding on the encoder's device) runs on the local backend only"),
    (["reproduce", "--dataset", "folder", "--images", "no-such-folder", "--out-dir", "o", "--encoder", "emoji-small"],
     "--images 'no-such-folder': no such folder"),
    (["workspace", "--cache", "tests", "--name", "a/b"], "--name: workspace name 'a/b' is not allowed"),
    (["workspace"], "needs --cache DIR"),
    (["workspace", "--cache", "no-such-cache"], "--cache 'no-such-cache': no such folder"),
    (["workspace", "--cache", "tests", "--pool-shards", "no-such-shards"], "--pool-shards 'no-such-shards'"),
    (["align"], "give SOURCE.npy TARGET.npy -o ALIGN.npz, or --workspace NAME"),
    (["align", "no-such-a.npy", "no-such-b.npy", "-o", "x.npz"], "SOURCE 'no-such-a.npy': no such file"),
    (["align", "--workspace", "w", "--align-pairs", "no-such.npz"], "--align-pairs 'no-such.npz': no such file"),
])
def test_bad_options_reported_before_heavy_imports(args, culprit, tmp_path):
    """Bad numbers and unknown encoder names are refused before torch, scikit-learn or the command's module."""
    code, out, err, imported = _run_cli(args, tmp_path)
    assert code == 2 and out == ""
    assert err.startswith(f"slics {args[0]}: error: ") and "\n" not in err and culprit in err, err
    assert not set(HEAVY) & imported, sorted(set(HEAVY) & imported)
    assert not (tmp_path / "o").exists()


def test_version_imports_nothing_heavy(tmp_path):
    code, out, err, imported = _run_cli(["--version"], tmp_path)
    from slics_core import __version__

    assert code == 0 and out.strip() == f"slics {__version__}", (out, err)
    assert not set(HEAVY) & imported, sorted(set(HEAVY) & imported)


def test_models_imports_nothing_heavy(tmp_path):
    code, out, err, imported = _run_cli(["models"], tmp_path)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split()[:2] == ["MODEL", "LIBRARY"]
    names = [line.split()[0] for line in lines[1:]]
    assert set(names) == set(weights.PRESETS) | {"emoji-small", "emoji-large", "emoji-generator"}
    # usable here first: the shipped emoji models; then every preset, absent from the empty cache of _run_cli
    assert names[:3] == ["emoji-small", "emoji-large", "emoji-generator"]
    assert [line.split()[2] for line in lines[1:]] == ["yes"] * 3 + ["no"] * len(weights.PRESETS)
    assert all("download: " in line for line in lines[4:])
    assert not set(HEAVY) & imported, sorted(set(HEAVY) & imported)


@pytest.mark.parametrize("name", ["ViT-B-32/openai", "dinov2-base", "sd-1.5"])
def test_download_missing_offline_imports_nothing_heavy(name, tmp_path):
    code, _, err, imported = _run_cli(["download", name], tmp_path)
    assert code == 2
    assert err.count("\n") == 0 and err.startswith("slics download: error: Cannot download"), err
    assert weights.PRESETS[name].repo_id in err
    assert not set(HEAVY) & imported, sorted(set(HEAVY) & imported)


@pytest.mark.parametrize("command", ["embed", "workspace", "captions", "reproduce"])
def test_missing_encoder_weights_reported_before_heavy_imports(command, tmp_path):
    args = {"embed": ["--dataset", "folder", "--images", str(tmp_path), "--cache", str(tmp_path / "c")],
            "workspace": ["--cache", str(tmp_path / "c")],
            "captions": ["--model", str(tmp_path / "m.npz"), "--cache", str(tmp_path / "c")],
            "reproduce": ["--dataset", "folder", "--images", str(tmp_path), "--out-dir", str(tmp_path / "o")]}
    code, _, err, imported = _run_cli([command, *args[command], "--encoder", "ViT-B-32/openai"], tmp_path)
    assert code == 2
    assert err.startswith(f"slics {command}: error: cannot load encoder 'ViT-B-32/openai': ") and "\n" not in err
    assert "`slics download ViT-B-32/openai`" in err
    assert not set(HEAVY) & imported, sorted(set(HEAVY) & imported)


def test_unknown_command_lists_all(tmp_path):
    code, _, err, _ = _run_cli(["no-such-command"], tmp_path)
    assert code == 2
    assert "invalid choice" in err and all(name in err for name in COMMANDS)


def test_commands_table_matches_the_parsers():
    """COMMANDS names every sub-command the parser has, with a function that runs it in the module named."""
    full = build_parser()
    sub = next(a for a in full._actions if a.dest == "command")
    assert set(sub.choices) == set(COMMANDS)
    for name, command in COMMANDS.items():
        assert callable(command_function(name)), name
        assert command_function(name).__module__ == f"slics_core.commands.{command.module}"


def test_every_command_and_option_says_what_it_does():
    """`slics COMMAND --help` opens with a description, and every option and argument has help text (issue 40:
    emoji-build had no description and several options of most commands none)."""
    full = build_parser()
    sub = next(a for a in full._actions if a.dest == "command")
    missing = {name: [a.option_strings[0] if a.option_strings else a.dest for a in parser._actions
                      if a.help is None or not str(a.help).strip()]
               for name, parser in sub.choices.items()}
    assert not {k: v for k, v in missing.items() if v}, missing
    assert all(parser.description and len(parser.description) > 20 for parser in sub.choices.values())


def test_no_arguments_prints_full_help(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in COMMANDS)


def test_preset_urls_are_open_clips():
    """The OpenAI URLs written into the presets (so open_clip is not imported to find them) are open_clip's."""
    open_clip = pytest.importorskip("open_clip")
    openai = [p for p in weights.list_presets() if p.kind == "open_clip"]
    assert openai
    for p in openai:
        assert p.url == open_clip.get_pretrained_cfg(p.arch, p.tag)["url"], p.name


def test_check_encoder_weights_same_message_as_the_command(tmp_path, monkeypatch):
    """The early check raises exactly what loading the encoder in the command would raise."""
    from slics_core.commands.data import resolve_encoder

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(weights, "_clip_url_cache", lambda preset: None)  # ignore a ~/.cache/clip copy
    for spec in ("ViT-B-32/openai", "vit-b-32/openai", "dinov2-base"):
        with pytest.raises(CLIError) as early:
            check_encoder_weights(spec)
        with pytest.raises(CLIError) as late:
            resolve_encoder(spec)
        assert str(early.value) == str(late.value)
        assert "not on this machine" in str(early.value)
    # names the early check leaves to the command: not presets, generators, nothing
    for spec in ("ViT-B-32/random@32", "emoji-small", "sd-1.5", None, "RN50/yfcc15m"):
        check_encoder_weights(spec)
    # what needs no import is refused at once: a missing local: folder or checkpoint, an architecture open_clip
    # does not ship (issue 40: it was said after torch and open_clip were imported)
    for spec, words in (("local:/nowhere", "no folder at /nowhere"), ("ViT-B-32//nowhere/w.pt", "does not exist"),
                        ("NoSuch/random", "unknown open_clip model 'NoSuch'"), ("NoSuch/xyz", "'NoSuch'")):
        with pytest.raises(CLIError, match=words):
            check_encoder_weights(spec)
    # a name no encoder form reads is refused at once, with the forms
    with pytest.raises(CLIError, match="unknown encoder 'no such encoder': use a preset"):
        check_encoder_weights("no such encoder")


def test_check_encoder_weights_passes_when_on_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path))
    preset = weights.PRESETS["RN50/openai"]
    fake_hub_file(tmp_path, preset.repo_id, "open_clip_model.safetensors", data=b"w")
    check_encoder_weights("RN50/openai")  # no error: the command goes on to load it


def test_find_preset_never_guesses():
    assert weights.find_preset("ViT-B-32/openai") is weights.PRESETS["ViT-B-32/openai"]
    assert weights.find_preset("DINOV2-BASE") is weights.PRESETS["dinov2-base"]
    assert weights.find_preset("ViT-B-16/laion2b_s34b_b88k") is None  # open_clip knows it; find_preset does not look
    assert weights.find_preset(None) is None

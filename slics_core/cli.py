"""The ``slics`` command line (also ``python -m slics_core``).

Sub-commands live in :mod:`slics_core.commands`: their options in
:mod:`slics_core.commands.options` (light), the function that runs each in the
module :data:`slics_core.commands.COMMANDS` names, imported only when the command
runs, so ``slics --version``, ``slics models``, ``slics download`` and every
``--help`` answer without importing scikit-learn, SciPy, torch or open_clip.
Options are checked (the command's ``check``) before that module is imported,
and for a command that needs the encoder named by ``--encoder``, an unknown name
or a preset whose weights are not on disk is reported first too.

Errors a user can fix (bad paths, bad files, missing weights) are raised as
:class:`CLIError`, :class:`slics_core.errors.UserError` or ``ValueError``;
they, file-system errors (``OSError``: disk full, read-only, permissions, ...)
and damaged files are printed as one line naming the file and what to do
(:func:`slics_core.errors.user_message`), without a traceback, and the exit
code is 2. Warnings raised while a command runs are printed as one line too
(``slics CMD: warning: ...``), never with their Python source line.

:func:`run` is the process's entry point (the ``slics`` script, ``python -m slics_core``): :func:`main`, then
the heap frozen (``gc.freeze``) so that the interpreter's last collections at exit do not walk the half a
million objects torch, numba and scikit-learn leave (1.7 s of every emoji build's 48 s went there:
docs/performance.md, "The emoji world's serial steps").
"""
from __future__ import annotations

import argparse
import gc
import sys
import warnings

from slics_core import __version__, weights
from slics_core.commands import COMMANDS, CLIError, command_function, options
from slics_core.encoders import parse_encoder_spec
from slics_core.errors import DAMAGED_FILE_ERRORS, UserError, short_words, user_message
from slics_core.extras import MissingExtraError, extra_for, missing_extra_message

__all__ = ["CLIError", "build_parser", "check_encoder_weights", "main", "run"]

_HELP = {"-h", "--help"}


def build_parser() -> argparse.ArgumentParser:
    """The ``slics`` parser with every sub-command (light: it imports no command module)."""
    parser = argparse.ArgumentParser(
        prog="slics",
        description="Sparse Linear Concept Subspaces: fit, evaluate and explore concept dictionaries.",
    )
    parser.add_argument("--version", action="version", version=f"slics {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    options.register(subparsers)
    for sub in subparsers.choices.values():
        sub.set_defaults(_parser=sub)  # so that an option unknown to a sub-command is reported by it
    return parser


def _command_name(argv: list[str]) -> str | None:
    """The sub-command named in ``argv`` (the first word that is not an option: ``slics`` has no option
    with a value)."""
    return next((a for a in argv if not a.startswith("-")), None)


def _option_value(argv: list[str], option: str) -> str | None:
    value = None
    for i, a in enumerate(argv):
        if a == option and i + 1 < len(argv):
            value = argv[i + 1]
        elif a.startswith(option + "="):
            value = a[len(option) + 1:]
    return value


def check_encoder_weights(spec: str | None) -> None:
    """Report missing weights of the encoder preset ``spec`` at once (no torch, no scikit-learn).

    A name no encoder form reads is refused (the message lists the forms); other
    names and ``None`` pass, and the command itself reports what is wrong. Raises
    :class:`CLIError` with the message the command would give after importing everything.
    """
    if not spec:
        return
    options.check_encoder_spec(spec)
    parsed = parse_encoder_spec(spec)
    preset = weights.find_preset(parsed.text) if parsed.kind == "preset" else None
    if preset is None or preset.kind not in ("open_clip", "transformers"):
        return  # an open_clip ARCH/TAG beyond the presets needs open_clip's table; generators are refused later
    try:
        weights.resolve(preset)
    except weights.MissingWeightsError as exc:
        raise CLIError(f"cannot load encoder {spec!r}: {exc}") from None


#: Errors printed as one line (exit code 2): user errors, file-system errors and damaged files.
_USER_ERRORS = (CLIError, UserError, ValueError, OSError, *DAMAGED_FILE_ERRORS)


def _fail(command, exc) -> int:
    print(f"slics {command}: error: {user_message(exc)}", file=sys.stderr)
    return 2


def _missing_extra(command, exc: ModuleNotFoundError) -> int:
    """One line naming the extra that installs the missing library (other missing modules re-raise)."""
    if extra_for(exc.name) is None:
        raise exc
    message = str(exc) if isinstance(exc, MissingExtraError) else missing_extra_message(exc.name)
    print(f"slics {command}: error: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    name = _command_name(argv)
    command = COMMANDS.get(name)
    rest = argv[argv.index(name) + 1:] if command is not None else []
    if command is not None and command.passthrough and rest[:1] not in (["-h"], ["--help"]):
        try:
            return int(command_function(name)(rest) or 0)
        except _USER_ERRORS as exc:
            return _fail(name, exc)
        except ModuleNotFoundError as exc:
            return _missing_extra(name, exc)
    if command is not None and command.loads_encoder and not _HELP & set(argv):
        try:
            check_encoder_weights(_option_value(argv, "--encoder"))
        except _USER_ERRORS as exc:
            return _fail(name, exc)
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # reported by the sub-command's parser: "slics fit: error: ...", with its usage
        getattr(args, "_parser", parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command is None:
        parser.print_help()
        return 0
    return _run(args)


def run() -> int:
    """The ``slics`` process: :func:`main` on ``sys.argv``, its exit code returned for ``sys.exit``. Every object
    left is then frozen (``gc.freeze``): the process ends next, and its final garbage collections skip them
    (only for the process's end: a caller of :func:`main` keeps its collector as it was)."""
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    gc.freeze()
    return code


def _run(args) -> int:
    """Check the parsed ``args`` (the command's ``check``), then import and run its function (``args.func``
    when set, else the one :data:`~slics_core.commands.COMMANDS` names): user errors and warnings as one
    line each."""

    def show(message, category, filename, lineno, file=None, line=None):
        text = short_words(" ".join(str(message).split()))
        print(f"slics {args.command}: warning: {text}", file=sys.stderr if file is None else file)

    try:
        with warnings.catch_warnings():
            warnings.showwarning = show
            check = getattr(args, "check", None)
            if check is not None:
                check(args)
            func = getattr(args, "func", None) or command_function(args.command)
            return int(func(args) or 0)
    except _USER_ERRORS as exc:
        return _fail(args.command, exc)
    except ModuleNotFoundError as exc:
        return _missing_extra(args.command, exc)
    except KeyboardInterrupt:
        print(f"slics {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

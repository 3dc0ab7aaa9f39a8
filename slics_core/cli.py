"""The ``slics`` command line (also ``python -m slics_core``).

Sub-commands live in :mod:`slics_core.commands`; each module there registers
its own. Errors a user can fix (bad paths, bad files, missing weights) are
raised as :class:`CLIError`, :class:`slics_core.errors.UserError` or
``ValueError``; they, file-system errors (``OSError``: disk full, read-only,
permissions, ...) and damaged files are printed as one line naming the file
and what to do (:func:`slics_core.errors.user_message`), without a
traceback, and the exit code is 2.
"""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from slics_core import __version__, commands
from slics_core.commands import CLIError
from slics_core.errors import DAMAGED_FILE_ERRORS, UserError, user_message

__all__ = ["CLIError", "build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="slics",
        description="Sparse Linear Concept Subspaces: fit, evaluate and explore concept dictionaries.",
    )
    parser.add_argument("--version", action="version", version=f"slics {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 0
    try:
        return int(func(args) or 0)
    except (CLIError, UserError, ValueError, OSError, *DAMAGED_FILE_ERRORS) as exc:
        # one line (file and what to do) for user errors, file-system errors and damaged files
        print(f"slics {args.command}: error: {user_message(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"slics {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

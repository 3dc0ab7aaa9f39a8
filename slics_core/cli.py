"""The ``slics`` command line (also ``python -m slics_core``).

Sub-commands live in :mod:`slics_core.commands`; each module there registers
its own. Errors a user can fix (bad paths, bad files, missing weights) are
raised as :class:`CLIError` or ``ValueError``/``FileNotFoundError`` and
printed as one line, without a traceback.
"""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from slics_core import __version__, commands
from slics_core.commands import CLIError

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
    except (CLIError, ValueError, FileNotFoundError, PermissionError) as exc:
        print(f"slics {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"slics {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

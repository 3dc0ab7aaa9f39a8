"""Sub-commands of the ``slics`` command line.

Every module in this package that defines ``register(subparsers)`` adds its
sub-commands; :mod:`slics_core.cli` discovers them, so features can add
commands without editing a central list. A sub-command sets ``func`` (a
callable taking the parsed ``argparse.Namespace`` and returning an exit code)
with ``parser.set_defaults(func=...)``.
"""


class CLIError(Exception):
    """An error that is reported to the user as one line (exit code 2)."""

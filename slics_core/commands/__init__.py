"""Sub-commands of the ``slics`` command line.

Each module of this package defines ``register(subparsers)``, which adds its
sub-commands; a sub-command sets ``func`` (a callable taking the parsed
``argparse.Namespace`` and returning an exit code) with
``parser.set_defaults(func=...)``. The modules import the library at their
top, so importing one costs what its commands need (``data`` and
``workspaces`` load scikit-learn, SciPy and pandas; ``models`` does not).

:data:`COMMANDS` names the module of every sub-command, so that
:func:`slics_core.cli.main` imports only the module of the command it runs:
``slics --version``, ``slics models`` and ``slics download`` never import
scikit-learn, SciPy, torch or open_clip. A new command is added to its
module and to :data:`COMMANDS` (``tests/test_cli_instant.py`` checks that
the two agree).
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["COMMANDS", "CLIError", "Command", "check_at_least"]


class CLIError(Exception):
    """An error that is reported to the user as one line (exit code 2)."""


def check_at_least(args, low: int, *options: str) -> None:
    """Refuse, naming the option, any of ``options`` (``"--n-train"``...) given below ``low``.

    Options left at ``None`` (not given, no default) are not checked.
    """
    for option in options:
        value = getattr(args, option.lstrip("-").replace("-", "_"), None)
        if value is not None and value < low:
            raise CLIError(f"{option} must be at least {low}; got {value}")


@dataclass(frozen=True)
class Command:
    """Where a sub-command lives.

    Attributes
    ----------
    module : str
        Module of this package that registers and runs it.
    loads_encoder : bool
        Whether it cannot run without the encoder its ``--encoder`` option
        names (when given), so that the command line checks that encoder's
        weights before importing ``module``: missing weights are reported in
        well under a second, without importing scikit-learn or torch.
    passthrough : bool
        Its arguments go, unparsed, to another program (``slics app`` to ``streamlit run``): the
        command line calls the module's ``run(args)`` with them, except for a lone ``-h``/``--help``.
    """

    module: str
    loads_encoder: bool = False
    passthrough: bool = False


#: Every sub-command of ``slics`` and its module.
COMMANDS: dict[str, Command] = {
    "align": Command("align"),
    "app": Command("app", passthrough=True),
    "captions": Command("data", loads_encoder=True),
    "download": Command("models"),
    "embed": Command("data", loads_encoder=True),
    "emoji-build": Command("workspaces"),
    "emoji-report": Command("workspaces"),
    "evaluate": Command("data"),  # --encoder is optional there: without its weights the SpLiCE rows say why
    "fit": Command("data"),
    "models": Command("models"),
    "reproduce": Command("data", loads_encoder=True),
    "workspace": Command("workspaces", loads_encoder=True),
}

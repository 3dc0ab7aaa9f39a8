"""Sub-commands of the ``slics`` command line.

:mod:`slics_core.commands.options` declares every sub-command's options (light: ``slics --help``
and ``slics COMMAND --help`` import no scikit-learn, SciPy, pandas or torch) and the checks that
need only them. :data:`COMMANDS` names the module and function that run each sub-command: a
function takes the parsed ``argparse.Namespace`` and returns an exit code, and its module, which
imports the library at its top, is imported only when the command runs, after its options were
checked. ``slics --version``, ``slics models``, ``slics download`` and every ``--help`` never
import scikit-learn, SciPy, torch or open_clip. A new command is added to
:mod:`~slics_core.commands.options` and to :data:`COMMANDS` (``tests/test_cli_instant.py`` checks
that the two agree).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass

__all__ = ["COMMANDS", "CLIError", "Command", "check_at_least", "command_function"]


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
        Module of this package that runs it (imported only then).
    function : str
        The function of ``module`` that runs it: ``function(args) -> exit code``.
    loads_encoder : bool
        Whether it cannot run without the encoder its ``--encoder`` option
        names (when given), so that the command line checks that encoder's
        weights before importing ``module``: missing weights are reported in
        well under a second, without importing scikit-learn or torch.
    passthrough : bool
        Its arguments go, unparsed, to another program (``slics app`` to ``streamlit run``): the
        command line calls ``function`` with them (a list of strings), except for a lone ``-h``/``--help``.
    """

    module: str
    function: str
    loads_encoder: bool = False
    passthrough: bool = False


#: Every sub-command of ``slics`` and its module.
COMMANDS: dict[str, Command] = {
    "align": Command("align", "cmd_align"),
    "app": Command("app", "run", passthrough=True),
    "captions": Command("data", "cmd_captions", loads_encoder=True),
    "download": Command("models", "cmd_download"),
    "embed": Command("data", "cmd_embed", loads_encoder=True),
    "emoji-build": Command("workspaces", "cmd_emoji_build"),
    "emoji-report": Command("workspaces", "cmd_emoji_report"),
    # --encoder is optional there: without its weights the SpLiCE rows say why
    "evaluate": Command("data", "cmd_evaluate"),
    "fit": Command("data", "cmd_fit"),
    "models": Command("models", "cmd_models"),
    "reproduce": Command("data", "cmd_reproduce", loads_encoder=True),
    "workspace": Command("workspaces", "cmd_workspace", loads_encoder=True),
}


def command_function(name: str):
    """The function that runs sub-command ``name`` (imports its module)."""
    command = COMMANDS[name]
    return getattr(importlib.import_module(f"{__name__}.{command.module}"), command.function)

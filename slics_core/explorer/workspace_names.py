"""Workspace names: where the app lists workspaces (:func:`workspaces_root`) and which names are folders there
(:func:`check_workspace_name`). Light (no NumPy, no scikit-learn), so that ``slics workspace --name`` is checked
before the command imports anything heavy; :mod:`slics_core.explorer.workspace` re-exports both.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from slics_core.errors import explain, shown_value

__all__ = ["check_workspace_name", "workspaces_root"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._ -]{0,99}$")


def workspaces_root() -> Path:
    """Where dataset workspaces are listed: ``$SLICS_WORKSPACES`` or ``~/.cache/slics/workspaces``."""
    env = os.environ.get("SLICS_WORKSPACES")
    return Path(env) if env else Path.home() / ".cache" / "slics" / "workspaces"


def check_workspace_name(name) -> str:
    """``name`` if it is a safe workspace name (a folder name under :func:`workspaces_root`).

    Raises
    ------
    ValueError
        Empty, a path (separators, ``..``, absolute) or odd characters.
    """
    if not isinstance(name, str) or not _NAME.match(name) or name in (".", "..") or ".." in name:
        rule = "letters, digits, '.', '_', '-' or spaces, at most 100, starting with a letter or digit"
        path = isinstance(name, str) and any(c in name for c in "/\\")
        raise explain(ValueError(f"workspace name {shown_value(name)} is not allowed: use {rule} (no '/', no '..'); "
                                 "to write elsewhere use --out"),
                      f"{shown_value(name)} is a folder path, not a workspace name" if path else
                      f"workspace name {shown_value(name)} is not allowed",
                      visitor_fix=f"a workspace is named by its folder's name: {rule}",
                      operator_fix=f"the app opens the workspaces in {str(workspaces_root())!r} ($SLICS_WORKSPACES) "
                                   "by their folder's name: move (or link) a workspace folder there, or set "
                                   "SLICS_WORKSPACES to its parent")
    return name

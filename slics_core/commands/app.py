"""``slics app [streamlit options]``: run the explorer, from an installed package or a checkout.

The explorer is the repository's ``app.py`` and ``app_pages/``; a wheel holds them as the package
``slics_explorer_app`` (see ``pyproject.toml``). This command finds that ``app.py`` and runs
``python -m streamlit run APP.py`` with the app's own settings (its ``.streamlit/config.toml``,
passed as command-line options because Streamlit reads that file only from the working folder)
followed by the options given here, which win: ``slics app --server.port 8600 --server.headless
true``. It works from any folder. The library never imports Streamlit. On POSIX systems this command
*becomes* the server (``os.execv``): there is one process, so every signal, SIGKILL included, reaches the
server itself and nothing is left serving the port. Elsewhere (Windows) it runs the server as a child whose
exit code it returns; SIGTERM, SIGINT and SIGHUP are passed on to it, and it never outlives ``slics app``.
"""
from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import slics_core
from slics_core.commands import CLIError
from slics_core.extras import missing_extra_message

__all__ = ["FORWARDED_SIGNALS", "app_script", "config_options", "run", "streamlit_command"]

#: What the explorer imports at its top (the ``app`` extra).
_APP_MODULES = ("streamlit", "plotly", "pandas")


def _is_app_folder(folder: Path) -> bool:
    return (folder / "app.py").is_file() and (folder / "app_pages" / "home.py").is_file()


def app_script() -> Path:
    """The explorer's ``app.py``: the checkout's beside the imported ``slics_core``, else the installed one."""
    checkout = Path(slics_core.__file__).resolve().parent.parent
    if _is_app_folder(checkout):
        return checkout / "app.py"
    spec = importlib.util.find_spec("slics_explorer_app")
    for location in (spec.submodule_search_locations or []) if spec else []:
        if _is_app_folder(Path(location)):
            return Path(location) / "app.py"
    raise CLIError("the explorer's files (package slics_explorer_app) are not installed; reinstall: "
                   'pip install --force-reinstall "slics-explorer[all]"')


def config_options(app: Path) -> list[str]:
    """The settings of the app's ``.streamlit/config.toml`` as ``--section.key=value`` options."""
    path = app.parent / ".streamlit" / "config.toml"
    if not path.is_file():
        return []
    with open(path, "rb") as fh:
        config = tomllib.load(fh)
    options = []
    for section, values in config.items():
        for key, value in values.items():
            text = str(value).lower() if isinstance(value, bool) else str(value)
            options.append(f"--{section}.{key}={text}")
    return options


def streamlit_command(args: list[str]) -> list[str]:
    """The ``streamlit run`` command line for ``slics app ARGS`` (checks the ``app`` extra first)."""
    for module in _APP_MODULES:
        if importlib.util.find_spec(module) is None:
            raise CLIError(missing_extra_message(module, "slics app"))
    app = app_script()
    return [sys.executable, "-m", "streamlit", "run", str(app), *config_options(app), *args]


#: Signals that stop ``slics app``: each is passed on to the Streamlit server, which then ends.
FORWARDED_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGHUP") if hasattr(signal, name))
#: Seconds the server has to stop after a forwarded signal before it is killed.
STOP_TIMEOUT = 10


def run(args: list[str]) -> int:
    """Run the explorer with ``streamlit run`` options ``args``; returns Streamlit's exit code (``128 + N`` when
    signal N ended it).

    SIGTERM, SIGINT and SIGHUP sent to this process (a service manager, ``timeout``, ``kill PID``, a closed
    SSH session) are passed on to the server, and the server never outlives this process: it is ended when
    this function leaves, however it leaves. On POSIX this process is replaced by the server (``os.execv``)
    and the function does not return: a SIGKILL then ends the server itself, so no orphan keeps the port.
    """
    command = streamlit_command(list(args))
    if importlib.util.find_spec("open_clip") is None:
        print("slics app: note: the emoji world is built with open_clip, which is not installed; "
              'pip install "slics-explorer[models]" (pages on given embeddings work without it)', file=sys.stderr)
    if os.name == "posix" and hasattr(os, "execv"):
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(command[0], command)
    proc = subprocess.Popen(command)

    def forward(signum, frame):
        if proc.poll() is None:
            proc.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in FORWARDED_SIGNALS}
    try:
        code = proc.wait()
        return 128 - code if code < 0 else code
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

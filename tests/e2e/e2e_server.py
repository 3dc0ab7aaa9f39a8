"""A Streamlit server and browser pages for the end-to-end tests (shared by conftest.py and tests
that need a server of their own, e.g. one listing a dataset workspace)."""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Tall viewport: Streamlit scrolls an inner container, so a full-page screenshot
#: only shows what fits in the viewport.
VIEWPORT = {"width": 1400, "height": 2600}
SERVER_START_TIMEOUT_S = 180
_SERVER_LOG: dict = {}


# ---------------------------------------------------------------------- server
def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _log_tail(path: Path, n_chars: int = 20000) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"(no server log: {exc})"
    return text[-n_chars:]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


@contextlib.contextmanager
def run_streamlit(workspaces: Path, log_path: Path, emoji_cache: Path | None = None):
    """Start ``streamlit run app.py`` on a free port; yield its base URL; kill its process group.

    The emoji world is the tests' one (``$SLICS_EMOJI_SCALE``, default 0.2, in ``$SLICS_EMOJI_CACHE``)
    unless ``emoji_cache`` names another cache folder.
    """
    port = _free_port()
    env = dict(os.environ)
    env.update(
        SLICS_EMOJI_SCALE=os.environ.get("SLICS_EMOJI_SCALE", "0.2"),
        SLICS_EMOJI_CACHE=str(emoji_cache) if emoji_cache is not None else os.environ.get(
            "SLICS_EMOJI_CACHE", str(Path(tempfile.gettempdir()) / "slics-test-emoji")
        ),
        SLICS_WORKSPACES=str(workspaces),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        PYTHONUNBUFFERED="1",
    )
    cmd = [
        sys.executable, "-m", "streamlit", "run", "app.py",
        "--server.headless", "true",
        "--server.port", str(port),
        "--server.address", "127.0.0.1",
        "--browser.gatherUsageStats", "false",
        "--server.fileWatcherType", "none",
        "--server.runOnSave", "false",
    ]
    log = open(log_path, "wb")
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    _SERVER_LOG["path"] = log_path
    base = f"http://localhost:{port}"
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while not _healthy(f"{base}/_stcore/health"):
            if proc.poll() is not None:
                pytest.fail(
                    f"streamlit exited with code {proc.returncode} before answering:\n{_log_tail(log_path)}",
                    pytrace=False,
                )
            if time.monotonic() > deadline:
                pytest.fail(
                    f"streamlit did not answer {base}/_stcore/health in {SERVER_START_TIMEOUT_S} s:\n"
                    f"{_log_tail(log_path)}",
                    pytrace=False,
                )
            time.sleep(0.5)
        yield base
    finally:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=15)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout=15)
        log.close()


def new_page(browser, base_url: str):
    """A page in a new browser context (a new Streamlit session) with a tall viewport."""
    context = browser.new_context(viewport=VIEWPORT, base_url=base_url)
    context.set_default_timeout(60_000)
    pg = context.new_page()
    console_errors = []
    pg.on("pageerror", lambda exc: console_errors.append(str(exc)))
    pg.console_errors = console_errors
    return pg



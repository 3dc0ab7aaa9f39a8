"""``slics app`` never orphans its Streamlit server: SIGTERM, SIGINT, SIGHUP or SIGKILL to the ``slics app``
process (a service manager, ``timeout``, ``kill PID``, a closed SSH session, ``kill -9``) stops the server and
frees its port.

The started process gets the default disposition of every signal sent here, whatever the test runner
inherited (``nohup`` and some CI runners ignore SIGHUP, and an ignored signal stays ignored across exec).

Each case starts the real command on a free port, waits (with a deadline, polling) until the server
answers its health endpoint, sends the signal to the ``slics app`` process only (not its group), and
waits, polling, until nothing listens on the port any more.
"""
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("streamlit")

ROOT = Path(__file__).resolve().parent.parent
START_DEADLINE = 240  # a loaded test machine starts Streamlit slowly
STOP_DEADLINE = 30


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
            return r.read().decode().strip() == "ok"
    except OSError:
        return False


def _wait(condition, deadline, what, proc, log):
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if condition():
            return
        time.sleep(0.2)
    pytest.fail(f"{what} within {deadline} s; slics app exit code {proc.poll()}; output: "
                f"{log.read_text(errors='replace')[-2000:]}")


SIGNALS = [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGKILL]


def _default_dispositions():
    """In the child before exec: the signals of this test at their default action (see the module docstring)."""
    for s in SIGNALS:
        if s != signal.SIGKILL:
            signal.signal(s, signal.SIG_DFL)


@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: s.name)
def test_signal_to_slics_app_stops_the_server(signum, tmp_path):
    port = _free_port()
    env = dict(os.environ, SLICS_EMOJI_CACHE=str(tmp_path / "emoji"), SLICS_WORKSPACES=str(tmp_path / "ws"),
               HOME=str(tmp_path), PYTHONPATH=str(ROOT), STREAMLIT_BROWSER_GATHER_USAGE_STATS="false")
    log = tmp_path / "app.log"
    with open(log, "wb") as out:  # a file, not a pipe: an orphaned server holding a pipe would block reading it
        proc = subprocess.Popen([sys.executable, "-m", "slics_core", "app", "--server.headless", "true",
                                 "--server.port", str(port), "--server.address", "127.0.0.1"],
                                cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True,  # its own group: the signal reaches slics app alone
                                preexec_fn=_default_dispositions)
    try:
        _wait(lambda: _healthy(port) or proc.poll() is not None, START_DEADLINE, "no health answer", proc, log)
        assert proc.poll() is None, log.read_text(errors="replace")
        os.kill(proc.pid, signum)
        _wait(lambda: proc.poll() is not None, STOP_DEADLINE, f"slics app still runs after {signum.name}", proc, log)
        _wait(lambda: not _listening(port), STOP_DEADLINE, f"port {port} still held after {signum.name}", proc, log)
        # the server's own exit (0 after a clean stop), or death by the signal itself
        assert proc.returncode in (0, 128 + signum, -signum), proc.returncode
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever is left of the group, an orphaned server included
        except ProcessLookupError:
            pass
        proc.wait()

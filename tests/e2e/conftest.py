"""Fixtures of the end-to-end tests: a real Streamlit server and a headless Chromium.

The server is ``python -m streamlit run app.py`` on a free port, started once per
test session with the small emoji world (the same cache as the AppTest tests) and
an empty folder of dataset workspaces. The browser is the system Chromium driven
by Playwright's sync API (Playwright's own browser download is not used).

Without Chromium or Playwright the tests are skipped, except under CI (``$CI``
or ``$SLICS_E2E_REQUIRED`` set), where they fail: CI must run them. ``$SLICS_CHROMIUM`` overrides the
browser's path. Screenshots go to ``$SLICS_E2E_SCREENSHOTS`` (default
``<tmp>/slics-e2e-screenshots``).
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
from e2e_server import _SERVER_LOG, _log_tail, new_page, run_streamlit  # noqa: E402


# ---------------------------------------------------------------------- availability
def chromium_path() -> str | None:
    env = os.environ.get("SLICS_CHROMIUM")
    if env:
        return env if Path(env).exists() else None
    for cand in ("/usr/bin/chromium", "/usr/bin/chromium-browser"):
        if Path(cand).exists():
            return cand
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _missing() -> str | None:
    """Why the e2e tests cannot run here (None when they can)."""
    why = []
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as exc:
        why.append(f"playwright is not installed ({exc}); pip install playwright")
    if chromium_path() is None:
        why.append(f"no Chromium at {os.environ.get('SLICS_CHROMIUM') or '/usr/bin/chromium'}; "
                   "apt-get install chromium")
    return "; ".join(why) or None


def _required() -> bool:
    """Under CI (``$CI``) or with ``$SLICS_E2E_REQUIRED`` set (``.ci/run``), a missing browser is a failure."""
    return any(os.environ.get(v, "").strip().lower() not in ("", "0", "false") for v in ("CI", "SLICS_E2E_REQUIRED"))


def _skip_or_fail(reason: str):
    if _required():
        pytest.fail(f"end-to-end tests cannot run under CI: {reason}", pytrace=False)
    pytest.skip(f"end-to-end tests need a browser: {reason}")


@pytest.fixture(scope="module")
def streamlit_server(tmp_path_factory, ws):
    """Base URL of a running ``streamlit run app.py`` shared by a module's tests.

    Module scope: the server (and the workspace it holds in memory) is stopped as
    soon as the e2e module is done, not at the end of the whole test session.
    The emoji world is built first (``ws``), so the server opens it whole: a test
    of a feature never races the background build publishing the whole world in
    the middle of a click (the cold start has a test of its own, test_cold_start.py).
    """
    reason = _missing()
    if reason:
        _skip_or_fail(reason)
    workspaces = tmp_path_factory.mktemp("e2e-workspaces")
    log_path = tmp_path_factory.mktemp("e2e-server") / "streamlit.log"
    with run_streamlit(workspaces, log_path) as base:
        yield base


@pytest.fixture
def fresh_server(tmp_path_factory, ws):
    """Base URL of a server of its own, on which no page has been opened yet (deep links after a restart)."""
    reason = _missing()
    if reason:
        _skip_or_fail(reason)
    workspaces = tmp_path_factory.mktemp("e2e-workspaces")
    log_path = tmp_path_factory.mktemp("e2e-fresh-server") / "streamlit.log"
    previous = _SERVER_LOG.get("path")
    with run_streamlit(workspaces, log_path) as base:
        yield base
    if previous is not None:
        _SERVER_LOG["path"] = previous


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Attach the server's output to every failed e2e test."""
    outcome = yield
    report = outcome.get_result()
    names = getattr(item, "fixturenames", ())
    if report.failed and "path" in _SERVER_LOG and ("streamlit_server" in names or "fresh_server" in names):
        report.sections.append(("streamlit server output (tail)", _log_tail(_SERVER_LOG["path"])))
    if report.failed and report.when == "call":
        pg = getattr(item, "funcargs", {}).get("page") or getattr(item, "funcargs", {}).get("fresh_page")
        if pg is not None:
            path = _screenshot_root() / ("FAILED_" + re.sub(r"[^A-Za-z0-9_.-]+", "_", item.name) + ".png")
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                pg.screenshot(path=str(path), full_page=True)
                report.sections.append(("screenshot at failure", str(path)))
            except Exception as exc:  # the browser may be gone; the failure itself matters more
                report.sections.append(("screenshot at failure", f"not taken: {exc}"))


# ---------------------------------------------------------------------- browser
@pytest.fixture(scope="module")
def browser():
    reason = _missing()
    if reason:
        _skip_or_fail(reason)
    from playwright.sync_api import sync_playwright

    pw = sync_playwright().start()
    try:
        b = pw.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS, headless=True)
    except Exception as exc:  # a broken browser is the same as a missing one
        pw.stop()
        _skip_or_fail(f"Chromium at {chromium_path()} did not start: {exc}")
    yield b
    b.close()
    pw.stop()


@pytest.fixture
def page(browser, streamlit_server):
    """A page of a new Streamlit session on the shared server."""
    pg = new_page(browser, streamlit_server)
    yield pg
    pg.context.close()


@pytest.fixture
def fresh_page(browser, fresh_server):
    """A page of the first Streamlit session of a server of its own."""
    pg = new_page(browser, fresh_server)
    yield pg
    pg.context.close()


def _screenshot_root() -> Path:
    return Path(os.environ.get("SLICS_E2E_SCREENSHOTS", Path(tempfile.gettempdir()) / "slics-e2e-screenshots"))


@pytest.fixture(scope="session")
def screenshot_dir() -> Path:
    d = _screenshot_root()
    d.mkdir(parents=True, exist_ok=True)
    return d

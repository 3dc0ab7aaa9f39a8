"""A classroom on one server: N real browser sessions through a typical round (not a test).

Starts ``streamlit run app.py`` on loopback (warm emoji workspace: built first if the cache is
empty), then drives N Chromium sessions (Playwright, one browser, one context per student,
at most ``--concurrency`` at once) through the round of issue 15: open Retrieve, click a query
thumbnail of the strip, add a concept, visit Subspaces, visit Evaluate. For every step it records
the time until the page has settled (Streamlit's script state ``notRunning`` and the step's content
visible), and samples the server's CPU time and RSS (psutil, the streamlit process and its
children). Prints median / p95 time-to-settled per N and server CPU seconds per interaction.

    python -m benchmarks.bench_load [--n 1 8 16 30] [--concurrency 30] [--scale 1.0] [--cache DIR]

Loopback only; Chromium at ``$SLICS_CHROMIUM`` or /usr/bin/chromium.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


# ---------------------------------------------------------------------- server
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def streamlit_server(env_extra: dict, log_path: Path, start_timeout_s: float = 180):
    """``(base_url, psutil.Process)`` of ``streamlit run app.py`` on loopback; stopped on exit."""
    port = free_port()
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1", **env_extra)
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
           "--server.port", str(port), "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false",
           "--server.fileWatcherType", "none", "--server.runOnSave", "false"]
    log = open(log_path, "wb")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + start_timeout_s
        while True:
            try:
                with urllib.request.urlopen(f"{base}/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"streamlit did not start; log: {log_path}")
            time.sleep(0.2)
        yield base, psutil.Process(proc.pid)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 15)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=15)
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
        log.close()


def server_cpu(proc: psutil.Process) -> float:
    """CPU seconds (user + system) of the server process (all its threads) and its children."""
    t = proc.cpu_times()
    total = t.user + t.system
    for c in proc.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            ct = c.cpu_times()
            total += ct.user + ct.system
    return total


class RssSampler:
    """Peak RSS of the server (sampled every 0.2 s in a thread)."""

    def __init__(self, proc):
        self.proc, self.peak, self._stop = proc, 0, threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            with contextlib.suppress(psutil.Error):
                self.peak = max(self.peak, self.proc.memory_info().rss)
            self._stop.wait(0.2)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()


def browser_path() -> str:
    return os.environ.get("SLICS_CHROMIUM") or "/usr/bin/chromium"


# ---------------------------------------------------------------------- page readiness (async)
async def settled(page, timeout_s: float, settle_s: float = 0.5) -> None:
    """Until the script has finished running (``notRunning``) for ``settle_s``."""
    deadline = time.monotonic() + timeout_s
    app = page.locator('[data-testid="stApp"]')
    await app.wait_for(state="attached", timeout=timeout_s * 1000)
    since = None
    while True:
        state = await app.get_attribute("data-test-script-state")
        now = time.monotonic()
        if state == "notRunning":
            since = since or now
            if now - since >= settle_s:
                return
        else:
            since = None
        if now > deadline:
            raise TimeoutError(f"not settled after {timeout_s:.0f} s at {page.url} (state {state!r})")
        await page.wait_for_timeout(100)


async def n_images(page) -> int:
    # (st.image pictures and gallery pictures: one HTML element per gallery, app_pages/_images.image_gallery)
    return await page.locator('[data-testid="stMain"] :is([data-testid="stImage"], .slics-gallery) img').evaluate_all(
        "els => els.filter(e => e.complete && e.naturalWidth > 0).length")


async def until(page, cond, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while not await cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not seen after {timeout_s:.0f} s at {page.url}")
        await page.wait_for_timeout(150)


async def retrieve_ready(page, timeout_s: float) -> None:
    """Retrieve has drawn its galleries: the "Unfiltered" gallery heading is shown and at least 20 images
    (query strip, query, two galleries) are decoded, and the run has settled."""
    async def ready():
        return await page.get_by_text("Unfiltered (whole query)").count() > 0 and await n_images(page) >= 20

    await until(page, ready, timeout_s, "Retrieve galleries")
    await settled(page, timeout_s)


# ---------------------------------------------------------------------- one student's round
async def student_round(ctx, base: str, timeout_s: float, cpu=None) -> dict:
    """Times (s) of the steps of one round; raises on a step that does not settle.

    ``cpu``: a function giving the server's CPU seconds; with it, ``out["cpu"][step]`` is the server CPU
    spent during each step (only meaningful when one session runs at a time)."""
    page = await ctx.new_page()
    out = {}
    cpu_at = {}

    def mark(step):
        if cpu is not None:
            cpu_at[step] = cpu()

    mark("start")
    t = time.monotonic()
    await page.goto(f"{base}/retrieve")
    await retrieve_ready(page, timeout_s)
    out["open Retrieve"] = time.monotonic() - t
    mark("open Retrieve")

    # click a query thumbnail of the strip (the second button of the query picker's strip)
    main = page.locator('[data-testid="stMain"]')
    # (":visible": Streamlit 1.67 draws a hidden copy of each button that has a help tooltip)
    strip = main.locator('[data-testid="stButton"] button:visible')
    t = time.monotonic()
    if await strip.count() >= 2:
        await strip.nth(1).click()
    await page.wait_for_timeout(300)
    await retrieve_ready(page, timeout_s)
    out["click a thumbnail"] = time.monotonic() - t
    mark("click a thumbnail")

    # add a concept: open the concept multiselect (key "concepts") and take its first remaining option
    # (not the "Select all" entry); a round whose option never shows fails (reported, not hidden)
    t = time.monotonic()
    box = page.locator(".st-key-concepts").locator('[role="combobox"]').first
    opt = page.locator('[role="option"]:not([data-key="__select_all__"])').first
    deadline = time.monotonic() + timeout_s
    while True:  # a click that lands while the page is still drawing can leave the list closed: try again
        await box.click()
        if not await opt.is_visible():
            await page.keyboard.press("ArrowDown")  # the focused, closed list opens on the arrow key
        try:
            await opt.wait_for(timeout=3000)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the concept list did not open after {timeout_s:.0f} s") from None
            await page.keyboard.press("Escape")
    await opt.click()
    await page.keyboard.press("Escape")
    await page.wait_for_timeout(300)
    await retrieve_ready(page, timeout_s)
    out["add a concept"] = time.monotonic() - t
    mark("add a concept")

    for name, path, ready in (("visit Subspaces", "subspaces", '[data-testid="stPlotlyChart"]'),
                              ("visit Evaluate", "evaluate", '[data-testid="stDataFrame"]')):
        t = time.monotonic()
        link = page.locator(f'[data-testid="stSidebarNav"] a[href$="/{path}"]')
        if await link.count():
            await link.first.click()
        else:
            await page.goto(f"{base}/{path}")
        await page.locator(ready).first.wait_for(timeout=timeout_s * 1000)
        await settled(page, timeout_s)
        out[name] = time.monotonic() - t
        mark(name)
    if cpu is not None:
        names = list(cpu_at)
        out["cpu"] = {b: cpu_at[b] - cpu_at[a] for a, b in itertools.pairwise(names)}
    errors = await page.locator('[data-testid="stException"]').count()
    await page.close()
    out["errors"] = errors
    return out


async def run_class(base: str, n: int, concurrency: int, timeout_s: float, cpu=None) -> tuple:
    from playwright.async_api import async_playwright

    sem = asyncio.Semaphore(concurrency)
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=browser_path(), args=CHROMIUM_ARGS)

        async def one(i):
            async with sem:
                ctx = await browser.new_context(viewport={"width": 1400, "height": 1000})
                try:
                    return await student_round(ctx, base, timeout_s, cpu=cpu)
                except Exception as exc:  # a failed round is reported, never hidden
                    return {"failed": f"{type(exc).__name__}: {exc}"}
                finally:
                    await ctx.close()

        t = time.monotonic()
        results = await asyncio.gather(*(one(i) for i in range(n)))
        wall = time.monotonic() - t
        await browser.close()
    return results, wall


def pct(xs, q):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))]


def add_class_args(ap: argparse.ArgumentParser) -> None:
    """The options both classroom benchmarks take."""
    ap.add_argument("--n", type=int, nargs="+", default=[1, 8, 16, 30])
    ap.add_argument("--scale", type=float, default=1.0, help="SLICS_EMOJI_SCALE")
    ap.add_argument("--cache", default=None, help="emoji cache folder (default: a private one, built if empty)")
    ap.add_argument("--solo", type=int, default=3, help="rounds run one at a time for the per-step CPU")
    ap.add_argument("--timeout", type=float, default=300, help="seconds one step may take")


def warm_emoji_env(scale: float, cache: str | None) -> dict:
    """The server's environment for a warm emoji workspace at ``scale`` (built into ``cache`` first if empty)."""
    cache = cache or str(Path(tempfile.gettempdir()) / f"slics-bench-load-{scale}")
    env = {"SLICS_EMOJI_SCALE": str(scale), "SLICS_EMOJI_CACHE": cache,
           "SLICS_WORKSPACES": str(Path(tempfile.mkdtemp(prefix="slics-bench-ws-")))}
    if not any(Path(cache).glob("workspace-*/workspace.json")):
        print(f"building the emoji workspace into {cache} first (warm-workspace benchmark)", flush=True)
        os.environ.update(env)
        from slics_core.explorer.emoji_build import open_emoji_workspace

        open_emoji_workspace()
    return env


def print_class(n: int, steps, results: list, wall: float, cpu: float, peaks: list) -> None:
    """Median / p95 time to settled per step and over all steps, server CPU per interaction, peak RSS."""
    ok = [r for r in results if "failed" not in r]
    for s in steps:
        xs = [r[s] for r in ok if s in r]
        if xs:
            print(f"{n:>3} {s:<18} {statistics.median(xs):9.2f} {pct(xs, 0.95):7.2f}")
    alls = [r[s] for r in ok for s in steps if s in r]
    n_inter = max(1, len(alls))
    shown = sum(r.get("errors", 0) > 0 for r in ok)
    print(f"{n:>3} {'all steps':<18} {statistics.median(alls) if alls else float('nan'):9.2f} "
          f"{pct(alls, 0.95):7.2f}   wall {wall:.1f} s; server CPU {cpu:.1f} s = {cpu / n_inter:.2f} s per "
          f"interaction ({n_inter}); peak RSS {'+'.join(f'{p / 2**20:.0f}' for p in peaks)} MiB; failed rounds "
          f"{len(results) - len(ok)}; rounds with an exception shown {shown}", flush=True)
    for r in results:
        if "failed" in r:
            print(f"    failed: {r['failed'][:300]}")


def print_solo(solo: list) -> None:
    """Server CPU and time to settled of each step, median over rounds run one at a time."""
    solo = [r for r in solo if "cpu" in r]
    if not solo:
        return
    print(f"server CPU per step, {len(solo)} rounds one at a time (median s; warm caches):")
    steps = list(solo[0]["cpu"])
    for s in steps:
        print(f"    {s:<18} {statistics.median(r['cpu'][s] for r in solo):6.3f} s CPU   "
              f"{statistics.median(r[s] for r in solo):6.2f} s to settled")
    per = statistics.mean(statistics.median(r["cpu"][s] for r in solo) for s in steps)
    print(f"    {'mean of the steps':<18} {per:6.3f} s CPU")


def main():
    ap = argparse.ArgumentParser()
    add_class_args(ap)
    ap.add_argument("--concurrency", type=int, default=30, help="at most this many sessions at once")
    args = ap.parse_args()
    env = warm_emoji_env(args.scale, args.cache)
    load = os.getloadavg()
    print(f"{os.cpu_count()} CPUs, load average before: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; "
          f"emoji scale {args.scale}; concurrency cap {args.concurrency}")
    log = Path(tempfile.mkdtemp(prefix="slics-bench-load-")) / "streamlit.log"
    with streamlit_server(env, log) as (base, proc):
        # one warm-up round (first imports of each page, shared caches) is not counted
        asyncio.run(run_class(base, 1, 1, args.timeout))
        # server CPU of each step: students one after the other (nothing else runs on the server)
        solo, _ = asyncio.run(run_class(base, args.solo, 1, args.timeout, cpu=lambda: server_cpu(proc)))
        print_solo(solo)
        print(f"{'N':>3} {'step':<18} {'median s':>9} {'p95 s':>7}   (time to settled per step)")
        for n in args.n:
            cpu0 = server_cpu(proc)
            with RssSampler(proc) as rss:
                results, wall = asyncio.run(run_class(base, n, args.concurrency, args.timeout))
            cpu = server_cpu(proc) - cpu0
            steps = [k for k in next((r for r in results if "failed" not in r), {}) if k not in ("errors", "cpu")]
            print_class(n, steps, results, wall, cpu, [rss.peak])
    load = os.getloadavg()
    print(f"load average after: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")


if __name__ == "__main__":
    main()

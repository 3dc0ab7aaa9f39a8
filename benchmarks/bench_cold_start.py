"""Time to first interaction of ``streamlit run app.py`` on an empty emoji cache (not a test).

Starts the server on loopback with an empty ``SLICS_EMOJI_CACHE``, opens Retrieve in a headless
Chromium and waits until its galleries show (the first interaction a presenter needs); meanwhile a
second tab opened during the build must show progress that moves. Then waits until the whole world
is built (the banner goes away). Prints wall and server CPU seconds (psutil, the streamlit process
and its children) for each.

    python -m benchmarks.bench_cold_start [--scale 1.0] [--no-full]
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import tempfile
import time
from pathlib import Path

from benchmarks.bench_load import CHROMIUM_ARGS, browser_path, retrieve_ready, server_cpu, streamlit_server

BANNER = "Building the whole world in the background"


async def drive(base, proc, t0, cpu0, full: bool, timeout_s: float):
    from playwright.async_api import async_playwright

    out = {}
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=browser_path(), args=CHROMIUM_ARGS)
        ctx = await browser.new_context(viewport={"width": 1400, "height": 1000})
        page = await ctx.new_page()
        await page.goto(f"{base}/retrieve")
        # a second tab opened while the first waits: its progress text must change while it waits
        tab2 = await ctx.new_page()
        await tab2.goto(f"{base}/evaluate")
        first = asyncio.ensure_future(retrieve_ready(page, timeout_s))
        texts = []
        while not first.done():
            await tab2.wait_for_timeout(1000)
            bars = tab2.locator('[data-testid="stProgress"]')
            with contextlib.suppress(Exception):
                texts.append(await bars.first.inner_text(timeout=500) if await bars.count() else "")
        await first
        t_first = (time.monotonic() - t0, server_cpu(proc) - cpu0)
        print(f"first interaction (Retrieve galleries): wall {t_first[0]:.1f} s, server CPU {t_first[1]:.1f} s",
              flush=True)
        out["first interaction (Retrieve galleries)"] = t_first
        shown = [t for t in texts if t]
        out["second tab: progress texts seen"] = f"{len(set(shown))} different of {len(texts)} samples; " \
            f"first {shown[:1]}, last {shown[-1:]}"
        out["second tab progress moves"] = len(set(shown)) > 1
        if full:
            deadline = time.monotonic() + 1800
            while await page.get_by_text(BANNER).count() and time.monotonic() < deadline:
                await page.wait_for_timeout(1000)
            out["whole world built (banner gone)"] = (time.monotonic() - t0, server_cpu(proc) - cpu0)
            out["Evaluate after the build shows a table"] = bool(
                await tab2.locator('[data-testid="stDataFrame"]').count() or
                (await tab2.wait_for_selector('[data-testid="stDataFrame"]', timeout=600_000)) is not None)
        await browser.close()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--no-full", action="store_true", help="stop after the first interaction")
    ap.add_argument("--timeout", type=float, default=600)
    args = ap.parse_args()
    cache = tempfile.mkdtemp(prefix="slics-cold-")
    env = {"SLICS_EMOJI_SCALE": str(args.scale), "SLICS_EMOJI_CACHE": cache,
           "SLICS_WORKSPACES": tempfile.mkdtemp(prefix="slics-cold-ws-")}
    load = os.getloadavg()
    print(f"{os.cpu_count()} CPUs, load average before: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; scale {args.scale}")
    log = Path(cache).parent / f"{Path(cache).name}.log"
    t0 = time.monotonic()
    try:
        with streamlit_server(env, log) as (base, proc):
            t_up = time.monotonic() - t0
            cpu0 = 0.0
            print(f"server answering after {t_up:.1f} s (CPU {server_cpu(proc):.1f} s)")
            res = asyncio.run(drive(base, proc, t0, cpu0, not args.no_full, args.timeout))
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    for k, v in res.items():
        if isinstance(v, tuple):
            print(f"{k:<45} wall {v[0]:7.1f} s   server CPU {v[1]:7.1f} s")
        else:
            print(f"{k:<45} {v}")
    load = os.getloadavg()
    print(f"load average after: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")


if __name__ == "__main__":
    main()

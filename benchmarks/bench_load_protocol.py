"""A classroom on one server, with light clients: N sessions speaking Streamlit's own protocol (not a test).

``bench_load.py`` drives real Chromium pages; on a 2-core machine 30 browsers take the cores the
server needs, so N = 30 there measures the browsers. Here each student is a websocket client of
``/_stcore/stream`` that does what the page's JavaScript does and nothing else: it asks for a page
run (``BackMsg.rerun_script`` with the URL's query string, as the browser sends it), reads the
``ForwardMsg`` deltas until ``script_finished``, fetches every image the run names by URL (as the
browser would; data: URLs travel in the delta), carries the query string the app writes back
(``page_info_changed``) into the next run, and sets widget values exactly as the frontend encodes
them (a button's ``trigger_value``, a multiselect's ``string_array_value``). The server does the
same work as for a browser; only the drawing is left out (each student's own machine does that).

A first visit also loads the frontend itself (index page, about 140 JavaScript, CSS and font files,
gzip-compressed by the server on the fly): the URLs a real Chromium fetches when it opens Retrieve
are recorded once at the start (Playwright), and every student fetches them, gzip accepted, within
its "open Retrieve" step.

The round is ``bench_load.py``'s: open Retrieve, click a query thumbnail of the strip ("Use" of the
second thumbnail), add a concept (the concept multiselect's first option not picked yet), visit
Subspaces, visit Evaluate. Each step's time to settled is from sending the message to the end of the
run plus its image downloads; every step checks that the server did what was asked (the thumbnail is
now the current query, the concept is picked, the map and the table are there), and a round with an
exception element or a failed check is reported as failed.

Students start together (``--join 0``: a burst, everyone clicks at once) or join at random times
within ``--join`` seconds and pause a random ``--think`` × U(0.5, 1.5) seconds between steps
(reading the page), as in a class. Prints median / p95 time to settled per step and over all steps,
server CPU per interaction and peak RSS for each N.

With ``--servers K`` it starts K server processes on the same warm cache and sends student ``i`` to
process ``i mod K``, as a proxy that keeps each client on one process would (README, "A classroom
server"): one Streamlit process runs the sessions' Python one at a time (the GIL), so one process
uses about one core however many it is given.

    python -m benchmarks.bench_load_protocol [--n 1 8 16 30] [--think 0] [--join 0] [--servers 1]
                                             [--scale 1.0] [--cache DIR]
"""
from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import os
import random
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import websockets
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetState

from benchmarks.bench_load import (
    CHROMIUM_ARGS,
    RssSampler,
    add_class_args,
    browser_path,
    print_class,
    print_solo,
    retrieve_ready,
    server_cpu,
    streamlit_server,
    warm_emoji_env,
)

STEPS = ("open Retrieve", "click a thumbnail", "add a concept", "visit Subspaces", "visit Evaluate")


class RoundFailed(RuntimeError):
    """The server did not do what a step asked (or showed an exception)."""


class Student:
    """One browser session at the protocol level."""

    def __init__(self, base: str, timeout_s: float, static=()):
        self.base, self.timeout_s, self.static = base, timeout_s, list(static)
        self.query_string = ""
        self.elements: list = []
        self.ws = None

    async def __aenter__(self):
        url = self.base.replace("http://", "ws://") + "/_stcore/stream"
        self.ws = await websockets.connect(url, subprotocols=["streamlit"], max_size=None, origin=self.base,
                                           open_timeout=self.timeout_s)
        return self

    async def __aexit__(self, *exc):
        await self.ws.close()

    async def load_frontend(self) -> None:
        """What a first visit fetches besides the websocket: the index page and the frontend's files."""
        await asyncio.gather(*(asyncio.to_thread(self._fetch, url, True) for url in self.static))

    async def run(self, page_name: str, states=()) -> list:
        """Run ``page_name`` with the widget ``states`` (WidgetState protos); return the run's elements."""
        msg = BackMsg()
        cs = msg.rerun_script
        cs.query_string = self.query_string
        cs.page_name = page_name
        for s in states:
            cs.widget_states.widgets.add().CopyFrom(s)
        await self.ws.send(msg.SerializeToString())
        elements = []
        deadline = time.monotonic() + self.timeout_s
        while True:
            data = await asyncio.wait_for(self.ws.recv(), max(0.1, deadline - time.monotonic()))
            fm = ForwardMsg()
            fm.ParseFromString(data)
            kind = fm.WhichOneof("type")
            if kind == "delta" and fm.delta.WhichOneof("type") == "new_element":
                elements.append(fm.delta.new_element)
            elif kind == "page_info_changed":
                self.query_string = fm.page_info_changed.query_string
            elif kind == "script_finished":
                if fm.script_finished == ForwardMsg.FINISHED_EARLY_FOR_RERUN:
                    elements = []  # the app asked for a rerun: the next run's elements are the page
                    continue
                break
        if any(e.WhichOneof("type") == "exception" for e in elements):
            raise RoundFailed(f"{page_name}: the page shows an exception")
        await asyncio.gather(*(asyncio.to_thread(self._fetch, url) for url in _image_urls(elements)))
        self.elements = elements
        return elements

    def _fetch(self, url: str, gzip: bool = False) -> None:
        req = urllib.request.Request(self.base + url, headers={"Accept-Encoding": "gzip"} if gzip else {})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as r:
                r.read()
        except urllib.error.HTTPError as exc:  # an answer all the same (the browser gets the same 404)
            if not gzip:
                raise RoundFailed(f"{url}: HTTP {exc.code}") from None


def record_frontend(base: str, timeout_s: float) -> list:
    """Same-origin paths (not images, not the websocket) a fresh Chromium fetches when it opens Retrieve."""
    from playwright.async_api import async_playwright

    async def rec():
        seen = []
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=browser_path(), args=CHROMIUM_ARGS)
            page = await (await browser.new_context()).new_page()
            page.on("request", lambda r: seen.append((r.url, r.resource_type)))
            await page.goto(f"{base}/retrieve")
            await retrieve_ready(page, timeout_s)
            await browser.close()
        return seen

    paths = []
    for url, kind in asyncio.run(rec()):
        if url.startswith(base) and kind not in ("image", "media", "websocket") and "/media/" not in url:
            path = url[len(base):]
            if path not in paths:
                paths.append(path)
    return paths


def _image_urls(elements) -> list:
    urls = []
    for e in elements:
        if e.WhichOneof("type") == "imgs":
            urls += [im.url for im in e.imgs.imgs if im.url.startswith("/")]
    return urls


def _of_type(elements, kind: str) -> list:
    return [getattr(e, kind) for e in elements if e.WhichOneof("type") == kind]


def _retrieve_ready(elements) -> None:
    if not any("Unfiltered" in h.body for h in _of_type(elements, "heading")) and \
            not any("Unfiltered" in m.body for m in _of_type(elements, "markdown")):
        raise RoundFailed("Retrieve drew no unfiltered gallery")
    n_images = sum(len(e.imgs.imgs) for e in elements if e.WhichOneof("type") == "imgs")
    if n_images < 20:
        raise RoundFailed(f"Retrieve drew {n_images} images (fewer than 20)")


def _thumbs(elements) -> list:
    """The query strip's thumbnail buttons, in order: (id, label)."""
    return [(b.id, b.label) for b in _of_type(elements, "button") if "query_thumb_" in b.id]


async def student_round(base: str, timeout_s: float, think_s: float, rng: random.Random, cpu=None,
                        static=()) -> dict:
    out, cpu_at = {}, {}

    async def step(name, coro):
        if think_s and out:
            await asyncio.sleep(think_s * rng.uniform(0.5, 1.5))
        c0 = cpu() if cpu is not None else None
        t = time.monotonic()
        elements = await coro
        out[name] = time.monotonic() - t
        if cpu is not None:
            cpu_at[name] = cpu() - c0
        return elements

    async def first_visit(s):
        await s.load_frontend()
        return await s.run("retrieve")

    async with Student(base, timeout_s, static) as s:
        els = await step("open Retrieve", first_visit(s))
        _retrieve_ready(els)
        thumbs = _thumbs(els)
        use = [t for t in thumbs if t[1] == "Use"]
        if not use:
            raise RoundFailed(f"no query thumbnail to click ({len(thumbs)} thumbnails)")
        target = use[min(1, len(use) - 1)][0]
        state = _widget_state(target, trigger_value=True)
        els = await step("click a thumbnail", s.run("retrieve", [state]))
        _retrieve_ready(els)
        if dict(_thumbs(els)).get(target, "").startswith("Use"):
            raise RoundFailed("the clicked thumbnail did not become the current query")

        boxes = [m for m in _of_type(els, "multiselect") if m.id.endswith("-concepts")]
        if not boxes:
            raise RoundFailed("no concept multiselect on Retrieve")
        box = boxes[0]
        picked = list(box.raw_values)
        new = next((o for o in box.options if o not in picked), None)
        if new is None:
            raise RoundFailed("every concept is already picked")
        els = await step("add a concept", s.run("retrieve", [_widget_state(box.id, string_array_value=picked + [new])]))
        _retrieve_ready(els)
        now = [m for m in _of_type(els, "multiselect") if m.id == box.id]
        if not now or new not in now[0].raw_values:
            raise RoundFailed(f"the concept {new!r} was not added")

        els = await step("visit Subspaces", s.run("subspaces"))
        if not _of_type(els, "plotly_chart"):
            raise RoundFailed("Subspaces drew no map")
        els = await step("visit Evaluate", s.run("evaluate"))
        if not _of_type(els, "arrow_data_frame") and not _of_type(els, "dataframe"):
            raise RoundFailed("Evaluate drew no table")
    if cpu is not None:
        out["cpu"] = cpu_at
    return out


def _widget_state(widget_id: str, **value):
    st = WidgetState(id=widget_id)
    for k, v in value.items():
        if k == "string_array_value":
            st.string_array_value.data.extend(v)
        else:
            setattr(st, k, v)
    return st


async def run_class(bases, n: int, timeout_s: float, think_s: float, join_s: float, seed: int,
                    cpu=None, one_at_a_time: bool = False, static=()) -> tuple:
    """``n`` rounds; student ``i`` uses server ``bases[i % len(bases)]`` (as a proxy routing each client to
    one process would)."""
    # browsers fetch in parallel: enough threads that the clients never queue their downloads
    asyncio.get_running_loop().set_default_executor(concurrent.futures.ThreadPoolExecutor(max_workers=8 * n + 8))

    async def one(i):
        rng = random.Random(seed * 1000 + i)
        if join_s:
            await asyncio.sleep(rng.uniform(0, join_s))
        try:
            return await student_round(bases[i % len(bases)], timeout_s, think_s, rng, cpu=cpu, static=static)
        except Exception as exc:
            return {"failed": f"{type(exc).__name__}: {exc}"}

    t = time.monotonic()
    if one_at_a_time:
        results = [await one(i) for i in range(n)]
    else:
        results = await asyncio.gather(*(one(i) for i in range(n)))
    return results, time.monotonic() - t


def main():
    ap = argparse.ArgumentParser()
    add_class_args(ap)
    ap.add_argument("--think", type=float, default=0.0, help="mean pause between a student's steps (s)")
    ap.add_argument("--join", type=float, default=0.0, help="students start at random within this many seconds")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--servers", type=int, default=1,
                    help="server processes (one per core: Python runs one script at a time per process)")
    args = ap.parse_args()
    env = warm_emoji_env(args.scale, args.cache)
    load = os.getloadavg()
    print(f"{os.cpu_count()} CPUs, load average before: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; emoji scale "
          f"{args.scale}; protocol clients; think {args.think:g} s, join within {args.join:g} s; "
          f"{args.servers} server process(es)", flush=True)
    logs = Path(tempfile.mkdtemp(prefix="slics-bench-load-"))
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(streamlit_server(env, logs / f"streamlit-{k}.log")) for k in range(args.servers)]
        bases = [b for b, _ in servers]
        procs = [p for _, p in servers]

        def cpu_all():
            return sum(server_cpu(p) for p in procs)

        static = record_frontend(bases[0], args.timeout)  # also the warm-up of the first page, not counted
        print(f"a first visit fetches {len(static)} frontend files besides images", flush=True)
        warm, _ = asyncio.run(run_class(bases, len(bases), args.timeout, 0, 0, args.seed, static=static))
        bad = [r["failed"] for r in warm if "failed" in r]  # warm-up rounds (one per server) are not counted
        if bad:
            raise SystemExit(f"a warm-up round failed: {bad[0]} (server logs: {logs})")
        solo, _ = asyncio.run(run_class(bases[:1], args.solo, args.timeout, 0, 0, args.seed,
                                        cpu=cpu_all, one_at_a_time=True, static=static))
        print_solo(solo)
        print(f"{'N':>3} {'step':<18} {'median s':>9} {'p95 s':>7}   (time to settled per step)")
        for n in args.n:
            cpu0 = cpu_all()
            with contextlib.ExitStack() as samplers:
                rss = [samplers.enter_context(RssSampler(p)) for p in procs]
                results, wall = asyncio.run(run_class(bases, n, args.timeout, args.think, args.join, args.seed + n,
                                                      static=static))
            cpu = cpu_all() - cpu0
            print_class(n, STEPS, results, wall, cpu, [r.peak for r in rss])
    load = os.getloadavg()
    print(f"load average after: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")


if __name__ == "__main__":
    main()

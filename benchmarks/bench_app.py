"""How long the app's work takes on the emoji world (not a test).

The issue asks that every page does real work "in about a minute on a laptop CPU" and that
the next start is ready in a few seconds. This times, on this machine:

* the cold start: render + embed + fit the default emoji workspace into an empty cache;
* the warm start: opening the cached workspace;
* the computation behind each page for one query (what a rerun costs, without Streamlit).

* per interaction on a warm workspace (``--interactions``): the server time of each click, timed
  on Streamlit's AppTest runs of the real pages (wall and process CPU seconds of the script run),
  first visit and repeated visits apart (what caches save).

    python -m benchmarks.bench_app [--scale 1.0] [--keep-cache DIR] [--interactions-only]
    python -m benchmarks.bench_app --pages [--keep-cache DIR | --ws NAME] [--query ROW]

``--pages``: every page's first and warm visit in a new process (server wall and CPU), the issue-24 check
that no first visit on a built world waits over 3 s.

``--browser``: the same clicks a presenter makes, in a real browser (``streamlit run`` on loopback, one
headless Chromium through Playwright, ``$SLICS_CHROMIUM`` or /usr/bin/chromium): the first visits of
Retrieve and Atoms in a new server process, picking other queries on Retrieve (the strip's "Use" buttons
and a gallery's "Query this image" pills), the query edits, and clicks on an Atoms heatmap cell. Per interaction
(medians): wall from the click until the script has finished, every image on the page is decoded and every visible
chart has its SVG (timestamps taken in the page); idle: from the click until Chromium's CPU went quiet (drawing
that outlasts the wall, such as a chart's traces, ends there; looked for only after the wall's 0.6 s settle wait,
so never under wall + 0.6 s); server CPU (user + system of the streamlit
process), browser CPU (Chromium's processes until idle: building and drawing the page) and the bytes the server
sent over the websocket. On a loaded machine the two CPU columns are the robust ones.

    python -m benchmarks.bench_app --browser [--scale 1.0] [--keep-cache DIR] [--rounds 5]
"""
import argparse
import os
import shutil
import tempfile
import time

import numpy as np


def _t(fn, repeat=1):
    ts, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts)), out


def interactions(cache):
    """Server time (wall, CPU) of each click on the real pages, warm workspace (AppTest)."""
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    os.environ["SLICS_EMOJI_CACHE"] = cache
    app = str(Path(__file__).resolve().parent.parent / "app.py")
    at = AppTest.from_file(app, default_timeout=900)
    rows = []

    def step(name, fn):
        c, t = time.process_time(), time.perf_counter()
        fn()
        wall, cpu = time.perf_counter() - t, time.process_time() - c
        err = " (EXCEPTION)" if at.exception else ""
        rows.append((name + err, wall, cpu))

    def widget(kind, key):
        try:
            return getattr(at, kind)(key=key)
        except KeyError:
            return None

    step("Home: first run (opens the workspace)", at.run)
    for visit in ("first", "second"):
        step(f"Retrieve: {visit} visit", lambda: at.switch_page("app_pages/retrieve.py").run())
    for val, name in ((20, "k"),):
        w = widget("slider", name)
        if w is not None:
            step(f"Retrieve: k -> {val}", lambda w=w, val=val: w.set_value(val).run())
    w = widget("selectbox", "method")
    if w is not None:
        step("Retrieve: method -> U-SLiCS", lambda: w.set_value("U-SLiCS").run())
        step("Retrieve: method -> S-SLiCS", lambda: at.selectbox(key="method").set_value("S-SLiCS").run())
    w = widget("select_slider", "d0")
    if w is not None:
        other = [d for d in w.options if str(d) != str(w.value)][0]
        step(f"Retrieve: d0 -> {other}", lambda: w.set_value(int(other)).run())
    for page in ("subspaces", "atoms", "captions", "generate"):
        for visit in ("first", "second"):
            step(f"{page.capitalize()}: {visit} visit", lambda p=page: at.switch_page(f"app_pages/{p}.py").run())
    step("Evaluate: first visit (ranks every job once)", lambda: at.switch_page("app_pages/evaluate.py").run())
    step("Evaluate: second visit", lambda: at.switch_page("app_pages/evaluate.py").run())
    for k in (10, 5, 37, 20):
        step(f"Evaluate: k -> {k}", lambda k=k: at.number_input(key="eval_k").set_value(k).run())
    step("Evaluate: split -> val", lambda: at.radio(key="eval_split").set_value("val").run())
    step("Evaluate: normalisation -> min", lambda: at.radio(key="eval_norm").set_value("min").run())
    step("Evaluate: k -> 120 (deeper ranking once)", lambda: at.number_input(key="eval_k").set_value(120).run())
    width = max(len(r[0]) for r in rows)
    print(f"per interaction, warm workspace ({os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}):")
    for name, wall, cpu in rows:
        flag = "" if wall <= 1.0 else "   > 1 s"
        print(f"  {name:<{width}}  wall {wall:7.3f} s  CPU {cpu:7.3f} s{flag}")
    return rows


PAGES = ("home", "retrieve", "mix", "subspaces", "atoms", "captions", "generate", "evaluate", "learn", "cones",
         "glossary")


def page_visits(ws_name=None, query=None):
    """Every page's first and warm visit in this (new) process: server wall and CPU seconds of the script run
    (AppTest runs the real pages; CPU is the whole process's, background threads included).

    A new process is what a restarted or second classroom server is: its first visits find nothing in memory
    and only what the build stored in the workspace folder (slics_core.explorer.arrival).
    """
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    app = str(Path(__file__).resolve().parent.parent / "app.py")
    at = AppTest.from_file(app, default_timeout=900)
    if ws_name:
        at.query_params["ws"] = ws_name
    if query is not None:
        at.query_params["q"] = str(query)
    rows = []
    c, t = time.process_time(), time.perf_counter()
    at.switch_page("app_pages/learn.py").run()  # the process's own start (Streamlit, imports), no workspace
    rows.append(("process start (Learn page)", time.perf_counter() - t, time.process_time() - c))
    for page in PAGES:
        for visit in ("first", "warm"):
            c, t = time.process_time(), time.perf_counter()
            at.switch_page(f"app_pages/{page}.py").run()
            wall, cpu = time.perf_counter() - t, time.process_time() - c
            err = " (EXCEPTION)" if at.exception else ""
            rows.append((f"{page}: {visit} visit{err}", wall, cpu))
    print(f"every page, first and warm visit, workspace {ws_name or 'emoji'} ({os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.1f}):")
    for name, wall, cpu in rows:
        flag = "" if wall <= 3.0 else "   > 3 s"
        print(f"  {name:<28}  wall {wall:7.3f} s  CPU {cpu:7.3f} s{flag}")
    return rows


# ---------------------------------------------------------------------- in a real browser
_WATCH_JS = """() => {
  // timestamps (performance.now) of the script state's changes and of every image's load, kept in the page
  // (the whole document is watched: Streamlit may replace the element that carries the state)
  window.__slics = {states: [], loads: []};
  const attr = 'data-test-script-state', now = () => performance.now();
  new MutationObserver(ms => ms.forEach(m => window.__slics.states.push([now(), m.target.getAttribute(attr)])))
    .observe(document.body, {attributes: true, attributeFilter: [attr], subtree: true});
  document.addEventListener('load', e => { if (e.target.tagName === 'IMG') window.__slics.loads.push(now()); }, true);
}"""
_SNAPSHOT_JS = """() => ({now: performance.now(), states: window.__slics.states, loads: window.__slics.loads,
  state: document.querySelector('[data-testid="stApp"]').getAttribute('data-test-script-state'),
  pending: [...document.querySelectorAll('[data-testid="stMain"] img')].filter(i => !i.complete).length,
  images: document.querySelectorAll('[data-testid="stMain"] img').length,
  undrawn: [...document.querySelectorAll('[data-testid="stMain"] [data-testid="stPlotlyChart"]')]
    .filter(c => c.offsetParent !== null && !c.querySelector('.js-plotly-plot .main-svg')).length})"""


async def _timed(page, act, ready=None, timeout_s=120.0, quiet_s=0.6):
    """Wall seconds from ``act()`` until the page is done: the script ran and stopped (its state is
    ``notRunning`` and stays so for ``quiet_s``), every image in the main area is decoded, and ``ready()``
    holds, and every visible plotly chart in the main area is drawn. The end is the last state change or image
    load seen in the page (not when the poll noticed it), or the poll that first saw the charts drawn (50 ms
    polls) when they were drawn last."""
    await page.evaluate("() => { window.__slics.states = []; window.__slics.loads = []; }")
    t0 = await page.evaluate("() => performance.now()")
    await act()
    deadline = time.monotonic() + timeout_s
    drawn_at, undrawn_seen = t0, False
    while True:
        await page.wait_for_timeout(50)
        snap = await page.evaluate(_SNAPSHOT_JS)
        if snap["undrawn"]:
            undrawn_seen = True
        elif undrawn_seen and drawn_at == t0:
            drawn_at = snap["now"]
        ran = any(st_ == "running" for _, st_ in snap["states"])
        last = max([t for t, _ in snap["states"]] + snap["loads"] + [drawn_at])
        if (snap["state"] == "notRunning" and snap["pending"] == 0 and not snap["undrawn"]
                and (ran or snap["now"] - t0 > 3000)
                and snap["now"] - last >= quiet_s * 1000 and (ready is None or await ready())):
            return (last - t0) / 1000, snap["images"]
        if time.monotonic() > deadline:
            raise TimeoutError(f"not done after {timeout_s:.0f} s at {page.url} (state {snap['state']})")


def _browser_cpu() -> float:
    """CPU seconds (user + system) of the Chromium processes this process started (through Playwright)."""
    import contextlib

    import psutil

    total = 0.0
    for c in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if "chrom" in c.name().lower():
                t = c.cpu_times()
                total += t.user + t.system
    return total


_CELL_JS = """([key, row, col]) => {
  // page coordinates of the centre of heatmap cell (row, col) of the chart with widget key ``key``
  const gd = document.querySelector(`.st-key-${key} .js-plotly-plot`), L = gd._fullLayout;
  gd.scrollIntoView({block: "start"});
  const box = gd.getBoundingClientRect();
  return [box.left + L.xaxis._offset + L.xaxis.l2p(col), box.top + L.yaxis._offset + L.yaxis.l2p(row)];
}"""


async def _click_cell(page, key, row, col):
    await page.locator(f".st-key-{key} .js-plotly-plot").first.wait_for()
    x, y = await page.evaluate(_CELL_JS, [key, row, col])
    await page.mouse.move(x - 3, y - 3)
    await page.mouse.move(x, y)
    await page.wait_for_timeout(100)  # plotly's hover (which a click selects) follows the mouse
    await page.mouse.click(x, y)


#: JavaScript: page coordinates and point id of the ``k``-th item embedding (a circle) of the map with widget key
#: ``key``, counted over its traces in drawing order (the map's colour groups, then kinds).
_POINT_JS = """([key, k]) => {
  const gd = document.querySelector(`.st-key-${key} .js-plotly-plot`), L = gd._fullLayout;
  gd.scrollIntoView({block: "center"});
  const box = gd.getBoundingClientRect(), pts = [];
  gd._fullData.forEach(t => {
    if (t.marker.symbol !== 'circle' || t.name === 'current query') return;
    for (let i = 0; i < t.x.length; i++)
      pts.push([box.left + L._size.l + L.xaxis.d2p(t.x[i]), box.top + L._size.t + L.yaxis.d2p(t.y[i]),
                t.customdata[i][0]]);
  });
  return pts[k % pts.length];
}"""


async def _click_point(page, key, k):
    await page.locator(f".st-key-{key} .js-plotly-plot").first.wait_for()
    x, y, _ = await page.evaluate(_POINT_JS, [key, k])
    await page.mouse.move(x - 3, y - 3)
    await page.mouse.move(x, y)
    await page.wait_for_timeout(100)
    await page.mouse.click(x, y)


async def _preview_shown(page):
    """The caption of Subspaces' preview image ("#<row>"), or "" when no point is picked."""
    box = page.locator(".st-key-map_preview")
    return await box.inner_text() if await box.count() else ""


async def _atom_shown(page):
    """The value of Atoms' atom picker (widget key ``atom_<method>_d0<d0>``)."""
    return await page.locator('[class*="st-key-atom_"] [role="combobox"]').first.input_value()


async def _browser_idle(page, window_s=0.3, busy_cpu_s=0.03, timeout_s=30.0):
    """Wait until Chromium uses under ``busy_cpu_s`` CPU seconds in a ``window_s`` window (or ``timeout_s``);
    return the ``time.monotonic()`` at which that quiet window began."""
    deadline = time.monotonic() + timeout_s
    while True:
        c, t = _browser_cpu(), time.monotonic()
        await page.wait_for_timeout(window_s * 1000)
        if _browser_cpu() - c < busy_cpu_s or t > deadline:
            return t  # when the quiet window began


async def _browser_tour(base, proc, rounds, only=None):
    from playwright.async_api import async_playwright

    from benchmarks.bench_load import CHROMIUM_ARGS, browser_path, server_cpu

    rows, sent = [], [0]
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=browser_path(), args=CHROMIUM_ARGS)
        page = await (await browser.new_context(viewport={"width": 1400, "height": 1000})).new_page()
        page.on("websocket", lambda ws: ws.on("framereceived",
                                              lambda f: sent.__setitem__(0, sent[0] + len(f if isinstance(f, bytes)
                                                                                          else f.encode()))))
        main = page.locator('[data-testid="stMain"]')

        async def step(name, act, ready=None):
            c, b, bc, t = server_cpu(proc), sent[0], _browser_cpu(), time.monotonic()
            wall, n_img = await _timed(page, act, ready)
            # the browser's work that outlasts the wall (drawing a chart) counts to this step: "idle" is the seconds
            # from the click until Chromium's CPU went quiet (a 0.3 s window under 10 % of a core)
            idle = await _browser_idle(page) - t
            rows.append((name, wall, server_cpu(proc) - c, (sent[0] - b) / 1e6, n_img, _browser_cpu() - bc, idle))

        async def nav(path):
            await page.locator(f'[data-testid="stSidebarNav"] a[href$="/{path}"]').first.click()

        async def galleries():  # a gallery's title and its images are drawn
            return (await page.get_by_text("Unfiltered (whole query)").count() > 0
                    and await main.locator(".slics-gallery img").count() > 0)

        async def retrieve_clicks():
            await step("Retrieve: warm visit", lambda: nav("retrieve"), galleries)
            # (":visible": Streamlit draws a hidden copy of each button that has a help tooltip)
            strip = main.locator('[data-testid="stButton"] button:visible')
            for i in range(rounds):
                await step("Retrieve: pick a query (strip)", lambda i=i: strip.nth(1 + i % 5).click(), galleries)
            pills = main.locator('[class*="st-key-pick_"] button')
            for i in range(rounds):
                await step("Retrieve: pick a gallery image", lambda i=i: pills.nth(2 + i).click(), galleries)
            for label, value in (("Without concept", 1), ("More of concept", 2)):
                box = main.locator(f'[data-testid="stSelectbox"]:has-text("{label}") [role="combobox"]').first

                async def choose(box=box, value=value):
                    await box.click()
                    await page.locator('[role="option"]').nth(value).click()

                # scrolled to and drawn before the clock starts, as a presenter sees the box before clicking it (a
                # click during the scroll can land before the page settles and only focus the box)
                await box.scroll_into_view_if_needed()
                await _browser_idle(page)
                await step(f"Retrieve: {label.lower()}", choose, galleries)

        async def atoms_clicks():
            await step("Atoms: warm visit", lambda: nav("atoms"))
            for i in range(rounds):  # a click on a cell of the co-occurrence heatmap picks its row's atom
                was = await _atom_shown(page)

                async def picked(was=was):  # the atom picker shows another atom
                    return await _atom_shown(page) != was

                await step("Atoms: click a heatmap cell",
                           lambda i=i: _click_cell(page, "cooc_map", 3 + 7 * i, 5 + 3 * i), picked)

        await page.goto(base)
        await page.locator('[data-testid="stApp"]').wait_for()
        await page.evaluate(_WATCH_JS)
        await _timed(page, lambda: page.wait_for_timeout(0))

        def want(part):
            return only is None or part in only

        if want("retrieve"):
            await step("Retrieve: first visit", lambda: nav("retrieve"), galleries)
        if want("atoms"):
            await step("Atoms: first visit", lambda: nav("atoms"))
        if want("retrieve"):
            await retrieve_clicks()
        if want("atoms"):
            await atoms_clicks()
        if want("subspaces"):
            await step("Subspaces: first visit", lambda: nav("subspaces"))
            for i in range(rounds):  # a click on an item point of the map previews it
                was = await _preview_shown(page)

                async def previewed(was=was):
                    now = await _preview_shown(page)
                    return bool(now) and now != was

                await step("Subspaces: click a map point", lambda i=i: _click_point(page, "tsne", 17 + 31 * i),
                           previewed)
        errors = await page.locator('[data-testid="stException"]').count()
        await browser.close()
    return rows, errors


def browser_interactions(scale, cache, rounds=5, only=None):
    """Wall (click to drawn), server CPU and bytes sent of a presenter's clicks in a real browser."""
    import asyncio
    import statistics
    from pathlib import Path

    from benchmarks.bench_load import streamlit_server, warm_emoji_env

    env = warm_emoji_env(scale, cache)
    log = Path(tempfile.mkdtemp(prefix="slics-bench-app-")) / "streamlit.log"
    with streamlit_server(env, log) as (base, proc):
        rows, errors = asyncio.run(_browser_tour(base, proc, rounds, only))
    print(f"in a real browser, emoji world scale {scale}, new server process ({os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.1f}){'; ERRORS SHOWN: ' + str(errors) if errors else ''}:")
    names = list(dict.fromkeys(r[0] for r in rows))
    width = max(map(len, names))
    for name in names:
        mine = [r for r in rows if r[0] == name]
        med = [statistics.median(r[i] for r in mine) for i in (1, 2, 3, 5, 6)]
        walls = [r[1] for r in mine]
        spread = f" (of {len(mine)}: {min(walls):.2f}-{max(walls):.2f} s)" if len(mine) > 1 else ""
        print(f"  {name:<{width}}  wall {med[0]:6.2f} s  idle {med[4]:6.2f} s  server CPU {med[1]:5.2f} s  "
              f"browser CPU {med[3]:5.2f} s  "
              f"sent {med[2]:5.2f} MB  "
              f"images {mine[-1][4]}{spread}")
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=float, default=1.0, help="SLICS_EMOJI_SCALE (1 = the app's default sizes)")
    ap.add_argument("--keep-cache", default=None, help="build into this folder and keep it")
    ap.add_argument("--interactions-only", action="store_true",
                    help="only the per-interaction times (uses --keep-cache, built there if empty)")
    ap.add_argument("--pages", action="store_true",
                    help="only every page's first and warm visit in this new process, on a built world "
                         "(--keep-cache, built there if empty) or on the dataset workspace --ws")
    ap.add_argument("--ws", default=None, help="with --pages: a dataset workspace name under $SLICS_WORKSPACES")
    ap.add_argument("--query", type=int, default=None, help="with --pages: the query row (?q=)")
    ap.add_argument("--browser", action="store_true",
                    help="only a presenter's clicks in a real browser (wall, server CPU, bytes sent; Playwright)")
    ap.add_argument("--rounds", type=int, default=5, help="with --browser: clicks of each kind (medians)")
    ap.add_argument("--only", default=None,
                    help="with --browser: the pages to tour, comma-separated (retrieve, atoms, subspaces; default all)")
    args = ap.parse_args()
    if args.browser:
        browser_interactions(args.scale, args.keep_cache, args.rounds,
                             set(args.only.split(",")) if args.only else None)
        return
    os.environ["SLICS_EMOJI_SCALE"] = str(args.scale)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.pages:
        if args.ws is None:
            cache = args.keep_cache or tempfile.mkdtemp(prefix="slics-bench-")
            os.environ["SLICS_EMOJI_CACHE"] = cache
            from slics_core.explorer.emoji_build import open_emoji_workspace

            open_emoji_workspace(cache_dir=cache)
        page_visits(args.ws, args.query)
        return
    if args.interactions_only:
        cache = args.keep_cache or tempfile.mkdtemp(prefix="slics-bench-")
        from slics_core.explorer.emoji_build import open_emoji_workspace

        open_emoji_workspace(cache_dir=cache)
        interactions(cache)
        return

    from slics_core.explorer import scoring
    from slics_core.explorer.atom_tables import atom_heatmaps, caption_table
    from slics_core.explorer.emoji_build import open_emoji_workspace
    from slics_core.explorer.encoding import embed_query, load_query_encoder, workspace_vocabulary
    from slics_core.explorer.generation import load_workspace_generator
    from slics_core.explorer.maps import subspace_map
    from slics_core.explorer.pool import memory_pool
    from slics_core.explorer.queries import components_of_row, concept_galleries, concept_scores
    from slics_core.explorer.sphere import PRESETS, decompose, direction

    cache = args.keep_cache or tempfile.mkdtemp(prefix="slics-bench-")
    rows = []
    try:
        t_cold, ws = _t(lambda: open_emoji_workspace(cache_dir=cache))
        rows.append(("cold start: render, embed, fit (empty cache)", t_cold))
        t_warm, ws = _t(lambda: open_emoji_workspace(cache_dir=cache), repeat=3)
        rows.append(("warm start: open the cached workspace", t_warm))
        q = int(ws.index["query"][np.flatnonzero(ws.Y[ws.index["query"]].sum(1) >= 2)[0]])
        model = ws.model("S-SLiCS")
        x = ws.X[q]
        concepts = np.flatnonzero(ws.Y[q])
        pool = ws.index["pool"]

        t_enc, enc = _t(lambda: load_query_encoder(ws))
        rows.append(("load the query encoder", t_enc))
        rows.append(("embed one uploaded image", _t(lambda: embed_query(ws, enc, ws.image(q)), repeat=5)[0]))

        def retrieve():
            V = components_of_row(model, x)
            concept_scores(model, x[None])
            # a pool made here (its exact index built in the call, as this row always measured)
            return concept_galleries(V, x, memory_pool(ws.X, pool, Y=ws.Y, Z=ws.Z), concepts, 20,
                                     sub_to_concept=ws.sub_to_concept, query_sub=ws.Z[q])

        rows.append(("Retrieve: scores + galleries, all picked concepts, k=20", _t(retrieve, repeat=5)[0]))
        rows.append(("Subspaces: t-SNE map, 200 items + components + atoms",
                     _t(lambda: subspace_map(model, ws.X, ws.Y, ws.index["pool"], n_points=200))[0]))
        rows.append(("Atoms: co-occurrence (OMP on val) + cosines",
                     _t(lambda: atom_heatmaps(model, ws.X[ws.index["val"]]))[0]))
        t_voc, (words, W) = _t(lambda: workspace_vocabulary(ws))
        rows.append(("Captions: embed the vocabulary (first time)", t_voc))
        rows.append(("Captions: S-SLiCS + U-SLiCS table",
                     _t(lambda: caption_table({m: ws.model(m) for m in ("S-SLiCS", "U-SLiCS")},
                                              ws.concept_names, words, W))[0]))
        t_gl, gen = _t(lambda: load_workspace_generator(ws))
        rows.append(("Generate: load generator + fit alignment", t_gl))
        V = model.project(x[None], None)[0][concepts]
        rows.append((f"Generate: {1 + len(concepts)} images (query + components)",
                     _t(lambda: gen.generate(np.vstack([x[None], V])), repeat=3)[0]))
        rows.append(("Evaluate: methods table (3 methods x 2 modes + UF, query split)",
                     _t(lambda: scoring.methods_table(ws))[0]))
        rows.append((f"Evaluate: d0 sweep ({len(ws.d0_values)} d0, val + query, both modes)",
                     _t(lambda: scoring.score_d0_sweep(ws))[0]))
        job = scoring.Job("S-SLiCS", ws.default_d0, "partial", "query")
        t_rank, stored = _t(lambda: scoring.rank_job(ws, job))
        t_k = _t(lambda: scoring.run_job(ws, job, k=10, rankings=stored), repeat=5)[0]
        rows.append(("Evaluate: one job, rank once (depth 50)", t_rank))
        rows.append(("Evaluate: one job, mAP@10 from the stored ranking", t_k))
        scene = next(iter(PRESETS.values()))()
        rows.append(("Learn: decompose x* on the 3-D cones",
                     _t(lambda: decompose(scene, direction(30.0, 20.0)), repeat=20)[0]))
    finally:
        if not args.keep_cache:
            shutil.rmtree(cache, ignore_errors=True)
    sizes = {k: len(v) for k, v in ws.index.items()}
    print(f"emoji world, scale {args.scale}: {sizes}, d0 {ws.d0_values}, {os.cpu_count()} CPUs")
    width = max(len(r[0]) for r in rows)
    for name, sec in rows:
        print(f"{name:<{width}}  {sec:8.3f} s")
    print(f"cold / warm start ratio: {t_cold / max(t_warm, 1e-9):.0f}x")
    print(f"new k from stored rankings vs ranking again: {t_rank / max(t_k, 1e-9):.0f}x faster")


if __name__ == "__main__":
    main()

"""Hostile-input catalogue, class 3: no link can put a foreign link or image on any page.

Every page is visited in a real browser (a) on the emoji world with a Markdown/HTML payload in every
link parameter, (b) with a text query made of payloads, (c) with a ``?ws=`` naming no workspace, and
(d) on a dataset workspace whose name, concept names, ids and captions are payloads. Requests to any
host but the app's are blocked (``page.route``) and recorded; the DOM must hold no ``<a>`` or
``<img>`` pointing off the app, and no request may have left for the attacker's host.
"""
from __future__ import annotations

from urllib.parse import quote, urlsplit

import numpy as np
import pytest
from e2e_helpers import wait_for_app
from e2e_server import new_page, run_streamlit

EVIL = "evil.example"
PAGES = ["", "retrieve", "mix", "subspaces", "atoms", "captions", "generate", "evaluate", "learn", "cones",
         "glossary"]
NO_WORKSPACE = ("learn", "cones", "glossary")  # pages that open no workspace
PAYLOADS = [
    f"[click me](https://{EVIL}/link)",
    f"https://{EVIL}/bare",
    f"![img](https://{EVIL}/img.png)",
    f"<a href='https://{EVIL}/html'>x</a><img src='https://{EVIL}/html.png'>",
    f"`` ` ``](https://{EVIL}/tick) ![i](https://{EVIL}/tick.png)",
    f"www.{EVIL}/www",
    f"mail@{EVIL}",
    f":red[x] $x$ **b** [r][1]\n\n[1]: https://{EVIL}/ref",
]
PARAMS = ("q", "c", "method", "d0", "k", "mode", "q2", "c1", "c2")


def _url(path, **params):
    return "/" + path + "?" + "&".join(f"{k}={quote(str(v), safe='')}" for k, v in params.items())


def _hostile_workspace(root):
    from slics_core.data import LabelledEmbeddings
    from slics_core.explorer.build import build_workspace
    from slics_core.labels import Labels

    rng = np.random.default_rng(0)
    n, d = 60, 8
    Y = np.eye(4, dtype=bool)[np.arange(n) % 4] | np.eye(4, dtype=bool)[(np.arange(n) + 1) % 4]
    raw = (Y @ rng.standard_normal((4, d)) + 0.3 * rng.standard_normal((n, d))).astype(np.float32)
    names = [PAYLOADS[0], PAYLOADS[1], PAYLOADS[2], PAYLOADS[3]]
    data = LabelledEmbeddings(raw=raw, ids=[PAYLOADS[i % len(PAYLOADS)] for i in range(n)],
                              labels=Labels(Y, names), name=PAYLOADS[3],
                              extras={"captions": [PAYLOADS[(i + 3) % len(PAYLOADS)] for i in range(n)]})
    build_workspace(data, root / "hostile", methods=["S-SLiCS", "S-SVD", "UF"], d0_values=(1, 2), n_iter=2,
                    name=PAYLOADS[4])


@pytest.fixture(scope="module")
def server(tmp_path_factory, ws, browser):  # browser: skipped (or failed under CI) without one
    root = tmp_path_factory.mktemp("injection-workspaces")
    _hostile_workspace(root)
    with run_streamlit(root, tmp_path_factory.mktemp("injection-server") / "streamlit.log") as base:
        yield base


def _visit(browser, base, url):
    """Open ``url`` in a new session; return (foreign links and images in the DOM, blocked requests)."""
    pg = new_page(browser, base)
    blocked = []
    host = urlsplit(base).hostname

    def guard(route):
        h = urlsplit(route.request.url).hostname
        if h not in (host, "localhost", "127.0.0.1") and not route.request.url.startswith(("data:", "blob:")):
            blocked.append(route.request.url)
            route.abort()
        else:
            route.continue_()

    pg.route("**/*", guard)
    try:
        pg.goto(url, wait_until="domcontentloaded")
        wait_for_app(pg)
        foreign = pg.evaluate("""(evil) => {
            const out = [];
            for (const a of document.querySelectorAll('a[href]')) {
                const h = a.getAttribute('href');
                if (h.includes(evil) || /^(mailto|xmpp|javascript):/i.test(h))
                    out.push('a ' + h + ' in ' + a.parentElement.outerHTML.slice(0, 300));
            }
            for (const i of document.querySelectorAll('img[src], image[href]')) {
                const s = i.getAttribute('src') || i.getAttribute('href');
                if (!/^(data:|blob:|\\/|\\.|https?:\\/\\/(localhost|127\\.0\\.0\\.1)[:/])/.test(s) || s.includes(evil))
                    out.push('img ' + s.slice(0, 120) + ' in ' + i.parentElement.outerHTML.slice(0, 300));
            }
            return out;
        }""", EVIL)
        text = pg.locator('[data-testid="stMain"]').inner_text()
    finally:
        pg.context.close()
    return foreign, blocked, text


@pytest.mark.parametrize("path", PAGES, ids=[p or "home" for p in PAGES])
def test_no_page_shows_a_foreign_link_or_image(browser, server, path):
    visits = {
        "every parameter": _url(path, **{k: PAYLOADS[i % len(PAYLOADS)] for i, k in enumerate(PARAMS)}),
        "text query": _url(path, q="text:" + PAYLOADS[1] + " " + PAYLOADS[0], c=PAYLOADS[2]),
        "unknown workspace": _url(path, ws=PAYLOADS[4], q=PAYLOADS[0]),
        "hostile dataset": _url(path, ws="hostile", c=PAYLOADS[0], c1=PAYLOADS[1]),
    }
    bad = {}
    for what, url in visits.items():
        foreign, blocked, text = _visit(browser, server, url)
        if foreign or [u for u in blocked if EVIL in u]:
            bad[what] = (foreign, blocked)
        if what == "unknown workspace" and path not in NO_WORKSPACE:
            assert "Could not open workspace" in text, text[:500]
    assert not bad, bad

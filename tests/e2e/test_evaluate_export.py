"""End-to-end: Evaluate's chart downloads as HTML that renders with the network blocked (issue 12, item 6).

The file is downloaded from the real page, then opened from disk in a browser context whose every
non-file request is aborted: the chart must still draw its traces (plotly.js is inside the file).
"""
from __future__ import annotations

import pytest
from e2e_helpers import assert_no_errors, by_key, wait_for_app

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

#: JavaScript: the number of drawn traces of the first plotly graph (0 while plotly has not drawn it).
_DRAWN = """() => {
    const g = document.querySelector('.js-plotly-plot');
    if (!g || !g._fullData) return 0;
    return g.querySelectorAll('.scatterlayer .trace').length;
}"""


def test_evaluate_chart_html_renders_with_the_network_blocked(page, browser, tmp_path):
    page.goto("/evaluate", wait_until="domcontentloaded")
    wait_for_app(page)
    assert_no_errors(page, "/evaluate")
    button = by_key(page, "eval_sweep_html").get_by_role("button")
    button.wait_for()
    with page.expect_download() as dl:
        button.click()
    path = tmp_path / "d0_sweep.html"
    dl.value.save_as(path)
    html = path.read_text(encoding="utf-8")
    assert "Plotly.newPlot" in html

    ctx = browser.new_context(viewport={"width": 1000, "height": 800})
    blocked = []

    def block(route):
        if route.request.url.startswith("file:"):
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    ctx.route("**/*", block)
    ctx.set_offline(True)
    try:
        offline = ctx.new_page()
        errors = []
        offline.on("pageerror", lambda exc: errors.append(str(exc)))
        offline.goto(path.as_uri(), wait_until="load")
        offline.wait_for_function(f"({_DRAWN})() > 0", timeout=60_000)
        n_traces = offline.evaluate(_DRAWN)
        n_data = offline.evaluate("() => document.querySelector('.js-plotly-plot').data.length")
        assert n_traces == n_data > 0
        assert errors == [] and blocked == [], (errors, blocked)
    finally:
        ctx.close()

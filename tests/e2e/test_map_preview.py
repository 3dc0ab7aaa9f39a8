"""End-to-end: the Subspaces map in a real headless Chromium (issue 12, "a map people can read").

A click on one map point selects it (plotly ``clickmode="event+select"`` reaching Streamlit), its
image appears in the preview panel beside the map, and "Use #r as the query" opens Retrieve with
that item as the query. Waits on the app's own readiness (script state), never on fixed sleeps.
"""
from __future__ import annotations

import re

import pytest
from e2e_helpers import assert_no_errors, by_key, pick_option, selectbox_value, shot, wait_for_app, wait_for_images

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

#: JavaScript: page coordinates and point id of the item embedding (a circle) farthest from every other
#: point, so that a click there can only hit that point.
_ISOLATED_ITEM = """gd => {
    const L = gd._fullLayout, box = gd.getBoundingClientRect();
    const pts = [];
    gd._fullData.forEach((t, i) => {
        if (!t.visible || t.visible === 'legendonly') return;
        for (let k = 0; k < t.x.length; k++) {
            const px = box.left + L._size.l + L.xaxis.d2p(t.x[k]);
            const py = box.top + L._size.t + L.yaxis.d2p(t.y[k]);
            const circle = t.marker.symbol === 'circle' && t.name !== 'current query';
            pts.push({px, py, circle, id: t.customdata[k][0], text: t.hovertext[k]});
        }
    });
    let best = null, bestD = -1;
    for (const p of pts) {
        if (!p.circle) continue;
        let d = Infinity;
        for (const q of pts) if (q !== p) d = Math.min(d, Math.hypot(p.px - q.px, p.py - q.py));
        if (d > bestD) { bestD = d; best = p; }
    }
    return {...best, gap: bestD, clickmode: L.clickmode};
}"""


def test_click_a_map_point_previews_it_and_makes_it_the_query(page, screenshot_dir):
    page.goto("/subspaces", wait_until="domcontentloaded")
    wait_for_app(page)
    assert_no_errors(page, "/subspaces")
    # items of the query split, so that Retrieve's query picker lists the picked one
    pick_option(page, by_key(page, "map_split"), "query")
    assert_no_errors(page, "/subspaces (query split)")
    preview = by_key(page, "map_preview")
    assert preview.count() == 0, "a preview is shown before any point was picked"

    chart = by_key(page, "tsne")
    gd = chart.locator(".js-plotly-plot").first
    gd.wait_for()
    target = gd.evaluate(_ISOLATED_ITEM)
    assert target["clickmode"] == "event+select"
    assert target["gap"] > 4, f"no isolated item point to click ({target})"
    m = re.match(r"item #(\d+)", target["text"])
    assert m, target["text"]
    row = int(m.group(1))

    page.mouse.move(target["px"], target["py"])
    page.mouse.click(target["px"], target["py"])
    wait_for_app(page)
    assert_no_errors(page, "/subspaces after a click")

    preview.wait_for()
    srcs = wait_for_images(page, preview, 1)
    assert len(srcs) == 1
    assert preview.locator('[data-testid="stImageCaption"]').inner_text().strip() == f"#{row}"
    text = preview.inner_text()
    assert f"item #{row}" in text and "sub_label=" not in text, text
    # the picked-points box holds exactly the clicked point
    tags = by_key(page, "picked_points").locator("[data-tag]").evaluate_all(
        "els => els.map(e => e.getAttribute('aria-label'))")
    assert len(tags) == 1 and tags[0].startswith(f"{target['id']} "), (tags, target)
    shot(page, screenshot_dir, "map_click_preview")

    button = preview.get_by_role("button", name=f"Use #{row} as the query")
    button.click()
    page.wait_for_url(re.compile(r"/retrieve"))
    wait_for_app(page)
    assert_no_errors(page, "/retrieve after 'Use as query'")
    assert selectbox_value(by_key(page, "query_pick")).startswith(f"#{row} "), selectbox_value(
        by_key(page, "query_pick"))
    shot(page, screenshot_dir, "map_click_use_as_query")

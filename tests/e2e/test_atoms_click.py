"""Atoms in a real browser: a click on a heatmap cell picks the atom of its row (plotly's click selection reaching
Streamlit through the heatmap's invisible per-cell markers; AppTest cannot click a chart)."""
from __future__ import annotations

import re

import pytest
from e2e_helpers import assert_no_errors, by_key, selectbox_value, shot, wait_for_app
from streamlit_private import script_runs

from slics_core.explorer.atom_tables import group_layout

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

#: page coordinates of the centre of cell (row, col) of the heatmap with widget key ``key`` (scrolled into view)
CELL_JS = """([key, row, col]) => {
  const gd = document.querySelector(`.st-key-${key} .js-plotly-plot`), L = gd._fullLayout;
  gd.scrollIntoView({block: "start"});
  const box = gd.getBoundingClientRect();
  return [box.left + L.xaxis._offset + L.xaxis.l2p(col), box.top + L.yaxis._offset + L.yaxis.l2p(row)];
}"""


def _atom_picker(page):
    return page.locator('[class*="st-key-atom_"] [role="combobox"]').first


def _click_cell(page, key, row, col) -> str:
    """Hover, then click the cell; return the hover label plotly showed for it."""
    page.locator(f".st-key-{key} .js-plotly-plot").first.wait_for()
    x, y = page.evaluate(CELL_JS, [key, row, col])
    page.mouse.move(x - 3, y - 3)
    page.mouse.move(x, y)
    label = page.locator(f".st-key-{key} .hoverlayer .hovertext")
    label.first.wait_for(timeout=10_000)
    text = label.first.text_content()
    page.mouse.click(x, y)
    return text


def _wait_for_atom(page, atom: int, timeout_s: float = 60) -> str:
    deadline = page.evaluate("() => performance.now()") + timeout_s * 1000
    while True:
        shown = _atom_picker(page).input_value()
        if shown.endswith(f"(atom {atom})") or page.evaluate("() => performance.now()") > deadline:
            return shown
        page.wait_for_timeout(250)


@pytest.mark.parametrize("key", ["cooc_map", "cos_map"])
def test_a_click_on_a_heatmap_cell_picks_the_atom_of_its_row(page, ws, key, screenshot_dir):
    page.goto("/atoms", wait_until="domcontentloaded")
    wait_for_app(page)
    assert_no_errors(page, "/atoms")
    method = selectbox_value(by_key(page, "method"))
    order = group_layout(ws.model(method, ws.default_d0).groups_)["order"]  # rows are atoms in group order
    M = len(order)
    for row, col in ((M - 2, 1), (1, M - 2)):  # far from the diagonal, so the row (not the column) must decide
        want = int(order[row])
        hover = _click_cell(page, key, row, col)
        assert re.search(rf"row atom {want}\b", hover), hover
        wait_for_app(page)
        assert _wait_for_atom(page, want).endswith(f"(atom {want})")
        assert_no_errors(page, f"/atoms after a click on {key}")
    shot(page, screenshot_dir, f"atoms_click_{key}")


def test_a_heatmap_click_reruns_only_the_heatmaps_and_the_atom(page, ws):
    """The heatmaps and the picked atom's images and words are one fragment: a click reruns that, not the health
    tab or the label profile (no element of theirs is sent again)."""
    frames = []
    page.on("websocket", lambda sock: sock.on("framereceived",
                                              lambda f: frames.append(f) if isinstance(f, bytes) else None))
    page.reload(wait_until="domcontentloaded")  # a new connection, now listened to
    page.goto("/atoms", wait_until="domcontentloaded")
    wait_for_app(page)
    assert_no_errors(page, "/atoms")
    full = script_runs(frames)
    assert full and full[-1][0] == "FINISHED_SUCCESSFULLY"
    assert any(i.endswith("health_csv") for i in full[-1][1]), "the page's own run sends the health section"
    method = selectbox_value(by_key(page, "method"))
    order = group_layout(ws.model(method, ws.default_d0).groups_)["order"]
    want = int(order[len(order) - 3])
    del frames[:]
    _click_cell(page, "cooc_map", len(order) - 3, 2)
    wait_for_app(page)
    assert _wait_for_atom(page, want).endswith(f"(atom {want})")
    assert_no_errors(page, "/atoms after a click")
    runs = script_runs(frames)
    assert runs, "the click ran nothing"
    for status, ids in runs:
        assert status == "FINISHED_FRAGMENT_RUN_SUCCESSFULLY", (status, ids)
        assert not [i for i in ids if i.endswith(("health_csv", "health_table", "profile_label", "n_nonzero"))], ids
    assert any(i.endswith(f"atom_{method}_d0{ws.default_d0}") for _, ids in runs for i in ids)

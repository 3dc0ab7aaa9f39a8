"""Helpers of the end-to-end tests: waiting for Streamlit runs, finding errors, screenshots."""
from __future__ import annotations

import re
import time
from pathlib import Path

#: Seconds to wait for a script run. The first page that opens the emoji
#: workspace builds it (torch import, scene rendering, fits): minutes on a busy
#: 2-core machine. Later runs take seconds.
FIRST_RUN_TIMEOUT_S = 420


def wait_for_app(page, timeout_s: float = FIRST_RUN_TIMEOUT_S, settle_s: float = 0.6) -> None:
    """Wait until the app is connected and its script has finished running.

    Streamlit marks the root element ``data-testid="stApp"`` with
    ``data-test-script-state`` (``initial``, ``running``, ``notRunning``,
    ``rerunRequested``...). A run counts as finished when the state is
    ``notRunning`` and stays so for ``settle_s`` seconds (a widget change may
    start its rerun a moment after the event).
    """
    deadline = time.monotonic() + timeout_s
    app = page.locator('[data-testid="stApp"]')
    app.wait_for(state="attached", timeout=timeout_s * 1000)
    stable_since = None
    while True:
        state = app.get_attribute("data-test-script-state")
        conn = app.get_attribute("data-test-connection-state")
        done = state == "notRunning" and (conn or "CONNECTED").upper() == "CONNECTED"
        now = time.monotonic()
        if done:
            stable_since = stable_since or now
            if now - stable_since >= settle_s:
                return
        else:
            stable_since = None
        if now > deadline:
            raise AssertionError(
                f"the app did not finish running in {timeout_s:.0f} s "
                f"(script state {state!r}, connection {conn!r}) at {page.url}"
            )
        page.wait_for_timeout(200)


def error_texts(page) -> list:
    """Texts of every exception box and every ``st.error`` on the page."""
    out = []
    for el in page.locator('[data-testid="stException"]').all():
        out.append("exception: " + el.inner_text()[:2000])
    for el in page.locator('[data-testid="stAlertContentError"]').all():
        out.append("st.error: " + el.inner_text()[:2000])
    return out


def assert_no_errors(page, what: str = "") -> None:
    errs = error_texts(page)
    assert not errs, f"{what or page.url} shows errors:\n" + "\n---\n".join(errs)


def main(page):
    """The main area of the app (not the sidebar)."""
    return page.locator('[data-testid="stMain"]')


def shot(page, screenshot_dir: Path, name: str) -> Path:
    """Wait for the page to be drawn (:func:`wait_for_render`), then save a screenshot ``<name>.png``."""
    wait_for_render(page)
    path = screenshot_dir / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', name)}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def loaded_images(scope) -> list:
    """``src`` of every ``st.image`` and gallery picture (one HTML element per gallery,
    app_pages/_images.image_gallery) under ``scope`` whose picture has been decoded by the browser."""
    return scope.locator('[data-testid="stImage"] img, .slics-gallery img').evaluate_all(
        "els => els.filter(e => e.complete && e.naturalWidth > 0).map(e => e.getAttribute('src'))"
    )


def wait_for_images(page, scope, min_count: int, timeout_s: float = 60) -> list:
    """Wait until at least ``min_count`` images under ``scope`` are decoded; return their ``src``."""
    deadline = time.monotonic() + timeout_s
    while True:
        srcs = loaded_images(scope)
        if len(srcs) >= min_count:
            return srcs
        if time.monotonic() > deadline:
            raise AssertionError(f"only {len(srcs)} images (wanted >= {min_count}) after {timeout_s:.0f} s")
        page.wait_for_timeout(250)


def by_key(page, key: str):
    """The element container of the widget with ``key=`` (Streamlit adds class ``st-key-<key>``)."""
    return page.locator(f".st-key-{key}")


def box_select(page, chart, frac=(0.2, 0.2, 0.8, 0.8)) -> None:
    """Drag a box-selection over a plotly chart (``chart``: locator of the ``st.plotly_chart``).

    ``frac`` = (x0, y0, x1, y1) of the box as fractions of the plotting area. Switches
    the chart to box-select mode with its mode bar first when it is in another drag mode.
    """
    gd = chart.locator(".js-plotly-plot").first
    gd.wait_for()
    if gd.evaluate("g => g._fullLayout.dragmode") != "select":
        gd.hover()
        chart.locator('.modebar-btn[data-title="Box Select"]').first.click()
    area = chart.locator(".nsewdrag").first
    bb = area.bounding_box()
    x0, y0 = bb["x"] + bb["width"] * frac[0], bb["y"] + bb["height"] * frac[1]
    x1, y1 = bb["x"] + bb["width"] * frac[2], bb["y"] + bb["height"] * frac[3]
    page.mouse.move(x0, y0)
    page.mouse.down()
    for k in range(1, 13):
        page.mouse.move(x0 + (x1 - x0) * k / 12, y0 + (y1 - y0) * k / 12)
    page.mouse.up()


def open_options(page, widget):
    """Open the drop-down of a selectbox / multiselect (``widget``: its ``st-key-`` container);
    return the locator of its options ("Select all" of a multiselect left out)."""
    widget.locator('[role="combobox"]').first.click()
    options = page.locator('[role="option"]:not([data-key="__select_all__"])')
    options.first.wait_for()
    return options


def pick_option(page, widget, option_text: str | None = None) -> str:
    """Choose ``option_text`` (default: the first offered option) in a selectbox / multiselect
    and wait for the rerun; return the text of the option chosen."""
    options = open_options(page, widget)
    opt = options.first if option_text is None else page.get_by_role("option", name=option_text, exact=True)
    text = opt.inner_text().strip()
    opt.click()
    page.keyboard.press("Escape")
    wait_for_app(page)
    return text


def multiselect_values(widget) -> list:
    """The picked values of an ``st.multiselect`` (its tags)."""
    return widget.locator("[data-tag]").evaluate_all("els => els.map(e => e.getAttribute('aria-label'))")


def wait_for_tags(page, widget, timeout_s: float = 60) -> list:
    """The picked values of an ``st.multiselect`` once the browser has drawn at least one (a loaded machine can
    leave widgets as placeholders for a while after the script has finished); ``[]`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        values = multiselect_values(widget)
        if values or time.monotonic() > deadline:
            return values
        page.wait_for_timeout(250)


def selectbox_value(widget) -> str:
    return widget.locator('[role="combobox"]').first.input_value()


def set_number(page, widget, value) -> None:
    """Type ``value`` into an ``st.number_input`` (``widget``: its ``st-key-`` container) and commit it."""
    box = widget.locator("input").first
    box.fill(str(value))
    box.press("Enter")


def png_bytes(array) -> bytes:
    """PNG file bytes of an (H, W, 3) uint8 array."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format="PNG")
    return buf.getvalue()


def wait_for_render(page, timeout_s: float = 30) -> None:
    """After a run: wait until every image of the page is decoded and no element is a loading skeleton
    (for screenshots; a picture that never loads is reported)."""
    deadline = time.monotonic() + timeout_s
    while True:
        pending = page.evaluate(
            """() => ({
                images: [...document.querySelectorAll('[data-testid="stMain"] img')]
                          .filter(e => !(e.complete && e.naturalWidth > 0)).map(e => e.getAttribute('src')),
                skeletons: document.querySelectorAll('[data-testid="stSkeleton"]').length,
            })"""
        )
        if not pending["images"] and not pending["skeletons"]:
            page.wait_for_timeout(500)
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the page did not finish drawing in {timeout_s:.0f} s: {pending}")
        page.wait_for_timeout(250)

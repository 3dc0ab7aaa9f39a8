"""End-to-end tests of the exploration loop and the shared state (issue 12), in a real headless Chromium.

A gallery image becomes the query; a text query gives galleries; concept mixing gives a gallery;
a URL copied on a *dataset* workspace reopens the same view in a fresh browser. Every wait is on the
page's own readiness (Streamlit's script state, decoded images), never a fixed sleep.
"""
from __future__ import annotations

import urllib.parse

import numpy as np
import pytest
from e2e_helpers import (
    assert_no_errors,
    by_key,
    main,
    multiselect_values,
    selectbox_value,
    shot,
    wait_for_app,
    wait_for_images,
)
from e2e_server import new_page, run_streamlit

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def open_page(page, path: str):
    page.goto("/" + path, wait_until="domcontentloaded")
    wait_for_app(page)


def url_params(page) -> dict:
    return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(page.url).query))


def wait_for_param(page, name: str, value: str, timeout_ms: int = 120_000):
    """The URL is written at the end of a run: wait until it carries ``name=value``."""
    page.wait_for_function(
        "([n, v]) => new URLSearchParams(window.location.search).get(n) === v", arg=[name, value],
        timeout=timeout_ms)


def test_gallery_image_becomes_the_query(page, screenshot_dir):
    open_page(page, "retrieve")
    body = main(page)
    wait_for_images(page, body, 4)
    before = url_params(page)["q"]
    # a click on the third image of the first concept gallery (its images are buttons named by their rank)
    gallery = page.locator('[class*="st-key-pick_"]:not([class*="st-key-pick_uf"])').first
    button = gallery.get_by_role("button", name="Make #3 the query", exact=True)
    button.click()
    wait_for_app(page)
    assert_no_errors(page, "/retrieve after clicking a gallery image")
    after = url_params(page)["q"]
    assert after != before
    assert selectbox_value(by_key(page, "query_pick")).startswith(f"#{after} ")
    wait_for_images(page, body, 4)
    # (which row a position names is tests/test_page_retrieve.py's); Enter on a focused image picks it too
    first = page.locator('[class*="st-key-pick_"]:not([class*="st-key-pick_uf"])').first
    first.get_by_role("button", name="Make #2 the query", exact=True).focus()
    page.keyboard.press("Enter")
    wait_for_app(page)
    page.wait_for_function("q => new URLSearchParams(window.location.search).get('q') !== q", arg=after)
    assert_no_errors(page, "/retrieve after picking an image with the keyboard")
    shot(page, screenshot_dir, "loop_gallery_click")


def test_text_query_gives_galleries(page, screenshot_dir):
    open_page(page, "retrieve")
    box = by_key(page, "query_text").locator("input")
    box.fill("a cat")
    box.press("Enter")
    wait_for_app(page)
    assert_no_errors(page, "/retrieve after a text query")
    wait_for_param(page, "q", "text:a cat")
    body = main(page)
    assert body.get_by_text("“a cat”").count() >= 1
    tags = multiselect_values(by_key(page, "concepts"))
    assert len(tags) == 1
    assert body.locator("h3").filter(has_text=tags[0]).count() >= 1
    wait_for_images(page, body, 10)
    shot(page, screenshot_dir, "loop_text_query")


def test_concept_mixing_gives_a_gallery(page, screenshot_dir):
    open_page(page, "mix")
    assert_no_errors(page, "/mix")
    body = main(page)
    p = url_params(page)
    assert {"q", "q2", "c1", "c2"} <= set(p), p
    assert p["c1"] in selectbox_value(by_key(page, "mix_c1"))
    images = wait_for_images(page, body, 10)
    assert len(images) >= 10
    # a mixed result becomes the query (a click on the gallery's first image)
    by_key(page, "mix_pick").get_by_role("button", name="Make #1 the query", exact=True).click()
    wait_for_app(page)
    assert url_params(page)["q"] != p["q"]
    shot(page, screenshot_dir, "loop_mix")


# ---------------------------------------------------------------------- dataset workspace links
def _folder_workspace(root):
    """A small folder + CSV dataset embedded with emoji-small and turned into workspace ``toys``."""
    from PIL import Image

    from slics_core.cli import main as cli

    rng = np.random.default_rng(0)
    photos = root / "photos"
    photos.mkdir(parents=True)
    rows = ["image,labels,sub_labels"]
    colours = {"red": (220, 30, 30), "green": (30, 200, 30), "blue": (30, 30, 220)}
    for i in range(60):
        lab = list(colours)[i % 3]
        extra = "|warm" if i % 4 == 0 else ""
        a = np.clip(np.asarray(colours[lab]) + rng.normal(0, 25, (32, 32, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(a).save(photos / f"p{i}.jpg")
        rows.append(f"p{i}.jpg,{lab}{extra},{lab}/{'dark' if i % 2 else 'light'}")
    (root / "labels.csv").write_text("\n".join(rows) + "\n")
    cache = root / "cache"
    assert cli(["embed", "--dataset", "folder", "--images", str(photos), "--labels", str(root / "labels.csv"),
                "--encoder", "emoji-small", "--cache", str(cache), "--no-progress", "--workers", "0"]) == 0
    out = root / "workspaces"
    import os

    old = os.environ.get("SLICS_WORKSPACES")
    os.environ["SLICS_WORKSPACES"] = str(out)
    try:
        assert cli(["workspace", "--cache", str(cache), "--name", "toys", "--d0", "2", "3", "--n-iter", "2",
                    "--quiet"]) == 0
    finally:
        if old is None:
            os.environ.pop("SLICS_WORKSPACES", None)
        else:
            os.environ["SLICS_WORKSPACES"] = old
    return out


def test_dataset_link_reopens_the_same_view_in_a_fresh_browser(browser, tmp_path, screenshot_dir):
    workspaces = _folder_workspace(tmp_path)
    with run_streamlit(workspaces, tmp_path / "streamlit.log") as base:
        first = new_page(browser, base)
        try:
            open_page(first, "retrieve?ws=toys&method=S-SVD&d0=3&k=6&mode=full")
            assert_no_errors(first, "dataset deep link")
            assert not first.locator('[data-testid="stAlertContentWarning"]').count()
            concepts = by_key(first, "concepts")
            concepts.locator("[data-tag]").first.wait_for()  # the picked concepts are drawn
            assert multiselect_values(concepts)
            wait_for_param(first, "ws", "toys")
            url = first.url
            view = {"query": selectbox_value(by_key(first, "query_pick")), "concepts": multiselect_values(concepts),
                    "method": selectbox_value(by_key(first, "method"))}
            shot(first, screenshot_dir, "dataset_link_first")
        finally:
            first.context.close()
        assert view["method"] == "S-SVD"
        params = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))
        assert params["ws"] == "toys" and params["d0"] == "3" and params["k"] == "6" and params["mode"] == "full"
        # a fresh browser (new context: no cookies, no session) opening the copied URL
        second = new_page(browser, base)
        try:
            second.goto(url, wait_until="domcontentloaded")
            wait_for_app(second)
            by_key(second, "concepts").locator("[data-tag]").first.wait_for()
            assert_no_errors(second, "reopened link")
            assert selectbox_value(by_key(second, "query_pick")) == view["query"]
            assert multiselect_values(by_key(second, "concepts")) == view["concepts"]
            assert selectbox_value(by_key(second, "method")) == "S-SVD"
            sidebar = second.locator('[data-testid="stSidebar"]')
            assert "toys" in main(second).inner_text() or "toys" in sidebar.inner_text()
            # no emoji concept leaks into the dataset workspace
            assert not set(view["concepts"]) & {"animal", "food", "vehicle"}
            shot(second, screenshot_dir, "dataset_link_reopened")
        finally:
            second.context.close()

"""End-to-end tests: the app in a real headless Chromium (Playwright).

Main flows of issue 6: every page opens without an error; upload -> concept
galleries (Retrieve); selecting t-SNE points -> images (Subspaces); generation
(Generate). Run alone with ``python -m pytest -m e2e``; screenshots of every page
are written to ``$SLICS_E2E_SCREENSHOTS`` (default ``<tmp>/slics-e2e-screenshots``).
"""
from __future__ import annotations

import re
import time

import numpy as np
import pytest
from e2e_helpers import (
    assert_no_errors,
    box_select,
    by_key,
    loaded_images,
    main,
    multiselect_values,
    open_options,
    pick_option,
    png_bytes,
    selectbox_value,
    set_number,
    shot,
    wait_for_app,
    wait_for_images,
    wait_for_render,
    wait_for_tags,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PAGES = {
    "": "home",
    "retrieve": "retrieve",
    "subspaces": "subspaces",
    "atoms": "atoms",
    "captions": "captions",
    "generate": "generate",
    "evaluate": "evaluate",
    "mix": "mix",
    "learn": "learn",
    "cones": "cones",
    "glossary": "glossary",
}


def open_page(page, path: str):
    page.goto("/" + path, wait_until="domcontentloaded")
    wait_for_app(page)


@pytest.mark.parametrize("path", list(PAGES), ids=list(PAGES.values()))
def test_every_page_opens_without_error(page, path, screenshot_dir):
    open_page(page, path)
    body = main(page)
    body.wait_for()
    # The page really is the requested one (an unknown url_path falls back to the home page
    # with a "page not found" notice).
    assert page.get_by_text("Page not found", exact=False).count() == 0
    current = page.locator('[data-testid="stSidebarNavLink"][aria-current="page"]')
    assert current.count() == 1
    href = current.get_attribute("href").rstrip("/")
    assert href == page.url.split("?")[0].rstrip("/"), (href, page.url)
    assert href.endswith("/" + path) if path else href.count("/") == 2, href
    heading = body.locator("h1")
    assert heading.count() >= 1, f"/{path} has no title"
    assert body.inner_text().strip(), f"/{path} shows nothing"
    shot(page, screenshot_dir, f"page_{PAGES[path]}")
    assert_no_errors(page, f"/{path}")
    assert not page.console_errors, f"/{path}: JavaScript errors {page.console_errors}"


def nav_titles(page) -> list:
    return [t.split("\n")[-1].strip() for t in page.locator('[data-testid="stSidebarNavLink"]').all_inner_texts()]


def test_deep_link_opens_the_page_with_its_query_and_concepts(fresh_page, screenshot_dir):
    """A deep link ``/retrieve?q=<row>&c=<concept>`` as the first visit to a (re)started server."""
    page = fresh_page
    open_page(page, "retrieve?c=animal")
    # The app's own navigation (app.py's st.navigation), not Streamlit's listing of a pages/ folder
    # (what a first visit showed while the page files lived in pages/).
    titles = nav_titles(page)
    shot(page, screenshot_dir, "deep_link_first_visit")
    assert "Retrieve" in titles and "ui" not in titles and "query" not in titles, (
        f"first visit of a deep link shows the sidebar {titles}: the app's navigation was not used"
    )
    assert_no_errors(page, "deep link")
    assert multiselect_values(by_key(page, "concepts")) == ["animal"]
    # Another query of the query set, then its own deep link in a new session.
    pick = by_key(page, "query_pick")
    options = open_options(page, pick)
    second = options.nth(1).inner_text().strip()
    page.keyboard.press("Escape")
    row = int(second.split("#", 1)[1].split()[0])
    other = page.context.new_page()
    other.goto(f"/retrieve?q={row}&c=animal,food", wait_until="domcontentloaded")
    wait_for_app(other)
    assert_no_errors(other, "deep link")
    picked = selectbox_value(by_key(other, "query_pick"))
    assert picked.startswith(f"#{row} "), picked
    assert multiselect_values(by_key(other, "concepts")) == ["animal", "food"]
    assert other.locator("h3").filter(has_text="animal").count() >= 1


# ---------------------------------------------------------------------- Retrieve: upload -> galleries
def scene_png(index: int = 0) -> tuple:
    """PNG bytes of an emoji scene that is not in the workspace (another world seed) and its objects."""
    from slics_core.emoji.scenes import make_scenes

    scenes = make_scenes(1, seed=777, start=index)
    return png_bytes(scenes.images[0]), scenes.objects[0]


def upload(page, key: str, name: str, data: bytes, mime: str = "image/png"):
    by_key(page, key).locator('input[type="file"]').set_input_files(
        files=[{"name": name, "mimeType": mime, "buffer": data}]
    )
    wait_for_app(page)


def slider_value(page, key: str) -> int:
    return int(float(by_key(page, key).locator('input[type="range"]').first.input_value()))


def test_upload_gives_concept_galleries(page, screenshot_dir):
    """Retrieve: upload a scene, its likely concepts are pre-selected, each picked concept gets a gallery."""
    open_page(page, "retrieve")
    body = main(page)
    data, objects = scene_png()
    upload(page, "query_upload", "my scene.png", data)
    assert_no_errors(page, "/retrieve after an upload")
    captions = " ".join(body.locator('[data-testid="stImageCaption"]').all_inner_texts())
    assert "my scene.png" in captions, f"the upload did not become the query (captions: {captions[:300]})"
    concepts = by_key(page, "concepts")
    tags = multiselect_values(concepts)
    assert tags, "no concept was pre-selected for the upload"
    k = slider_value(page, "k")
    for name in tags:  # one gallery section per picked concept
        assert body.locator("h3").filter(has_text=name).count() >= 1, f"no gallery for {name}"
    before = wait_for_images(page, body, 2 * k * len(tags))
    shot(page, screenshot_dir, "flow_retrieve_upload")

    # Pick one more concept: one more pair of galleries (by its component, unfiltered) of k images each.
    new_name = pick_option(page, concepts)
    assert new_name and new_name not in tags
    assert multiselect_values(concepts) == tags + [new_name]
    assert body.locator("h3").filter(has_text=new_name).count() >= 1
    after = wait_for_images(page, body, len(before) + 2 * k)
    assert len(after) == len(before) + 2 * k, (len(before), len(after), k)
    assert_no_errors(page, "/retrieve after picking a concept")
    # The deep link follows the picks.
    assert new_name.replace(" ", "+") in page.url or new_name.replace(" ", "%20") in page.url or new_name in page.url
    shot(page, screenshot_dir, "flow_retrieve_two_concepts")


def test_bad_upload_gives_a_message_and_the_page_keeps_working(page, screenshot_dir):
    """Retrieve: a text file posing as a PNG gives a message; the current query and galleries stay."""
    open_page(page, "retrieve")
    body = main(page)
    wait_for_render(page)
    images = loaded_images(body)
    query = selectbox_value(by_key(page, "query_pick"))
    concepts = multiselect_values(by_key(page, "concepts"))
    assert images and concepts
    upload(page, "query_upload", "notes.png", b"this is not a picture\n" * 20)
    assert page.locator('[data-testid="stException"]').count() == 0
    msg = " ".join(page.locator('[data-testid="stAlertContentError"]').all_inner_texts())
    assert "notes.png" in msg and "not an image" in msg, f"no clear message for a bad upload: {msg!r}"
    # Nothing else on the page is lost: the same query, concepts and gallery pictures.
    assert selectbox_value(by_key(page, "query_pick")) == query
    assert multiselect_values(by_key(page, "concepts")) == concepts
    wait_for_render(page)
    assert loaded_images(body) == images
    shot(page, screenshot_dir, "flow_retrieve_bad_upload")


# ---------------------------------------------------------------------- Subspaces: t-SNE selection -> images
def column_of(page, widget):
    """The innermost ``st.columns`` column holding ``widget``."""
    return page.locator('[data-testid="stColumn"]').filter(has=widget).last


def test_selecting_tsne_points_shows_their_images(page, screenshot_dir):
    """Subspaces: a box selection dragged on the t-SNE map fills the picked points and shows their images."""
    open_page(page, "subspaces")
    assert_no_errors(page, "/subspaces")
    picked = by_key(page, "picked_points")
    panel = column_of(page, picked)
    assert multiselect_values(picked) == []
    assert loaded_images(panel) == [], "images shown before any selection"

    box_select(page, by_key(page, "tsne"), frac=(0.05, 0.05, 0.95, 0.95))
    wait_for_app(page)
    assert_no_errors(page, "/subspaces after a selection")
    tags = multiselect_values(picked)
    assert tags, "the box selection picked no points"
    # a tag is "point <id> · <description with item #<row>>"; "#N" is an item's row everywhere (issue 38)
    picked_rows = {m.group(1) for t in tags if (m := re.search(r"item #(\d+)", t))}
    srcs = wait_for_images(page, panel, 1)
    captions = panel.locator('[data-testid="stImageCaption"]').all_inner_texts()
    assert len(captions) == len(srcs)
    for cap in captions:  # "#<row> <kind>: <concept>": every image is one of the picked points' items
        assert cap.startswith("#") and cap[1:].split(" ")[0] in picked_rows, (cap, sorted(picked_rows)[:10])
    shot(page, screenshot_dir, "flow_subspaces_selection")

    # A smaller box picks fewer points (the selection, not a fixed list, drives the panel).
    box_select(page, by_key(page, "tsne"), frac=(0.3, 0.3, 0.7, 0.7))
    wait_for_app(page)
    fewer = multiselect_values(picked)
    assert 0 < len(fewer) < len(tags), (len(fewer), len(tags))
    assert set(fewer) <= set(tags)


# ---------------------------------------------------------------------- Generate
def generated(page, prefix: str = "gen") -> dict:
    """Caption -> image ``src`` of every generated image that has its own PNG download (``<prefix>_png_<i>``)."""
    cells = page.locator('[data-testid="stColumn"]').filter(has=page.locator(f'[class*="st-key-{prefix}_png_"]'))
    out = {}
    for cell in cells.all():
        img = cell.locator('[data-testid="stImage"] img')
        if img.count() != 1:
            continue
        cap = cell.locator('[data-testid="stImageCaption"]').inner_text().strip()
        out[cap] = img.get_attribute("src")
    return out


def wait_generated(page, n: int, prefix: str = "gen", timeout_s: float = 120) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        imgs = generated(page, prefix)
        if len(imgs) >= n and len(loaded_images(main(page))) >= n:
            return imgs
        if time.monotonic() > deadline:
            raise AssertionError(f"{len(imgs)} generated images (wanted {n}) after {timeout_s:.0f} s")
        page.wait_for_timeout(250)


def click_generate_if_needed(page, key: str = "generate"):
    button = by_key(page, key).locator("button")
    if button.count():
        button.first.click()
        wait_for_app(page)


def test_generation_from_concept_components(page, screenshot_dir):
    """Generate: one image for the query and one per picked concept; picks and seed change them."""
    open_page(page, "generate")
    assert_no_errors(page, "/generate")
    concepts = by_key(page, "concepts")
    picked = wait_for_tags(page, concepts)
    assert picked, "the query's concepts were not pre-selected"
    click_generate_if_needed(page)
    imgs = wait_generated(page, 1 + len(picked))
    assert len(imgs) == 1 + len(picked), (list(imgs), picked)
    for name in picked:  # every picked concept has its image
        assert any(name in cap for cap in imgs), (name, list(imgs))
    assert len(set(imgs.values())) == len(imgs), "two components gave the same picture"
    shot(page, screenshot_dir, "flow_generate")

    # Another concept: one more image, the earlier ones unchanged (same query, same seed).
    new_name = pick_option(page, concepts)
    click_generate_if_needed(page)
    more = wait_generated(page, len(imgs) + 1)
    assert_no_errors(page, "/generate after picking a concept")
    assert len(more) == len(imgs) + 1, (list(imgs), list(more))
    new_caps = [c for c in more if c not in imgs]
    assert len(new_caps) == 1 and new_name in new_caps[0], (new_name, new_caps)
    assert more[new_caps[0]] not in imgs.values()
    for cap, src in imgs.items():
        assert more[cap] == src, f"{cap} changed when another concept was added"

    seed_box = by_key(page, "seed").locator("input").first
    if seed_box.is_disabled():  # one-pass deterministic decoder: seed has no effect (the page says so)
        assert page.get_by_text("deterministic", exact=False).count() >= 1
    else:  # stochastic generator: another seed draws other pictures
        set_number(page, by_key(page, "seed"), 1234)
        wait_for_app(page)
        click_generate_if_needed(page)
        reseeded = wait_generated(page, len(more))
        assert set(reseeded.values()).isdisjoint(more.values()), "a new seed gave the same pictures"


def test_atom_interpolation_strip(page, screenshot_dir):
    """Generate: the Fig. 3 strip between two atoms of a concept (a = 0 ... 1), one image per step."""
    open_page(page, "generate")
    click_generate_if_needed(page, "generate_interp")
    body = main(page)
    n = slider_value(page, "interp_n")
    strip_caps = [f"a={a:.2f}" for a in np.linspace(0.0, 1.0, n)]
    wait_for_images(page, body, n)
    caps = body.locator('[data-testid="stImageCaption"]').all_inner_texts()
    assert [c for c in caps if c.startswith("a=")] == strip_caps
    srcs = strip_srcs(body)
    assert len(srcs) == n and srcs[0] != srcs[-1], "the two ends of the strip are the same picture"
    # Another second atom b2: the strip changes except at a = 1 (a*b1 + (1-a)*b2 = b1 there).
    pick_option(page, by_key(page, "atom_b"), "2")
    click_generate_if_needed(page, "generate_interp")
    wait_for_images(page, body, n)
    other = strip_srcs(body)
    assert len(other) == n
    assert other[-1] == srcs[-1], "a=1 draws b1 alone, which did not change"
    assert other[0] != srcs[0], "a=0 draws b2 alone, which changed"
    assert_no_errors(page, "/generate interpolation")
    shot(page, screenshot_dir, "flow_generate_interpolation")


def strip_srcs(body) -> list:
    return body.locator('[data-testid="stImage"]').evaluate_all(
        """els => els.filter(e => { const c = e.querySelector('[data-testid="stImageCaption"]');
                                    return c && c.innerText.startsWith('a='); })
                     .map(e => e.querySelector('img').getAttribute('src'))"""
    )

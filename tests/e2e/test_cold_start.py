"""End-to-end: the first start on an empty emoji cache (issue 12, "cold start").

A presenter's first page opens on a preview (the first scenes of the world) while the whole world is
built in the background; every tab shows the build's progress, and each page updates by itself when
the whole world is published (no reload). The other e2e modules start their servers on a built
cache; this one starts on an empty cache folder of its own. Waits on the app's readiness, never on
fixed sleeps.
"""
from __future__ import annotations

import time

import pytest
from e2e_helpers import assert_no_errors, main, shot, wait_for_app, wait_for_images
from e2e_server import new_page, run_streamlit

from slics_core.emoji.world import PREVIEW_SCENES, config_from_env, preview_config

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

BANNER = "Building the whole world in the background"
#: The whole small world (600 training scenes) is built in about a minute on a quiet 2-core machine.
BUILD_TIMEOUT_S = 900


def _items(page) -> int:
    """The Home page's "Items" metric."""
    metric = main(page).locator('[data-testid="stMetric"]').filter(has_text="Items")
    return int(metric.locator('[data-testid="stMetricValue"]').inner_text().replace(",", ""))


def test_empty_cache_opens_a_preview_then_the_whole_world_without_a_reload(browser, tmp_path, screenshot_dir):
    cfg = config_from_env()
    preview = preview_config(cfg)
    assert preview is not None, "the test world is too small to have a preview"
    with run_streamlit(tmp_path / "workspaces", tmp_path / "streamlit.log", emoji_cache=tmp_path / "emoji") as base:
        retrieve, home = new_page(browser, base), new_page(browser, base)
        try:
            # two tabs opened at once: both wait on the same build and open on its preview
            t0 = time.monotonic()
            retrieve.goto("/retrieve", wait_until="domcontentloaded")
            home.goto("/", wait_until="domcontentloaded")
            wait_for_app(retrieve)
            wait_for_app(home)
            print(f"preview open in both tabs after {time.monotonic() - t0:.1f} s")
            # the preview: galleries to click at once, and the build's progress on every page
            assert retrieve.get_by_text(BANNER).count(), "no build banner on the preview"
            assert home.get_by_text(BANNER).count(), "the second tab shows no build progress"
            wait_for_images(retrieve, main(retrieve), 4)
            assert_no_errors(retrieve, "/retrieve on the preview")
            assert _items(home) == preview.n_total == PREVIEW_SCENES
            shot(home, screenshot_dir, "cold_start_preview_home")
            # ... then both pages update by themselves when the whole world is published
            deadline = time.monotonic() + BUILD_TIMEOUT_S
            for page in (home, retrieve):
                page.get_by_text(BANNER).wait_for(state="detached",
                                                  timeout=max(1.0, deadline - time.monotonic()) * 1000)
                wait_for_app(page)
            print(f"whole world in both tabs after {time.monotonic() - t0:.1f} s")
            assert_no_errors(home, "Home after the build")
            assert _items(home) == cfg.n_total
            wait_for_images(retrieve, main(retrieve), 4)
            assert_no_errors(retrieve, "/retrieve after the build")
            shot(retrieve, screenshot_dir, "cold_start_whole_world_retrieve")
        finally:
            retrieve.context.close()
            home.context.close()

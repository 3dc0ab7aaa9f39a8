"""End-to-end: a dataset workspace with a (tiny, random) diffusion generator draws on Generate and Mix.

The workspace is built by ``slics workspace --generator local:DIR --align-encoder local:DIR``
(tests/real_workspace.py); the browser sets few steps, presses the buttons and waits for the
pictures. Every wait is on the page's own readiness, never a fixed sleep.
"""
from __future__ import annotations

import pytest
from e2e_helpers import assert_no_errors, by_key, main, set_number, shot, wait_for_app, wait_for_images
from e2e_server import new_page, run_streamlit
from real_workspace import build_real_workspace

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _draw(page, button_key: str, n_images: int, what: str) -> None:
    """Set 2 denoising steps, press the drawing button and wait until ``n_images`` more pictures are decoded."""
    assert_no_errors(page, what)
    set_number(page, by_key(page, "steps"), 2)
    wait_for_app(page)
    before = len(wait_for_images(page, main(page), 1))
    by_key(page, button_key).locator("button").first.click()
    wait_for_app(page)
    assert_no_errors(page, f"{what}, after drawing")
    wait_for_images(page, main(page), before + n_images)


def test_dataset_workspace_generator_draws_on_generate_and_mix(browser, tmp_path, screenshot_dir):
    paths = build_real_workspace(tmp_path)
    with run_streamlit(paths["workspaces"], tmp_path / "streamlit.log") as base:
        page = new_page(browser, base)
        try:
            page.goto("/generate?ws=toys", wait_until="domcontentloaded")
            wait_for_app(page)
            text = main(page).inner_text()
            assert "mean cosine" in text and "held-out" in text and "takes about" in text, text[:2000]
            _draw(page, "generate", 2, "Generate page of a dataset workspace with a generator")
            assert "query" in main(page).inner_text()
            shot(page, screenshot_dir, "generate_real_workspace")

            page.goto("/mix?ws=toys", wait_until="domcontentloaded")
            wait_for_app(page)
            _draw(page, "mix_draw", 3, "Mix page")
            assert by_key(page, "mix_png").count() == 1  # the mix image's download
            shot(page, screenshot_dir, "mix_real_workspace")
        finally:
            page.context.close()

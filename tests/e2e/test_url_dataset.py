"""The address bar on a dataset workspace, in a real browser (issue 24, item 3).

Streamlit sends nothing after ``st.stop()``, so a page that stopped early (Generate without a generator,
Retrieve with every concept cleared) used to leave a sidebar click's bare address (``/generate``), which a
reload opened on the emoji world. AppTest cannot see this (it reads the server's own copy of the query
string), so it is checked here: click through the pages, clear the concepts, reload.
"""
from __future__ import annotations

import sys
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import numpy as np
import pytest
from e2e_helpers import assert_no_errors, by_key, wait_for_app
from e2e_server import new_page, run_streamlit

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _params(page) -> dict:
    return {k: v[0] for k, v in parse_qs(urlparse(page.url).query).items()}


@pytest.fixture(scope="module")
def dataset_server(tmp_path_factory, ws):
    """A server whose workspace list holds one dataset workspace ("precomputed": clip-retrieval-style
    embeddings with a labels CSV, no encoder, no generator)."""
    from conftest import _missing, _skip_or_fail

    reason = _missing()
    if reason:
        _skip_or_fail(reason)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from test_real_formats import make_precomputed

    from slics_core.cli import main

    root = tmp_path_factory.mktemp("e2e-dataset")
    args = make_precomputed(root / "data", np.random.default_rng(0))
    assert main(["embed", *args, "--cache", str(root / "cache"), "--no-progress"]) == 0
    import os

    old = os.environ.get("SLICS_WORKSPACES")
    os.environ["SLICS_WORKSPACES"] = str(root / "workspaces")
    try:
        assert main(["workspace", "--cache", str(root / "cache"), "--name", "precomputed", "--d0", "2", "3",
                     "--n-iter", "2", "--vocab", "none", "--quiet"]) == 0
    finally:
        if old is None:
            os.environ.pop("SLICS_WORKSPACES", None)
        else:
            os.environ["SLICS_WORKSPACES"] = old
    with run_streamlit(root / "workspaces", root / "streamlit.log") as base:
        yield base


def test_every_page_keeps_the_workspace_in_the_address_and_a_reload_reopens_it(browser, dataset_server):
    page = new_page(browser, dataset_server)
    try:
        page.goto("/retrieve?ws=precomputed&method=S-SVD")
        wait_for_app(page)
        assert_no_errors(page)
        first = _params(page)
        assert first["ws"] == "precomputed" and first["method"] == "S-SVD" and "q" in first and "c" in first
        for title in ("Generate", "Evaluate", "Mix concepts", "Subspaces", "Atoms", "Captions", "Glossary"):
            page.locator('[data-testid="stSidebarNav"] a').filter(has_text=title).first.click()
            wait_for_app(page)
            got = _params(page)
            assert {k: got.get(k) for k in ("ws", "q", "c", "method")} == \
                {k: first[k] for k in ("ws", "q", "c", "method")}, (title, page.url)
        # Generate stops early here (no generator) and still wrote the address; a reload reopens it
        page.locator('[data-testid="stSidebarNav"] a').filter(has_text="Generate").first.click()
        wait_for_app(page)
        assert "Stable Diffusion" in page.locator('[data-testid="stMain"]').inner_text()
        page.reload()
        wait_for_app(page)
        assert _params(page)["ws"] == "precomputed"
        assert "Could not open" not in page.locator('[data-testid="stMain"]').inner_text()
        # clearing every concept on Retrieve takes c= out of the address
        page.locator('[data-testid="stSidebarNav"] a').filter(has_text="Retrieve").first.click()
        wait_for_app(page)
        remove = by_key(page, "concepts").locator('button[aria-label^="Remove "]')
        for _ in range(remove.count()):  # each tag's own remove button, one run each
            remove.first.click()
            wait_for_app(page)
        assert remove.count() == 0
        got = _params(page)
        assert "c" not in got and got["ws"] == "precomputed" and got["q"] == first["q"], page.url
    finally:
        page.context.close()

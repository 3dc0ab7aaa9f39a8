"""Test configuration shared by every test module.

No network is reachable in tests or CI, so the Hugging Face libraries are put
in offline mode *before* anything imports them (otherwise a missing-weights
load retries for about 47 s).
"""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

# The app's pages open the emoji workspace; tests use a small one (600 training scenes) in a
# cache that survives between local runs (it is keyed by its parameters and the model weights).
import tempfile
from pathlib import Path

os.environ.setdefault("SLICS_EMOJI_SCALE", "0.2")
os.environ.setdefault("SLICS_EMOJI_CACHE", str(Path(tempfile.gettempdir()) / "slics-test-emoji"))
os.environ.setdefault("SLICS_WORKSPACES", str(Path(tempfile.gettempdir()) / "slics-test-workspaces-empty"))


import numpy as np
import pytest


@pytest.fixture(scope="session")
def ws():
    """The (small) emoji workspace the app opens on, its first views prepared by this release (a cache built by an
    earlier one would have the app prepare them in the background while the tests run: Evaluate waits for it)."""
    from slics_core.explorer.arrival import prepare_pages, prepared
    from slics_core.explorer.emoji_build import open_emoji_workspace

    world = open_emoji_workspace()
    if not prepared(world):
        prepare_pages(world)
    return world


@pytest.fixture(scope="session")
def multi_row(ws):
    """A query-set row with three or more concepts."""
    q = ws.index["query"]
    return int(q[np.flatnonzero(ws.Y[q].sum(axis=1) >= 3)[0]])


@pytest.fixture
def media(monkeypatch):
    """The in-memory media stores AppTest creates (download button data lives there; read a button's bytes with
    ``streamlit_private.download_data``)."""
    from streamlit_private import record_media_stores

    return record_media_stores(monkeypatch)

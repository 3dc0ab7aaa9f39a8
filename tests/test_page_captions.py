"""AppTest of the Captions page (Table 1: words of every concept subspace) on the small emoji world."""
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from slics_core.explorer.atom_tables import caption_table
from slics_core.explorer.encoding import workspace_vocabulary
from slics_core.labels import Labels

ROOT = Path(__file__).resolve().parent.parent
PAGE = str(ROOT / "app_pages" / "captions.py")


def test_captions_table_follows_d0_words_and_methods(ws):
    words, W = workspace_vocabulary(ws)
    at = AppTest.from_file(PAGE, default_timeout=180).run()
    assert not at.exception
    d0 = at.session_state["d0"]
    table = at.dataframe[0].value
    assert list(table.columns) == ["concept", "S-SLiCS", "U-SLiCS"]
    expected = caption_table({m: ws.model(m, d0) for m in ("S-SLiCS", "U-SLiCS")}, ws.concept_names, words, W, 5)
    assert table.equals(expected)
    assert all(len(c.split(", ")) == 5 for c in table["S-SLiCS"])

    other = [d for d in ws.d0_values if d != d0][0]
    at.select_slider(key="d0").set_value(other).run()
    assert not at.exception
    t2 = at.dataframe[0].value
    assert not t2.equals(table)
    assert t2.equals(caption_table({m: ws.model(m, other) for m in ("S-SLiCS", "U-SLiCS")}, ws.concept_names,
                                   words, W, 5))

    at.slider(key="n_words").set_value(3).run()
    assert not at.exception
    t3 = at.dataframe[0].value
    assert all(len(c.split(", ")) == 3 for c in t3["U-SLiCS"])
    # the best three words are the first three of the five
    assert [c.split(", ") for c in t3["S-SLiCS"]] == [c.split(", ")[:3] for c in t2["S-SLiCS"]]

    at.multiselect(key="caption_methods").set_value(["S-SLiCS"]).run()
    assert not at.exception
    assert list(at.dataframe[0].value.columns) == ["concept", "S-SLiCS"]
    at.multiselect(key="caption_methods").set_value([]).run()
    assert not at.exception and at.info


@pytest.fixture
def bare_dataset_workspace(tmp_path, monkeypatch):
    """A dataset workspace with no sub-labels, no encoder, no vocabulary and missing image files
    (its name, listed under $SLICS_WORKSPACES)."""
    monkeypatch.setenv("SLICS_WORKSPACES", str(tmp_path))
    import numpy as np

    from slics_core.explorer.workspace import Workspace
    from slics_core.explorer.workspace_files import save_workspace
    from slics_core.slics import SLiCS
    from slics_core.synthetic import make_concept_cones

    data = make_concept_cones(n_samples=240, n_features=16, n_concepts=3, n_atoms=2, random_state=0)
    X = (data.X / np.linalg.norm(data.X, axis=1, keepdims=True)).astype(np.float32)
    idx = np.arange(240)
    index = {"train": idx[:120], "val": idx[120:150], "query": idx[150:180], "pool": idx[180:]}
    models = {(m, d0): SLiCS(n_atoms=d0, n_iter=0 if m == "S-SVD" else 2).fit(X[:120], data.Y[:120])
              for m in ("S-SLiCS", "S-SVD") for d0 in (2, 3)}
    ws = Workspace(name="bare", kind="dataset", path=None, X=X, raw=X, mean=np.zeros(16),
                   labels=Labels(data.Y, ["red", "green", "blue"]), index=index, models=models,
                   ids=[str(i) for i in idx], paths=[str(tmp_path / f"missing{i}.jpg") for i in idx])
    save_workspace(ws, tmp_path / "bare")
    return "bare"


def test_pages_work_on_a_bare_dataset_workspace(bare_dataset_workspace):
    for page in ("captions", "atoms", "subspaces"):
        at = AppTest.from_file(str(ROOT / "app_pages" / f"{page}.py"), default_timeout=180)
        at.session_state["ws_choice"] = bare_dataset_workspace
        at.run()
        assert not at.exception, page
        if page == "captions":  # no vocabulary and no encoder: a message, no table
            assert at.warning and "vocabulary" in at.warning[0].value and not at.dataframe
        elif page == "atoms":  # heatmaps, activations, health, profile and images still there, words replaced
            assert [c.key for c in at.get("plotly_chart")] == ["cooc_map", "cos_map", "activation_hist", "health_hist",
                                                                 "profile_fig"]
            assert any("No words for the bars" in w.value for w in at.warning) or any(
                "No words for the bars" in c.value for c in at.caption)
            assert at.get("image")  # unreadable files are drawn as placeholder tiles
        else:  # no sub-labels: no colouring by sub-label
            assert at.radio(key="color_by").options == ["concept", "first label", "has concept"]
            at.multiselect(key="picked_points").set_value([0, 1]).run()
            # the linked preview of the first picked item, then the grid of both (placeholder tiles)
            assert not at.exception and len(at.get("image")) == 1 + 2

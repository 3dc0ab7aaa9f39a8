"""AppTest of the Atoms page (Fig. 6 heatmaps, images and words of one atom) on the small emoji world."""
import base64
import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest
from streamlit_private import download_data

from slics_core.analysis import HEALTH_FLAGS, dictionary_health
from slics_core.captions import prepare_text_embeddings
from slics_core.explorer.atom_tables import (
    atom_labels,
    atom_top_words,
    group_layout,
    item_codes,
    misplaced_threshold_words,
)
from slics_core.explorer.encoding import workspace_vocabulary
from slics_core.explorer.safe_text import figure_text
from tests.top_items_reference import atom_top_items

ROOT = Path(__file__).resolve().parent.parent
PAGE = str(ROOT / "app_pages" / "atoms.py")


@pytest.fixture(scope="module")
def vocab(ws):
    words, W = workspace_vocabulary(ws)
    return words, prepare_text_embeddings(W)[0]


def _arr(v):
    """A plotly array from the chart spec (plotly serialises numpy arrays as base64 typed arrays)."""
    if isinstance(v, dict) and "bdata" in v:
        a = np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"]))
        shape = v.get("shape")
        if shape:
            a = a.reshape([int(k) for k in str(shape).split(",")])
        return a.astype(float)
    return np.array(v, dtype=float)


def _words(at):
    return at.dataframe[0].value.word.tolist()


def test_heatmaps_have_group_boundaries_and_concept_ticks(ws):
    at = AppTest.from_file(PAGE, default_timeout=180).run()
    assert not at.exception
    charts = at.get("plotly_chart")[:2]  # the two heatmaps (the health histogram follows)
    assert len(charts) == 2
    S = ws.n_concepts
    model = ws.model(at.session_state["method"], at.session_state["d0"])
    M = model.atoms_.shape[0]
    for ch in charts:
        spec = json.loads(ch.spec)
        lines = spec["layout"]["shapes"]
        assert len(lines) == 2 * (S - 1)  # one horizontal and one vertical line between consecutive concepts
        assert spec["layout"]["xaxis"]["ticktext"] == ws.concept_names
        z = _arr(spec["data"][0]["z"])
        assert z.shape == (M, M)
    cos = _arr(json.loads(charts[1].spec)["data"][0]["z"])
    order = group_layout(model.groups_)["order"]
    B = model.atoms_[order]
    np.testing.assert_allclose(cos, B @ B.T, atol=1e-6)
    cooc = _arr(json.loads(charts[0].spec)["data"][0]["z"])
    np.testing.assert_allclose(np.diag(cooc)[np.diag(cooc) > 0], 1.0)
    before = [m.value for m in at.markdown if "together" in m.value]  # the sentence under the co-occurrence
    at.slider(key="n_nonzero").set_value(2).run()
    assert not at.exception
    after = [m.value for m in at.markdown if "together" in m.value]
    assert before != after
    assert "2 atoms each" in json.loads(at.get("plotly_chart")[0].spec)["layout"]["title"]["text"]


def test_every_heatmap_row_has_click_targets_naming_its_atom(ws):
    """Invisible markers make the cells clickable (heatmaps emit no selection events): every row has them, in the
    same columns on every row (so the marker nearest a click is its row's), each carrying its row's atom (the page
    picks it; a click in a real browser: tests/e2e/test_atoms_click.py), and within ``hoverdistance`` of every
    cell of its row. At most 10 per row: one WebGL marker per cell (3 600) cost 1-3 s of browser CPU per figure
    without a GPU (docs/performance.md)."""
    at = AppTest.from_file(PAGE, default_timeout=180).run()
    assert not at.exception
    model = ws.model(at.session_state["method"], at.session_state["d0"])
    order = group_layout(model.groups_)["order"]
    M = len(order)
    for ch in at.get("plotly_chart")[:2]:
        spec = json.loads(ch.spec)
        pick = spec["data"][1]
        assert pick["type"] == "scatter" and pick["mode"] == "markers"
        row, col = _arr(pick["y"]).astype(int), _arr(pick["x"]).astype(int)
        cols = sorted(set(col))
        assert 1 <= len(cols) <= 10
        assert sorted(zip(row, col)) == sorted((r, c) for r in range(M) for c in cols)  # same columns every row
        np.testing.assert_array_equal(_arr(pick["customdata"]).ravel(), order[row])
        labels = atom_labels(model.groups_, ws.concept_names)  # the hover names the row's atom, escaped
        assert pick["hovertext"] == [figure_text(labels[a]) for a in order[row]]
        cell_px = spec["layout"]["height"] / M  # an upper bound of a cell's width in pixels
        farthest = max(min(abs(c - t) for t in cols) for c in range(M))  # cells from a cell to its row's target
        assert farthest * cell_px <= spec["layout"]["hoverdistance"]


def test_selecting_an_atom_changes_images_and_words(ws, vocab):
    at = AppTest.from_file(PAGE, default_timeout=180).run()
    assert not at.exception
    model = ws.model(at.session_state["method"], at.session_state["d0"])
    pool = ws.index["pool"]
    codes = item_codes(model, ws.X[pool], ws.Y[pool])
    words, Wp = vocab
    shown = {}
    for atom in (0, int(model.groups_.size - 1)):
        at.selectbox(key=f"atom_{at.session_state['method']}_d0{at.session_state['d0']}").set_value(atom).run()
        assert not at.exception
        expected = atom_top_words(model.atoms_[atom], Wp, words, k=10).word.tolist()
        assert _words(at) == expected
        shown[atom] = _words(at)
        top = atom_top_items(codes, atom, k=12, rows=pool)
        assert len(at.get("image")) == len(top)
    assert shown[0] != shown[int(model.groups_.size - 1)]
    at.number_input(key="atom_k").set_value(3).run()
    assert not at.exception
    assert len(at.get("image")) == min(3, len(atom_top_items(codes, int(model.groups_.size - 1), k=3)))




def test_health_table_counts_histogram_and_csv(ws, media):
    at = AppTest.from_file(PAGE, default_timeout=180).run()
    assert not at.exception
    model = ws.model(at.session_state["method"], at.session_state["d0"])
    train = ws.index["train"]
    expected = dictionary_health(model, ws.X[train], ws.Y[train])
    table = next(d.value for d in at.dataframe if "flags" in d.value.columns)
    assert len(table) == model.atoms_.shape[0]
    np.testing.assert_allclose(table["frequency"].to_numpy(float), expected["frequency"].to_numpy(float))
    assert table["flags"].tolist() == [", ".join(f) for f in expected["flags"]]
    # the signed nearest cosines, the null chance of the nearest other and the share's lower bound are shown
    assert table["nearest_own"].tolist() == [f"{v:.3f}" for v in expected["nearest_own"]]
    assert table["nearest_other_p"].tolist() == [f"{v:.1e}" for v in expected["nearest_other_p"]]
    assert table["concept_share_low"].tolist() == [f"{v:.3f}" for v in expected["concept_share_low"]]
    assert any("signed cos" in c.value and f"{ws.X.shape[1]} dimensions" in c.value for c in at.caption)
    assert any(c.value.endswith(misplaced_threshold_words(model.groups_, expected["nearest_other_cut"]))
               for c in at.caption)
    counts = {f: sum(f in flags for flags in expected["flags"]) for f in HEALTH_FLAGS}
    line = " · ".join(f"**{counts[f]}** {f}" for f in HEALTH_FLAGS)
    assert any(m.value.startswith(line) for m in at.markdown)
    assert any("NNLS codes" in c.value and f"{len(train)} training items" in c.value for c in at.caption)
    hist = next(json.loads(c.spec) for c in at.get("plotly_chart")  # the health histogram (after the
                if "health_hist" in c.id)                               # heatmaps and the picked atom's)
    assert "log10" in hist["layout"]["title"]["text"]
    assert sum(_arr(hist["data"][0]["y"])) == int((expected["frequency"] > 0).sum())
    button = next(b for b in at.get("download_button") if "health_csv" in b.id)
    csv = pd.read_csv(io.BytesIO(download_data(media, button)),
                      keep_default_na=False)
    assert list(csv.columns[:4]) == ["workspace", "method", "d0", "split"]
    assert (csv["split"] == "train").all() and (csv["method"] == at.session_state["method"]).all()
    np.testing.assert_allclose(csv["frequency"], expected["frequency"])
    assert csv["flags"].tolist() == [";".join(f) for f in expected["flags"]]


def test_label_profile_tab_bars_table_and_csv(ws, media):
    """The "Label profile" tab: a sub-label picked in its select box draws every concept's mean ‖v_j‖²/‖x̂‖²
    over the pool items carrying it (decomposed without labels), P(concept | label) beside it, and its CSV."""
    from tests.label_profiles import label_profile

    at = AppTest.from_file(PAGE, default_timeout=180).run()
    assert not at.exception
    assert [t.label for t in at.tabs] == ["Dictionary health", "Label profile"]
    box = at.selectbox(key="profile_label")
    S = ws.n_concepts
    assert len(box.options) == S + ws.Z.shape[1]
    assert box.options[0] == f"concept: {ws.concept_names[0]}"
    model = ws.model(at.session_state["method"], at.session_state["d0"])
    pool = ws.index["pool"]
    counts = ws.Z[pool].sum(axis=0)
    sub = int(np.argmax(counts))  # a sub-label with pool items
    box.set_value(S + sub).run()
    assert not at.exception
    expected = label_profile(model, ws.X[pool], ws.Z[pool], sub, Y=ws.Y[pool])
    spec = json.loads(next(c for c in at.get("plotly_chart") if "profile_fig" in c.id).spec)
    bar = spec["data"][0]
    assert bar["x"] == ws.concept_names
    np.testing.assert_allclose(_arr(bar["y"]) + bar["base"], expected.lift, rtol=1e-5)  # bars stand on lift 1
    custom = np.array([_arr(row) for row in bar["customdata"]]) if isinstance(bar["customdata"], list) \
        else _arr(bar["customdata"]).reshape(len(ws.concept_names), 6)
    np.testing.assert_allclose(custom[:, 0], expected.p_concept, rtol=1e-6)
    np.testing.assert_allclose(custom[:, 1], expected.energy, rtol=1e-5)
    np.testing.assert_allclose(custom[:, 3], expected.lift, rtol=1e-5)
    # the random subsets' band (trace 1) and the bars inside it drawn grey
    np.testing.assert_allclose(custom[:, 4], expected.lift_lo, rtol=1e-5)
    band = spec["data"][1]
    np.testing.assert_allclose(_arr(band["base"]) + _arr(band["y"]), expected.lift_hi, rtol=1e-5)
    grey = [c == "#b0b0b0" for c in bar["marker"]["color"]]
    assert grey == expected.in_band.tolist()
    assert f"({int(counts[sub])} pool items)" in spec["layout"]["title"]["text"]
    table = next(d.value for d in at.dataframe if "P(concept | label)" in d.value.columns)
    np.testing.assert_allclose(table["P(concept | label)"], expected.p_concept)
    button = next(b for b in at.get("download_button") if "profile_csv" in b.id)
    csv = pd.read_csv(io.BytesIO(download_data(media, button)),
                      keep_default_na=False)
    assert (csv["label_kind"] == "sub-label").all() and (csv["split"] == "pool").all()
    assert csv["label"].iloc[0] == f"{ws.sub_names[sub]} ({ws.concept_names[ws.sub_to_concept[sub]]})"
    assert csv["concept"].tolist() == ws.concept_names
    np.testing.assert_allclose(csv["energy"], expected.energy, rtol=1e-9)
    np.testing.assert_allclose(csv["lift"], expected.lift, rtol=1e-9)
    np.testing.assert_allclose(csv["share"], expected.share, rtol=1e-9)
    np.testing.assert_allclose(csv["p_concept"], expected.p_concept)
    assert (csv["n_items"] == int(counts[sub])).all()
    # a concept: P(concept | label) is 1 on itself
    box = at.selectbox(key="profile_label")
    box.set_value(3).run()
    assert not at.exception
    table = next(d.value for d in at.dataframe if "P(concept | label)" in d.value.columns)
    assert table["P(concept | label)"].iloc[3] == 1.0


def test_a_rerun_builds_no_heatmap_again(ws, monkeypatch):
    """The two heatmap figures are built once per dictionary and codes (st.cache_resource), not on every rerun
    (building them was most of the page's CPU per rerun, docs/performance.md)."""
    import plotly.graph_objects as go

    made = []
    real = go.Heatmap

    def counting(*a, **kw):
        made.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(go, "Heatmap", counting)
    at = AppTest.from_file(PAGE, default_timeout=180).run()
    assert not at.exception
    first = len(made)
    spec = [json.loads(c.spec) for c in at.get("plotly_chart")]
    at.run()
    assert not at.exception
    assert first <= 2 and len(made) == first  # none built again
    assert [json.loads(c.spec) for c in at.get("plotly_chart")] == spec  # the same figures drawn

"""Every sentence a page shows is true for what it shows (issue 24, item 4).

The sentences are computed from the numbers beside them (:mod:`slics_core.explorer.narration`); the
pages are run on workspaces whose numbers contradict the old fixed texts (a dataset workspace without a
generator, atoms that are less alike within a concept than between concepts).
"""
import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from gallery_helpers import gallery_bodies
from streamlit.testing.v1 import AppTest
from test_cli_data import toy  # noqa: F401  (fixture)
from test_shared_state import _ok
from test_workspace import dataset_ws, no_val_ws  # noqa: F401  (fixtures)

from slics_core.analysis import atom_cosine, match_atoms
from slics_core.explorer.atom_tables import atom_heatmaps
from slics_core.explorer.narration import (
    atom_sentences,
    component_words,
    evaluate_look_at,
    example_caption,
    missing,
    page_readiness,
)
from slics_core.explorer.workspace_files import load_workspace

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")


def _texts(at):
    return " ".join([m.value for m in at.markdown] + [c.value for c in at.caption] + [w.value for w in at.warning]
                    + [s.value for s in at.success] + [i.value for i in at.info])


def _page(page, **params):
    at = AppTest.from_file(APP, default_timeout=300)
    for k, v in params.items():
        at.query_params[k] = str(v)
    _ok(at.run())
    return _ok(at.switch_page(f"app_pages/{page}.py").run())


# ---------------------------------------------------------------------- the sentences themselves
def test_atom_sentences_follow_the_numbers():
    # the workspace: cosine within a concept −0.145, below between; co-occurrence without blocks
    s = atom_sentences({"cooc_within_mean": 0.05, "cooc_between_mean": 0.06, "within_mean": -0.145,
                        "within_std": 0.05, "between_mean": 0.01, "between_std": 0.2})
    assert "point alike" not in s["look_at"] and "blocks on the diagonal" not in s["look_at"].lower()
    assert "No blocks here" in s["cooccurrence"] and "0.05" in s["cooccurrence"] and "0.06" in s["cooccurrence"]
    assert "less alike" in s["cosine"] and "-0.145" in s["cosine"] and "−0.056" not in s["cosine"]
    assert "-0.056" in s["cosine"]  # the paper's number, quoted as the paper's
    # the paper's Fig. 6 situation: blocks of co-occurrence, no blocks of cosine
    s = atom_sentences({"cooc_within_mean": 0.4, "cooc_between_mean": 0.1, "within_mean": -0.056,
                        "within_std": 0.062, "between_mean": 0.0, "between_std": 0.134})
    assert s["look_at"].startswith("The co-occurrence matrix's blocks on the diagonal")
    assert "4.0×" in s["cooccurrence"] and "less alike" in s["cosine"]
    # the opposite of the paper is said as such
    s = atom_sentences({"cooc_within_mean": 0.4, "cooc_between_mean": 0.1, "within_mean": 0.5,
                        "within_std": 0.1, "between_mean": 0.0, "between_std": 0.1})
    assert "more alike" in s["cosine"] and "unlike" in s["cosine"] and "opposite" in s["look_at"]
    s = atom_sentences({"cooc_within_mean": float("nan"), "cooc_between_mean": 0.1, "within_mean": float("nan"),
                        "within_std": float("nan"), "between_mean": 0.0, "between_std": 0.1})
    assert "not defined" in s["cooccurrence"] and "not defined" in s["cosine"]


def test_missing_values_print_a_dash():
    import pandas as pd

    assert [missing(v) for v in (None, float("nan"), pd.NA, 0.12345)] == ["—", "—", "—", "0.123"]
    assert missing(5, "{:d}") == "5"


def test_component_words_are_method_specific():
    assert "ṽ" in component_words("S-SLiCS", "partial") and "vⱼ, full" in component_words("U-SLiCS", "full")
    for m in ("F-SpLiCE", "UF"):
        assert "ṽ" not in component_words(m, "partial") and "vⱼ" not in component_words(m, "full")


def test_example_caption_names_what_the_row_leaves_out():
    assert "leaves out" not in example_caption(["a", "b"], ["a", "b"])
    c = example_caption(["a", "b"], ["a", "b", "c"])
    assert "3 concepts" in c and "shows 2" in c and "leaves out c" in c


def test_evaluate_sentence_compares_with_uf():
    rows = [{"method": "S-SLiCS", "general": 0.8}, {"method": "UF", "general": 0.6},
            {"method": "F-SpLiCE", "general": float("nan")}]
    s = evaluate_look_at(rows, 5, 20, True)
    assert "S-SLiCS ranks best (0.800)" in s and "0.200 above UF" in s and "d0 = 5" in s
    s = evaluate_look_at([{"method": "S-SLiCS", "general": 0.5}, {"method": "UF", "general": 0.6}], 3, 10, False)
    assert "UF ranks best" in s and "above" not in s and "general-label" in s


def test_evaluate_sentence_never_crowns_an_oracle():
    """The oracle row (given the label names as its vocabulary) has the best number, yet the sentence names the
    best of the others and says the oracle is left out."""
    from slics_core.methods import ORACLE_FSPLICE

    rows = [{"method": "S-SLiCS", "general": 0.8}, {"method": "UF", "general": 0.6},
            {"method": "F-SpLiCE", "general": 0.7}, {"method": ORACLE_FSPLICE, "general": 0.997}]
    s = evaluate_look_at(rows, 5, 20, True)
    assert "S-SLiCS ranks best (0.800)" in s and "0.200 above UF" in s
    assert "0.997" not in s and f"{ORACLE_FSPLICE}: oracle, shown but not ranked" in s


# ---------------------------------------------------------------------- Hungarian matching
def test_match_atoms_recovers_a_planted_permutation_with_sign_flips():
    rng = np.random.default_rng(0)
    P = rng.standard_normal((9, 20))
    groups = np.repeat(np.arange(3), 3)
    perm = np.concatenate([rng.permutation(3) + 3 * g for g in range(3)])  # within each concept
    signs = rng.choice([-1.0, 1.0], 9)
    learned = signs[:, None] * P[perm] + 0.05 * rng.standard_normal((9, 20))
    order, cos = match_atoms(P, learned, groups, groups[perm])
    assert np.array_equal(perm[order], np.arange(9))  # learned atom order[i] is planted atom i
    np.testing.assert_allclose(np.abs(cos), 1.0, atol=0.01)
    assert np.array_equal(np.sign(cos), signs[order])


def test_match_atoms_is_the_best_one_to_one_matching():
    rng = np.random.default_rng(1)
    for _ in range(5):
        P, B = rng.standard_normal((5, 4)), rng.standard_normal((6, 4))
        order, cos = match_atoms(P, B)
        U = lambda A: A / np.linalg.norm(A, axis=1, keepdims=True)  # noqa: E731
        C = np.abs(U(P) @ U(B).T)
        best = max(sum(C[i, p[i]] for i in range(5)) for p in itertools.permutations(range(6), 5))
        assert np.sum(np.abs(cos)) == pytest.approx(best)
        assert sorted(order.tolist()) == list(range(6))
    with pytest.raises(ValueError, match="cannot match"):
        match_atoms(rng.standard_normal((3, 4)), rng.standard_normal((2, 4)))


# ---------------------------------------------------------------------- pages
def test_home_on_a_workspace_without_generator_says_what_is_missing(dataset_ws):  # noqa: F811
    _, folder = dataset_ws
    at = _page("home", ws=folder.name)
    text = _texts(at)
    assert "every page works" not in text
    assert any("Generate" in w.value for w in at.warning)
    lines = next(m.value for m in at.markdown if "**Generate**" in m.value).splitlines()
    gen = next(ln for ln in lines if "**Generate**" in ln)
    assert gen.startswith("- ⛔") and "Stable Diffusion" in gen
    rows = page_readiness(load_workspace(folder))
    assert [ln.split("**")[1] for ln in lines] == [r["page"] for r in rows]
    assert [ln.startswith("- ✅") for ln in lines] == [r["ready"] for r in rows]


def test_home_explains_its_baselines_and_where_the_encoders_weights_are(ws):
    """"UF" is not left unexplained; the emoji encoders' weights ship with the package (no "needs its weights")."""
    import dataclasses

    at = _page("home")
    baselines = next(c.value for c in at.caption if c.value.startswith("Baselines fitted too"))
    assert "UF (unfiltered: the whole embedding)" in baselines, baselines
    retrieve = next(r["note"] for r in page_readiness(ws) if r["page"] == "Retrieve")
    assert "ship with the package" in retrieve and "needs its weights" not in retrieve, retrieve
    real = dataclasses.replace(ws, encoder="ViT-B-32/openai")  # a downloaded encoder: its weights are needed here
    retrieve = next(r["note"] for r in page_readiness(real) if r["page"] == "Retrieve")
    assert "needs its weights on this machine" in retrieve, retrieve


def test_home_hides_the_server_path_when_error_details_are_off(dataset_ws):  # noqa: F811
    from streamlit import config

    _, folder = dataset_ws
    before = config.get_option("client.showErrorDetails")
    try:
        config.set_option("client.showErrorDetails", "none")  # the README's classroom switch
        at = _page("home", ws=folder.name)
    finally:
        config.set_option("client.showErrorDetails", before)
    # (the process keeps workspaces open by name, so the folder may be an earlier test's "toys")
    assert "stored in" not in _texts(at) and "/workspaces/toys" not in _texts(at) and "**toys**" in _texts(at)
    assert "slics " not in _texts(at)  # nor the commands that add a generator or a dictionary
    at = _page("home", ws=folder.name)
    assert "stored in `/" in _texts(at)  # a laptop (full details, the shipped default) shows it
    assert "`slics align --workspace toys --generator sd-1.5`" in _texts(at)  # and how to add a generator


def test_home_row_covers_every_concept_of_the_query(ws):
    q = ws.index["query"]
    row = int(q[np.flatnonzero(ws.Y[q].sum(1) >= 3)[0]])
    at = AppTest.from_file(APP, default_timeout=300)
    at.session_state["home_example"] = row
    _ok(at.run())
    heads = " ".join(m.value for m in at.markdown)
    for c in ws.labels_of(row)["concepts"][:4]:
        assert f"v({c})" in heads, c
    if len(ws.labels_of(row)["concepts"]) > 4:
        assert "leaves out" in _texts(at)


def _atoms_page_says_what_it_shows(ws, at):
    method, d0 = at.selectbox(key="method").value, at.select_slider(key="d0").value
    model = ws.model(method, d0)
    _, summ = atom_cosine(model.atoms_, model.groups_)
    mats = atom_heatmaps(model, ws.X[ws.index["val"]], n_nonzero=at.slider(key="n_nonzero").value)
    said = atom_sentences(mats["summary"])
    md = [m.value for m in at.markdown]
    assert f"**What to look at:** {said['look_at']}" in md and said["cosine"] in md and said["cooccurrence"] in md
    assert f"{summ['within_mean']:+.3f}" in said["cosine"]
    for ch in at.get("plotly_chart"):  # full width, tall enough to read (the heatmaps; the health histogram)
        spec = json.loads(ch.spec)
        tall = 800 if spec["data"][0]["type"] == "heatmap" else 400
        assert spec["layout"]["height"] >= tall and spec["layout"]["xaxis"]["tickfont"]["size"] >= 14
    return summ, " ".join(md)


def test_atoms_page_sentence_matches_its_matrices(ws):
    """On the emoji world (S-SLiCS at its chosen d0) the atoms of one concept are *less* alike than atoms of
    different concepts, as in the paper, so the old "point alike" sentence was false; the page now says what
    its own matrices show."""
    summ, text = _atoms_page_says_what_it_shows(ws, _page("atoms"))
    assert summ["within_mean"] < summ["between_mean"] - 0.03  # the workspace contradicts the old text
    assert "point alike" not in text and "less alike" in text


def test_atoms_page_on_a_dataset_workspace(dataset_ws):  # noqa: F811
    _, folder = dataset_ws
    _atoms_page_says_what_it_shows(load_workspace(folder), _page("atoms", ws=folder.name))


def test_evaluate_and_subspaces_have_a_sentence_and_no_none(dataset_ws):  # noqa: F811
    _, folder = dataset_ws
    at = _page("evaluate", ws=folder.name)
    intro = [m.value for m in at.markdown if m.value.startswith("**What to look at:**")]
    assert len(intro) == 1 and "ranks best" in intro[0]
    df = at.dataframe[0].value
    assert "None" not in df.astype(str).to_numpy().ravel().tolist()
    assert (df[df.Method == "UF"]["d0"] == "—").all()
    at = _page("subspaces", ws=folder.name)
    assert any(m.value.startswith("**What to look at:**") for m in at.markdown)


def _tiny_workspace(root, name, methods, monkeypatch):
    """A 40-item, 6-d workspace of two alternating concepts with only ``methods`` fitted, in ``root``, which
    becomes the app's workspaces folder."""
    from slics_core.data import LabelledEmbeddings
    from slics_core.explorer.build import build_workspace
    from slics_core.labels import Labels

    rng = np.random.default_rng(0)
    data = LabelledEmbeddings(raw=rng.standard_normal((40, 6)).astype(np.float32), ids=[str(i) for i in range(40)],
                              labels=Labels(np.eye(2, dtype=bool)[np.arange(40) % 2], ["a", "b"]))
    build_workspace(data, root / name, methods=methods, d0_values=(1,), n_iter=1)
    monkeypatch.setenv("SLICS_WORKSPACES", str(root))


def test_evaluate_has_its_sentence_where_it_stops_before_the_table(tmp_path, monkeypatch):
    """A workspace without S-SLiCS: Evaluate stops before its table, and still says what to look at."""
    _tiny_workspace(tmp_path, "uf-only", ["UF"], monkeypatch)
    at = _page("evaluate", ws="uf-only")
    intro = [m.value for m in at.markdown if m.value.startswith("**What to look at:**")]
    assert len(intro) == 1 and "against UF" in intro[0], [m.value for m in at.markdown]
    assert any("no fitted S-SLiCS" in i.value and "`slics workspace`" in i.value for i in at.info)  # a laptop
    from streamlit import config

    before = config.get_option("client.showErrorDetails")
    try:
        config.set_option("client.showErrorDetails", "none")  # a classroom: no shell command
        at = _page("evaluate", ws="uf-only")
    finally:
        config.set_option("client.showErrorDetails", before)
    assert any("no fitted S-SLiCS" in i.value for i in at.info) and not any("slics" in i.value for i in at.info)


def test_captions_names_u_slics_only_where_the_workspace_has_it(ws, tmp_path, monkeypatch):
    """The emoji world's preview (S-SLiCS alone) and a workspace without U-SLiCS: no U-SLiCS in the sentence."""
    def intro(at):
        return next(m.value for m in at.markdown if m.value.startswith("**What to look at:**"))

    assert "U-SLiCS" in intro(_page("captions"))  # the emoji world has it
    _tiny_workspace(tmp_path, "s-only", ["S-SLiCS"], monkeypatch)
    at = _page("captions", ws="s-only")
    assert "U-SLiCS" not in intro(at) and not any("U-SLiCS" in c.value for c in at.caption), intro(at)


def test_retrieve_names_f_splice_component_without_tilde_v(ws, multi_row):
    at = _page("retrieve", q=multi_row, method="F-SpLiCE")
    import re

    # each gallery's title is drawn in the gallery's HTML (app_pages/retrieve._title)
    heads = [m.group(0) for b in gallery_bodies(at) for m in [re.search(r"<strong>By the .*?</p>", b)] if m]
    assert heads and all("ṽ" not in h and "F-SpLiCE" in h for h in heads), heads


def test_planted_cones_matrix_is_matched(ws):
    from slics_core import SLiCS
    from slics_core.synthetic import make_concept_cones

    at = _page("cones")
    spec = json.loads(at.get("plotly_chart")[1].spec)
    from test_page_atoms import _arr

    z = _arr(spec["data"][0]["z"])
    data = make_concept_cones(n_samples=1500, n_features=48, n_concepts=5, n_atoms=3, noise=0.05, random_state=0)
    model = SLiCS(n_atoms=3, n_iter=10, update="ksvd").fit(data.X, data.Y)
    order, cos = match_atoms(data.atoms, model.atoms_, data.groups, model.groups_)
    np.testing.assert_allclose(np.diag(z), cos, atol=1e-5)
    # matched: each diagonal entry is its row's largest |cos| among the same concept's learned atoms
    assert np.median(np.abs(np.diag(z))) >= np.median(np.abs(z[~np.eye(len(z), dtype=bool)]))
    assert any("Hungarian" in c.value for c in at.caption)


# ---------------------------------------------------------------------- captions: can the encoder read words?
def test_text_tower_check_against_an_independent_count(ws):
    from slics_core.explorer.narration import text_tower_check

    r = text_tower_check(ws)
    rows = ws.index["val"]
    U = ws.raw[rows] / np.linalg.norm(ws.raw[rows], axis=1, keepdims=True)
    T = ws.concept_text / np.linalg.norm(ws.concept_text, axis=1, keepdims=True)
    hits = [ws.Y[r_, int(np.argmax(u @ T.T))] for r_, u in zip(rows, U) if ws.Y[r_].any()]
    assert r["accuracy"] == pytest.approx(np.mean(hits)) and r["level"] == "reads"  # the emoji encoders read
    assert r["chance"] == pytest.approx(ws.Y[rows][ws.Y[rows].any(1)].mean())


def test_captions_page_warns_when_the_encoder_cannot_read_words(ws, monkeypatch):
    """A workspace whose text embeddings of its concept names are unrelated to its images (what an encoder
    trained on other pictures gives): the Captions page says its words are noise, beside the captions."""
    at = _page("captions")
    assert not at.warning and any(c.value.startswith("Text tower check:") and "reads these words" in c.value
                                  for c in at.caption)
    rng = np.random.default_rng(0)
    monkeypatch.setattr(ws, "concept_text", rng.standard_normal(ws.concept_text.shape))
    import streamlit as st

    from app_pages import _workspace

    st.cache_resource.clear()
    monkeypatch.setattr(_workspace, "_open_workspace", lambda choice: _Handle(ws))
    at = _page("captions")
    assert any("cannot read these words" in w.value for w in at.warning), [w.value for w in at.warning]
    assert at.dataframe  # the captions are still shown, with the caveat beside them


class _Handle:
    """A finished build handle around one workspace (what app_pages._workspace keeps per workspace)."""

    def __init__(self, ws):
        self.workspace, self.finished, self.error, self.generation = ws, True, None, 1


def test_server_paths_are_cut_whatever_the_error_details():
    """A visitor never reads the server's folders (a laptop's owner reads them in the server's log)."""
    from streamlit import config

    from app_pages._errors import for_visitor

    msg = "no workspace in /home/teacher/.cache/slics/workspaces/coco (missing workspace.json)"
    before = config.get_option("client.showErrorDetails")
    try:
        for details in ("full", "none"):
            config.set_option("client.showErrorDetails", details)
            assert for_visitor(msg) == "no workspace in coco (missing workspace.json)"
        assert for_visitor("see https://example.org/a/b and ratio 3/4") == "see https://example.org/a/b and ratio 3/4"
    finally:
        config.set_option("client.showErrorDetails", before)


def test_text_tower_check_flags_an_emoji_encoder_on_a_dataset(ws, monkeypatch):
    """Its text tower knows the 83 emoji category names, not a 10 000-word vocabulary: said beside captions."""
    from slics_core.explorer.narration import text_tower_check

    monkeypatch.setattr(ws, "kind", "dataset")
    r = text_tower_check(ws)
    # 71 sprites and 12 supercategories ("person" is both)
    assert r["level"] == "weak" and "noise" in r["text"] and "82 category and supercategory names" in r["text"]


def test_pages_say_d0_is_the_fallback_without_a_validation_split(no_val_ws):  # noqa: F811
    """No validation split: Home, Evaluate (its sentence, its d0 section, its slider) and the CLI's words say
    that d0 = 3 is the fallback rule's, never "chosen on validation"."""
    from slics_core.explorer.narration import d0_choice

    built, folder = no_val_ws
    said = d0_choice(built)
    assert said.startswith("d0 = 3, not chosen on validation (there is no validation split to choose it on): "
                           "the middle fitted d0")
    home = _texts(_page("home", ws=folder.name))
    assert f"Fitted dictionaries (default {said})" in home and "chosen on the validation split" not in home
    at = _page("evaluate", ws=folder.name)
    text = _texts(at)
    assert "chosen on the validation" not in text and "picks d0" not in text
    assert "**d0 = 3**, not chosen on validation (this workspace has no validation split)" in text
    intro = next(m.value for m in at.markdown if m.value.startswith("**What to look at:**"))
    assert "with no validation split, d0 = 3 is the middle fitted d0" in intro
    slider = at.select_slider(key="eval_d0")
    assert slider.value == 3 and slider.options == ["1", "2", "3 (fallback)", "4"]
    assert at.radio(key="eval_split").options == ["Query set (test)"]

"""explorer.maps and explorer.atom_tables: subspace maps, atom usage, heatmaps and caption tables (planted truth)."""
import numpy as np
import pandas as pd
import pytest
from scipy.optimize import nnls

from slics_core.explorer.atom_tables import (
    atom_heatmaps,
    atom_labels,
    atom_top_words,
    caption_table,
    group_layout,
    item_codes,
    matrix_table,
)
from slics_core.explorer.exports import with_settings
from slics_core.explorer.layouts import tsne_layout
from slics_core.explorer.map_colours import (
    ATOM_SUB,
    COLOUR_MODES,
    LACKS_GREY,
    OTHER,
    OTHER_CONCEPTS,
    PALETTE,
    SEVERAL,
    colour_groups,
    map_colours,
)
from slics_core.explorer.maps import (
    map_points,
    map_sample,
    match_points,
    picture_points,
    point_text,
    sample_rows,
    selected_point_ids,
    selection_summary,
    subspace_map,
)
from slics_core.slics import SLiCS
from slics_core.synthetic import make_concept_cones
from tests.top_items_reference import atom_top_items

S, D0, D = 4, 3, 40


def _unit(A):
    return A / np.linalg.norm(A, axis=-1, keepdims=True)


@pytest.fixture(scope="module")
def planted():
    data = make_concept_cones(n_samples=400, n_features=D, n_concepts=S, n_atoms=D0, mean_active=1.8,
                              secondary=0.2, noise=0.02, random_state=0)
    model = SLiCS(n_atoms=D0, n_iter=5, random_state=0).fit(data.X, data.Y)
    # sub-labels: the dominant planted atom of each active concept
    Z = np.zeros((data.X.shape[0], S * D0), dtype=bool)
    for j in range(S):
        on = data.sublabels[:, j] >= 0
        Z[np.flatnonzero(on), j * D0 + data.sublabels[on, j]] = True
    names = [f"c{j}" for j in range(S)]
    subs = [f"c{j}s{k}" for j in range(S) for k in range(D0)]
    return data, model, Z, np.repeat(np.arange(S), D0), names, subs


def _nnls_rows(B, X):
    return np.array([nnls(B.T, x)[0] for x in X])


# ---------------------------------------------------------------------- sampling
def test_sample_rows_caps_seeds_and_keeps_small_sets():
    rows = np.arange(100, 600)
    a = sample_rows(rows, 50, random_state=3)
    assert a.size == 50 and np.unique(a).size == 50 and set(a) <= set(rows)
    assert np.all(np.diff(a) > 0)
    np.testing.assert_array_equal(a, sample_rows(rows, 50, random_state=3))
    assert not np.array_equal(a, sample_rows(rows, 50, random_state=4))
    np.testing.assert_array_equal(sample_rows([5, 2, 9], 10), [2, 5, 9])
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError):
            sample_rows(rows, bad)


def test_map_sample_filters_concepts_and_includes_rows():
    Y = np.zeros((50, 3), dtype=bool)
    Y[:20, 0] = True
    Y[20:, 1] = True
    Y[45:, 2] = True
    got = map_sample(Y, np.arange(40), 5, random_state=0, concepts=[0])
    assert got.size == 5 and (got < 20).all()
    got = map_sample(Y, np.arange(40), 5, random_state=0, concepts=["b"], concept_names=["a", "b", "c"])
    assert got.size == 5 and ((got >= 20) & (got < 40)).all()
    # an included row from outside the candidates is kept, and counts towards the cap
    got = map_sample(Y, np.arange(40), 5, random_state=0, include=[47])
    assert 47 in got and got.size == 5
    assert 47 not in map_sample(Y, np.arange(40), 5, concepts=[0], include=[47])
    np.testing.assert_array_equal(map_sample(Y, np.arange(40), 1, include=[3, 47]), [3, 47])
    with pytest.raises(ValueError, match="include"):
        map_sample(Y, np.arange(40), 5, include=[99])
    with pytest.raises(ValueError, match="out of range"):
        map_sample(Y, [60], 5)


# ---------------------------------------------------------------------- map points
def test_map_points_vectors_match_independent_nnls(planted):
    data, model, Z, s2c, names, subs = planted
    rows = np.arange(0, 60)
    P, tab = map_points(model, data.X, data.Y, rows, component="partial", Z=Z, sub_to_concept=s2c,
                        concept_names=names, sub_names=subs)
    assert list(tab["point"]) == list(range(len(tab)))
    emb = tab[tab.kind == "embedding"]
    np.testing.assert_allclose(P[emb.point], data.X[emb.row])
    comp = tab[tab.kind == "component"]
    assert len(comp) == data.Y[rows].sum()
    for p, r, c in zip(comp.point, comp.row, comp.concept):
        j = names.index(c)
        Bj = model.atoms_[model.groups_ == j]
        np.testing.assert_allclose(P[p], nnls(Bj.T, data.X[r])[0] @ Bj, atol=1e-6)
        assert data.Y[r, j]
        # the component's sub-label is the planted dominant atom of that concept
        assert tab.loc[p, "sub_label"] == f"c{j}s{data.sublabels[r, j]}"
    atoms = tab[tab.kind == "atom"]
    np.testing.assert_allclose(P[atoms.point], model.atoms_[atoms.atom])
    assert list(atoms.concept) == [names[g] for g in model.groups_]
    assert set(atoms.sub_label) == {ATOM_SUB} and set(atoms.row) == {-1}
    # an embedding with several concepts is in the "several" concept group
    n_lab = data.Y[emb.row].sum(1)
    assert (emb.concept[n_lab > 1] == SEVERAL).all()
    assert [names[np.flatnonzero(data.Y[r])[0]] for r in emb.row[n_lab == 1]] == list(emb.concept[n_lab == 1])


def test_map_points_full_components_sum_to_reconstruction(planted):
    data, model, *_ = planted
    rows = np.arange(100, 140)
    P, tab = map_points(model, data.X, data.Y, rows, kinds=["component"], component="full")
    for r in rows[:15]:
        active = np.flatnonzero(data.Y[r])
        sel = np.isin(model.groups_, active)
        a = np.zeros(model.atoms_.shape[0])
        a[sel] = nnls(model.atoms_[sel].T, data.X[r])[0]
        sub = tab[tab.row == r]
        total = P[sub.point].sum(0)
        np.testing.assert_allclose(total, a @ model.atoms_, atol=1e-5)


def test_map_points_concept_filter_and_bad_input(planted):
    data, model, Z, s2c, names, subs = planted
    rows = np.arange(200)
    P, tab = map_points(model, data.X, data.Y, rows, concepts=["c1"], concept_names=names)
    assert set(tab.concept[tab.kind != "embedding"]) == {"c1"}
    assert set(tab.row[tab.kind == "embedding"]) == set(np.flatnonzero(data.Y[:200, 1]))
    assert (tab.kind == "atom").sum() == D0
    with pytest.raises(ValueError, match="kinds"):
        map_points(model, data.X, data.Y, rows, kinds=["pixels"])
    with pytest.raises(ValueError, match="component"):
        map_points(model, data.X, data.Y, rows, component="half")
    with pytest.raises(ValueError, match="Y must"):
        map_points(model, data.X, data.Y[:, :2], rows)
    with pytest.raises(ValueError, match="unknown concept"):
        map_points(model, data.X, data.Y, rows, concepts=["nope"], concept_names=names)
    with pytest.raises(ValueError, match="out of range"):
        map_points(model, data.X, data.Y, [10_000])


# ---------------------------------------------------------------------- t-SNE
def test_tsne_layout_keeps_concept_neighbourhoods(planted):
    data, model, Z, s2c, names, subs = planted
    P, tab = map_points(model, data.X, data.Y, np.arange(150), kinds=["component", "atom"], concept_names=names)
    xy = tsne_layout(P, random_state=0)
    assert xy.shape == (len(tab), 2) and np.all(np.isfinite(xy))
    np.testing.assert_allclose(xy, tsne_layout(P, random_state=0))
    # ground truth: a component's 5 nearest neighbours in the map mostly share its concept
    lab = tab.concept.to_numpy()
    d2 = ((xy[:, None, :] - xy[None, :, :]) ** 2).sum(-1)
    np.fill_diagonal(d2, np.inf)
    nn = np.argsort(d2, axis=1)[:, :5]
    agree = (lab[nn] == lab[:, None]).mean()
    chance = max((lab == c).mean() for c in set(lab))
    assert agree > 0.85 > chance + 0.3


def test_tsne_layout_rejects_too_few_or_zero_points():
    with pytest.raises(ValueError, match="at least 3"):
        tsne_layout(np.eye(2, 5))
    with pytest.raises(ValueError):
        tsne_layout(np.vstack([np.eye(4, 5), np.zeros((1, 5))]))


def test_subspace_map_samples_and_reports_progress(planted):
    data, model, Z, s2c, names, subs = planted
    calls = []
    tab = subspace_map(model, data.X, data.Y, np.arange(400), n_points=30, random_state=1, Z=Z,
                       sub_to_concept=s2c, concept_names=names, sub_names=subs, max_iter=250,
                       progress=lambda *a: calls.append(a))
    emb = tab[tab.kind == "embedding"]
    np.testing.assert_array_equal(emb.row, sample_rows(np.arange(400), 30, 1))
    assert {"x", "y", "kind", "row", "concept", "sub_label"} <= set(tab.columns)
    assert len(tab) == 30 + data.Y[emb.row].sum() + S * D0
    assert calls and calls[-1][1] == calls[-1][2]
    # the concept filter is applied before sampling: every sampled item has the concept
    tab2 = subspace_map(model, data.X, data.Y, np.arange(400), n_points=20, concepts=[2], max_iter=250,
                        kinds=["embedding"], concept_names=names)
    assert len(tab2) == 20 and data.Y[tab2.row, 2].all()


def test_selected_point_ids_reads_plotly_events():
    event = {"selection": {"points": [{"customdata": [4, "x"]}, {"customdata": [2]}, {"customdata": [4]},
                                      {"point_index": 1}, {"customdata": ["bad"]}, {"customdata": 99}]}}
    assert selected_point_ids(event) == [4, 2, 99]
    assert selected_point_ids(event, n_points=10) == [4, 2]
    assert selected_point_ids(event["selection"]) == [4, 2, 99]
    assert selected_point_ids(None) == [] and selected_point_ids({"selection": {"points": []}}) == []
    # what Streamlit returns for a numpy customdata row (seen in Chromium): a mapping of positions
    typed = {"selection": {"points": [{"customdata": {"0": 23, "1": 37, "2": 0.5}}, {"customdata": []}]}}
    assert selected_point_ids(typed) == [23]


# ---------------------------------------------------------------------- reading a map
@pytest.fixture(scope="module")
def planted_table(planted):
    data, model, Z, s2c, names, subs = planted
    rows = np.arange(0, 40)
    _, tab = map_points(model, data.X, data.Y, rows, Z=Z, sub_to_concept=s2c, concept_names=names, sub_names=subs)
    return tab


def test_map_points_sub_labels_column(planted, planted_table):
    data, names = planted[0], planted[4]
    tab = planted_table
    for k, r, c, sl in zip(tab.kind, tab.row, tab.concept, tab.sub_labels):
        if k == "atom":
            assert sl == ""
        elif k == "component":  # the planted dominant atom of that concept
            j = names.index(c)
            assert sl == f"c{j}s{data.sublabels[r, j]}"
        else:  # every planted sub-label of the item, concept order
            assert sl == ", ".join(f"c{j}s{data.sublabels[r, j]}" for j in np.flatnonzero(data.sublabels[r] >= 0))


def test_point_text_reads_as_words(planted, planted_table):
    data, model, _, _, names, _ = planted
    tab = planted_table
    texts = point_text(tab, "partial", html=False)
    assert len(texts) == len(tab)
    comp = tab[tab.kind == "component"].iloc[0]
    j = names.index(comp.concept)
    assert texts[comp.point] == f"component ṽ of c{j} · item #{comp.row} · c{j}s{data.sublabels[comp.row, j]}"
    emb = tab[tab.kind == "embedding"].iloc[0]
    cs = [names[j] for j in np.flatnonzero(data.Y[emb.row])]
    assert texts[emb.point] == f"item #{emb.row} · {', '.join(cs)} · {emb.sub_labels}"
    # atoms are named as on the Atoms page ("<concept> #<rank>"), with their index
    atoms = tab[tab.kind == "atom"]
    lab = atom_labels(model.groups_, names)
    for p, a in zip(atoms.point, atoms.atom):
        c, rank = lab[a].split(" #")
        assert texts[p] == f"atom {c} #{rank} (atom {a})"
    html = point_text(tab, "full", ids=[f"f{i}.png" for i in range(data.X.shape[0])])
    assert html[comp.point].startswith(f"component v of <i>c{j}</i> · item #{comp.row} (f{comp.row}.png) · ")
    assert not any("=" in t for t in texts)  # no raw "key=value" dumps
    with pytest.raises(ValueError, match="component"):
        point_text(tab, "half")


def test_colour_groups_by_concept_caps_the_palette(planted, planted_table):
    names = planted[4]
    tab = planted_table
    groups, order = colour_groups(tab, "concept", concept_names=names)
    np.testing.assert_array_equal(groups, tab.concept.to_numpy())
    assert order == [n for n in names if n in set(tab.concept)] + ([SEVERAL] if SEVERAL in set(tab.concept) else [])
    # more groups than colours: the smallest merge into "other", exactly max_groups remain
    sizes = tab.concept.value_counts()
    groups3, order3 = colour_groups(tab, "concept", concept_names=names, max_groups=3)
    assert len(order3) == 3 and order3[-1] == OTHER and set(groups3) == set(order3)
    kept = set(order3[:2])
    assert kept == set(sizes.sort_values(ascending=False, kind="stable").index[:2])
    assert (groups3 == OTHER).sum() == len(tab) - sizes[list(kept)].sum()
    with pytest.raises(ValueError, match="max_groups"):
        colour_groups(tab, "concept", max_groups=1)
    with pytest.raises(ValueError, match="by must"):
        colour_groups(tab, "colour")


def test_colour_groups_sub_labels_of_one_concept(planted, planted_table):
    data, _, Z, s2c, names, subs = planted
    tab = planted_table
    groups, order = colour_groups(tab, "sub-label", concept="c1", concept_names=names, Z=Z, sub_to_concept=s2c,
                                  sub_names=subs)
    for g, k, r, c in zip(groups, tab.kind, tab.row, tab.concept):
        if k == "atom":
            assert g == (ATOM_SUB if c == "c1" else OTHER_CONCEPTS)
        elif k == "component":
            assert g == (f"c1s{data.sublabels[r, 1]}" if c == "c1" else OTHER_CONCEPTS)
        else:
            assert g == (f"c1s{data.sublabels[r, 1]}" if data.sublabels[r, 1] >= 0 else OTHER_CONCEPTS)
    own = {f"c1s{k}" for k in range(D0)}
    assert set(order) <= own | {ATOM_SUB, OTHER_CONCEPTS, SEVERAL}
    assert order[:len(set(order) & own)] == sorted(set(order) & own)  # sub-label order first
    assert order[-1] == OTHER_CONCEPTS
    with pytest.raises(ValueError, match="one concept"):
        colour_groups(tab, "sub-label", concept="zz", concept_names=names, Z=Z, sub_to_concept=s2c, sub_names=subs)
    with pytest.raises(ValueError, match="sub-labels"):
        colour_groups(tab, "sub-label", concept="c1", concept_names=names)


def test_colour_by_first_label_and_by_presence_of_one_concept(planted, planted_table):
    data, _, Z, s2c, names, subs = planted
    tab = planted_table
    assert list(COLOUR_MODES) == ["concept", "first label", "has concept", "sub-label"]
    several = 0
    groups, order, colours = map_colours(tab, "first label", concept_names=names)
    for g, k, r, c in zip(groups, tab.kind, tab.row, tab.concept):
        if k == "embedding":
            several += c == SEVERAL
            assert g == names[int(np.flatnonzero(data.Y[r])[0])]  # the item's first concept
        else:
            assert g == c
    assert several > 0 and SEVERAL not in order  # the rule did change some points
    assert colours == {g: PALETTE[names.index(g)] for g in order}
    groups, order, colours = map_colours(tab, "has concept", concept="c2", concept_names=names)
    for g, k, r, c in zip(groups, tab.kind, tab.row, tab.concept):
        has = (c == "c2") if k == "atom" else bool(data.Y[r, 2])
        assert g == ("has c2" if has else "lacks c2")
    assert order == ["has c2", "lacks c2"]
    assert colours == {"has c2": PALETTE[2], "lacks c2": LACKS_GREY}
    # every mode through the one function; sub-labels keep their palette place within their concept
    groups, order, colours = map_colours(tab, "sub-label", concept="c1", concept_names=names, Z=Z,
                                         sub_to_concept=s2c, sub_names=subs)
    assert all(colours[g] == PALETTE[int(g[-1])] for g in order if g.startswith("c1s"))
    assert colours[OTHER_CONCEPTS] == "#cccccc"
    with pytest.raises(ValueError, match="presence"):
        map_colours(tab, "has concept", concept="zz", concept_names=names)


def test_picture_points_one_embedding_per_grid_cell(planted, planted_table):
    rng = np.random.default_rng(0)
    tab = planted_table.assign(x=rng.normal(size=len(planted_table)), y=rng.normal(size=len(planted_table)))
    emb = tab[tab.kind == "embedding"]
    assert picture_points(tab, len(emb)).tolist() == emb.point.tolist()  # few enough: all of them
    got = picture_points(tab, 17)  # more than 17: a 4 x 4 grid
    xs, ys = emb.x.to_numpy(), emb.y.to_numpy()
    cx = np.minimum(((xs - xs.min()) / (xs.max() - xs.min()) * 4).astype(int), 3)
    cy = np.minimum(((ys - ys.min()) / (ys.max() - ys.min()) * 4).astype(int), 3)
    want = []
    for a in range(4):
        for b in range(4):
            inside = np.flatnonzero((cx == a) & (cy == b))
            if inside.size:
                centre = (xs.min() + (a + 0.5) * (xs.max() - xs.min()) / 4,
                          ys.min() + (b + 0.5) * (ys.max() - ys.min()) / 4)
                d = (xs[inside] - centre[0]) ** 2 + (ys[inside] - centre[1]) ** 2
                want.append(int(emb.point.iloc[inside[np.argmin(d)]]))
    assert got.tolist() == sorted(want) and 1 < len(got) <= 16 < len(emb)
    assert set(tab.kind[got]) == {"embedding"}
    assert picture_points(tab[tab.kind == "atom"], 400).size == 0
    with pytest.raises(ValueError, match="max_pictures"):
        picture_points(tab, 0)


def test_selection_summary_counts_picked_items_per_concept(planted, planted_table):
    data, names = planted[0], planted[4]
    tab = planted_table
    rng = np.random.default_rng(1)
    picked = rng.choice(len(tab), size=60, replace=False)
    out = selection_summary(tab, picked, data.Y, names)
    items = sorted({int(tab.row[p]) for p in picked if tab.row[p] >= 0})
    direct = {c: sum(bool(data.Y[r, j]) for r in items) for j, c in enumerate(names)}
    assert sorted(out.concept) == sorted(names) and (out["items"] == len(items)).all()
    assert dict(zip(out.concept, out.have)) == direct
    assert list(out.have) == sorted(out.have, reverse=True)
    top = out.iloc[0]
    assert top.text == f"{direct[top.concept]} / {len(items)} have {top.concept}"
    assert selection_summary(tab, [], data.Y, names).text.iloc[0] == f"0 / 0 have {names[0]}"
    with pytest.raises(ValueError, match="out of range"):
        selection_summary(tab, [len(tab)], data.Y, names)


def test_match_points_searches_labels_and_items(planted, planted_table):
    data = planted[0]
    tab = planted_table
    m = match_points(tab, "C2S1")
    expect = ["c2s1" in sl.lower() for sl in tab.sub_labels]
    np.testing.assert_array_equal(m, expect)
    assert m.any()
    r = int(tab.row[tab.kind == "embedding"].iloc[3])
    np.testing.assert_array_equal(match_points(tab, f"#{r}"), (tab.row == r).to_numpy())
    assert match_points(tab, f"#{r}").sum() == 1 + data.Y[r].sum()
    m0 = match_points(tab, "c0")  # concept c0: its components, atoms and items labelled with it
    exp0 = (tab.concept == "c0") | tab["labels"].str.contains("c0")
    np.testing.assert_array_equal(m0, exp0.to_numpy())
    assert not match_points(tab, "").any() and not match_points(tab, None).any()
    assert not match_points(tab, "no such label").any()


def test_with_settings_prepends_constant_columns(planted_table):
    tab = planted_table
    out = with_settings(tab, **{"method": "S-SLiCS", "d0": 5, "concepts": ["a", "b"]})
    assert list(out.columns[:3]) == ["method", "d0", "concepts"] and list(out.columns[3:]) == list(tab.columns)
    assert (out.method == "S-SLiCS").all() and (out.d0 == 5).all() and (out.concepts == "a;b").all()
    assert len(out) == len(tab) and "method" not in tab.columns
    with pytest.raises(ValueError, match="clash"):
        with_settings(tab, **{"kind": "x"})


# ---------------------------------------------------------------------- atom usage
def test_atom_top_items_against_independent_nnls(planted):
    data, model, *_ = planted
    rows = np.arange(50, 150)
    codes = item_codes(model, data.X[rows], data.Y[rows])
    ref = np.zeros_like(codes)
    for a, r in enumerate(rows):
        sel = np.isin(model.groups_, np.flatnonzero(data.Y[r]))
        ref[a, sel] = nnls(model.atoms_[sel].T, data.X[r])[0]
    np.testing.assert_allclose(codes, ref, atol=1e-6)
    atom = 4
    top = atom_top_items(codes, atom, k=7, rows=rows)
    expect = rows[np.argsort(-ref[:, atom], kind="stable")][:7]
    np.testing.assert_array_equal(top.row, expect)
    assert list(top["rank"]) == list(range(1, 8)) and np.all(np.diff(top.coefficient) <= 0)
    # only items that use the atom
    few = atom_top_items(np.array([[0.0, 1.0], [0.5, 0.0], [0.0, 0.2]]), 0, k=5)
    assert list(few.row) == [1]
    with pytest.raises(ValueError, match="out of range"):
        atom_top_items(codes, codes.shape[1])
    with pytest.raises(ValueError, match="one entry"):
        atom_top_items(codes, 0, rows=rows[:3])


def test_atom_top_words_equals_one_atom_nnls_captions():
    from slics_core.captions import prepare_text_embeddings, word_captions

    rng = np.random.default_rng(2)
    W, _ = prepare_text_embeddings(rng.standard_normal((300, 16)))
    words = [f"w{i}" for i in range(300)]
    b = _unit(rng.standard_normal(16))
    top = atom_top_words(b, W, words, k=8)
    caps, errs = word_captions(b[None], [0], W, words, top_k=8, return_errors=True)
    assert list(top.word) == caps[0]
    np.testing.assert_allclose(top.nnls_error, errs[0], atol=1e-9)
    i = words.index(top.word[0])
    assert top.cosine[0] == pytest.approx(W[i] @ b)
    assert top.cosine[0] == pytest.approx((W @ b).max())
    with pytest.raises(ValueError, match="zero"):
        atom_top_words(np.zeros(16), W, words)
    with pytest.raises(ValueError, match="words"):
        atom_top_words(b, W, words[:3])


# ---------------------------------------------------------------------- heatmaps
def test_atom_heatmaps_match_brute_force_and_show_groups(planted):
    data, model, *_ = planted
    X = data.X[:200]
    res = atom_heatmaps(model, X, n_nonzero=3)
    codes = res["codes"]
    assert codes.shape == (200, S * D0) and ((codes > 0).sum(1) <= 3).all()
    M = codes.shape[1]
    C = np.full((M, M), np.nan)
    for a in range(M):
        users = codes[:, a] > 0
        if users.any():
            C[a] = (codes[users] > 0).mean(0)
    np.testing.assert_allclose(res["cooccurrence"], C, equal_nan=True)
    U = _unit(model.atoms_)
    np.testing.assert_allclose(res["cosine"], U @ U.T, atol=1e-12)
    np.testing.assert_allclose(res["usage"], (codes > 0).mean(0))
    # planted ground truth: atoms of one concept co-occur more often than atoms of different concepts
    same = model.groups_[:, None] == model.groups_[None, :]
    off = ~np.eye(M, dtype=bool)
    assert np.nanmean(res["cooccurrence"][same & off]) > np.nanmean(res["cooccurrence"][~same])
    assert atom_heatmaps(model, X)["n_nonzero"] == D0
    with pytest.raises(ValueError):
        atom_heatmaps(model, X, n_nonzero=0)


def test_group_layout_and_matrix_table():
    lay = group_layout([0, 0, 1, 1, 1, 2])
    np.testing.assert_array_equal(lay["order"], np.arange(6))
    np.testing.assert_allclose(lay["boundaries"], [1.5, 4.5])
    np.testing.assert_allclose(lay["centres"], [0.5, 3.0, 5.0])
    np.testing.assert_array_equal(lay["concepts"], [0, 1, 2])
    lay = group_layout([2, 0, 2, 1])
    np.testing.assert_array_equal(lay["order"], [1, 3, 0, 2])
    np.testing.assert_allclose(lay["boundaries"], [0.5, 1.5])
    with pytest.raises(ValueError):
        group_layout([])
    df = matrix_table(np.arange(4.0).reshape(2, 2), ["a0", "a1"])
    assert list(df.columns) == ["atom", "a0", "a1"] and list(df.atom) == ["a0", "a1"]
    assert df.loc[1, "a0"] == 2.0
    with pytest.raises(ValueError):
        matrix_table(np.eye(3), ["a"])


# ---------------------------------------------------------------------- captions
def test_caption_table_recovers_planted_words_per_method(planted):
    data, model, Z, s2c, names, subs = planted
    rng = np.random.default_rng(5)
    planted_atoms = data.atoms
    V = 200
    W = rng.standard_normal((V, D))
    words = [f"noise{i}" for i in range(V)]
    for k in range(S * D0):  # one word near each planted atom
        W[k] = planted_atoms[k] + 0.05 * rng.standard_normal(D) / np.sqrt(D)
        words[k] = f"c{k // D0}w{k % D0}"
    W = _unit(W)
    other = SLiCS(n_atoms=D0, n_iter=0).fit(data.X, data.Y)  # S-SVD as a second "method"
    tab = caption_table({"A": model, "B": other}, names, words, W, n_words=D0)
    assert list(tab.columns) == ["concept", "A", "B"] and list(tab.concept) == names
    for j in range(S):
        assert set(tab.A[j].split(", ")) == {f"c{j}w{k}" for k in range(D0)}
    # independent check of the order: prepared words, brute-force NNLS errors
    from slics_core.captions import prepare_text_embeddings

    Wp, _ = prepare_text_embeddings(W)
    Bj = other.atoms_[other.groups_ == 1]
    err = np.array([nnls(Bj.T, w)[1] ** 2 for w in Wp])
    assert tab.B[1].split(", ") == [words[i] for i in np.argsort(err, kind="stable")[:D0]]
    tab5 = caption_table({"A": model}, names, words, W, n_words=5)
    assert all(len(c.split(", ")) == 5 for c in tab5.A)
    with pytest.raises(ValueError):
        caption_table({}, names, words, W)
    with pytest.raises(ValueError, match="concepts"):
        caption_table({"A": model}, names[:2], words, W)
    assert isinstance(tab, pd.DataFrame)


def test_atom_labels_and_cooccurrence_summary():
    from slics_core.explorer.atom_tables import atom_labels

    assert atom_labels([1, 0, 1, 1, 0], ["a", "b"]) == ["b #0", "a #0", "b #1", "b #2", "a #1"]
    rng = np.random.default_rng(3)

    class Model:  # 3 concepts x 2 atoms
        atoms_ = rng.standard_normal((6, 8))
        groups_ = np.array([0, 0, 1, 1, 2, 2])

    X = np.abs(rng.standard_normal((40, 6))) @ Model.atoms_
    res = atom_heatmaps(Model, X, n_nonzero=3)
    C = res["cooccurrence"]
    within = [C[i, j] for i in range(6) for j in range(6) if i != j and i // 2 == j // 2]
    between = [C[i, j] for i in range(6) for j in range(6) if i // 2 != j // 2]
    assert res["summary"]["cooc_within_mean"] == pytest.approx(np.nanmean(within))
    assert res["summary"]["cooc_between_mean"] == pytest.approx(np.nanmean(between))


# ---------------------------------------------------------------------- t-SNE engines and placing a query
def test_layout_engine_rule_and_the_item_cap(monkeypatch):
    from slics_core.explorer import layouts

    assert layouts.open_tsne_installed()  # the test venv has the tsne extra
    assert layouts.tsne_engine(layouts.OPENTSNE_MIN_POINTS) == "scikit-learn"
    assert layouts.tsne_engine(layouts.OPENTSNE_MIN_POINTS + 1) == "openTSNE"
    assert layouts.max_map_items() == 20_000 and layouts.engine_note() is None
    # without openTSNE: scikit-learn at every size, the cap stays 3 000, and one line says why
    monkeypatch.setattr(layouts.importlib.util, "find_spec", lambda name: None)
    assert layouts.tsne_engine(50_000) == "scikit-learn"
    assert layouts.max_map_items() == 3_000
    note = layouts.engine_note()
    assert "3,000" in note and 'pip install "slics-explorer[tsne]"' in note and "\n" not in note
    with pytest.raises(ValueError, match="engine must be one of"):
        layouts.tsne_fit(np.eye(5), engine="umap")


def _clusters(n=240, d=24, k=4, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((k, d)) * 3
    lab = rng.integers(0, k, n)
    return centres[lab] + rng.standard_normal((n, d)), lab


def test_open_tsne_layout_places_an_existing_item_at_its_own_position(monkeypatch):
    """Planted truth: an item of the map, placed again into the map (from its stored coordinates, the embedding
    rebuilt without re-optimising), lands beside its own point, inside its own cluster."""
    from slics_core.explorer import layouts

    monkeypatch.setattr(layouts, "OPENTSNE_GRADIENT", "bh")  # the FFT grid's fixed cost is seconds at this size
    X, lab = _clusters()
    seen = []
    xy, embedding = layouts.tsne_fit(X, random_state=0, engine="openTSNE", progress=lambda *a: seen.append(a))
    assert embedding is not None and xy.shape == (len(X), 2)
    assert seen[-1][1:] == (20, 20) and all(d <= t for _, d, t in seen)  # 25-iteration steps of 500
    span = np.ptp(xy, axis=0).max()
    rebuilt = layouts.tsne_embedding(X, xy, random_state=0)
    np.testing.assert_allclose(np.asarray(rebuilt) + rebuilt.slics_offset, xy)  # the stored layout, not re-optimised
    kept = xy.copy()
    for emb in (embedding, rebuilt, embedding):
        items = np.arange(0, len(X), 40)
        got = layouts.place_points(emb, X[items])
        err = np.linalg.norm(got - xy[items], axis=1)
        assert err.max() < 0.01 * span, err  # in the layout's own frame (openTSNE's transform recentres its map)
        np.testing.assert_array_equal(xy, kept)
        # nearer its own cluster's centre on the map than any other cluster's
        centres = np.array([xy[lab == c].mean(axis=0) for c in range(lab.max() + 1)])
        nearest = np.linalg.norm(got[:, None, :] - centres[None], axis=2).argmin(axis=1)
        np.testing.assert_array_equal(nearest, lab[items])
    with pytest.raises(ValueError, match="xy must have shape"):
        layouts.tsne_embedding(X, xy[:-1])


def test_large_layouts_use_open_tsne_stored_with_their_embedding(tmp_path, monkeypatch):
    """arrival.map_layout above the threshold is openTSNE's layout; stored; a new process (no embedding in memory)
    rebuilds the embedding from the stored coordinates and places an item at its own position."""
    from types import SimpleNamespace

    from slics_core.explorer import arrival, layouts

    monkeypatch.setattr(layouts, "OPENTSNE_GRADIENT", "bh")
    monkeypatch.setattr(layouts, "OPENTSNE_MIN_POINTS", 100)
    X, _ = _clusters()
    ws = SimpleNamespace(path=tmp_path, building=None, remember=lambda name, factory: factory())  # keeps nothing
    xy = arrival.map_layout(ws, X, 0)
    np.testing.assert_allclose(xy, layouts.tsne_fit(X, random_state=0, engine="openTSNE")[0])  # openTSNE's
    np.testing.assert_array_equal(arrival.stored_map_layout(ws, X, 0), xy)
    assert arrival.stored_map_layout(ws, X, 1) is None
    monkeypatch.setattr(arrival, "_EMBEDDINGS", type(arrival._EMBEDDINGS)())  # a new process

    def refuse(*a, **k):
        raise AssertionError("recomputed the layout")

    monkeypatch.setattr(arrival, "tsne_fit", refuse)
    emb = arrival.map_embedding(ws, X, 0)
    assert arrival.map_embedding(ws, X, 0) is emb  # kept
    got = layouts.place_points(emb, X[7])
    assert np.linalg.norm(got[0] - xy[7]) < 0.05 * np.ptp(xy, axis=0).max()
    assert arrival.map_embedding(ws, X[:-1], 0) is None  # no layout stored for these points


def test_a_stored_layout_says_how_long_its_t_sne_took_not_how_long_reading_it_took(tmp_path, monkeypatch):
    """Issue 38: the Subspaces title said "t-SNE 0.0 s" for a 50-s layout read back from the store. The layout's
    seconds are kept with it: a fake t-SNE that takes 50 s of a fake clock reads back as 50 s, twice."""
    from types import SimpleNamespace

    from slics_core.explorer import arrival

    clock = [100.0]
    monkeypatch.setattr(arrival.time, "perf_counter", lambda: clock[0])

    def slow_tsne(P, random_state=0, progress=None):
        clock[0] += 50.0
        return np.zeros((len(P), 2)) + random_state, None

    monkeypatch.setattr(arrival, "tsne_fit", slow_tsne)
    ws = SimpleNamespace(path=tmp_path, building=None, remember=lambda name, factory: factory())  # keeps nothing
    X = np.random.default_rng(0).standard_normal((30, 5))
    xy, seconds = arrival.map_layout_timed(ws, X, 0)
    assert seconds == 50.0
    again = arrival.map_layout_timed(ws, X, 0)  # read from the store: no t-SNE, the same seconds
    assert clock[0] == 150.0 and again[1] == 50.0
    np.testing.assert_array_equal(again[0], xy)
    assert arrival.stored_map_layout(ws, X, 0, with_seconds=True)[1] == 50.0
    np.testing.assert_array_equal(arrival.map_layout(ws, X, 0), xy)


def test_sample_words_say_when_a_map_has_fewer_items_than_asked():
    from slics_core.explorer.maps import sample_words

    assert sample_words(200, 200, "pool") is None
    line = sample_words(20_000, 3_000, "pool", ["animal"])
    assert "3,000 items on the map, not the 20,000 asked for" in line and "pool split" in line and "animal" in line

"""slics_core.explorer.queries against independent brute-force computations on planted concept cones."""
import numpy as np
import pytest
from PIL import Image
from scipy.optimize import nnls
from sklearn.metrics import f1_score

from slics_core import SLiCS
from slics_core.explorer.edits import edit_line, edit_query, edited_gallery, parse_boost_param
from slics_core.explorer.pool import memory_pool
from slics_core.explorer.queries import (
    Gallery,
    check_query,
    components_of_row,
    concept_galleries,
    concept_scores,
    fit_score_thresholds,
    galleries_table,
    gallery_relevance,
    generation_rows,
    image_strip,
    likely_concepts,
    model_dim,
    n_concepts,
    parse_concept_param,
    upload_thresholds,
)
from slics_core.synthetic import make_concept_cones

S, D0, D = 4, 3, 24


@pytest.fixture(scope="module")
def world():
    data = make_concept_cones(n_samples=300, n_features=D, n_concepts=S, n_atoms=D0, noise=0.05, random_state=0)
    X = data.X / np.linalg.norm(data.X, axis=1, keepdims=True)
    Z = np.zeros((len(X), S * D0), bool)
    for i, j in zip(*np.nonzero(data.sublabels >= 0)):
        Z[i, j * D0 + data.sublabels[i, j]] = True
    model = SLiCS(n_atoms=D0, n_iter=3, random_state=0).fit(X[:200], data.Y[:200])
    return {"X": X, "Y": data.Y, "Z": Z, "s2c": np.repeat(np.arange(S), D0), "model": model,
            "pool": np.arange(200, 300)}


def _cone_projection(model, x, j):
    B = model.atoms_[model.groups_ == j]
    a, _ = nnls(B.T, x)
    return a @ B


def test_partial_components_and_scores_match_scipy_nnls(world):
    m = world["model"]
    for x in world["X"][200:205]:
        V = components_of_row(m, x, mode="partial")
        s = concept_scores(m, x)
        for j in range(S):
            v = _cone_projection(m, x, j)
            np.testing.assert_allclose(V[j], v, atol=1e-6)
            expect = 0.0 if np.linalg.norm(v) < 1e-12 else v @ x / (np.linalg.norm(v) * np.linalg.norm(x))
            assert s[j] == pytest.approx(expect, abs=1e-6)


def test_batch_scores_equal_single_scores(world):
    m, X = world["model"], world["X"][200:230]
    batch = concept_scores(m, X)
    assert batch.shape == (30, S)
    for i in range(0, 30, 7):
        np.testing.assert_allclose(batch[i], concept_scores(m, X[i]), atol=1e-9)
    t = upload_thresholds(m, X, world["Y"][200:230])
    np.testing.assert_allclose(t, fit_score_thresholds(batch, world["Y"][200:230]))
    np.testing.assert_array_equal(upload_thresholds(m, X[:0], world["Y"][:0]), np.full(S, 0.5))


def test_full_components_use_only_active_concepts(world):
    m = world["model"]
    x = world["X"][210]
    active = [0, 2]
    V = components_of_row(m, x, mode="full", active=active)
    B = np.concatenate([m.atoms_[m.groups_ == j] for j in active])
    a, _ = nnls(B.T, x)
    np.testing.assert_allclose(V[0], a[:D0] @ B[:D0], atol=1e-6)
    np.testing.assert_allclose(V[2], a[D0:] @ B[D0:], atol=1e-6)
    assert np.all(V[1] == 0) and np.all(V[3] == 0)
    mask = np.zeros(S, bool)
    mask[active] = True
    np.testing.assert_allclose(components_of_row(m, x, mode="full", active=mask), V)
    with pytest.raises(ValueError, match="at least one"):
        components_of_row(m, x, mode="full", active=[])
    with pytest.raises(ValueError, match="needs the active"):
        components_of_row(m, x, mode="full")


def test_bad_queries(world):
    m = world["model"]
    with pytest.raises(ValueError, match="zero"):
        concept_scores(m, np.zeros(D))
    with pytest.raises(ValueError, match="dimensions"):
        concept_scores(m, np.ones(D + 1))
    with pytest.raises(ValueError, match="mode"):
        components_of_row(m, np.ones(D), mode="half")


def test_thresholds_maximise_f1_brute_force():
    rng = np.random.default_rng(1)
    n, s = 60, 5
    Y = rng.random((n, s)) < 0.3
    scores = np.round(rng.random((n, s)) + 0.4 * Y, 2)  # rounding creates ties
    Y[:, 4] = False  # a concept without positives
    t = fit_score_thresholds(scores, Y)
    for j in range(4):
        cands = np.unique(scores[:, j])
        f1s = np.array([f1_score(Y[:, j], scores[:, j] >= c) for c in cands])
        got = f1_score(Y[:, j], scores[:, j] >= t[j])
        assert got == pytest.approx(f1s.max())
        assert t[j] == cands[f1s >= f1s.max() - 1e-12].max()  # the highest of the best
    assert t[4] == pytest.approx(np.median(t[:4]))
    with pytest.raises(ValueError):
        fit_score_thresholds(scores, Y[:, :3])


def test_likely_concepts():
    assert likely_concepts([0.1, 0.9, 0.5, 0.7], [0.5, 0.5, 0.6, 0.6]) == [1, 3]
    assert likely_concepts([0.1, 0.2, 0.15], [0.9, 0.9, 0.9]) == [1]


def test_concept_galleries_brute_force(world):
    X, Y, Z, s2c, m, pool = world["X"], world["Y"], world["Z"], world["s2c"], world["model"], world["pool"]
    q = 205
    x = X[q]
    V = components_of_row(m, x)
    concepts = [j for j in range(S) if np.linalg.norm(V[j]) > 0][:3]
    k = 10
    pairs = concept_galleries(V, x, memory_pool(X, pool, Y=Y, Z=Z), concepts, k, sub_to_concept=s2c, query_sub=Z[q])
    P = X[pool] / np.linalg.norm(X[pool], axis=1, keepdims=True)
    uf_expected = pool[np.argsort(-(P @ x), kind="stable")[:k]]
    for (cg, uf), j in zip(pairs, concepts):
        assert cg.kind == "concept" and uf.kind == "unfiltered" and cg.concept == uf.concept == j
        v = _cone_projection(m, x, j)
        expected = pool[np.argsort(-(P @ v), kind="stable")[:k]]
        np.testing.assert_array_equal(cg.rows, expected)
        np.testing.assert_array_equal(uf.rows, uf_expected)
        # relevance by loops over the label matrices
        gen = [bool(Y[r, j]) for r in expected]
        qs = [l for l in range(Z.shape[1]) if Z[q, l] and s2c[l] == j]
        sub = [any(Z[r, l] for l in qs) for r in expected]
        assert cg.relevant_general.tolist() == gen
        assert cg.precision_general == pytest.approx(sum(gen) / k)
        if qs:
            assert cg.relevant_sub.tolist() == sub
            assert cg.precision_sub == pytest.approx(sum(sub) / k)
        else:
            assert cg.relevant_sub is None and np.isnan(cg.precision_sub)
        assert uf.relevant_general.tolist() == [bool(Y[r, j]) for r in uf_expected]


def test_concept_filtering_beats_unfiltered_on_planted_cones(world):
    """A property of the method on clean planted data: concept galleries are more precise on average."""
    X, Y, m, pool = world["X"], world["Y"], world["model"], world["pool"]
    cg_p, uf_p = [], []
    labelled = memory_pool(X, pool, Y=Y)
    for q in range(200, 240):
        for (cg, uf) in concept_galleries(components_of_row(m, X[q]), X[q], labelled, np.flatnonzero(Y[q]), 10):
            if len(cg.rows):
                cg_p.append(cg.precision_general)
                uf_p.append(uf.precision_general)
    assert np.mean(cg_p) > np.mean(uf_p) + 0.1


def test_zero_component_gives_empty_gallery(world):
    X, pool = world["X"], world["pool"]
    V = np.zeros((S, D))
    V[1] = X[0]
    pairs = concept_galleries(V, X[0], memory_pool(X, pool, Y=world["Y"]), [0, 1], 5)
    assert len(pairs[0][0].rows) == 0 and "zero" in pairs[0][0].note
    assert np.isnan(pairs[0][0].precision_general)
    assert len(pairs[0][1].rows) == 5 and len(pairs[1][0].rows) == 5


def test_relevance_without_labels():
    g, s = gallery_relevance([0, 1], 0)
    assert g is None and s is None
    Y = np.array([[1, 0], [0, 1]], bool)
    Z = np.array([[1, 0], [1, 1]], bool)
    g, s = gallery_relevance([0, 1], 1, Y, Z, [0, 1], query_sub=[True, False])
    assert g.tolist() == [False, True] and s is None  # the query has no sub-label of concept 1
    g, s = gallery_relevance([0, 1], 0, Y, Z, [0, 1], query_sub=[True, False])
    assert s.tolist() == [True, True]


def test_galleries_table(world):
    X, pool = world["X"], world["pool"]
    V = components_of_row(world["model"], X[201])
    ids = [f"id{i}" for i in range(len(X))]
    pairs = concept_galleries(V, X[201], memory_pool(X, pool, Y=world["Y"], ids=ids), [0, 1], 4)
    df = galleries_table(pairs, None, ["a", "b", "c", "d"])  # the ids come with the galleries' hits
    n_rows = sum(len(g.rows) for p in pairs for g in p)
    assert len(df) == n_rows
    assert list(df.columns) == ["concept", "gallery", "edit", "rank", "item_id", "row", "score", "relevant_general",
                                "relevant_sub", "precision_general", "precision_sub"]
    first = df[(df.concept == "a") & (df.gallery == "concept")].iloc[0]
    assert first["item_id"] == ids[pairs[0][0].rows[0]] and first["rank"] == 1
    assert first["relevant_general"] == bool(world["Y"][pairs[0][0].rows[0], 0])
    assert df["relevant_sub"].isna().all()
    # each row carries its gallery's P@k: the share of that gallery's relevant items
    got = df.groupby(["concept", "gallery"]).agg(p=("precision_general", "first"), m=("relevant_general", "mean"))
    np.testing.assert_allclose(got.p, got.m)


def test_galleries_table_holds_the_edited_galleries_with_their_p_at_k(world):
    """Issue 38: Retrieve's CSV left out the edited galleries ("without j", "more of j") and their P@k."""
    from slics_core.explorer.edits import edit_title, edited_gallery

    X, pool, Y = world["X"], world["pool"], world["Y"]
    V = components_of_row(world["model"], X[201])
    pairs = concept_galleries(V, X[201], memory_pool(X, pool, Y=Y), [0], 4)
    eq = edited_gallery(world["model"], X[201], memory_pool(X, pool, Y=Y), 1, 4, edit="remove", active=[0, 1])
    title = edit_title("remove", "b")
    df = galleries_table(pairs, None, ["a", "b", "c", "d"], edited=[(title, eq)])
    rows = df[df.edit == title]
    assert rows.gallery.tolist() == ["edited"] * len(eq.gallery.rows) + ["unfiltered"] * len(eq.unfiltered.rows)
    assert rows.row.tolist() == eq.gallery.rows.tolist() + eq.unfiltered.rows.tolist()
    assert (rows.concept == "b").all()
    edited = rows[rows.gallery == "edited"]
    assert edited.relevant_general.tolist() == (~Y[eq.gallery.rows, 1]).tolist()  # "lacks b"
    assert edited.precision_general.iloc[0] == eq.gallery.precision_general == np.mean(~Y[eq.gallery.rows, 1])
    assert (df[df.gallery == "concept"].edit == "").all()


def test_fsplice_groups_words_by_concept_prompts():
    from slics_core.methods import FitInputs, fit_method

    rng = np.random.default_rng(3)
    C = rng.standard_normal((3, 16))
    # each word is a noisy copy of one concept prompt
    owner = np.repeat(np.arange(3), 5)
    W = C[owner] + 0.2 * rng.standard_normal((15, 16))
    words = [f"w{i}" for i in range(15)]
    X = rng.standard_normal((10, 16))
    fs = fit_method("F-SpLiCE", FitInputs(X=X, Y=None, concept_names=["a", "b", "c"], concept_text=C,
                                          vocab_words=words, vocab_text=W))
    # independent: centre both with the vocabulary mean of the unit rows, then argmax cosine
    Wu = W / np.linalg.norm(W, axis=1, keepdims=True)
    mu = Wu.mean(axis=0)
    Wc = Wu - mu
    Cc = C / np.linalg.norm(C, axis=1, keepdims=True) - mu
    cos = (Wc / np.linalg.norm(Wc, axis=1, keepdims=True)) @ (Cc / np.linalg.norm(Cc, axis=1, keepdims=True)).T
    np.testing.assert_array_equal(fs.fsplice.groups, cos.argmax(axis=1))
    assert fs.n_concepts_ == 3 and fs.n_features_in_ == 16
    x = Wc[0] / np.linalg.norm(Wc[0])
    V = components_of_row(fs, x, mode="full", active=[0])  # one kind of component: mode does not matter
    np.testing.assert_allclose(V.sum(axis=0), fs.fsplice.reconstruct(x[None])[0], atol=1e-9)
    np.testing.assert_allclose(V, components_of_row(fs, x, mode="partial"), atol=1e-12)
    s = concept_scores(fs, x)
    assert np.argmax(s) == fs.fsplice.groups[0]

def test_generation_rows():
    x = np.array([1.0, 0, 0])
    V = np.array([[0, 1.0, 0], [0, 0, 0], [0, 0, 2.0]])
    rows, titles, skipped = generation_rows(x, V, [2, 1, 0], ["a", "b", "c"])
    np.testing.assert_array_equal(rows, [x, V[2], V[0]])
    assert titles == ["query", "c", "a"] and skipped == ["b"]


def test_image_strip():
    a = Image.new("RGB", (3, 2), (255, 0, 0))
    b = Image.new("RGB", (2, 4), (0, 0, 255))
    s = np.asarray(image_strip([a, b], gap=1))
    assert s.shape == (4, 6, 3)
    assert (s[:2, :3] == [255, 0, 0]).all() and (s[2:, :3] == 255).all()
    assert (s[:, 3] == 255).all() and (s[:, 4:] == [0, 0, 255]).all()
    with pytest.raises(ValueError):
        image_strip([])


def test_parse_concept_param():
    names = ["person", "vehicle", "food"]
    assert parse_concept_param("Food, person,unknown,food", names) == ["food", "person"]
    assert parse_concept_param(None, names) == [] and parse_concept_param("", names) == []


def test_parse_concept_param_never_picks_one_of_two_names_that_differ_in_case():
    """``cat`` and ``Cat`` are two concepts: each is named by its own spelling, a third spelling names neither."""
    names = ["Cat", "cat", "dog"]
    assert parse_concept_param("cat", names) == ["cat"]
    assert parse_concept_param("Cat", names) == ["Cat"]
    assert parse_concept_param("CAT,Dog", names) == ["dog"]  # ambiguous part dropped, unique one found
    assert parse_concept_param("cat,Cat", names) == ["cat", "Cat"]


def test_gallery_precision_nan_when_unknown():
    g = Gallery("concept", 0, np.array([1, 2]), np.array([0.5, 0.4]))
    assert np.isnan(g.precision_general) and np.isnan(g.precision_sub)


def test_norms_and_cosine_against_scipy():
    from scipy.spatial.distance import cosine

    from slics_core.explorer.queries import norms_and_cosine

    rng = np.random.default_rng(3)
    a, b = rng.standard_normal(16), rng.standard_normal(16)
    n1, n2, cos = norms_and_cosine(a, b)
    assert n1 == pytest.approx(np.sqrt((a ** 2).sum())) and n2 == pytest.approx(np.sqrt((b ** 2).sum()))
    assert cos == pytest.approx(1 - cosine(a, b))
    assert norms_and_cosine(a, np.zeros(16)) == (pytest.approx(n1), 0.0, 0.0)  # a zero component: cosine 0


# ---------------------------------------------------------------------- removal and boosting
@pytest.fixture(scope="module")
def orthogonal_world():
    """Planted cones whose concept subspaces are orthogonal (the planted atoms, orthonormalised), and a SLiCS
    fitted on them: there, removing ``v_j`` leaves nothing in cone ``j``."""
    data = make_concept_cones(n_samples=300, n_features=D, n_concepts=S, n_atoms=D0, random_state=0)
    Q, _ = np.linalg.qr(data.atoms.T)
    X = data.coef @ Q.T
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    model = SLiCS(n_atoms=D0, n_iter=10, random_state=0).fit(X[:200], data.Y[:200])
    return X, data.Y, model


def test_removal_leaves_no_projection_on_the_concepts_cone(orthogonal_world):
    X, Y, m = orthogonal_world
    n_checked = 0
    for i in range(200, 300):
        x, act = X[i], np.flatnonzero(Y[i])
        for j in act:
            edited, v = edit_query(m, x, j, "remove", active=act)
            np.testing.assert_allclose(edited, x - components_of_row(m, x, "full", active=act)[j], atol=1e-12)
            before = np.linalg.norm(_cone_projection(m, x, j)) / np.linalg.norm(x)
            after = np.linalg.norm(_cone_projection(m, edited, j)) / np.linalg.norm(x)
            assert before > 0.3  # the query had a lot of concept j ...
            assert after < 0.02, (i, j, before, after)  # ... and nothing is left of it
            n_checked += 1
    assert n_checked > 150


def test_boost_scales_the_partial_component_exactly(world):
    m = world["model"]
    for x in world["X"][200:210]:
        for j in range(S):
            for lam in (0.0, 0.5, 2.0):
                edited, v = edit_query(m, x, j, "boost", strength=lam)
                np.testing.assert_allclose(v, _cone_projection(m, x, j), atol=1e-6)
                np.testing.assert_allclose(edited, x + lam * v, atol=1e-12)
                # Moreau: the cone's projection of x + lam * P(x) is (1 + lam) P(x)
                np.testing.assert_allclose(_cone_projection(m, edited, j), (1 + lam) * v, atol=1e-6)


def test_edit_arguments_are_checked(world):
    m, x = world["model"], world["X"][200]
    for bad in (-0.1, 2.5, float("nan")):
        with pytest.raises(ValueError, match="lambda"):
            edit_query(m, x, 0, "boost", strength=bad)
    with pytest.raises(ValueError, match="edit must be"):
        edit_query(m, x, 0, "erase")
    with pytest.raises(ValueError, match="out of range"):
        edit_query(m, x, S, "remove")


def test_edited_gallery_brute_force(world):
    m, X, Y, pool = world["model"], world["X"], world["Y"], world["pool"]
    i = 205
    x, act = X[i], np.flatnonzero(Y[i])
    j = int(act[0])
    for edit, lam, crit in (("remove", 1.0, "lacks"), ("boost", 1.5, "has")):
        eq = edited_gallery(m, x, memory_pool(X, pool, Y=Y), j, 10, edit=edit, strength=lam, active=act)
        assert eq.criterion == crit and eq.gallery.kind == "edited"
        edited, _ = edit_query(m, x, j, edit, strength=lam, active=act)
        np.testing.assert_allclose(eq.x, edited)
        for g, vec in ((eq.gallery, edited), (eq.unfiltered, x)):
            cos = X[pool] @ vec / (np.linalg.norm(X[pool], axis=1) * np.linalg.norm(vec))
            assert g.rows.tolist() == pool[np.argsort(-cos, kind="stable")[:10]].tolist()
            want = ~Y[g.rows, j] if crit == "lacks" else Y[g.rows, j]
            assert g.relevant_general.tolist() == want.tolist()
            assert g.precision_general == pytest.approx(want.mean())
    assert edit_line("lacks", "animal", 20, 0.85) == "lacks animal: P@20 0.85"
    assert edit_line("has", "animal", 20, float("nan")) == "has animal: P@20 —"


def test_removal_raises_lacks_precision_on_the_emoji_world(ws):
    """P@20 of "lacks j" for x − v_j is higher than for the query itself, on average over queries having j."""
    model = ws.model("S-SLiCS", ws.default_d0)
    gains = []
    for j in range(len(ws.concept_names)):
        rows = [int(r) for r in ws.index["query"] if ws.Y[r, j]][:3]
        for r in rows:
            eq = edited_gallery(model, ws.X[r], ws.pool, j, 20, edit="remove", active=np.flatnonzero(ws.Y[r]))
            # independent: the labels of the 20 nearest pool items to x − v_j by cosine
            P = ws.X[ws.index["pool"]]
            cos = P @ eq.x / (np.linalg.norm(P, axis=1) * np.linalg.norm(eq.x))
            top = np.asarray(ws.index["pool"])[np.argsort(-cos)[:20]]
            assert set(top.tolist()) == set(eq.gallery.rows.tolist())
            gains.append((~ws.Y[top, j]).mean() - eq.unfiltered.precision_general)
    assert len(gains) >= 20
    assert np.mean(gains) > 0.1, np.mean(gains)


def test_parse_boost_param():
    names = ["animal", "food"]
    assert parse_boost_param("Animal:1.5", names) == ("animal", 1.5)
    assert parse_boost_param("food:0", names) == ("food", 0.0)
    for bad, why in (("animal", "concept>:<lambda"), ("plant:1", "not a concept"), ("animal:2.5", "lambda"),
                     ("animal:x", "lambda"), ("animal:nan", "lambda"), ("animal,food:1", "not a concept")):
        with pytest.raises(ValueError, match=why):
            parse_boost_param(bad, names)


def test_check_query_and_model_facts():
    x = check_query(np.array([[3.0, 4.0]], dtype=np.float32), 2)
    assert x.dtype == np.float64 and x.shape == (2,) and np.array_equal(x, [3.0, 4.0])
    for bad, why in ((np.zeros(2), "zero"), (np.array([1.0, np.nan]), "NaN"), (np.ones((2, 2)), "one embedding"),
                     (np.ones(3), "3 dimensions, the model 2")):
        with pytest.raises(ValueError, match=why):
            check_query(bad, 2)
    model = SLiCS(n_atoms=1, n_iter=1, random_state=0).fit(
        np.abs(np.random.RandomState(0).randn(12, 5)) + 0.1, np.eye(3, dtype=bool)[np.arange(12) % 3])
    assert model_dim(model) == 5 and n_concepts(model) == 3
    assert model_dim(object()) is None

"""slics_core.explorer.scoring against a brute-force re-implementation on a small planted workspace."""
import math

import numpy as np
import pytest
from scipy.optimize import nnls as scipy_nnls

from slics_core.evaluation import choose_d0
from slics_core.explorer import scoring
from slics_core.explorer.workspace import Workspace
from slics_core.labels import Labels
from slics_core.method_models import UnfilteredModel
from slics_core.methods import FitInputs, fit_method
from slics_core.slics import SLiCS
from slics_core.synthetic import make_concept_cones
from slics_core.unsupervised import zero_shot_labels

S, D0_PLANTED, D = 3, 3, 16


def unit(A):
    A = np.asarray(A, float)
    return A / np.linalg.norm(A, axis=-1, keepdims=True)


@pytest.fixture(scope="module")
def ws():
    data = make_concept_cones(n_samples=420, n_features=D, n_concepts=S, n_atoms=D0_PLANTED, noise=0.15,
                              random_state=3)
    X = unit(data.X).astype(np.float32)
    Z = np.zeros((len(X), S * D0_PLANTED), bool)
    for j in range(S):
        on = data.sublabels[:, j] >= 0
        Z[np.flatnonzero(on), j * D0_PLANTED + data.sublabels[on, j]] = True
    index = {"train": np.arange(0, 220), "val": np.arange(220, 260), "query": np.arange(260, 320),
             "pool": np.arange(320, 420)}
    concept_text = unit(np.stack([data.atoms[data.groups == j].sum(0) for j in range(S)]))
    tr = index["train"]
    n_active = max(1, int(round(data.Y[tr].sum(1).mean())))
    Y_pseudo = zero_shot_labels(X[tr], concept_text, n_active=n_active)
    models = {}
    for d0 in (2, 3):
        models[("S-SVD", d0)] = SLiCS(n_atoms=d0, n_iter=0, random_state=0).fit(X[tr], data.Y[tr].astype(float))
        models[("S-SLiCS", d0)] = SLiCS(n_atoms=d0, n_iter=3, random_state=0).fit(X[tr], data.Y[tr].astype(float))
        models[("U-SLiCS", d0)] = SLiCS(n_atoms=d0, n_iter=3, random_state=0).fit(X[tr], Y_pseudo.astype(float))
    models[("UF", None)] = UnfilteredModel().fit(X[tr], data.Y[tr])
    return Workspace(name="planted", kind="dataset", path=None, X=X, raw=X.copy(), mean=np.zeros(D),
                     labels=Labels(data.Y.astype(bool), [f"c{j}" for j in range(S)], Z,
                                   [f"s{i}" for i in range(Z.shape[1])], np.repeat(np.arange(S), D0_PLANTED)),
                     index=index, models=models, concept_text=concept_text)


# ---------------------------------------------------------------------- brute force
def brute_component(model, x, j, active=None):
    """tilde-v_j (active None) or v_j (NNLS over the active concepts' atoms) with scipy."""
    B, g = np.asarray(model.atoms_, float), np.asarray(model.groups_)
    if active is None:
        a, _ = scipy_nnls(B[g == j].T, x)
        return a @ B[g == j]
    sel = np.isin(g, np.flatnonzero(active))
    a, _ = scipy_nnls(B[sel].T, x)
    keep = g[sel] == j
    return a[keep] @ B[sel][keep]


def brute_ap(order, relevant, k, n_rel_pool=None):
    hits, total = 0, 0.0
    for r, i in enumerate(order[:k], start=1):
        if relevant[i]:
            hits += 1
            total += hits / r
    z = hits if n_rel_pool is None else min(k, n_rel_pool)
    return total / z if z else 0.0


def brute_map(ws, query_vector, split, k, normalization="retrieved"):
    """mAP general and sub with loops; query_vector(q_row, j) gives the ranking vector."""
    pool = ws.index["pool"]
    P = ws.X[pool].astype(float)
    P = P / np.linalg.norm(P, axis=1, keepdims=True)
    gen, sub = [], []
    for q in ws.index[split]:
        for j in np.flatnonzero(ws.Y[q]):
            v = query_vector(q, j)
            s = P @ (v / np.linalg.norm(v)) if np.linalg.norm(v) > 0 else np.zeros(len(pool))
            order = np.argsort(-s, kind="stable")
            rel = ws.Y[pool, j]
            gen.append(brute_ap(order, rel, k, int(rel.sum()) if normalization == "min" else None))
            L = np.flatnonzero(ws.sub_to_concept == j)
            if ws.Z[q, L].any():
                rel_s = (ws.Z[pool][:, L] & ws.Z[q, L]).any(axis=1)
                sub.append(brute_ap(order, rel_s, k, int(rel_s.sum()) if normalization == "min" else None))
    return float(np.mean(gen)), float(np.mean(sub)), len(gen), len(sub)


def brute_zero_shot(ws, q):
    n_active = max(1, int(round(ws.Y[ws.index["train"]].sum(1).mean())))
    sims = unit(ws.raw[q]) @ ws.concept_text.T
    act = np.zeros(S, bool)
    act[np.argsort(-sims)[:n_active]] = True
    return act


# ---------------------------------------------------------------------- tests
@pytest.mark.parametrize("method", ["S-SLiCS", "S-SVD", "U-SLiCS"])
@pytest.mark.parametrize("mode", ["partial", "full"])
def test_run_job_matches_brute_force(ws, method, mode):
    d0, k = 2, 10
    model = ws.model(method, d0)
    X = ws.X.astype(float)
    if mode == "partial":
        vec = lambda q, j: brute_component(model, X[q], j)  # noqa: E731
    else:
        act = (lambda q: brute_zero_shot(ws, q)) if method == "U-SLiCS" else (lambda q: ws.Y[q])
        vec = lambda q, j: brute_component(model, X[q], j, act(q))  # noqa: E731
    g, s, ng, ns = brute_map(ws, vec, "query", k)
    rec = scoring.run_job(ws, scoring.Job(method, d0, mode, "query"), k=k)
    assert rec["general"] == pytest.approx(g, abs=1e-9)
    assert rec["sub"] == pytest.approx(s, abs=1e-9)
    assert (rec["n_pairs_general"], rec["n_pairs_sub"]) == (ng, ns)
    assert (rec["method"], rec["d0"], rec["mode"], rec["split"], rec["k"]) == (method, d0, mode, "query", k)


def test_unfiltered_and_min_normalization_match_brute_force(ws):
    X = ws.X.astype(float)
    for norm in ("retrieved", "min"):
        g, s, _, _ = brute_map(ws, lambda q, j: X[q], "val", 20, norm)
        rec = scoring.run_job(ws, scoring.Job("UF", None, None, "val"), k=20, normalization=norm)
        assert rec["general"] == pytest.approx(g, abs=1e-9)
        assert rec["sub"] == pytest.approx(s, abs=1e-9)
    model = ws.model("S-SLiCS", 3)
    g, s, _, _ = brute_map(ws, lambda q, j: brute_component(model, X[q], j), "query", 7, "min")
    rec = scoring.run_job(ws, scoring.Job("S-SLiCS", 3, "partial", "query"), k=7, normalization="min")
    assert (rec["general"], rec["sub"]) == (pytest.approx(g, abs=1e-9), pytest.approx(s, abs=1e-9))


def test_filtering_beats_unfiltered_on_planted_cones(ws):
    """Ground truth: with planted cones, concept filtering must help general-label retrieval."""
    uf = scoring.run_job(ws, scoring.Job("UF", None, None, "query"), k=20)
    sl = scoring.run_job(ws, scoring.Job("S-SLiCS", 3, "partial", "query"), k=20)
    assert sl["general"] > uf["general"] + 0.05


def test_sweep_and_choose_d0(ws):
    calls = []
    recs = scoring.score_d0_sweep(ws, splits=("val", "query"), k=10, progress=lambda *a: calls.append(a))
    assert len(recs) == 2 * 2 * 2  # splits x d0 x modes
    assert calls[-1] == ("done", 8, 8)
    for r in recs:
        again = scoring.run_job(ws, scoring.Job(r["method"], r["d0"], r["mode"], r["split"]), k=10)
        assert again["general"] == r["general"] and again["sub"] == r["sub"]
    val = [r for r in recs if r["split"] == "val" and r["mode"] == "partial"]
    best = max(val, key=lambda r: (r["sub"], -r["d0"]))["d0"]
    assert choose_d0(recs) == best
    # the query split does not influence the choice
    flipped = [dict(r, sub=-r["sub"]) if r["split"] == "query" else r for r in recs]
    assert choose_d0(flipped) == best
    with pytest.raises(ValueError):
        choose_d0([r for r in recs if r["split"] == "query"])


def test_methods_table_and_summary_rows(ws):
    recs = scoring.methods_table(ws, 3, split="query", k=10)
    assert [(r["method"], r["mode"]) for r in recs] == [
        ("S-SVD", "partial"), ("S-SVD", "full"), ("S-SLiCS", "partial"), ("S-SLiCS", "full"),
        ("U-SLiCS", "partial"), ("U-SLiCS", "full"), ("UF", None)]
    rows = scoring.summary_rows(recs)
    assert [r["method"] for r in rows] == ["S-SVD", "S-SLiCS", "U-SLiCS", "UF"]
    by = {(r["method"], r["mode"]): r for r in recs}
    for row in rows:
        if row["method"] == "UF":
            assert math.isnan(row["general_full"]) and row["d0"] is None
            assert row["general"] == by[("UF", None)]["general"]
        else:
            assert row["general"] == by[(row["method"], "partial")]["general"]
            assert row["sub_full"] == by[(row["method"], "full")]["sub"]
            assert row["d0"] == 3
            assert row["general_full_lo"] <= row["general_full"] <= row["general_full_hi"]
        for key in ("general", "sub", "recall20_general", "recall100_sub"):
            assert row[f"{key}_lo"] <= row[key] <= row[f"{key}_hi"]
    # the interval is the library's bootstrap over the job's queries, the ceiling is recall_at_k's
    from slics_core.evaluation import intervals_of, score_split
    from slics_core.metrics import recall_at_k

    data, sp = scoring.eval_view(ws)
    idx = scoring.rank_split(ws, "S-SLiCS", 3, k=100)
    r = score_split(idx, data, sp, "query", k=10, recall_k=(20,), per_query=True)
    row = rows[1]
    want = intervals_of({"s": [r["per_query"]["general"]]})["s"]
    assert (row["general_lo"], row["general_hi"]) == pytest.approx(want)
    ceiling = recall_at_k(idx, ws.Y[sp.query], ws.Y[sp.pool], k=20)["ceiling_general"]
    assert row["recall20_general_ceiling"] == pytest.approx(ceiling)
    assert "general_lo" not in scoring.run_job(ws, scoring.Job("UF", None, None, "query"), k=10)  # asked for only


def test_fsplice_row_matches_brute_force(ws):
    import dataclasses

    rng = np.random.default_rng(0)
    W = unit(np.vstack([ws.concept_text + 0.3 * rng.standard_normal((S, D)), rng.standard_normal((30, D))]))
    words = [f"w{i}" for i in range(len(W))]
    tr = ws.index["train"]
    fs = fit_method("F-SpLiCE", FitInputs(X=ws.X[tr], Y=ws.Y[tr], concept_names=ws.concept_names,
                                          concept_text=ws.concept_text, vocab_words=words, vocab_text=W))
    Wu = unit(W)
    Wc = unit(Wu - Wu.mean(0))
    np.testing.assert_allclose(fs.fsplice.dictionary, Wc, atol=1e-6)  # unit, centred, unit
    Vq = {q: v for q, v in zip(ws.index["query"], fs.fsplice.components(ws.X[ws.index["query"]]))}
    g, s, _, _ = brute_map(ws, lambda q, j: Vq[q][j], "query", 10)
    with_fs = dataclasses.replace(ws, models={**ws.models, ("F-SpLiCE", None): fs})
    rec = scoring.run_job(with_fs, scoring.Job("F-SpLiCE", None, None, "query"), k=10)
    assert rec["general"] == pytest.approx(g, abs=1e-9) and rec["sub"] == pytest.approx(s, abs=1e-9)
    assert scoring.table_jobs(with_fs, 2)[-1] == scoring.Job("F-SpLiCE", None, None, "query")
    with pytest.raises(ValueError, match="vocabulary"):
        fit_method("F-SpLiCE", FitInputs(X=ws.X[tr], Y=None, concept_names=ws.concept_names,
                                         concept_text=ws.concept_text))


def test_workspace_without_sub_labels_scores_general_only(ws):
    import dataclasses

    bare = dataclasses.replace(ws, labels=Labels(ws.Y, ws.concept_names))
    rec = scoring.run_job(bare, scoring.Job("S-SLiCS", 2, "partial", "val"), k=10)
    assert math.isnan(rec["sub"]) and rec["n_pairs_sub"] == 0
    assert rec["general"] == scoring.run_job(ws, scoring.Job("S-SLiCS", 2, "partial", "val"), k=10)["general"]
    recs = scoring.score_d0_sweep(bare, splits=("val",), modes=("partial",), k=10)
    best = max(recs, key=lambda r: (r["general"], -r["d0"]))["d0"]
    assert choose_d0(recs) == best  # falls back to general-label mAP


def test_bad_input_messages(ws):
    import dataclasses

    with pytest.raises(ValueError, match="split"):
        scoring.run_job(ws, scoring.Job("UF", None, None, "train"))
    with pytest.raises(ValueError, match="k must"):
        scoring.run_job(ws, scoring.Job("UF", None, None, "query"), k=0)
    with pytest.raises(ValueError, match="unknown method"):
        scoring.run_job(ws, scoring.Job("PCA", 2, "partial", "query"))
    with pytest.raises(ValueError, match="d0=7"):
        scoring.run_job(ws, scoring.Job("S-SLiCS", 7, "partial", "query"))
    with pytest.raises(ValueError, match="mode"):
        scoring.run_job(ws, scoring.Job("S-SLiCS", 2, "both", "query"))
    with pytest.raises(ValueError, match="F-SpLiCE is not fitted"):
        scoring.run_job(ws, scoring.Job("F-SpLiCE", None, None, "query"))
    with pytest.raises(ValueError, match="concept prompt"):
        scoring.run_job(dataclasses.replace(ws, concept_text=None), scoring.Job("U-SLiCS", 2, "full", "query"))
    with pytest.raises(ValueError, match="d0=9"):
        scoring.table_jobs(ws, 9)
    empty = dataclasses.replace(ws, index=dict(ws.index, val=np.array([], int)))
    with pytest.raises(ValueError, match="no 'val' items"):
        scoring.sweep_jobs(empty)


@pytest.mark.parametrize("method,mode", [("S-SLiCS", "partial"), ("U-SLiCS", "full"), ("UF", None)])
def test_stored_rankings_give_the_direct_numbers_for_every_k(ws, method, mode):
    """Ranking once (rank_job) and scoring any k from the stored ranking equals ranking at that k."""
    d0 = None if method == "UF" else 2
    job = scoring.Job(method, d0, mode, "query")
    stored = scoring.rank_job(ws, job, depth=scoring.stored_depth(7))
    assert stored.shape == (len(ws.index["query"]), S, 100) and stored.dtype == np.uint16  # the whole pool
    X = ws.X.astype(float)
    model = ws.model(method, d0)
    for k in (1, 5, 7, 20, 50):
        for norm in ("retrieved", "min"):
            direct = scoring.run_job(ws, job, k=k, normalization=norm)
            cached = scoring.run_job(ws, job, k=k, normalization=norm, rankings=stored)
            assert cached == direct
    # and against the brute force at one k
    if method == "S-SLiCS":
        g, s, _, _ = brute_map(ws, lambda q, j: brute_component(model, X[q], j), "query", 13)
        rec = scoring.run_job(ws, job, k=13, rankings=stored)
        assert (rec["general"], rec["sub"]) == (pytest.approx(g, abs=1e-9), pytest.approx(s, abs=1e-9))


def test_stored_depth_and_bad_stored_rankings(ws):
    # deep enough for Recall@100 at any k, then k rounded up to 50
    assert [scoring.stored_depth(k) for k in (1, 20, 50, 51, 100, 101, 200)] == [100, 100, 100, 100, 100, 150, 200]
    with pytest.raises(ValueError, match="k must be"):
        scoring.stored_depth(0)
    job = scoring.Job("S-SLiCS", 2, "partial", "query")
    stored = scoring.rank_job(ws, job, depth=10)
    with pytest.raises(ValueError, match="depth 10 but k=20"):
        scoring.run_job(ws, job, k=20, rankings=stored)
    with pytest.raises(ValueError, match="do not fit job"):
        scoring.run_job(ws, scoring.Job("S-SLiCS", 2, "partial", "val"), k=5, rankings=stored)


def test_app_and_cli_front_ends_give_the_same_scores(ws):
    """The app's scores of a workspace's models equal the CLI's sweep (evaluation.sweep_d0) of the same models
    on the same data and split, built through EvalData's own (checking) constructor."""
    from slics_core.data import EvalData
    from slics_core.evaluation import sweep_d0
    from slics_core.splits import Split

    app = scoring.score_d0_sweep(ws, splits=("val",), k=10)
    data = EvalData(X=ws.X, labels=ws.labels, X_raw=ws.raw, concept_text=ws.concept_text)
    split = Split(*(np.asarray(ws.index[k]) for k in ("train", "val", "query", "pool")), np.zeros(0, int))
    cli = sweep_d0(data, split, [2, 3], k=10, models={d: ws.models[("S-SLiCS", d)] for d in (2, 3)})
    assert len(app) == len(cli) == 4
    by = {(r["d0"], r["mode"]): r for r in cli}
    for r in app:
        assert r["general"] == pytest.approx(by[(r["d0"], r["mode"])]["general"], abs=1e-12)
        assert r["sub"] == pytest.approx(by[(r["d0"], r["mode"])]["sub"], abs=1e-12)


def test_eval_view_shares_the_workspace_arrays(ws):
    data, split = scoring.eval_view(ws)
    assert data.X is ws.X and data.X_raw is ws.raw and data.Y is ws.Y and data.Z is ws.Z
    for k in ("train", "val", "query", "pool"):
        np.testing.assert_array_equal(getattr(split, k), ws.index[k])
    assert split.dropped.size == 0


def test_run_job_recall_at_20_matches_brute_force_and_shallow_rankings_give_nan(ws):
    """Recall@20 = |top-20 ∩ R| / |R| per (query, concept) pair, averaged; with the 100-item pool Recall@100 is 1."""
    model = ws.model("S-SLiCS", 2)
    X = ws.X.astype(float)
    pool = ws.index["pool"]
    P = unit(X[pool])
    gen, sub = [], []
    for q in ws.index["query"]:
        for j in np.flatnonzero(ws.Y[q]):
            order = np.argsort(-(P @ unit(brute_component(model, X[q], j))), kind="stable")[:20]
            rel = ws.Y[pool, j]
            gen.append(rel[order].sum() / rel.sum())
            L = np.flatnonzero(ws.sub_to_concept == j)
            rel_s = (ws.Z[pool][:, L] & ws.Z[q, L]).any(axis=1)
            if ws.Z[q, L].any() and rel_s.any():
                sub.append(rel_s[order].sum() / rel_s.sum())
    job = scoring.Job("S-SLiCS", 2, "partial", "query")
    rec = scoring.run_job(ws, job, k=5)
    assert rec["recall20_general"] == pytest.approx(np.mean(gen), abs=1e-12)
    assert rec["recall20_sub"] == pytest.approx(np.mean(sub), abs=1e-12)
    assert rec["recall100_general"] == 1.0 and rec["recall100_sub"] == 1.0
    row = scoring.summary_rows([rec])[0]
    assert row["recall20_general"] == rec["recall20_general"] and row["recall100_sub"] == 1.0
    shallow = scoring.run_job(ws, job, k=5, rankings=scoring.rank_job(ws, job, depth=30))
    assert shallow["recall20_general"] == rec["recall20_general"] and math.isnan(shallow["recall100_general"])


def test_a_jobs_label_spells_its_mode_with_the_one_symbol():
    """Issue 40: the component modes' symbols have one home (methods.MODE_SYMBOL), used by every label."""
    from slics_core.methods import MODE_SYMBOL, MODES

    assert set(MODE_SYMBOL) == set(MODES) and MODE_SYMBOL["partial"] != MODE_SYMBOL["full"]
    for mode in MODES:
        assert scoring.Job("S-SLiCS", 5, mode, "query").label() == f"S-SLiCS · d0=5 · {MODE_SYMBOL[mode]} · on query"
    assert scoring.Job("UF", None, None, "val").label() == "UF · on val"

"""AP@k / mAP@k on hand-computed cases, splits, sweeps and the methods table."""
import math

import numpy as np
import pytest

from slics_core.data import EvalData
from slics_core.evaluation import choose_d0, evaluate_methods, methods_table_markdown, methods_table_rows, sweep_d0
from slics_core.labels import Labels
from slics_core.metrics import average_precision_at_k, evaluate_rankings
from slics_core.splits import make_split


def test_ap_hand_computed():
    # relevance 1,0,1,0 : P@1 = 1, P@3 = 2/3 -> sum = 5/3
    rel = np.array([[1, 0, 1, 0]], bool)
    np.testing.assert_allclose(average_precision_at_k(rel, k=4), [(1 + 2 / 3) / 2])
    np.testing.assert_allclose(average_precision_at_k(rel, k=4, n_relevant=[10], normalization="min"),
                               [(1 + 2 / 3) / 4])
    np.testing.assert_allclose(average_precision_at_k(rel, k=4, n_relevant=[2], normalization="min"),
                               [(1 + 2 / 3) / 2])
    # cut at k=2: only the first hit counts
    np.testing.assert_allclose(average_precision_at_k(rel, k=2), [1.0])
    # 0,1,1 : P@2 = 1/2, P@3 = 2/3
    np.testing.assert_allclose(average_precision_at_k([[0, 1, 1]], k=3), [(0.5 + 2 / 3) / 2])
    np.testing.assert_allclose(average_precision_at_k([[0, 0, 0]], k=3), [0.0])
    with pytest.raises(ValueError, match="n_relevant"):
        average_precision_at_k(rel, 4, normalization="min")
    with pytest.raises(ValueError):
        average_precision_at_k(rel, 4, normalization="other")


def test_map_general_and_sub_labels_hand_computed():
    # pool of 4 items, 2 concepts; concept 0 has sub-labels a (col 0) and b (col 1)
    Yp = np.array([[1, 0], [1, 1], [0, 1], [1, 0]])
    Zp = np.array([[1, 0], [0, 1], [0, 0], [1, 1]])
    s2c = np.array([0, 0])
    Yq = np.array([[1, 1], [0, 1]])
    Zq = np.array([[1, 0], [0, 0]])
    # rankings (q, S, k)
    idx = np.array([[[1, 0, 2], [2, 1, 0]],
                    [[0, 1, 2], [0, 2, 3]]])
    r = evaluate_rankings(idx, Yq, Yp, Zq, Zp, s2c, k=3)
    # pairs: (0,0): rel 1,1,0 -> AP 1 ; (0,1): rel 1,1,0 -> 1 ; (1,1): rel 0,1,0 -> P@2=1/2 -> 0.5
    assert r["n_pairs_general"] == 3
    assert r["general"] == pytest.approx((1 + 1 + 0.5) / 3)
    # sub: only pair (0,0), query sub-label a: ranked 1,0,2 -> Zp[:,a] = 0,1,0 -> P@2 = 1/2
    assert r["n_pairs_sub"] == 1
    assert r["sub"] == pytest.approx(0.5)
    # "min" normalisation: concept 0 is in 3 pool items, concept 1 in 2
    rm = evaluate_rankings(idx, Yq, Yp, Zq, Zp, s2c, k=3, normalization="min")
    assert rm["general"] == pytest.approx(((1 + 1) / 3 + (1 + 1) / 2 + 0.5 / 2) / 3)
    assert rm["sub"] == pytest.approx(0.5 / 2)  # sub-label a is in 2 pool items
    # unfiltered (2-D) ranking is used for every concept
    u = evaluate_rankings(idx[:, 0], Yq, Yp, k=3)
    # lists 1,0,2 / 1,0,2 / 0,1,2 -> rel 110 (AP 1), 101 (AP 5/6), 011 (AP 7/12)
    assert u["general"] == pytest.approx((1 + 5 / 6 + 7 / 12) / 3)
    assert math.isnan(u["sub"])
    with pytest.raises(ValueError, match="outside"):
        evaluate_rankings(idx + 10, Yq, Yp, k=3)


def test_make_split_disjoint_seeded_and_drops_unlabelled():
    rng = np.random.default_rng(0)
    Y = rng.random((600, 3)) < 0.4
    s = make_split(Y, 100, 50, 60, seed=3)
    all_idx = np.concatenate([s.train, s.val, s.query, s.pool])
    assert len(set(all_idx.tolist())) == all_idx.size
    assert set(all_idx.tolist()) | set(s.dropped.tolist()) == set(range(600))
    assert (Y[all_idx].any(axis=1)).all() and not Y[s.dropped].any()
    assert (s.train.size, s.val.size, s.query.size) == (100, 50, 60)
    s2 = make_split(Y, 100, 50, 60, seed=3)
    np.testing.assert_array_equal(s.query, s2.query)
    assert not np.array_equal(make_split(Y, 100, 50, 60, seed=4).query, s.query)
    with pytest.raises(ValueError, match="not enough"):
        make_split(Y, 1000, 50, 60)


def _planted(n=900, seed=0):
    from slics_core.synthetic import make_concept_cones

    d = make_concept_cones(n_samples=n, n_features=24, n_concepts=3, n_atoms=3, random_state=seed)
    X = d.X / np.linalg.norm(d.X, axis=1, keepdims=True)
    Y = np.asarray(d.Y).astype(bool)
    # sub-labels: the dominant planted atom within each active concept (3 per concept)
    return X, Y, d


def test_sweep_and_methods_table_beat_unfiltered_on_planted_cones():
    X, Y, d = _planted()
    data = EvalData(X=X, labels=Labels(Y, ["a", "b", "c"]))
    split = make_split(Y, 300, 100, 100, seed=0)
    recs = sweep_d0(data, split, [2, 3], n_iter=3)
    assert {(r["d0"], r["mode"]) for r in recs} == {(2, "partial"), (2, "full"), (3, "partial"), (3, "full")}
    assert choose_d0(recs) in (2, 3)
    rows = evaluate_methods(data, split, ["S-SVD", "S-SLiCS", "UF", "U-SLiCS", "SpLiCE"], n_atoms=3, n_iter=3,
                            seeds=(0, 1))
    by = {r["method"]: r for r in rows}
    assert by["S-SLiCS"]["general_mean"] > by["UF"]["general_mean"]
    assert by["S-SLiCS"]["n_runs"] == 1  # full batch is deterministic
    assert by["U-SLiCS"]["skipped"] and by["SpLiCE"]["skipped"]  # no text embeddings given
    md = methods_table_markdown(rows)
    assert "| Gen. mAP@20 |" in md and "n/a" in md
    flat = methods_table_rows(rows)
    assert set(flat[0]) >= {"method", "general_mean", "sub_std", "normalization"}


def _row(method, gen, sub, oracle=False):
    return {"method": method, "general_mean": gen, "general_std": 0.0, "sub_mean": sub, "sub_std": 0.0,
            "n_runs": 1, "runs": [], "skipped": None, "k": 20, "normalization": "retrieved", "pool": "original",
            "oracle": oracle}


def test_markdown_never_bolds_an_oracle():
    """The oracle row has the best numbers: it is shown, labelled, not bold; the best other row is bold."""
    from slics_core.methods import ORACLE_FSPLICE

    rows = [_row("S-SLiCS", 0.90, 0.60), _row("F-SpLiCE", 0.80, 0.65), _row(ORACLE_FSPLICE, 0.997, 0.78, True)]
    md = methods_table_markdown(rows)
    gen, sub = [line for line in md.splitlines() if line.startswith(("| Gen.", "| Sub."))]
    assert gen.split(" | ")[1:] == ["**0.900**", "0.800", "0.997 |"]
    assert sub.split(" | ")[1:] == ["0.600", "**0.650**", "0.780 |"]
    assert ORACLE_FSPLICE in md.splitlines()[0] and f"not ranked (never bold): {ORACLE_FSPLICE}" in md
    # the flag travels to the CSV/JSON records; an oracle is recognised by its registered name too
    assert [r["oracle"] for r in methods_table_rows(rows)] == [False, False, True]
    md2 = methods_table_markdown([_row("UF", 0.5, 0.4), _row(ORACLE_FSPLICE, 0.9, 0.9)])
    assert "**0.500**" in md2 and "**0.900**" not in md2


def test_oracle_row_only_where_its_label_names_are_given():
    """F-SpLiCE over general words is ranked; the oracle (label names only) is a flagged row when the names'
    text is given, and no row at all otherwise (never a "skipped" column on other datasets)."""
    from slics_core.methods import ORACLE_FSPLICE

    X, Y, d = _planted(600, seed=2)
    rng = np.random.default_rng(0)
    names = ["a", "b", "c"]
    concept_text = np.stack([d.atoms[d.groups == j].mean(0) for j in range(3)])
    vocab = ([f"w{i}" for i in range(40)], rng.normal(size=(40, X.shape[1])))
    data = EvalData(X=X, labels=Labels(Y, names), concept_text=concept_text,
                    vocab_words=vocab[0], vocab_text=vocab[1])
    split = make_split(Y, 300, 50, 100, seed=0)
    rows = evaluate_methods(data, split, None, n_atoms=3, n_iter=2, seeds=(0,))
    assert ORACLE_FSPLICE not in {r["method"] for r in rows} and "F-SpLiCE" in {r["method"] for r in rows}
    data.oracle_words, data.oracle_text = names, concept_text
    rows = evaluate_methods(data, split, ["UF", "F-SpLiCE", ORACLE_FSPLICE], n_atoms=3, seeds=(0,))
    by = {r["method"]: r for r in rows}
    assert by[ORACLE_FSPLICE]["oracle"] and not by["F-SpLiCE"]["oracle"] and not by[ORACLE_FSPLICE]["skipped"]


def test_minibatch_runs_report_mean_and_std_over_seeds():
    X, Y, _ = _planted(700, seed=1)
    data = EvalData(X=X, labels=Labels(Y, ["a", "b", "c"]))
    split = make_split(Y, 300, 50, 50, seed=0)
    rows = evaluate_methods(data, split, ["S-SLiCS"], n_atoms=3, n_iter=2, batch_size=64, seeds=(0, 1, 2))
    r = rows[0]
    assert r["n_runs"] == 3
    gens = [x["general"] for x in r["runs"]]
    assert r["general_mean"] == pytest.approx(np.mean(gens))
    assert r["general_std"] == pytest.approx(np.std(gens))
    assert "±" in methods_table_markdown(rows)


def test_choose_d0_prefers_sub_label_then_general():
    recs = [{"d0": 5, "mode": "partial", "general": 0.9, "sub": 0.5},
            {"d0": 6, "mode": "partial", "general": 0.8, "sub": 0.6}]
    assert choose_d0(recs) == 6
    assert choose_d0(recs, by="general") == 5
    nan = [{**r, "sub": math.nan} for r in recs]
    assert choose_d0(nan) == 5


def test_score_split_is_evaluate_rankings_of_the_split_rows():
    from slics_core.evaluation import rank_method, score_split

    X, Y, _ = _planted(500, seed=2)
    Z = np.zeros((len(Y), 6), bool)
    Z[:, 0::2], Z[:, 1::2] = Y & (X[:, :3] > 0), Y & (X[:, :3] <= 0)
    data = EvalData(X=X, labels=Labels(Y, ["a", "b", "c"], Z, [f"s{i}" for i in range(6)], [0, 0, 1, 1, 2, 2]))
    split = make_split(Y, 200, 50, 60, seed=1)
    idx, _ = rank_method("S-SVD", data, split, queries="val", n_atoms=2, k=10)
    got = score_split(idx, data, split, "val", k=10)
    want = evaluate_rankings(idx, Y[split.val], Y[split.pool], Z[split.val], Z[split.pool], [0, 0, 1, 1, 2, 2], k=10)
    assert got["general"] == want["general"] and got["sub"] == want["sub"] and not math.isnan(got["sub"])
    with pytest.raises(ValueError, match="positive integer"):
        score_split(idx, data, split, "val", k=0)
    with pytest.raises(ValueError, match="mode must be one of"):
        rank_method("S-SVD", data, split, mode="both")


def test_estimate_cost_counts_the_runs_left_and_names_the_uncosted(tmp_path):
    from slics_core.evaluation import estimate_cost, evaluate_methods
    from slics_core.runs import ResultStore

    X, Y, _ = _planted(500, seed=3)
    data = EvalData(X=X, labels=Labels(Y, ["a", "b", "c"]), concept_text=np.eye(3, X.shape[1]),
                    vocab_words=["w1", "w2", "w3", "w4"], vocab_text=np.eye(4, X.shape[1]))
    split = make_split(Y, 200, 50, 60, seed=0)
    methods = ["S-SVD", "S-SLiCS", "UF", "SpLiCE"]
    seconds, what = estimate_cost(data, split, methods, d0_values=[2, 3], n_iter=2, seeds=(0, 1))
    # 2 sweep runs (both fits) + 4 table runs (S-SLiCS seed 0 reuses the sweep's fit: 1 more fit, S-SVD)
    assert seconds > 0 and what.startswith("6 runs to do (3 fits of 200 x ")
    assert "not counting SpLiCE" in what  # needs a vocabulary: not costed
    store = ResultStore(tmp_path / "runs")
    evaluate_methods(data, split, ["S-SVD"], n_atoms=2, n_iter=2, seeds=(0,), results=store)
    _, what = estimate_cost(data, split, ["S-SVD", "UF"], n_atoms=2, n_iter=2, seeds=(0,), results=store)
    assert what.startswith("1 runs to do (0 fits")  # S-SVD is finished; UF fits nothing


def test_check_k():
    from slics_core._validation import check_k

    assert check_k(np.int64(7)) == 7 and type(check_k(np.int64(7))) is int
    for bad in (0, -1, 2.0, True, "3", None):
        with pytest.raises(ValueError, match="k must be a positive integer"):
            check_k(bad)
    with pytest.raises(ValueError, match="top_k must be a positive integer; got 0"):
        check_k(0, "top_k")


# ---------------------------------------------------------------------- Recall@k
def test_recall_at_k_hand_computed():
    from slics_core.metrics import recall_at_k

    # pool of 5 items, 2 concepts; concept 0 has sub-labels a (col 0) and b (col 1)
    Yp = np.array([[1, 0], [1, 1], [0, 1], [1, 0], [1, 0]])
    Zp = np.array([[1, 0], [0, 1], [0, 0], [1, 1], [0, 1]])
    s2c = np.array([0, 0])
    Yq = np.array([[1, 1], [0, 1], [1, 0]])
    Zq = np.array([[1, 0], [0, 0], [0, 1]])
    idx = np.array([[[1, 0, 2, 3, 4], [2, 1, 0, 3, 4]],
                    [[0, 1, 2, 3, 4], [0, 3, 4, 2, 1]],
                    [[2, 0, 3, 4, 1], [0, 1, 2, 3, 4]]])
    r = recall_at_k(idx, Yq, Yp, Zq, Zp, s2c, k=2)
    # general pairs: (0,0): top-2 {1,0}, R = {0,1,3,4} -> 2/4; (0,1): {2,1}, R = {1,2} -> 2/2;
    # (1,1): {0,3}, R = {1,2} -> 0/2; (2,0): {2,0}, R = {0,1,3,4} -> 1/4
    assert r["n_pairs_general"] == 4 and r["n_skipped_general"] == 0
    assert r["general"] == pytest.approx((2 / 4 + 1 + 0 + 1 / 4) / 4)
    np.testing.assert_allclose(r["recall_general"], [2 / 4, 1, 0, 1 / 4])
    # sub pairs (concept 0 only): q0 has a: R = {0,3}, top-2 {1,0} -> 1/2; q2 has b: R = {1,3,4}, {2,0} -> 0/3
    assert r["n_pairs_sub"] == 2 and r["sub"] == pytest.approx((1 / 2 + 0) / 2)
    # deeper k: q2's sub list 2,0,3,4 -> {3,4} of {1,3,4} at k=4
    assert recall_at_k(idx, Yq, Yp, Zq, Zp, s2c, k=4)["recall_sub"][1] == pytest.approx(2 / 3)
    # k beyond the pool: everything retrieved
    full = recall_at_k(idx, Yq, Yp, Zq, Zp, s2c, k=50)
    assert full["general"] == 1.0 and full["sub"] == 1.0
    # unfiltered (2-D) ranking, used for every concept; no sub-labels -> NaN
    u = recall_at_k(idx[:, 0], Yq, Yp, k=1)
    # lists 1.. / 0.. / 2..: (0,0) 1/4, (0,1) 1/2, (1,1) 0/2, (2,0) 0/4
    assert u["general"] == pytest.approx((1 / 4 + 1 / 2) / 4) and math.isnan(u["sub"])


def test_recall_at_k_skips_pairs_with_nothing_relevant_in_the_pool():
    from slics_core.metrics import recall_at_k

    Yp = np.array([[1, 0], [1, 0], [1, 0]])  # concept 1 is in no pool item
    Yq = np.array([[1, 1]])
    idx = np.array([[[2, 0, 1], [0, 1, 2]]])
    r = recall_at_k(idx, Yq, Yp, k=1)
    assert r["n_pairs_general"] == 1 and r["n_skipped_general"] == 1 and r["general"] == pytest.approx(1 / 3)
    assert evaluate_rankings(idx, Yq, Yp, k=1)["n_pairs_general"] == 2  # mAP keeps it (AP 0)


def test_methods_table_has_recall_rows_scored_from_deeper_rankings():
    from slics_core.evaluation import RECALL_KS, rank_method, score_split
    from slics_core.metrics import recall_at_k

    X, Y, _ = _planted(700, seed=4)
    data = EvalData(X=X, labels=Labels(Y, ["a", "b", "c"]))
    split = make_split(Y, 300, 50, 60, seed=0)
    assert RECALL_KS == (20, 100)
    rows = evaluate_methods(data, split, ["S-SLiCS", "UF"], n_atoms=3, n_iter=2, seeds=(0,))
    by = {r["method"]: r for r in rows}
    idx, _ = rank_method("S-SLiCS", data, split, n_atoms=3, n_iter=2, k=100)
    for rk in RECALL_KS:
        want = recall_at_k(idx, Y[split.query], Y[split.pool], k=rk)["general"]
        assert by["S-SLiCS"][f"recall{rk}_general_mean"] == pytest.approx(want)
    assert by["S-SLiCS"]["recall100_general_mean"] > by["S-SLiCS"]["recall20_general_mean"]
    # mAP@20 is unchanged by ranking deeper
    assert by["S-SLiCS"]["general_mean"] == pytest.approx(score_split(idx[:, :, :20], data, split)["general"])
    md = methods_table_markdown(rows)
    labels = [line.split(" | ")[0] for line in md.splitlines() if line.startswith("| ")][1:]
    assert [lab.split(" (ceiling")[0] for lab in labels] == [
        "| Gen. mAP@20", "| Sub. mAP@20", "| Gen. Recall@20", "| Sub. Recall@20", "| Gen. Recall@100",
        "| Sub. Recall@100"]
    assert f"**{by['S-SLiCS']['recall100_general_mean']:.3f} [" in md.splitlines()[6]
    flat = methods_table_rows(rows)
    assert {"recall20_general_mean", "recall20_sub_std", "recall100_general_mean", "recall100_sub_mean"} <= set(flat[0])


# ---------------------------------------------------------------------- seed stability and S~
def test_match_atoms_lives_in_analysis_and_recovers_a_planted_permutation_and_sign_flip():
    from slics_core.analysis import match_atoms

    rng = np.random.default_rng(5)
    ref = rng.standard_normal((6, 10))
    groups = np.repeat(np.arange(2), 3)
    perm = np.array([2, 0, 1, 4, 5, 3])  # within each concept
    signs = np.array([1, -1, 1, -1, -1, 1.0])
    other = signs[:, None] * ref[perm]   # other[i] is ref[perm[i]], maybe flipped
    order, cos = match_atoms(ref, other, groups, groups)
    np.testing.assert_array_equal(perm[order], np.arange(6))
    np.testing.assert_allclose(cos, signs[order])


def test_seed_stability_matches_every_seed_to_the_first_within_concepts():
    import itertools

    from slics_core.data import fit_inputs
    from slics_core.methods import fit_method
    from slics_core.stability import seed_stability, stability_markdown

    X, Y, _ = _planted(500, seed=6)
    data = EvalData(X=X, labels=Labels(Y, ["a", "b", "c"]))
    split = make_split(Y, 250, 30, 50, seed=0)
    records, summary, _ = seed_stability(data, split, (0, 1, 2), n_atoms=2, n_iter=2, batch_size=50)
    assert [r["concept"] for r in records] == ["a", "b", "c"]
    # independent: best within-concept permutation of the signed cos by brute force, seed 0 against seeds 1 and 2
    models = [fit_method("S-SLiCS", fit_inputs(data, split.train), 2, n_iter=2, batch_size=50, seed=s)
              for s in (0, 1, 2)]
    U = lambda A: A / np.linalg.norm(A, axis=1, keepdims=True)  # noqa: E731
    for j, rec in enumerate(records):
        best = []
        for m in models[1:]:
            C = U(models[0].atoms_[models[0].groups_ == j]) @ U(m.atoms_[m.groups_ == j]).T
            best.append(max(np.mean([C[i, p[i]] for i in range(2)]) for p in itertools.permutations(range(2))))
        assert rec["matched_cos"] == pytest.approx(np.mean(best))
        assert -1 <= rec["min_cos"] <= rec["matched_cos"] <= 1
    assert summary["general_std"] >= 0 and summary["seeds"] == [0, 1, 2]
    assert "| Concept | matched cos |" in stability_markdown(records, summary)


def test_evaluate_n_active_gives_one_uslics_row_per_value():
    from slics_core.stability import evaluate_n_active

    X, Y, d = _planted(500, seed=7)
    concept_text = np.stack([d.atoms[d.groups == j].mean(0) for j in range(3)])
    data = EvalData(X=X, labels=Labels(Y, ["a", "b", "c"]), concept_text=concept_text, X_raw=X)
    split = make_split(Y, 250, 30, 50, seed=0)
    rows = evaluate_n_active(data, split, [1, 3], n_atoms=2, n_iter=2, seeds=(0,))
    assert [(r["method"], r["n_active"], r["skipped"]) for r in rows] == [("U-SLiCS (S̃=1)", 1, None),
                                                                          ("U-SLiCS (S̃=3)", 3, None)]
    assert rows[0]["general_mean"] != rows[1]["general_mean"]  # another S~, another model
    with pytest.raises(ValueError, match="between 1 and the number of concepts"):
        evaluate_n_active(data, split, [4], n_atoms=2, seeds=(0,))


def test_kept_runs_without_recall_are_scored_again(tmp_path):
    """A run kept in the result store before Recall@k existed gets its Recall@k rows (not a '-' cell)."""
    from slics_core.runs import ResultStore, table_key

    X, Y, _ = _planted(400, seed=8)
    data = EvalData(X=X, labels=Labels(Y, ["a", "b", "c"]))
    split = make_split(Y, 200, 30, 40, seed=0)
    store = ResultStore(tmp_path / "runs")
    store.put(table_key("UF", 3, 0, "partial", None, ("original",)),
              {"original": {"seed": 0, "general": 0.123, "sub": math.nan}})  # an older run: mAP only
    row = evaluate_methods(data, split, ["UF"], n_atoms=3, seeds=(0,), results=store)[0]
    assert row["general_mean"] != 0.123 and 0 < row["recall20_general_mean"] <= 1
    again = evaluate_methods(data, split, ["UF"], n_atoms=3, seeds=(0,), results=store)[0]
    assert again["recall20_general_mean"] == row["recall20_general_mean"]  # now kept with its Recall@k

"""Intervals and null bands (slics_core.uncertainty), Recall@k's ceiling and their place in the methods table."""
import numpy as np
import pytest
from scipy import stats

from slics_core.data import EvalData
from slics_core.labels import Labels
from slics_core.splits import make_split
from slics_core.uncertainty import bootstrap_mean_interval, query_sums, subset_mean_band


def test_query_sums_match_a_loop():
    rng = np.random.default_rng(0)
    q = rng.integers(0, 7, 50)
    v = rng.random(50)
    s, c = query_sums(v, q, 9)
    for i in range(9):
        assert s[i] == pytest.approx(v[q == i].sum()) and c[i] == (q == i).sum()
    with pytest.raises(ValueError, match="query indices"):
        query_sums(v, q + 5, 9)


def test_bootstrap_of_a_pair_mean_matches_resampling_queries_by_hand():
    # planted per-pair values of 40 queries with 1..4 pairs each
    rng = np.random.default_rng(1)
    n_pairs = rng.integers(1, 5, 40)
    pairs = [rng.random(m) for m in n_pairs]
    sums = np.array([p.sum() for p in pairs])
    counts = n_pairs.astype(float)
    lo, hi = bootstrap_mean_interval(sums, counts, n_resamples=500, seed=11)
    # independent: draw the same query indices, concatenate the drawn queries' pairs, take the plain mean
    draws = np.random.default_rng(11).integers(0, 40, size=(500, 40))
    means = [np.concatenate([pairs[i] for i in row]).mean() for row in draws]
    want = np.percentile(means, [2.5, 97.5])
    assert (lo, hi) == pytest.approx(tuple(want), abs=1e-12)
    point = np.concatenate(pairs).mean()
    assert lo < point < hi
    # a query with no pair is left out, and the same seed gives the same interval
    assert bootstrap_mean_interval(np.r_[sums, 0.0], np.r_[counts, 0.0], n_resamples=500, seed=11) == (lo, hi)


def test_bootstrap_of_a_plain_mean_agrees_with_scipy():
    x = np.random.default_rng(2).normal(0.6, 0.2, 300)
    lo, hi = bootstrap_mean_interval(x, n_resamples=4000, seed=0)
    ref = stats.bootstrap((x,), np.mean, n_resamples=4000, method="percentile", confidence_level=0.95,
                          random_state=np.random.default_rng(0)).confidence_interval
    assert lo == pytest.approx(ref.low, abs=0.004) and hi == pytest.approx(ref.high, abs=0.004)


def test_bootstrap_interval_covers_a_known_mean_about_95_percent_of_the_time():
    rng = np.random.default_rng(3)
    hits = 0
    trials = 300
    for t in range(trials):
        x = rng.exponential(0.5, 120)  # skewed, known mean 0.5
        lo, hi = bootstrap_mean_interval(x, n_resamples=400, seed=t)
        hits += lo <= 0.5 <= hi
    assert 0.89 <= hits / trials <= 0.99


def test_bootstrap_rejects_bad_settings_and_is_nan_without_pairs():
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_mean_interval([1.0, 2.0], confidence=95)
    with pytest.raises(ValueError, match="sums"):
        bootstrap_mean_interval([1.0, 2.0], [1.0])
    assert np.isnan(bootstrap_mean_interval([0.0], [0.0])).all()


def test_subset_band_holds_random_subsets_about_95_percent_and_not_a_planted_one():
    rng = np.random.default_rng(4)
    V = rng.gamma(2.0, 1.0, (2000, 6))
    lo, hi = subset_mean_band(V, 50, n_subsets=400, seed=0)
    inside = []
    for _ in range(400):  # fresh random subsets, another stream
        m = V[rng.choice(2000, 50, replace=False)].mean(axis=0)
        inside.append((lo <= m) & (m <= hi))
    share = np.mean(inside)
    assert 0.91 <= share <= 0.98
    # a planted subset: the 50 rows largest in column 2
    top = np.argsort(V[:, 2])[-50:]
    m = V[top].mean(axis=0)
    assert m[2] > hi[2]
    with pytest.raises(ValueError, match="subset size"):
        subset_mean_band(V, 0)


# ---------------------------------------------------------------------- Recall@k's ceiling
def _brute_ceiling(Yq, Yp, k):
    vals = []
    for q in range(len(Yq)):
        for j in np.flatnonzero(Yq[q]):
            R = int(Yp[:, j].sum())
            if R:
                vals.append(min(k, R, len(Yp)) / R)
    return float(np.mean(vals))


def test_recall_ceiling_matches_brute_force_and_a_perfect_ranking_reaches_it():
    from slics_core.metrics import recall_at_k

    rng = np.random.default_rng(5)
    Yq = rng.random((30, 4)) < 0.4
    Yp = rng.random((200, 4)) < np.array([0.02, 0.1, 0.3, 0.6])
    Yq[:, 0] |= ~Yq.any(axis=1)
    for k in (5, 20, 100):
        # a perfect ranking per (query, concept): the relevant items first
        order = np.argsort(~Yp, axis=0, kind="stable").T  # (S, n_pool)
        idx = np.broadcast_to(order[None, :, :k], (30, 4, k))
        r = recall_at_k(idx, Yq, Yp, k=k)
        assert r["ceiling_general"] == pytest.approx(_brute_ceiling(Yq, Yp, k))
        assert r["general"] == pytest.approx(r["ceiling_general"])
        # a random ranking sits below it
        rand = np.stack([np.stack([rng.permutation(200)[:k] for _ in range(4)]) for _ in range(30)])
        assert recall_at_k(rand, Yq, Yp, k=k)["general"] <= r["ceiling_general"] + 1e-12


# ---------------------------------------------------------------------- the methods table
def test_methods_table_rows_carry_intervals_over_queries_and_the_recall_ceiling():
    from slics_core.evaluation import (
        evaluate_methods,
        intervals_of,
        methods_table_markdown,
        methods_table_rows,
        rank_method,
        score_split,
    )

    rng = np.random.default_rng(6)
    Y = rng.random((700, 3)) < 0.4
    Y[~Y.any(axis=1), 0] = True
    X = Y @ rng.standard_normal((3, 16)) + 0.5 * rng.standard_normal((700, 16))
    data = EvalData(X=X, labels=Labels(Y, ["a", "b", "c"]))
    split = make_split(Y, 300, 50, 60, seed=0)
    rows = evaluate_methods(data, split, ["S-SLiCS", "UF"], n_atoms=3, n_iter=2, seeds=(0,))
    row = rows[0]
    idx, _ = rank_method("S-SLiCS", data, split, n_atoms=3, n_iter=2, k=100)
    r = score_split(idx, data, split, recall_k=(20, 100), per_query=True)
    for key in ("general", "recall20_general", "recall100_general"):
        assert row[f"{key}_lo"] <= row[f"{key}_mean"] <= row[f"{key}_hi"]
        assert (row[f"{key}_lo"], row[f"{key}_hi"]) == pytest.approx(intervals_of({"s": [r["per_query"][key]]})["s"])
    # the per-query sums add up to the score
    s, c = r["per_query"]["general"]
    assert s.sum() / c.sum() == pytest.approx(row["general_mean"])
    assert row["recall20_general_ceiling"] == pytest.approx(_brute_ceiling(Y[split.query], Y[split.pool], 20))
    md = methods_table_markdown(rows)
    assert f"{row['general_mean']:.3f} [{row['general_lo']:.3f}, {row['general_hi']:.3f}]" in md
    assert f"(ceiling {row['recall20_general_ceiling']:.3f})" in md and "bootstrap interval over queries" in md
    flat = methods_table_rows(rows)[0]
    assert {"general_lo", "general_hi", "recall20_general_ceiling", "recall100_sub_hi"} <= set(flat)
    assert "per_query" not in rows[0]["runs"][0]  # the table's JSON keeps no per-query lists


def test_intervals_of_several_runs_are_those_of_their_query_by_query_mean():
    from slics_core.evaluation import intervals_of

    rng = np.random.default_rng(7)
    c = rng.integers(1, 3, 50).astype(float)
    a, b = rng.random(50) * c, rng.random(50) * c
    got = intervals_of({"x": [(a, c), (b, c)], "none": []})
    assert got["x"] == pytest.approx(bootstrap_mean_interval((a + b) / 2, c), abs=1e-12)
    assert np.isnan(got["none"]).all()
    # several scores share the draws: each column's interval is the one it has alone
    c2 = np.where(rng.random(50) < 0.3, 0.0, c)  # a score some queries have no pair in
    both = intervals_of({"x": [(a, c)], "y": [(b * (c2 > 0), c2)]})
    assert both["x"] == pytest.approx(bootstrap_mean_interval(a, c), abs=1e-12)
    lo, hi = bootstrap_mean_interval(np.column_stack([a, b * (c2 > 0)]), np.column_stack([c, c2]))
    assert both["y"] == pytest.approx((lo[1], hi[1]), abs=1e-12)

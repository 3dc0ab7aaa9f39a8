"""Per-atom stability (slics_core.stability): atom_matches against brute force and planted truths, the seeds'
shared start, the cross-method rows, and the bound on the number of seeds."""
import itertools

import numpy as np
import pytest

from slics_core.analysis import match_atoms
from slics_core.data import EvalData, fit_inputs
from slics_core.labels import Labels
from slics_core.methods import fit_method
from slics_core.rows import unit_rows
from slics_core.slics import SLiCS
from slics_core.splits import make_split
from slics_core.stability import (
    MAX_SEEDS,
    SHARED_BETWEEN_SEEDS,
    atom_matches,
    check_n_seeds,
    seed_stability,
    stability_markdown,
    stability_memory,
)
from slics_core.synthetic import make_concept_cones


class _Dict:
    """A fitted dictionary as atom_matches reads it."""

    def __init__(self, atoms, groups, names=("a", "b", "c")):
        self.atoms_, self.groups_, self.concept_names_ = np.asarray(atoms, float), np.asarray(groups), list(names)


def _best_total(A, B):
    """Brute force: the largest total signed cos of a one-to-one pairing of A's rows with B's."""
    C = unit_rows(A) @ unit_rows(B).T
    return max(sum(C[i, p[i]] for i in range(len(A))) for p in itertools.permutations(range(len(B)), len(A)))


def test_atom_matches_is_the_best_signed_matching_within_each_concept():
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(3), [2, 3, 4])
    ref = _Dict(rng.standard_normal((9, 12)), groups)
    for _ in range(5):
        other = _Dict(rng.standard_normal((9, 12)), groups)
        rows = atom_matches(ref, {"x": other})
        for j in range(3):
            got = sum(r["x cos"] for r, g in zip(rows, groups) if g == j)
            assert got == pytest.approx(_best_total(ref.atoms_[groups == j], other.atoms_[groups == j]))
        # the reported atom is the one whose cos is reported
        U, V = unit_rows(ref.atoms_), unit_rows(other.atoms_)
        for a, r in enumerate(rows):
            j = groups[a]
            b = np.flatnonzero(groups == j)[int(r["x atom"].lstrip("#"))]
            assert r["x cos"] == pytest.approx(U[a] @ V[b])
            assert r["atom"] == f"{'abc'[j]} #{a - np.flatnonzero(groups == j)[0]}"


def test_a_permuted_copy_comes_back_and_a_flipped_atom_does_not():
    rng = np.random.default_rng(1)
    groups = np.repeat(np.arange(3), 3)
    A = unit_rows(rng.standard_normal((9, 16)))
    perm = np.array([2, 0, 1, 5, 3, 4, 8, 7, 6])  # within each concept
    ref, copy = _Dict(A, groups), _Dict(A[perm], groups)
    rows = atom_matches(ref, {"copy": copy, "again": copy})
    np.testing.assert_allclose([r["copy cos"] for r in rows], 1.0)
    inverse = np.argsort(perm)
    assert [r["copy atom"] for r in rows] == [f"#{inverse[a] % 3}" for a in range(9)]
    assert [r["mean_cos"] for r in rows] == pytest.approx([1.0] * 9)
    # atom 4 flipped: an atom and its negative are opposite; |cos| matching would call it back (cos 1)
    flipped = A[perm].copy()
    flipped[inverse[4]] *= -1
    rows = atom_matches(ref, {"f": _Dict(flipped, groups)})
    assert rows[4]["f cos"] < 0.9 and rows[4]["min_cos"] < 0.9
    _, abs_cos = match_atoms(A, flipped, groups, groups)
    assert np.abs(abs_cos).min() == pytest.approx(1.0)
    assert sum(r["f cos"] for r in rows[3:6]) == pytest.approx(_best_total(A[3:6], flipped[3:6]))
    np.testing.assert_allclose([r["f cos"] for r in rows[:3] + rows[6:]], 1.0)  # the other concepts untouched


def test_match_atoms_keeps_pairs_within_concepts_whatever_the_cosines():
    """The concept penalty is larger than the cosines' whole range: a cross-concept copy (cos 1) never wins over the
    atom's own negative in its concept (cos -1) when the groups allow a within-concept matching."""
    rng = np.random.default_rng(2)
    A = unit_rows(rng.standard_normal((40, 8)))
    groups = np.repeat(np.arange(20), 2)
    # B: every atom's negative in its own concept, and every atom's copy in the next concept
    B = np.vstack([-A, A])
    Bg = np.concatenate([groups, (groups + 1) % 20])
    order, cos = match_atoms(A, B, groups, Bg, signed=True)
    np.testing.assert_array_equal(Bg[order[:40]], groups)
    for j in range(20):  # and the best signed total among the concept's candidates (its negatives, copies of j-1)
        assert cos[groups == j].sum() == pytest.approx(_best_total(A[groups == j], B[Bg == j]))


def _data(seed=6, concept_text=False):
    d = make_concept_cones(n_samples=500, n_features=24, n_concepts=3, n_atoms=3, random_state=seed)
    X = d.X / np.linalg.norm(d.X, axis=1, keepdims=True)
    Y = np.asarray(d.Y).astype(bool)
    extra = {}
    if concept_text:
        extra = dict(concept_text=np.stack([d.atoms[d.groups == j].mean(0) for j in range(3)]), X_raw=X)
    return EvalData(X=X, labels=Labels(Y, ["a", "b", "c"]), **extra), make_split(Y, 250, 30, 50, seed=0)


def test_seeds_share_the_s_svd_start_and_differ_only_by_batch_order():
    """What the page's caption says: a fit with no epoch is the S-SVD dictionary whatever the seed, and full-batch
    fits do not depend on the seed."""
    data, split = _data()
    X, Y = data.X[split.train], data.Y[split.train]
    starts = [SLiCS(n_atoms=2, n_iter=0, random_state=s).fit(X, Y).atoms_ for s in (0, 1, 7)]
    svd = fit_method("S-SVD", fit_inputs(data, split.train), 2, seed=3).atoms_
    for a in starts[1:] + [svd]:
        np.testing.assert_array_equal(a, starts[0])
    full = [SLiCS(n_atoms=2, n_iter=2, random_state=s).fit(X, Y).atoms_ for s in (0, 1)]
    np.testing.assert_array_equal(full[0], full[1])
    mini = [SLiCS(n_atoms=2, n_iter=2, batch_size=50, random_state=s).fit(X, Y).atoms_ for s in (0, 1)]
    assert not np.array_equal(mini[0], mini[1])
    assert "S-SVD" in SHARED_BETWEEN_SEEDS and "mini-batches" in SHARED_BETWEEN_SEEDS


def test_seed_stability_gives_one_row_per_atom_and_the_cross_method_rows():
    data, split = _data(concept_text=True)
    records, summary, atoms = seed_stability(data, split, (0, 1, 2), n_atoms=2, n_iter=2, batch_size=50)
    inputs = fit_inputs(data, split.train)
    fits = {s: fit_method("S-SLiCS", inputs, 2, n_iter=2, batch_size=50, seed=s) for s in (0, 1, 2)}
    rows = atoms["seeds"]
    assert len(rows) == 6 and [r["concept"] for r in rows] == ["a", "a", "b", "b", "c", "c"]
    assert rows == atom_matches(fits[0], {"seed 1": fits[1], "seed 2": fits[2]})  # the same rule, recomputed
    for r in rows:
        assert r["mean_cos"] == pytest.approx((r["seed 1 cos"] + r["seed 2 cos"]) / 2)
        assert r["min_cos"] == min(r["seed 1 cos"], r["seed 2 cos"])
    # the concepts' rows are the atoms' rows averaged
    for j, rec in enumerate(records):
        assert rec["matched_cos"] == pytest.approx(np.mean([r["mean_cos"] for r in rows[2 * j:2 * j + 2]]))
    # across methods: S-SVD and U-SLiCS at the same d0, seed 0, matched the same way
    assert summary["compared"] == ["S-SVD", "U-SLiCS"] and summary["skipped"] == {}
    svd = fit_method("S-SVD", inputs, 2, seed=0)
    uslics = fit_method("U-SLiCS", inputs, 2, n_iter=2, batch_size=50, seed=0)
    assert atoms["methods"] == atom_matches(fits[0], {"S-SVD": svd, "U-SLiCS": uslics})
    pairs = {(p["a"], p["b"]): p for p in atoms["pairs"]}
    assert set(pairs) == {("S-SLiCS", "S-SVD"), ("S-SLiCS", "U-SLiCS"), ("S-SVD", "U-SLiCS")}
    total = sum(_best_total(svd.atoms_[svd.groups_ == j], uslics.atoms_[uslics.groups_ == j]) for j in range(3))
    assert pairs[("S-SVD", "U-SLiCS")]["matched_cos"] == pytest.approx(total / 6)
    md = stability_markdown(records, summary, atoms)
    assert "| S-SLiCS vs S-SVD |" in md and "signed cos" in md and "Shared:" in md
    # without the labels' text U-SLiCS cannot be fitted: it is skipped with the reason
    bare, split = _data()
    _, summary, atoms = seed_stability(bare, split, (0, 1), n_atoms=2, n_iter=1, batch_size=50)
    assert summary["compared"] == ["S-SVD"] and "needs" in summary["skipped"]["U-SLiCS"]
    assert "U-SLiCS not compared: it needs" in stability_markdown([], summary, atoms)


def test_the_number_of_seeds_is_bounded_with_the_memory_it_would_take():
    assert check_n_seeds(MAX_SEEDS, 60, 64) == MAX_SEEDS
    with pytest.raises(ValueError) as exc:
        check_n_seeds(10**9, 60, 64, "--stability")
    msg = str(exc.value)
    assert msg.startswith("--stability 1000000000 is above the bound of 100 seeds") and "\n" not in msg
    assert "42.7 TB" in msg  # 1e9 seeds x 60 atoms x (8 x 64 + 200) bytes
    assert stability_memory(10**9, 60, 64) == 10**9 * 60 * (8 * 64 + 200)
    with pytest.raises(ValueError, match="at least 1"):
        check_n_seeds(0, 60, 64)
    data, split = _data()
    with pytest.raises(ValueError, match="above the bound"):  # refused before a single fit, even from an iterator
        seed_stability(data, split, itertools.count(), n_atoms=2)
    with pytest.raises(ValueError, match="above the bound"):
        seed_stability(data, split, range(10**9), n_atoms=2)

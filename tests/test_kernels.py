"""The compiled kernels of Algorithm 1 against plain numpy / LAPACK computations."""
import threading

import numpy as np
import pytest

from slics_core import SLiCS
from slics_core._kernels import (
    aligned_rows,
    allowed_products,
    ksvd_atoms,
    ksvd_update,
    rank2_update,
    reseed,
    residual,
    top_triplet,
)
from slics_core.synthetic import make_concept_cones


def _sparse(rng, shape, p=0.2):
    A = rng.random(shape)
    A[rng.random(shape) > p] = 0.0
    return A


def test_residual_equals_dense_product():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 33))
    B = rng.normal(size=(12, 33))
    At = _sparse(rng, (12, 50))
    R = aligned_rows(50, 33)
    residual(X, np.ascontiguousarray(At.T), B, R)
    assert R.ctypes.data % 64 == 0
    np.testing.assert_allclose(R, X - At.T @ B, rtol=0, atol=1e-13)


def test_allowed_products_are_zero_off_the_allowed_entries():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(40, 17))
    B = rng.normal(size=(9, 17))
    allowed = rng.random((40, 9)) < 0.4
    C = allowed_products(X, B, allowed)
    np.testing.assert_allclose(C, np.where(allowed, X @ B.T, 0.0), rtol=0, atol=1e-13)


def test_rank2_update_touches_only_the_listed_rows():
    rng = np.random.default_rng(2)
    R = rng.normal(size=(30, 8))
    rows = np.array([3, 7, 11, 20, 29])
    a = np.array([0.5, 0.0, 1.5, 0.0, 2.0])
    beta = np.array([0.2, 0.0, 0.0, 0.7, 1.0])
    b0, b = rng.normal(size=8), rng.normal(size=8)
    expected = R.copy()
    expected[rows] += np.outer(a, b0) - np.outer(beta, b)
    rank2_update(R, rows, a, b0, beta, b)
    np.testing.assert_allclose(R, expected, atol=1e-14)
    np.testing.assert_array_equal(a, beta)


@pytest.mark.parametrize("seed", range(3))
def test_ksvd_update_is_the_rank1_update_of_algorithm_1(seed):
    """Atom, coefficients and residual of one update against a full LAPACK SVD of the explicit E."""
    rng = np.random.default_rng(seed)
    n, d = 60, 24
    R = rng.normal(size=(n, d)) + 3 * np.outer(rng.random(n), rng.normal(size=d))
    rows = np.sort(rng.choice(n, 40, replace=False))
    a = rng.random(40)
    a[rng.random(40) < 0.3] = 0.0  # samples of the concept that do not use the atom
    b0 = rng.normal(size=d)
    b0 /= np.linalg.norm(b0)
    used = a != 0
    E = (R[rows] + np.outer(a, b0))[used]
    _, _, Vt = np.linalg.svd(E)
    beta_ref = E @ Vt[0]
    p = 1.0 if np.linalg.norm(np.maximum(beta_ref, 0)) >= np.linalg.norm(np.maximum(-beta_ref, 0)) else -1.0
    b_ref, beta_ref = p * Vt[0], np.maximum(p * beta_ref, 0)
    R_ref = R.copy()
    R_ref[rows[used]] = E - np.outer(beta_ref, b_ref)
    b, steps, kept = ksvd_update(R, rows, a, b0, 1e-12, 100, 3, False)
    assert kept and 1 <= steps <= d + 1
    np.testing.assert_allclose(b, b_ref, atol=1e-10)
    np.testing.assert_allclose(a[used], beta_ref, atol=1e-10)
    assert not a[~used].any()
    np.testing.assert_allclose(R, R_ref, atol=1e-10)


def test_monotone_ksvd_update_refuses_an_update_that_raises_the_error():
    """Ten samples lie near the atom (e1); two have +-3 e2, whose direction wins the SVD but, thresholded,
    fits worse (error about 18 before, 10 + 9 = 19 after): the monotone variant keeps the old atom."""
    d = 4
    E = np.zeros((12, d))
    E[:10, 0] = 1.0
    E[10, 1], E[11, 1] = 3.0, -3.0
    a = np.r_[np.ones(10), 1e-3, 1e-3]
    b0 = np.array([1.0, 0.05, 0.0, 0.0])  # (a start exactly on e1 would keep Lanczos in an invariant subspace)
    b0 /= np.linalg.norm(b0)
    R = E - np.outer(a, b0)
    rows = np.arange(12)
    before = np.linalg.norm(R) ** 2
    Rm, am = R.copy(), a.copy()
    b, _, kept = ksvd_update(Rm, rows, am, b0, 1e-12, 100, 3, True)
    assert not kept
    np.testing.assert_array_equal(b, b0)
    np.testing.assert_array_equal(Rm, R)
    np.testing.assert_array_equal(am, a)
    # without the check the update is applied, and the error does go up
    b, _, kept = ksvd_update(R, rows, a, b0, 1e-12, 100, 3, False)
    assert kept and abs(abs(b[1]) - 1) < 1e-12
    assert np.linalg.norm(R) ** 2 > before + 0.5


def test_top_triplet_of_a_zero_matrix_and_an_orthogonal_start():
    d = 6
    R = np.zeros((4, d))
    b0 = np.eye(d)[0]
    v, ev, eb, steps = top_triplet(R, np.arange(4), np.zeros(4), b0, False, 1e-9, 100, 3)
    np.testing.assert_array_equal(v, b0)
    assert not ev.any() and steps == 1
    # b0 orthogonal to every row: the start moves to the largest row
    R[:, 1] = [1.0, 3.0, 0.0, 2.0]
    R[:, 2] = [0.0, 1.0, 1.0, 0.0]
    v, ev, eb, _ = top_triplet(R, np.arange(4), np.zeros(4), b0, False, 1e-12, 100, 3)
    _, _, Vt = np.linalg.svd(R)
    assert abs(v @ Vt[0]) > 1 - 1e-12
    assert not eb.any()
    np.testing.assert_allclose(np.abs(ev), np.abs(R @ Vt[0]), atol=1e-12)


def test_fits_in_threads_run_side_by_side_and_agree_with_a_lone_fit():
    """The kernels release the GIL (app sessions fit in threads): concurrent fits give the lone fit's atoms."""
    data = make_concept_cones(n_samples=600, n_features=48, n_concepts=4, n_atoms=3, noise=0.3, random_state=5)
    lone = SLiCS(n_atoms=3, n_iter=4, batch_size=200, random_state=0).fit(data.X, data.Y)
    out = [None, None]

    def run(i):
        out[i] = SLiCS(n_atoms=3, n_iter=4, batch_size=200, random_state=0).fit(data.X, data.Y)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for model in out:
        np.testing.assert_array_equal(model.atoms_, lone.atoms_)


def test_reseed_takes_the_worst_approximated_row():
    R = np.zeros((6, 3))
    R[1] = [0.0, 3.0, 4.0]   # norm 5: the worst of the rows 1, 2, 4
    R[2] = [1.0, 0.0, 0.0]
    R[4] = [0.0, 0.0, 2.0]
    rows = np.array([1, 2, 4])
    a = np.zeros(3)
    B = np.eye(3)
    reseed(R, rows, a, B, 2)
    np.testing.assert_allclose(B[2], [0.0, 0.6, 0.8])
    np.testing.assert_allclose(a, [5.0, 0.0, 0.0])
    assert not R[1].any() and R[2, 0] == 1.0 and R[4, 2] == 2.0
    # nothing worth a new atom (all residuals below 1e-6): nothing changes
    R2, a2, B2 = np.full((2, 3), 1e-8), np.zeros(2), np.eye(3)
    reseed(R2, np.arange(2), a2, B2, 0)
    np.testing.assert_array_equal(B2, np.eye(3))
    assert not a2.any() and (R2 == 1e-8).all()


@pytest.mark.parametrize("full_batch", [True, False])
def test_ksvd_atoms_is_the_per_atom_update_in_turn(full_batch):
    """The compiled batch loop against ksvd_update / reseed called atom by atom in Python, dead atom included."""
    rng = np.random.default_rng(7)
    n, d, M = 80, 20, 6
    X = rng.normal(size=(n, d))
    B = rng.normal(size=(M, d))
    B /= np.linalg.norm(B, axis=1, keepdims=True)
    allowed = np.zeros((n, M), dtype=bool)
    allowed[:50, :3] = True
    allowed[30:, 3:] = True
    At = np.where(allowed.T, rng.random((M, n)), 0.0)
    At[4] = 0.0  # atom 4 is used by no sample of this batch
    R = X - At.T @ B
    R_ref, At_ref, B_ref = R.copy(), At.copy(), B.copy()
    for m in range(M):
        S = np.flatnonzero(allowed[:, m])
        a = At_ref[m, S]
        if not a.any():
            if full_batch:
                reseed(R_ref, S, a, B_ref, m)
        else:
            B_ref[m], _, _ = ksvd_update(R_ref, S, a, B_ref[m].copy(), 1e-9, 100, 3, False)
        At_ref[m, S] = a
    steps = np.full(M, 3, dtype=np.int64)
    ksvd_atoms(R, At, B, np.ascontiguousarray(allowed.T), steps, 1e-9, 100, False, full_batch)
    np.testing.assert_allclose(B, B_ref, atol=1e-13)
    np.testing.assert_allclose(At, At_ref, atol=1e-13)
    np.testing.assert_allclose(R, R_ref, atol=1e-13)
    assert At[4].any() == full_batch  # re-seeded: one sample now uses it
    assert (steps[[0, 1, 2, 3, 5]] >= 1).all()


def test_top_triplet_with_many_lanczos_steps():
    """A Gaussian matrix has no dominant direction: the solve takes more steps than the first allocation."""
    rng = np.random.default_rng(3)
    E = rng.normal(size=(100, 64))
    v0 = rng.normal(size=64)
    v0 /= np.linalg.norm(v0)
    v, ev, _, steps = top_triplet(E, np.arange(100), np.zeros(100), v0, False, 1e-12, 100, 3)
    assert steps > 16
    _, s, Vt = np.linalg.svd(E)
    assert abs(v @ Vt[0]) > 1 - 1e-10
    np.testing.assert_allclose(ev, E @ v, atol=1e-10)
    np.testing.assert_allclose(np.linalg.norm(ev), s[0], rtol=1e-12)


def test_each_kernel_is_compiled_for_one_signature():
    """Fits, ``transform`` and ``project`` hand the kernels C-ordered float64 / bool arrays whatever
    the caller passes, so each kernel compiles once per machine (another array layout or dtype would
    compile it again: about 2 s more for the NNLS kernel on a first run)."""
    from slics_core.nnls import _bpp_allowed

    data = make_concept_cones(n_samples=90, n_features=12, n_concepts=3, n_atoms=3, noise=0.3, random_state=4)
    X, Y = data.X, data.Y
    model = SLiCS(n_atoms=2, n_iter=2).fit(np.asfortranarray(X), np.asfortranarray(Y))
    SLiCS(n_atoms=2, n_iter=2, batch_size=30, random_state=0).fit(X.astype(np.float32), Y)
    for Xq in (X, np.asfortranarray(X), X.astype(np.float32)):
        model.transform(Xq, np.asfortranarray(Y))
        model.transform(Xq, Y.astype(np.uint8))
        model.project(Xq, 1)
    for kernel in (allowed_products, _bpp_allowed, residual, ksvd_atoms):
        assert len(kernel.signatures) == 1, (kernel.__name__, kernel.signatures)

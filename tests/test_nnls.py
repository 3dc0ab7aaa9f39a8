import numpy as np
import pytest
from reference_kernels import bpp_gram
from scipy.optimize import nnls

import slics_core.nnls as nnls_module
from slics_core.nnls import nnls_gram, nnls_shared


def _problem(seed, n=200, M=24, d=40, p=0.4):
    rng = np.random.default_rng(seed)
    B = rng.normal(size=(M, d))
    B /= np.linalg.norm(B, axis=1, keepdims=True)
    X = rng.normal(size=(n, d)) + rng.random((n, M)) @ B
    allowed = rng.random((n, M)) < p
    return B, X, allowed


def _scipy_residual(B, x, P):
    if P.size == 0:
        return np.linalg.norm(x)
    return nnls(B[P].T, x)[1]


@pytest.mark.parametrize("seed", range(4))
def test_batched_nnls_reaches_scipy_optimum(seed):
    B, X, allowed = _problem(seed)
    A = nnls_gram(B @ B.T, X @ B.T, allowed)
    assert (A >= 0).all()
    assert not A[~allowed].any()
    for i in range(X.shape[0]):
        ours = np.linalg.norm(X[i] - A[i] @ B)
        ref = _scipy_residual(B, X[i], np.flatnonzero(allowed[i]))
        assert ours <= ref * (1 + 1e-9) + 1e-12


def test_warm_start_and_fallback_give_the_same_optimum():
    B, X, allowed = _problem(7, n=60)
    cold = nnls_gram(B @ B.T, X @ B.T, allowed)
    warm = nnls_gram(B @ B.T, X @ B.T, allowed, init=np.random.default_rng(0).random(cold.shape))
    np.testing.assert_allclose(warm, cold, atol=1e-8)
    # max_steps=0 sends every problem to the scipy fallback
    k = 6
    G = (B[:k] @ B[:k].T)[None].repeat(X.shape[0], 0)
    c = X @ B[:k].T
    np.testing.assert_allclose(bpp_gram(G, c, max_steps=0), bpp_gram(G, c), atol=1e-8)


def test_nnls_shared_ridge_matches_augmented_scipy_problem():
    B, X, _ = _problem(3, n=30, M=8)
    ridge = 0.3
    A = nnls_shared(B, X, ridge=ridge)
    aug = np.vstack([B.T, np.sqrt(ridge) * np.eye(B.shape[0])])
    for i in range(X.shape[0]):
        ref, _ = nnls(aug, np.concatenate([X[i], np.zeros(B.shape[0])]))
        np.testing.assert_allclose(A[i], ref, atol=1e-8)


def test_linearly_dependent_atoms_still_reach_the_optimum():
    B, X, _ = _problem(5, n=40, M=6)
    B = np.vstack([B, B[:2]])  # duplicated atoms: Gram matrix singular
    A = nnls_shared(B, X)
    for i in range(X.shape[0]):
        ref = nnls(B.T, X[i])[1]
        assert np.linalg.norm(X[i] - A[i] @ B) <= ref + 1e-7


def test_nnls_shared_rejects_bad_input():
    B, X, _ = _problem(0, n=3, M=4)
    with pytest.raises(ValueError, match="features"):
        nnls_shared(B, X[:, :-1])
    bad = X.copy()
    bad[1, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        nnls_shared(B, bad)
    with pytest.raises(ValueError, match="ridge"):
        nnls_shared(B, X, ridge=-1)


def test_rows_the_compiled_solver_does_not_finish_go_to_scipy(monkeypatch):
    """nnls_gram's fallback: every row reported unfinished is solved again by scipy on its allowed atoms."""
    B, X, allowed = _problem(5, n=40)
    good = nnls_gram(B @ B.T, X @ B.T, allowed)
    solver = nnls_module._bpp_allowed

    def unfinished(*args):
        coef, ok = solver(*args)
        return np.full_like(coef, -1.0), np.zeros_like(ok)

    monkeypatch.setattr(nnls_module, "_bpp_allowed", unfinished)
    again = nnls_gram(B @ B.T, X @ B.T, allowed)
    np.testing.assert_allclose(again, good, atol=1e-8)
    assert not again[~allowed].any()


def test_rows_allowed_more_atoms_than_the_rank_reach_the_exact_optimum():
    """More allowed atoms than dimensions (a singular passive system): the residual is scipy's NNLS optimum, and
    rows allowed no more atoms than the rank are solved exactly as before (the same bits)."""
    from scipy.optimize import nnls as scipy_nnls

    rng = np.random.default_rng(3)
    B = rng.standard_normal((24, 6))  # 24 atoms in 6 dimensions
    X = np.abs(rng.standard_normal((60, 24))) @ B * 0.3 + 0.2 * rng.standard_normal((60, 6))
    allowed = np.zeros((60, 24), dtype=bool)
    allowed[:30] = True  # 24 > 6 atoms
    allowed[30:, :5] = True  # 5 <= 6 atoms
    assert nnls_module.gram_rank(B) == 6 and nnls_module.gram_rank(B, ridge=0.1) == 24
    G = nnls_module.solver_gram(B @ B.T)
    rhs = np.ascontiguousarray(X @ B.T)
    coef = nnls_module.nnls_rows(G, rhs, allowed, rank=nnls_module.gram_rank(B))
    assert (coef >= 0).all() and not coef[~allowed].any()
    for i in range(60):
        P = np.flatnonzero(allowed[i])
        _, best = scipy_nnls(B[P].T, X[i])
        assert np.linalg.norm(X[i] - coef[i] @ B) <= best + 1e-9, i
    before = nnls_module.nnls_rows(G, rhs[30:], allowed[30:])  # no rank given: every row as before
    assert np.array_equal(coef[30:], before)

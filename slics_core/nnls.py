"""Batched non-negative least squares (NNLS).

SLiCS solves thousands of small NNLS problems per epoch (paper eq. 5): one per
sample, restricted to the atoms of the sample's labelled concepts. Looping
over :func:`scipy.optimize.nnls` is far too slow, so this module solves them
together in *Gram form*::

    minimise_a  0.5 a^T G a - c^T a   subject to a >= 0,

with ``G = B_P B_P^T + ridge I`` and ``c = B_P x`` for the allowed atoms ``P``
(the same optimum as ``min ||x - a B_P||^2 + ridge ||a||^2``).

The solver is block principal pivoting (Kim & Park, SIAM J. Sci. Comput.
2011), vectorised over problems: every problem keeps its own passive set, all
problems exchange variables in the same step, and every step is one batched
linear solve. With warm starts (the passive set of the previous epoch) it
usually converges in 2-4 steps. Problems that do not converge within the step
limit (never seen in practice, but possible for degenerate data) are finished
with :func:`scipy.optimize.nnls`, so the result is always an optimum.
"""
from __future__ import annotations

import numpy as np
from scipy.linalg import cholesky, solve_triangular
from scipy.optimize import nnls as _scipy_nnls

from slics_core._validation import check_embeddings

#: Largest number of matrix entries (rows x k x k) handled in one batched solve.
_CHUNK_ENTRIES = 2_000_000


def _jitter(gram_diag):
    """Tiny diagonal loading that keeps every passive sub-system solvable."""
    scale = float(np.mean(gram_diag)) if gram_diag.size else 1.0
    return 1e-11 * (scale if scale > 0 else 1.0)


def _solve_passive(G, c, F):
    """Solve ``G[F,F] x_F = c_F`` for every problem; ``x`` is zero off ``F``.

    Returns ``x`` and the gradient ``y = G x - c`` (set to zero on ``F``).
    """
    k = G.shape[-1]
    both = F[:, :, None] & F[:, None, :]
    Gm = np.where(both, G, 0.0)
    diag = np.arange(k)
    Gm[:, diag, diag] += ~F  # identity rows/columns off the passive set
    rhs = np.where(F, c, 0.0)
    try:
        x = np.linalg.solve(Gm, rhs[..., None])[..., 0]
    except np.linalg.LinAlgError:
        x = np.einsum("nij,nj->ni", np.linalg.pinv(Gm), rhs)
    x[~F] = 0.0
    y = np.einsum("nij,nj->ni", G, x) - c
    y[F] = 0.0
    return x, y


def _finish_with_scipy(G, c):
    """Exact NNLS of one Gram-form problem through scipy (fallback path)."""
    L = cholesky(G, lower=True)
    target = solve_triangular(L, c, lower=True)
    x, _ = _scipy_nnls(L.T, target, maxiter=50 * G.shape[0])
    return x


def bpp_gram(G, c, passive=None, max_steps=None):
    """Solve a stack of NNLS problems in Gram form by block principal pivoting.

    Parameters
    ----------
    G : ndarray of shape (n_problems, k, k)
        Symmetric positive definite Gram matrices (one per problem).
    c : ndarray of shape (n_problems, k)
        Linear terms ``B_P x``.
    passive : ndarray of bool, shape (n_problems, k), optional
        Initial passive sets (warm start), e.g. the support of a previous
        solution. Default: all variables (one unconstrained solve first).
    max_steps : int, optional
        Pivoting steps before the scipy fallback. Default ``5 * k + 30``.

    Returns
    -------
    x : ndarray of shape (n_problems, k)
        Minimisers of ``0.5 x^T G x - c^T x`` over ``x >= 0``.
    """
    n, k = c.shape
    x = np.zeros((n, k))
    if n == 0 or k == 0:
        return x
    F = np.ones((n, k), dtype=bool) if passive is None else passive.copy()
    if max_steps is None:
        max_steps = 5 * k + 30
    tol = 1e-12 * max(1.0, float(np.abs(c).max()))
    xs, ys = _solve_passive(G, c, F)
    alpha = np.full(n, 3)
    beta = np.full(n, k + 1)
    rows = np.arange(n)
    last = np.arange(k)
    for _ in range(max_steps):
        V = (F[rows] & (xs < -tol)) | (~F[rows] & (ys < -tol))
        nv = V.sum(axis=1)
        done = nv == 0
        x[rows[done]] = xs[done]
        if done.all():
            rows = rows[:0]
            break
        keep = ~done
        rows, V, nv, xs, ys = rows[keep], V[keep], nv[keep], xs[keep], ys[keep]
        a_r, b_r = alpha[rows], beta[rows]
        fewer = nv < b_r  # progress: exchange all infeasible variables
        retry = ~fewer & (a_r >= 1)  # no progress, but tries left: exchange all
        single = ~fewer & ~retry  # backup rule: exchange only the last one
        b_r = np.where(fewer, nv, b_r)
        a_r = np.where(fewer, 3, np.where(retry, a_r - 1, a_r))
        alpha[rows], beta[rows] = a_r, b_r
        flip = V.copy()
        if single.any():
            lastidx = np.max(np.where(V[single], last, -1), axis=1)
            flip[single] = False
            flip[np.flatnonzero(single), lastidx] = True
        F[rows] ^= flip
        xs, ys = _solve_passive(G[rows], c[rows], F[rows])
    for r in rows:  # not converged within max_steps: exact fallback
        x[r] = _finish_with_scipy(G[r], c[r])
    np.maximum(x, 0.0, out=x)
    return x


def nnls_gram(gram, rhs, allowed=None, init=None):
    """Batched NNLS with a shared Gram matrix and per-sample allowed atoms.

    Solves, for every row ``i``, ``min 0.5 a^T G a - rhs_i^T a`` subject to
    ``a >= 0`` and ``a_m = 0`` where ``allowed[i, m]`` is False.

    Parameters
    ----------
    gram : ndarray of shape (M, M)
        ``B B^T`` (plus ``ridge * I``) for the dictionary ``B`` (atoms in rows).
    rhs : ndarray of shape (n, M)
        ``X B^T``.
    allowed : ndarray of bool, shape (n, M), optional
        Which atoms each sample may use. Default: all.
    init : ndarray of shape (n, M), optional
        A previous solution; its support warm-starts the solver.

    Returns
    -------
    coef : ndarray of shape (n, M)
        Non-negative coefficients, zero on disallowed atoms.
    """
    gram = np.asarray(gram, dtype=np.float64)
    rhs = np.asarray(rhs, dtype=np.float64)
    n, M = rhs.shape
    if gram.shape != (M, M):
        raise ValueError(f"gram must have shape ({M}, {M}); got {gram.shape}.")
    G = gram + _jitter(np.diag(gram)) * np.eye(M)
    coef = np.zeros((n, M))
    if allowed is None:
        allowed = np.ones((n, M), dtype=bool)
    counts = allowed.sum(axis=1)
    for k in np.unique(counts):
        if k == 0:
            continue
        rows_k = np.flatnonzero(counts == k)
        chunk = max(1, _CHUNK_ENTRIES // (k * k))
        for start in range(0, rows_k.size, chunk):
            rows = rows_k[start:start + chunk]
            idx = np.nonzero(allowed[rows])[1].reshape(rows.size, k)
            Gs = G[idx[:, :, None], idx[:, None, :]]
            cs = np.take_along_axis(rhs[rows], idx, axis=1)
            F0 = None
            if init is not None:
                F0 = np.take_along_axis(init[rows], idx, axis=1) > 0
                F0[~F0.any(axis=1)] = True  # no previous support: start from the unconstrained solution
            coef[rows[:, None], idx] = bpp_gram(Gs, cs, F0)
    return coef


def nnls_shared(atoms, X, ridge=0.0):
    """Non-negative least squares of every row of ``X`` on the same atoms.

    Solves ``min_{a >= 0} ||x - a @ atoms||^2 + ridge ||a||^2`` for each row
    ``x`` of ``X``, e.g. the projection of embeddings onto one concept's cone
    (paper eq. 3) or of word embeddings onto a concept dictionary (sec. 3.7).

    Parameters
    ----------
    atoms : array-like of shape (k, d)
        Atoms, one per row.
    X : array-like of shape (n, d)
        Vectors to approximate, one per row (zero rows are allowed).
    ridge : float, default=0.0
        Non-negative ridge penalty on the coefficients.

    Returns
    -------
    coef : ndarray of shape (n, k)
        Non-negative coefficients; ``coef @ atoms`` is the approximation.
    """
    atoms = check_embeddings(atoms, name="atoms", allow_zero_rows=True)
    X = check_embeddings(X, n_features=atoms.shape[1], name="X", allow_zero_rows=True)
    if ridge < 0:
        raise ValueError(f"ridge must be >= 0; got {ridge}.")
    gram = atoms @ atoms.T + ridge * np.eye(atoms.shape[0])
    return nnls_gram(gram, X @ atoms.T)

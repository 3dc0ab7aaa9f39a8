"""Batched non-negative least squares (NNLS).

SLiCS solves thousands of small NNLS problems per epoch (paper eq. 5): one per
sample, restricted to the atoms of the sample's labelled concepts. Looping
over :func:`scipy.optimize.nnls` is far too slow, so this module solves them
together in *Gram form*::

    minimise_a  0.5 a^T G a - c^T a   subject to a >= 0,

with ``G = B_P B_P^T + ridge I`` and ``c = B_P x`` for the allowed atoms ``P``
(the same optimum as ``min ||x - a B_P||^2 + ridge ||a||^2``).

The solver is block principal pivoting (Kim & Park, SIAM J. Sci. Comput.
2011), one problem after another in a numba-compiled loop: every problem
keeps its own passive set and solves its passive system by a Cholesky
factorisation of the few atoms it may use (at most a few dozen). With warm
starts (the passive set of the previous epoch) it usually converges in 2-4
steps. Problems that do not converge within the step limit (never seen in
practice, but possible for degenerate data) or whose passive system is not
numerically positive definite are finished with :func:`scipy.optimize.nnls`,
so the result is always an optimum. The compiled loop releases the GIL
(``nogil``), so fits in several threads (app sessions) run in parallel, and
``n_jobs`` runs one problem's rows in blocks on several threads
(:mod:`slics_core._parallel`): every row is solved on its own, so the result
does not depend on ``n_jobs``.
"""
from __future__ import annotations

import numpy as np
from numba import njit
from scipy.linalg import cholesky, solve_triangular
from scipy.optimize import nnls as _scipy_nnls

from slics_core._parallel import rowwise
from slics_core._validation import check_embeddings


def _jitter(gram_diag):
    """Tiny diagonal loading that keeps every passive sub-system solvable."""
    scale = float(np.mean(gram_diag)) if gram_diag.size else 1.0
    return 1e-11 * (scale if scale > 0 else 1.0)


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def _solve_passive(G, idx, c, F, L, x, y):
    """Solve ``G[F,F] x_F = c_F`` (``G`` indexed through ``idx``) by Cholesky; ``x`` is zero off ``F``.

    Fills ``x`` and the gradient ``y = G x - c`` (zero on ``F``); ``L`` is
    scratch. Returns False if ``G[F,F]`` is not numerically positive definite.
    """
    k = idx.size
    p = np.empty(k, dtype=np.int64)
    m = 0
    for i in range(k):
        x[i] = 0.0
        if F[i]:
            p[m] = i
            m += 1
    # L L^T = G[F,F], then forward and back substitution into x[F]
    for r in range(m):
        gr = idx[p[r]]
        for q in range(r + 1):
            t = G[gr, idx[p[q]]]
            for j in range(q):
                t -= L[r, j] * L[q, j]
            if q == r:
                if not t > 0.0:
                    return False
                L[r, r] = np.sqrt(t)
            else:
                L[r, q] = t / L[q, q]
    z = np.empty(m)
    for r in range(m):
        t = c[p[r]]
        for j in range(r):
            t -= L[r, j] * z[j]
        z[r] = t / L[r, r]
    for r in range(m - 1, -1, -1):
        t = z[r]
        for j in range(r + 1, m):
            t -= L[j, r] * z[j]
        z[r] = t / L[r, r]
    for r in range(m):
        x[p[r]] = z[r]
    for i in range(k):
        if F[i]:
            y[i] = 0.0
            continue
        t = -c[i]
        gi = idx[i]
        for r in range(m):
            t += G[gi, idx[p[r]]] * z[r]
        y[i] = t
    return True


@njit(cache=True, nogil=True)
def _bpp_one(G, idx, c, F, x, max_steps):
    """Block principal pivoting for one problem ``min 0.5 x^T G_I x - c^T x, x >= 0`` (``G_I = G[idx, idx]``).

    ``F`` (the passive set, a warm start) and ``x`` are updated in place.
    Returns True when the optimality conditions hold (then ``x >= 0`` is
    the optimum), False if the step limit is reached or a passive system is
    not positive definite (the caller then finishes the problem with scipy).
    A variable is infeasible below ``-1e-12 max(1, max |c|)``.
    """
    k = idx.size
    tol = 1.0
    for i in range(k):
        tol = max(tol, abs(c[i]))
    tol *= 1e-12
    L = np.empty((k, k))
    y = np.empty(k)
    bad = np.empty(k, dtype=np.bool_)
    if not _solve_passive(G, idx, c, F, L, x, y):
        return False
    alpha = 3
    beta = k + 1
    for _ in range(max_steps):
        nv = 0
        last = -1
        for i in range(k):
            bad[i] = x[i] < -tol if F[i] else y[i] < -tol
            if bad[i]:
                nv += 1
                last = i
        if nv == 0:
            for i in range(k):
                x[i] = max(x[i], 0.0)
            return True
        if nv < beta or alpha >= 1:  # progress, or no progress but tries left: exchange all
            if nv < beta:
                beta = nv
                alpha = 3
            else:
                alpha -= 1
            for i in range(k):
                F[i] = F[i] != bad[i]
        else:  # backup rule: exchange only the last infeasible variable
            F[last] = not F[last]
        if not _solve_passive(G, idx, c, F, L, x, y):
            return False
    return False


#: Block-pivoting steps tried on a row allowed more atoms than the Gram matrix's rank before the exact fallback
#: takes it (measured: docs/performance.md, "Rank-deficient rows").
DEFICIENT_STEPS = 30


@njit(cache=True, nogil=True)
def _bpp_allowed(G, rhs, allowed, init, warm, rank):
    """:func:`_bpp_one` for every row ``i`` on its allowed atoms: ``G[P, P]``, ``rhs[i, P]``.

    The passive set starts at the support of ``init[i]`` (``warm``; all of ``P``
    when that support is empty). A row with more allowed atoms than ``rank`` (the
    rank of ``G`` without its jitter: the atoms' dimension, when there is no ridge)
    gets :data:`DEFICIENT_STEPS` steps, not ``5 k + 30``: its passive systems may be
    singular, where block principal pivoting is not guaranteed to end (measured:
    a third of such rows ran to the step limit), and the exact fallback takes the
    rows not solved by then. Returns the coefficients (n, M) and which rows were
    solved here.
    """
    n, M = rhs.shape
    coef = np.zeros((n, M))
    ok = np.ones(n, dtype=np.bool_)
    idx_all = np.empty(M, dtype=np.int64)
    c_all = np.empty(M)
    x_all = np.empty(M)
    F_all = np.empty(M, dtype=np.bool_)
    for i in range(n):
        k = 0
        for m in range(M):
            if allowed[i, m]:
                idx_all[k] = m
                k += 1
        if k == 0:
            continue
        idx = idx_all[:k]
        c = c_all[:k]
        x = x_all[:k]
        F = F_all[:k]
        support = False
        for q in range(k):
            c[q] = rhs[i, idx[q]]
            F[q] = warm and init[i, idx[q]] > 0.0
            support = support or F[q]
        if not support:  # no previous support: start from the unconstrained solution
            for q in range(k):
                F[q] = True
        ok[i] = _bpp_one(G, idx, c, F, x, 5 * k + 30 if k <= rank else DEFICIENT_STEPS)
        for q in range(k):
            coef[i, idx[q]] = x[q]
    return coef, ok


def _finish_with_scipy(G, c):
    """Exact NNLS of one Gram-form problem through scipy (fallback path)."""
    L = cholesky(G, lower=True)
    target = solve_triangular(L, c, lower=True)
    x, _ = _scipy_nnls(L.T, target, maxiter=50 * G.shape[0])
    return x


def nnls_gram(gram, rhs, allowed=None, init=None, n_jobs=None):
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
    n_jobs : int, optional
        Threads that solve blocks of rows (``None``: 1, ``-1``: every core); the result is the same.

    Returns
    -------
    coef : ndarray of shape (n, M)
        Non-negative coefficients, zero on disallowed atoms.
    """
    # C order throughout: the compiled solver is then compiled for one signature only
    rhs = np.ascontiguousarray(rhs, dtype=np.float64)
    n, M = rhs.shape
    G = solver_gram(gram, M)
    allowed = np.ones((n, M), dtype=bool) if allowed is None else np.ascontiguousarray(allowed, dtype=bool)
    init = None if init is None else np.ascontiguousarray(init, dtype=np.float64)
    return rowwise(lambda b: nnls_rows(G, rhs[b], allowed[b], None if init is None else init[b]), n, n_jobs)


def solver_gram(gram, M=None):
    """The Gram matrix :func:`nnls_rows` takes: ``gram`` in double precision, C order, with a tiny diagonal
    loading (``1e-11`` of its mean diagonal) that keeps every passive sub-system solvable."""
    gram = np.asarray(gram, dtype=np.float64)
    M = gram.shape[0] if M is None else M
    if gram.shape != (M, M):
        raise ValueError(f"gram must have shape ({M}, {M}); got {gram.shape}.")
    return np.ascontiguousarray(gram + _jitter(np.diag(gram)) * np.eye(M))


def gram_rank(atoms, ridge=0.0) -> int:
    """The rank bound of the Gram matrix ``B B^T + ridge I`` of ``atoms`` (M, d) that :func:`nnls_rows` takes:
    ``min(M, d)`` without a ridge, ``M`` with one (then every passive system is positive definite)."""
    M, d = np.shape(atoms)
    return int(M if ridge else min(M, d))


def nnls_rows(G, rhs, allowed, init=None, rank=None):
    """:func:`nnls_gram` on rows already checked: ``G`` from :func:`solver_gram`, ``rhs`` (n, M) float64,
    ``allowed`` (n, M) bool and ``init`` (n, M) float64 or None, all C-ordered; one thread, no copies.
    ``rank``: the rank of ``G`` without its jitter when it is known to be below ``M`` (``B B^T`` of ``M`` atoms
    in ``d < M`` dimensions, no ridge: ``d``); a row with more allowed atoms than that is solved by the exact
    fallback at once (:func:`_bpp_allowed`)."""
    rank = G.shape[0] if rank is None else int(rank)
    coef, ok = _bpp_allowed(G, rhs, allowed, rhs if init is None else init, init is not None, rank)
    if not ok.all():
        for i in np.flatnonzero(~ok):  # not converged: exact fallback on the row's allowed atoms
            P = np.flatnonzero(allowed[i])
            coef[i] = 0.0
            coef[i, P] = _finish_with_scipy(G[np.ix_(P, P)], rhs[i, P])
    return coef


def nnls_shared(atoms, X, ridge=0.0, n_jobs=None):
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
    n_jobs : int, optional
        Threads for the rows, as in :func:`nnls_gram`.

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
    return nnls_gram(gram, X @ atoms.T, n_jobs=n_jobs)

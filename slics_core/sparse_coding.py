"""Sparse coding with unknown support (sec. 3.2): non-negative OMP.

When the active concepts of a query are unknown, coefficients can be found
greedily: non-negative orthogonal matching pursuit adds, per step, the atom
most positively correlated with the residual, then refits the coefficients on
the selected atoms by NNLS. The samples are processed together, in blocks of
rows fixed by their number (:mod:`slics_core._parallel`) that ``n_jobs``
threads share, so the result does not depend on ``n_jobs``. (The paper's
group variant, which adds whole concepts, had no caller and was removed:
docs/choices.md.)
"""
from __future__ import annotations

import numpy as np
from threadpoolctl import threadpool_limits

from slics_core._parallel import map_row_blocks, row_blocks, threads_that_help
from slics_core._validation import check_embeddings
from slics_core.nnls import nnls_gram
from slics_core.rows import TIE_TOL


def _check(X, atoms):
    atoms = check_embeddings(atoms, name="atoms")
    X = check_embeddings(X, n_features=atoms.shape[1], allow_zero_rows=True)
    return X, atoms


def _greedy_pursuit(X, B, n_units, steps, scores, atoms_of, tol):
    """Shared loop of the pursuits: add the best-scoring unit, refit by NNLS, repeat.

    ``scores(rows, R, coef)`` gives an (n_rows, n_units) score of every unit
    (atom or concept) for the residuals ``R``; ``atoms_of(chosen)`` maps an
    (n_rows, n_units) selection to the allowed atoms.
    """
    n = X.shape[0]
    gram, C = B @ B.T, X @ B.T
    chosen = np.zeros((n, n_units), dtype=bool)
    coef = np.zeros((n, B.shape[0]))
    active = np.ones(n, dtype=bool)
    for _ in range(min(steps, n_units)):
        rows = np.flatnonzero(active)
        if rows.size == 0:
            break
        score = scores(rows, X[rows] - coef[rows] @ B, coef[rows])
        score[chosen[rows]] = -np.inf
        best = np.argmax(score, axis=1)
        grow = score[np.arange(rows.size), best] > TIE_TOL
        active[rows[~grow]] = False  # nothing left that helps: this sample is done
        rows, best = rows[grow], best[grow]
        if rows.size == 0:
            break
        chosen[rows, best] = True
        allowed = atoms_of(chosen[rows])
        coef[rows] = nnls_gram(gram, C[rows], allowed, init=allowed)
        if tol is not None:
            R = X[rows] - coef[rows] @ B
            active[rows[np.einsum("ij,ij->i", R, R) <= tol]] = False
    return coef


def nn_omp(X, atoms, n_nonzero_coefs=None, tol=None, n_jobs=None):
    """Non-negative orthogonal matching pursuit.

    Parameters
    ----------
    X : array-like of shape (n, d)
        Signals, one per row.
    atoms : array-like of shape (M, d)
        Dictionary, one atom per row.
    n_nonzero_coefs : int, optional
        Maximum number of selected atoms per sample. Default: ``min(M, d)``.
    tol : float, optional
        Stop a sample once its squared residual norm is at most ``tol``.
    n_jobs : int, optional
        Threads that run blocks of rows (``None``: 1, ``-1``: every core; each
        with one BLAS thread). The result does not depend on it.

    Returns
    -------
    coef : ndarray of shape (n, M)
        Non-negative coefficients. A sample stops early when no remaining
        atom has a positive correlation with its residual.
    """
    X, B = _check(X, atoms)
    steps = min(B.shape[0], X.shape[1]) if n_nonzero_coefs is None else int(n_nonzero_coefs)
    if steps < 1:
        raise ValueError(f"n_nonzero_coefs must be >= 1; got {n_nonzero_coefs}.")
    threads = threads_that_help(n_jobs, len(row_blocks(X.shape[0])))

    def block(rows):
        return _greedy_pursuit(X[rows], B, B.shape[0], steps, lambda r, R, coef: R @ B.T, lambda chosen: chosen, tol)

    if threads <= 1:
        parts = map_row_blocks(block, X.shape[0], 1)
    else:
        with threadpool_limits(limits=1, user_api="blas"):
            parts = map_row_blocks(block, X.shape[0], threads)
    return np.concatenate(parts) if parts else np.zeros((0, B.shape[0]))

"""Sparse coding with unknown support (sec. 3.2): non-negative OMP and group OMP.

When the active concepts of a query are unknown, coefficients can be found
greedily: non-negative orthogonal matching pursuit adds, per step, the atom
most positively correlated with the residual; group OMP adds the concept
whose cone captures the most residual energy. After every addition the
coefficients on the selected atoms are refitted by NNLS. All samples are
processed together.
"""
from __future__ import annotations

import numpy as np

from slics_core._validation import check_embeddings
from slics_core.nnls import nnls_gram, nnls_shared


def _check(X, atoms):
    atoms = check_embeddings(atoms, name="atoms")
    X = check_embeddings(X, n_features=atoms.shape[1], allow_zero_rows=True)
    return X, atoms


def nn_omp(X, atoms, n_nonzero_coefs=None, tol=None):
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

    Returns
    -------
    coef : ndarray of shape (n, M)
        Non-negative coefficients. A sample stops early when no remaining
        atom has a positive correlation with its residual.
    """
    X, B = _check(X, atoms)
    n, M = X.shape[0], B.shape[0]
    steps = min(M, X.shape[1]) if n_nonzero_coefs is None else int(n_nonzero_coefs)
    if steps < 1:
        raise ValueError(f"n_nonzero_coefs must be >= 1; got {n_nonzero_coefs}.")
    gram, C = B @ B.T, X @ B.T
    selected = np.zeros((n, M), dtype=bool)
    coef = np.zeros((n, M))
    active = np.ones(n, dtype=bool)
    for _ in range(min(steps, M)):
        rows = np.flatnonzero(active)
        if rows.size == 0:
            break
        corr = C[rows] - coef[rows] @ gram  # B r for r = x - coef B
        corr[selected[rows]] = -np.inf
        best = np.argmax(corr, axis=1)
        grow = corr[np.arange(rows.size), best] > 1e-12
        active[rows[~grow]] = False
        rows, best = rows[grow], best[grow]
        if rows.size == 0:
            break
        selected[rows, best] = True
        coef[rows] = nnls_gram(gram, C[rows], selected[rows], init=selected[rows])
        if tol is not None:
            R = X[rows] - coef[rows] @ B
            active[rows[np.einsum("ij,ij->i", R, R) <= tol]] = False
    return coef


def group_nn_omp(X, atoms, groups, n_groups=None, tol=None):
    """Group OMP over concept cones, with non-negative coefficients.

    Parameters
    ----------
    X : array-like of shape (n, d)
    atoms : array-like of shape (M, d)
    groups : array-like of int, shape (M,)
        Concept of each atom.
    n_groups : int, optional
        Maximum number of concepts per sample. Default: all.
    tol : float, optional
        Stop a sample once its squared residual norm is at most ``tol``.

    Returns
    -------
    coef : ndarray of shape (n, M)
        Non-negative coefficients, non-zero only on the selected concepts.
    """
    X, B = _check(X, atoms)
    groups = np.asarray(groups)
    if groups.shape != (B.shape[0],):
        raise ValueError(f"groups must have one entry per atom ({B.shape[0]}); got shape {groups.shape}.")
    labels = np.unique(groups)
    n = X.shape[0]
    steps = labels.size if n_groups is None else int(n_groups)
    if steps < 1:
        raise ValueError(f"n_groups must be >= 1; got {n_groups}.")
    gram, C = B @ B.T, X @ B.T
    chosen = np.zeros((n, labels.size), dtype=bool)
    coef = np.zeros((n, B.shape[0]))
    active = np.ones(n, dtype=bool)
    for _ in range(min(steps, labels.size)):
        rows = np.flatnonzero(active)
        if rows.size == 0:
            break
        R = X[rows] - coef[rows] @ B
        # Energy of the residual captured by each concept's cone: <r, proj(r)> = ||proj(r)||^2.
        energy = np.stack([np.einsum("ij,ij->i", nnls_shared(B[groups == g], R) @ B[groups == g], R)
                           for g in labels], axis=1)
        energy[chosen[rows]] = -np.inf
        best = np.argmax(energy, axis=1)
        grow = energy[np.arange(rows.size), best] > 1e-12
        active[rows[~grow]] = False
        rows, best = rows[grow], best[grow]
        if rows.size == 0:
            break
        chosen[rows, best] = True
        allowed = chosen[rows][:, np.searchsorted(labels, groups)]
        coef[rows] = nnls_gram(gram, C[rows], allowed, init=allowed)
        if tol is not None:
            R = X[rows] - coef[rows] @ B
            active[rows[np.einsum("ij,ij->i", R, R) <= tol]] = False
    return coef

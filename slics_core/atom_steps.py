"""The atom-level steps of Algorithm 1 (the compiled K-SVD loop is in :mod:`slics_core._kernels`).

* :func:`initial_atoms` - the supervised SVD start (Algorithm 1, lines 1-3): the S-SVD dictionary.
* :func:`update_each_atom` - the atom step (lines 7-13): every atom in turn, K-SVD or Appendix A.
* :func:`majority_sign` - the polarity of a rank-1 factor (sec. 3.3.1).
* :func:`bcd_atom_update` - the block-coordinate atom update of Appendix A (``update="bcd"``).
"""
from __future__ import annotations

import warnings

import numpy as np
from scipy.linalg import eigh
from scipy.linalg.blas import dsyrk
from sklearn.utils import check_random_state

from slics_core._kernels import ksvd_atoms, lowers_error, rank2_update, reseed
from slics_core._parallel import parallel_map
from slics_core.rows import RANK_RTOL, unit_rows

__all__ = ["initial_atoms", "update_each_atom", "majority_sign", "bcd_atom_update"]

#: Relative residual at which the Lanczos rank-1 SVD of an atom update stops:
#: ``||E^T u - sigma v|| <= tol * sigma`` (for the unit Ritz pair ``u, v``); see :mod:`slics_core.slics`.
_LANCZOS_TOL = 1e-9
#: Most Lanczos steps per rank-1 SVD (never reached in practice: 4-16 steps converge).
_LANCZOS_MAX_STEPS = 100


def majority_sign(beta):
    """The optimal polarity ``p*`` of a rank-1 factor (paper sec. 3.3.1).

    Returns ``+1`` if ``||max(0, beta)|| >= ||max(0, -beta)||`` and ``-1``
    otherwise. Thresholding ``p* beta`` at zero then gives the best
    non-negative coefficients of the two polarities.
    """
    beta = np.asarray(beta, dtype=np.float64)
    pos = np.square(np.maximum(beta, 0.0)).sum()
    neg = np.square(np.maximum(-beta, 0.0)).sum()
    return 1.0 if pos >= neg else -1.0


def bcd_atom_update(E, beta0, n_power_steps=0):
    """Block-coordinate atom update of Appendix A, with the modified power method.

    The atom is the normalised least-squares atom for the previous
    coefficients, ``b = E^T beta0 / ||E^T beta0||``; the coefficients are the
    thresholded least-squares coefficients ``(E b)_+`` (eq. 19). Each of the
    ``n_power_steps`` further steps repeats this from the new coefficients
    (eq. 21). Every step is a block-coordinate descent step, so the error
    never increases.

    Returns
    -------
    b : ndarray of shape (d,)
    beta : ndarray of shape (n_L,)
    """
    beta = beta0
    b = None
    for _ in range(n_power_steps + 1):
        g = E.T @ beta
        norm = np.linalg.norm(g)
        if norm == 0.0:
            break
        b = g / norm
        beta = np.maximum(E @ b, 0.0)
    return b, beta


def update_each_atom(R, At, B, allowed, full_batch, steps, *, update, monotone, n_power_steps):
    """The atom step of Algorithm 1 (lines 7-13) over atoms ``m = 1..M``, in place on ``R``, ``At``, ``B``.

    ``R`` is the batch residual ``X - A B`` (double precision), ``At`` the coefficients transposed
    ``(M, n)``, ``allowed`` ``(n, M)`` which atoms each sample may use and ``steps`` each atom's
    last Lanczos step count. Every atom is updated on the rows of ``R`` that may use it (its
    concept's samples), read through an index list; its samples ``L_m`` are those with a non-zero
    coefficient. ``full_batch``: an atom no sample uses is re-seeded (else it keeps its value). The
    K-SVD update (``update="ksvd"``) runs as one compiled loop
    (:func:`slics_core._kernels.ksvd_atoms`); the block-coordinate update of Appendix A in Python.
    The updates and their order are those of Algorithm 1, on the caller's thread alone: ``n_jobs``
    does not reach this step (docs/performance.md, "n_jobs").
    """
    if update == "ksvd":
        ksvd_atoms(R, At, B, np.ascontiguousarray(allowed.T), steps, _LANCZOS_TOL,
                   _LANCZOS_MAX_STEPS, bool(monotone), bool(full_batch))
        return
    for m in range(B.shape[0]):
        S = np.flatnonzero(allowed[:, m])
        if S.size:
            a = At[m, S]
            _bcd_atom(m, R, S, a, B, full_batch, monotone, n_power_steps)
            At[m, S] = a


def _bcd_atom(m, R, S, a, B, full_batch, monotone, n_power_steps):
    """Block-coordinate update (Appendix A) of atom ``m`` on the residual rows ``R[S]`` (in place)."""
    if not a.any():
        if full_batch:
            reseed(R, S, a, B, m)
        return
    # E = R[S] + a b_m^T on the samples L_m that use the atom is the residual without atom m (eq. 8)
    b_old = B[m].copy()
    L = np.flatnonzero(a)
    E = R[S[L]] + np.outer(a[L], b_old)
    b, beta_L = bcd_atom_update(E, a[L], n_power_steps)
    if b is None:
        return
    b /= np.sqrt(b @ b)
    if monotone and not lowers_error(beta_L @ beta_L, a[L] @ (E @ b_old), a[L] @ a[L]):
        return
    beta = np.zeros_like(a)
    beta[L] = beta_L
    # new residual R[S] + a b_old^T - beta b^T (a and beta are zero off L_m)
    rank2_update(R, S, a, b_old, beta, b)
    B[m] = b


def _top_directions(Xj, m_j):
    """The top ``min(m_j, n_j, d)`` right singular directions of ``Xj`` (columns of ``V``), their squared
    singular values and the numerical rank."""
    n_j, d = Xj.shape
    top = min(m_j, n_j, d)
    if n_j < d:  # eigenvectors of the small n_j x n_j Gram give the left singular vectors
        # dsyrk fills the upper triangle of Xj Xj^T at half the cost of a full product
        s2, U = eigh(dsyrk(1.0, Xj.T, trans=1), lower=False, subset_by_index=[n_j - top, n_j - 1])
        s2, U = s2[::-1], U[:, ::-1]
        V = Xj.T @ U / np.sqrt(np.maximum(s2, 1e-300))
    else:  # eigenvectors of the d x d Gram matrix are the right singular vectors
        s2, V = eigh(dsyrk(1.0, Xj.T, trans=0), lower=False, subset_by_index=[d - top, d - 1])
        s2, V = s2[::-1], V[:, ::-1]
    rank = int(np.sum(s2 > RANK_RTOL * max(s2[0], 1e-300)))
    take = min(m_j, rank)
    block = unit_rows(V[:, :take].T.copy())
    for i in range(take):
        block[i] *= majority_sign(Xj @ block[i])
    return block, rank


def initial_atoms(X, Y, n_atoms, random_state=None, n_jobs=None):
    """Supervised SVD initialisation (Algorithm 1, lines 1-3): the S-SVD dictionary.

    For each concept ``j``, the top ``M_j`` singular directions of the
    embeddings that have the concept, each with the majority sign of its
    right singular vector (so that most samples have positive coefficients).

    Parameters
    ----------
    X : ndarray of shape (n_samples, d)
    Y : ndarray of bool, shape (n_samples, S)
    n_atoms : sequence of int, length S
        ``M_j`` for each concept.
    random_state : int, RandomState or None
        Only used when a concept has fewer independent samples than ``M_j``:
        the missing atoms are random unit vectors (with a warning).
    n_jobs : int, optional
        Threads that share the concepts (``None``: 1); the result is the same.

    Returns
    -------
    atoms : ndarray of shape (M, d)
    groups : ndarray of int, shape (M,)
    """
    d = X.shape[1]
    blocks, groups = [], []
    # each concept on its own (threads may share them); the warnings and random atoms then in concept order
    tops = parallel_map(lambda j: _top_directions(X[Y[:, j]], n_atoms[j]), range(len(n_atoms)), n_jobs)
    for j, (m_j, (block, rank)) in enumerate(zip(n_atoms, tops)):
        take = block.shape[0]
        if take < m_j:
            warnings.warn(
                f"concept {j} has only {rank} independent sample direction(s) for {m_j} atoms; "
                f"the other {m_j - take} atom(s) start as random unit vectors.",
                RuntimeWarning,
                stacklevel=3,
            )
            rng = check_random_state(random_state)
            extra = rng.standard_normal((m_j - take, d))
            extra = unit_rows(extra)
            block = np.vstack([block, extra])
        blocks.append(block)
        groups.extend([j] * m_j)
    return np.vstack(blocks), np.asarray(groups, dtype=np.int64)

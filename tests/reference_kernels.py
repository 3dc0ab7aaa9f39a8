"""Plain-Python reference versions of compiled kernels, reached only by the tests.

:func:`top_singular_vector` and :func:`ksvd_atom_update` are one atom's
rank-1 update of Algorithm 1 written on an explicit residual matrix (the
library runs the compiled :func:`slics_core._kernels.ksvd_atoms` loop);
:func:`bpp_gram` solves a stack of NNLS problems, each with its own Gram
matrix, with the compiled block-principal-pivoting step of
:mod:`slics_core.nnls`. The tests compare them with scipy / LAPACK and the
compiled kernels with them.
"""
import numpy as np
from numba import njit

from slics_core._kernels import top_triplet
from slics_core.atom_steps import _LANCZOS_MAX_STEPS, majority_sign
from slics_core.nnls import _bpp_one, _finish_with_scipy


def top_singular_vector(E, v0=None, tol=1e-10, max_iter=_LANCZOS_MAX_STEPS):
    """Leading right singular vector of ``E`` (rows are samples).

    Parameters
    ----------
    E : array-like of shape (n, d)
        Residual matrix.
    v0 : ndarray of shape (d,), optional
        Warm start (e.g. the atom being updated). Default: the row of ``E``
        with the largest norm.
    tol, max_iter : float, int
        The Lanczos method on ``E^T E`` (:mod:`slics_core._kernels`) stops
        when the Ritz residual ``||E^T u - sigma v||`` is below
        ``tol * sigma`` or after ``max_iter`` steps.

    Returns
    -------
    v : ndarray of shape (d,)
        Unit vector ``v`` maximising ``||E v||`` (sign arbitrary).
    """
    E = np.ascontiguousarray(E, dtype=np.float64)
    if v0 is None or not np.any(v0):
        v0 = E[np.argmax(np.einsum("ij,ij->i", E, E))]
    v0 = np.asarray(v0, dtype=np.float64)
    norm = np.sqrt(v0 @ v0)
    if norm == 0.0:
        return np.zeros(E.shape[1])
    rows = np.arange(E.shape[0])
    v, _, _, _ = top_triplet(E, rows, np.zeros(rows.size), v0 / norm, False, float(tol), int(max_iter), 3)
    return v


def ksvd_atom_update(E, b0, tol=1e-10, max_iter=_LANCZOS_MAX_STEPS):
    """Rank-1 update of one atom with the optimal sign (Algorithm 1, inner loop).

    Parameters
    ----------
    E : ndarray of shape (n_L, d)
        Residual without the atom, on the samples ``L_m`` that use it.
    b0 : ndarray of shape (d,)
        The current atom (warm start for the rank-1 SVD).
    tol, max_iter : float, int
        Stopping rule of the Lanczos SVD (see :func:`top_singular_vector`).

    Returns
    -------
    b : ndarray of shape (d,)
        New unit atom ``p* u_1``.
    beta : ndarray of shape (n_L,)
        New coefficients ``max(0, p* beta~)`` with ``beta~ = E u_1``.
    """
    E = np.ascontiguousarray(E, dtype=np.float64)
    u = top_singular_vector(E, b0, tol=tol, max_iter=max_iter)
    beta = E @ u
    p = majority_sign(beta)
    return p * u, np.maximum(p * beta, 0.0)



@njit(cache=True, nogil=True)
def _bpp_stack(G, c, F, max_steps):
    """:func:`_bpp_one` for a stack of problems with their own Gram matrices ``G[r]``."""
    n, k = c.shape
    x = np.zeros((n, k))
    ok = np.empty(n, dtype=np.bool_)
    idx = np.arange(k)
    for r in range(n):
        ok[r] = _bpp_one(G[r], idx, c[r], F[r], x[r], max_steps)
    return x, ok



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
    G = np.ascontiguousarray(G, dtype=np.float64)
    c = np.ascontiguousarray(c, dtype=np.float64)
    n, k = c.shape
    if n == 0 or k == 0:
        return np.zeros((n, k))
    F = np.ones((n, k), dtype=bool) if passive is None else np.array(passive, dtype=bool, order="C")
    steps = 5 * k + 30 if max_steps is None else int(max_steps)
    x, ok = _bpp_stack(G, c, F, steps)
    for r in np.flatnonzero(~ok):  # not finished: exact fallback
        x[r] = _finish_with_scipy(G[r], c[r])
    return x

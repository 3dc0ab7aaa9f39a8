"""The one unit-row helper: scaling vectors to unit Euclidean norm with an explicit zero-row policy.

Embeddings, atoms, text embeddings and components are compared by direction
everywhere in the library; :func:`unit_rows` is the one place that turns them
into unit vectors. A row of zero norm has no direction, and the caller says
what that means for it: ``zero="raise"`` (the row is a failed encoding or a
bug: a one-line ``ValueError`` naming the rows) or ``zero="keep"`` (the row is
legitimately empty, e.g. an inactive concept's component or padding: it stays
all zero and scores 0 against everything). A zero row is one whose norm is at
most :data:`ZERO_NORM` unless the caller names another tolerance.

The library's numerical thresholds on such vectors live here too, each with its reason:
:data:`ZERO_NORM` (a vector with no direction), :data:`TIE_TOL` (two values equal up to
rounding) and :data:`RANK_RTOL` (a Gram eigenvalue that is rounding noise). The solvers below
this module (:mod:`slics_core.nnls`, :mod:`slics_core._kernels`) keep their own documented
tolerances.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from slics_core._validation import _first

__all__ = ["unit_rows", "ZERO_NORM", "TIE_TOL", "RANK_RTOL"]

#: A vector of embedding scale (unit embeddings, their concept components, atoms, text embeddings) whose
#: Euclidean norm is at most this has no direction: it is zero up to float64 rounding. Rounding leaves
#: about 1e-16 on unit-scale sums, while a component that is not zero (a query's projection on a concept's
#: cone, a centred embedding) is many orders larger; such a vector is skipped, scores 0 or is refused.
ZERO_NORM = 1e-12

#: Two values of order one (F1 scores, cosines of unit vectors) that differ by at most this are equal
#: up to float64 rounding: ties, duplicate directions (cosine ``>= 1 - TIE_TOL``), and a greedy pursuit's
#: gain that is no gain (at most ``TIE_TOL`` above zero).
TIE_TOL = 1e-12

#: An eigenvalue of a Gram matrix (a squared singular value) below this fraction of the largest is
#: rounding noise, not a direction of the data: singular values below 1e-6 of the largest do not count
#: towards the rank.
RANK_RTOL = 1e-12


def unit_rows(X: ArrayLike, *, zero: str = "raise", tol: float = ZERO_NORM, dtype: DTypeLike | None = None,
              name: str = "rows") -> np.ndarray:
    """Scale every vector along the last axis of ``X`` to unit Euclidean norm.

    Parameters
    ----------
    X : array-like of shape (..., d)
        One vector (``(d,)``), rows of a matrix (``(n, d)``) or tokens of a
        token array (``(n, t, d)``): the norm is taken over the last axis.
    zero : {"raise", "keep"}, default="raise"
        What a zero row (norm ``<= tol``) becomes: ``"raise"`` raises
        ``ValueError`` naming ``name`` and the first such rows; ``"keep"``
        returns it as all zeros.
    tol : float, default=ZERO_NORM
        Rows with a norm at most ``tol`` are zero rows: by default those that are
        zero up to float64 rounding (:data:`ZERO_NORM`); ``0`` counts only
        exactly zero rows. A caller with another scale passes its own.
    dtype : numpy dtype, optional
        Dtype of the computation and of the result (the input is cast first).
        Default: the input's floating dtype, float64 for integer input.
    name : str, default="rows"
        What the rows are, in the error message.

    Returns
    -------
    ndarray of the shape of ``X``
        A new array; every vector has norm 1 except kept zero rows (all zero).

    Raises
    ------
    ValueError
        ``zero="raise"`` and some row has norm ``<= tol``; or ``zero`` is not
        one of the two policies.
    """
    if zero not in ("raise", "keep"):
        raise ValueError(f"zero must be 'raise' or 'keep'; got {zero!r}.")
    X = np.asarray(X, dtype=dtype)
    if dtype is None and not np.issubdtype(X.dtype, np.floating):
        X = X.astype(np.float64)
    norms = np.linalg.norm(X, axis=-1, keepdims=True)
    empty = norms <= tol
    if zero == "raise" and empty.any():
        rows = np.flatnonzero(empty.reshape(-1))
        limit = "" if tol == 0 else f" (norm <= {tol:g})"
        what = f"{rows.size} row(s) are all zero{limit} (zero rows: {_first(rows)})" if X.ndim > 1 else \
            f"it is all zero{limit}"
        raise ValueError(f"{name}: {what}; a zero vector has no direction and cannot be unit-normalised.")
    return np.divide(X, norms, out=np.zeros_like(X), where=~empty)

"""Input checks at the library boundary.

Every public entry point of :mod:`slics_core` funnels its arrays through these
functions so that bad input fails early, with a message that names the problem
(not deep inside numpy or LAPACK).
"""
from __future__ import annotations

import numpy as np


def _first(indices, limit=5):
    shown = ", ".join(str(int(i)) for i in indices[:limit])
    return shown + (", ..." if len(indices) > limit else "")


def check_embeddings(X, *, n_features=None, name="X", allow_zero_rows=False, dtype=np.float64):
    """Validate an embedding matrix with one sample per row.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        Embeddings.
    n_features : int, optional
        Required number of columns (e.g. the dimension a model was fitted on).
    name : str
        Name used in error messages.
    allow_zero_rows : bool
        Whether rows that are all zero are accepted.
    dtype : numpy dtype
        Output dtype.

    Returns
    -------
    X : ndarray of shape (n_samples, n_features)
        A C-contiguous floating-point copy or view of the input.

    Raises
    ------
    ValueError
        If the input is not numeric, not 2-D, empty, contains NaN or infinite
        values, has rows that are all zero, or has the wrong number of columns.
    """
    try:
        arr = np.asarray(X, dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a numeric array of embeddings: {exc}") from None
    if arr.ndim == 1:
        raise ValueError(
            f"{name} must be 2-D with one embedding per row (n_samples, n_features); got a 1-D array "
            f"of length {arr.shape[0]}. Use X.reshape(1, -1) for a single embedding."
        )
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n_samples, n_features); got shape {arr.shape}.")
    if arr.shape[0] == 0:
        raise ValueError(f"{name} has no rows (no samples).")
    if arr.shape[1] == 0:
        raise ValueError(f"{name} has no columns (zero-dimensional embeddings).")
    if n_features is not None and arr.shape[1] != n_features:
        raise ValueError(
            f"{name} has {arr.shape[1]} features per row, but {n_features} are expected "
            "(embeddings from a different encoder or preprocessing?)."
        )
    finite = np.isfinite(arr)
    if not finite.all():
        bad = np.flatnonzero(~finite.all(axis=1))
        raise ValueError(
            f"{name} contains NaN or infinite values in {bad.size} row(s) (rows {_first(bad)})."
        )
    if not allow_zero_rows:
        zero = np.flatnonzero(~arr.any(axis=1))
        if zero.size:
            raise ValueError(
                f"{name} has {zero.size} row(s) that are all zero (rows {_first(zero)}); an all-zero "
                "embedding has no direction (failed encoding?). Remove these rows."
            )
    return np.ascontiguousarray(arr)


def check_labels(Y, n_samples, *, n_concepts=None, name="Y"):
    """Validate a binary multi-label matrix.

    Parameters
    ----------
    Y : array-like of shape (n_samples, n_concepts)
        Concept labels, 1 (or True) where the concept is present, else 0.
    n_samples : int
        Number of rows the labels must have.
    n_concepts : int, optional
        Required number of columns.
    name : str
        Name used in error messages.

    Returns
    -------
    Y : ndarray of bool, shape (n_samples, n_concepts)

    Raises
    ------
    ValueError
        If the shape is wrong or a value is not 0/1.
    """
    try:
        arr = np.asarray(Y)
        if arr.dtype == object:
            arr = arr.astype(np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a numeric 0/1 label matrix: {exc}") from None
    if arr.ndim == 1 and n_concepts == arr.shape[0] and n_samples == 1:
        arr = arr.reshape(1, -1)
    if arr.ndim != 2:
        raise ValueError(
            f"{name} must be 2-D (n_samples, n_concepts) with one 0/1 column per concept; got shape {arr.shape}."
        )
    if arr.shape[0] != n_samples:
        raise ValueError(f"{name} has {arr.shape[0]} rows but X has {n_samples}; they must match.")
    if n_concepts is not None and arr.shape[1] != n_concepts:
        raise ValueError(f"{name} has {arr.shape[1]} concept columns, but {n_concepts} are expected.")
    if arr.shape[1] == 0:
        raise ValueError(f"{name} has no concept columns.")
    if arr.dtype == bool:
        return np.ascontiguousarray(arr)
    if not np.issubdtype(arr.dtype, np.number):
        raise ValueError(f"{name} must contain 0/1 values; got dtype {arr.dtype}.")
    binary = (arr == 0) | (arr == 1)
    if not binary.all():
        bad = np.argwhere(~binary)[0]
        raise ValueError(
            f"{name} must be binary (0/1); found {arr[tuple(bad)]!r} at row {bad[0]}, column {bad[1]}."
        )
    return np.ascontiguousarray(arr == 1)


def check_concept(concept, n_concepts):
    """Validate a concept index and return it as int."""
    if isinstance(concept, (bool, np.bool_)) or not isinstance(concept, (int, np.integer)):
        raise ValueError(f"concept must be an integer index in [0, {n_concepts}); got {concept!r}.")
    if not 0 <= int(concept) < n_concepts:
        raise ValueError(f"concept {int(concept)} is out of range: this model has {n_concepts} concepts (0..{n_concepts - 1}).")
    return int(concept)

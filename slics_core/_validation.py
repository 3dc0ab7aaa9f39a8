"""Input checks at the library boundary.

Every public entry point of :mod:`slics_core` funnels its arrays through these
functions so that bad input fails early, with a message that names the problem
(not deep inside numpy or LAPACK).
"""
from __future__ import annotations

import sys
from numbers import Integral, Real

import numpy as np

#: The one scikit-learn estimator check that cannot apply to the embedding estimators (SLiCS,
#: EmbeddingNormalizer), with its reason: ``check_estimator(est, expected_failed_checks=...)``.
SKLEARN_EXPECTED_FAILED_CHECKS = {
    "check_estimators_dtypes": "its integer X (3 * uniform, truncated) has an all-zero row, and an all-zero "
                               "embedding has no direction (a failed encoding), which every embedding "
                               "estimator here refuses by design; the dtypes themselves (float32, int32, "
                               "int64) are tested on data without such rows in tests/test_sklearn_conventions.py",
}


def _first(indices, limit=5):
    shown = ", ".join(str(int(i)) for i in indices[:limit])
    return shown + (", ..." if len(indices) > limit else "")


#: Component modes, ``tilde-v_j`` (eq. 3, "partial") or ``v_j`` (eq. 2, "full"): defined here, at the bottom of the
#: library, so that every layer can check a mode; callers import them from :mod:`slics_core.methods`.
MODES = ("partial", "full")


def check_mode(mode) -> str:
    """``mode`` if it is one of :data:`MODES`, else a one-line ``ValueError`` naming it."""
    if not isinstance(mode, str) or mode not in MODES:
        raise ValueError(f"component mode must be one of {MODES} (partial: tilde-v_j, the projection on the "
                         f"concept's cone; full: v_j, the joint decomposition over the active concepts); "
                         f"got {mode!r}.")
    return mode


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
        If the input is sparse, complex, not numeric, not 2-D, empty, contains
        NaN or infinite values or values so large that sums of their squares
        overflow, has rows that are all zero, or has the wrong number of
        columns.
    """
    check_dense(X, name)
    try:
        arr = np.asarray(X)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a numeric array of embeddings: {exc}") from None
    if np.iscomplexobj(arr):
        raise ValueError(f"{name} has complex values: embeddings must be real numbers "
                         "(Complex data not supported; pass the real part if that is what you mean).")
    try:
        arr = arr.astype(dtype, copy=False)
    except (TypeError, ValueError) as exc:  # same type: TypeError for objects that are not numbers
        raise type(exc)(f"{name} must be a numeric array of embeddings: {exc}") from None
    if arr.ndim == 1:
        raise ValueError(
            f"{name} must be 2-D with one embedding per row (n_samples, n_features); got a 1-D array "
            f"of length {arr.shape[0]}. Reshape your data: X.reshape(1, -1) for a single embedding."
        )
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n_samples, n_features); got shape {arr.shape}.")
    if arr.shape[0] == 0:
        raise ValueError(f"{name} has no rows (no samples).")
    if arr.shape[1] == 0:
        raise ValueError(f"{name} has 0 feature(s) (shape={arr.shape}) while a minimum of 1 is required "
                         "(zero-dimensional embeddings).")
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
    limit = _largest_value(arr.size)
    largest = max(float(arr.max()), -float(arr.min()))
    if largest > limit:
        raise ValueError(
            f"{name} has values as large as {largest:.3g}: sums of their squares overflow double precision "
            f"(above about {limit:.3g} for {arr.size} values); normalise the embeddings (e.g. scale each row "
            "to unit length) and run again."
        )
    if not allow_zero_rows:
        zero = np.flatnonzero(~arr.any(axis=1))
        if zero.size:
            raise ValueError(
                f"{name} has {zero.size} row(s) that are all zero (rows {_first(zero)}); an all-zero "
                "embedding has no direction (failed encoding?). Remove these rows."
            )
    return np.ascontiguousarray(arr)


def _largest_value(size) -> float:
    """Largest magnitude whose square, summed over ``size`` values, stays finite in double precision."""
    return float(np.sqrt(np.finfo(np.float64).max / max(int(size), 1)))


def validate_embeddings(estimator, X, *, reset, allow_zero_rows=False):
    """:func:`check_embeddings` for a scikit-learn estimator's ``fit`` (``reset=True``) or later methods.

    Also records (``reset=True``) or compares the column names (``feature_names_in_``, for a
    DataFrame) and the width (``n_features_in_``) as scikit-learn's ``validate_data`` does, with
    its messages.
    """
    from sklearn.utils.validation import (
        validate_data,  # scikit-learn only where an estimator is used
    )

    arr = check_embeddings(X, allow_zero_rows=allow_zero_rows)
    validate_data(estimator, X, reset=reset, skip_check_array=True)
    return arr


def check_dense(X, name="X"):
    """Refuse a SciPy sparse matrix or array with a one-line message (embeddings are dense)."""
    sparse = sys.modules.get("scipy.sparse")  # a sparse input means SciPy's sparse module is loaded
    if sparse is not None and sparse.issparse(X):
        raise ValueError(f"{name} is a sparse {type(X).__name__}; SLiCS takes dense embeddings only "
                         f"(convert it with {name}.toarray() if it fits in memory).")


def check_targets(y, n_samples, *, classes=None, name="Y"):
    """Concept labels from multi-label ``Y`` (2-D, 0/1) or class labels ``y`` (1-D, one concept per sample).

    Parameters
    ----------
    y : array-like of shape (n_samples, n_concepts) or (n_samples,)
        A 0/1 matrix, or one class label per sample (ints, strings...): each distinct label is then a
        concept and a sample has exactly the concept of its label, as scikit-learn's multi-label tools
        read class labels.
    n_samples : int
    classes : ndarray, optional
        The classes of a model fitted on class labels; 1-D ``y`` must use only these (in this order).

    Returns
    -------
    Y : ndarray of bool, shape (n_samples, n_concepts)
    classes : ndarray or None
        The sorted distinct labels of 1-D ``y`` (the concepts, in column order); None for a 2-D ``y``.
    """
    if y is None:
        raise ValueError(f"this model requires y to be passed, but the target y is None: give {name} as "
                         "concept labels (n_samples, n_concepts) of 0/1, or one class label per sample.")
    check_dense(y, name)
    arr = np.asarray(y)
    if arr.ndim != 1:
        return check_labels(arr, n_samples, name=name), None
    if np.iscomplexobj(arr):
        raise ValueError(f"{name} has complex values (Complex data not supported); labels must be real or strings.")
    if arr.shape[0] != n_samples:
        raise ValueError(f"{name} has {arr.shape[0]} labels but X has {n_samples} rows; they must match.")
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise ValueError(f"{name} contains NaN or infinite class labels.")
    if classes is None:
        classes, codes = np.unique(arr, return_inverse=True)
    else:
        codes = np.searchsorted(classes, arr)
        codes = np.minimum(codes, len(classes) - 1)
        unknown = classes[codes] != arr
        if unknown.any():
            raise ValueError(f"{name} has class label {arr[unknown][0]!r}, which the model was not fitted on "
                             f"(its classes: {list(classes)[:10]}).")
    Y = np.zeros((n_samples, len(classes)), dtype=bool)
    Y[np.arange(n_samples), codes.reshape(-1)] = True
    return Y, classes


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
        raise ValueError(f"concept {int(concept)} is out of range: "
                         f"this model has {n_concepts} concepts (0..{n_concepts - 1}).")
    return int(concept)


def check_k(k, name="k"):
    """A positive count (``k`` ranks retrieved / scored, words per caption, batch sizes...) as an int;
    ValueError naming ``name`` unless it is a positive integer."""
    if not is_int(k) or k < 1:
        raise ValueError(f"{name} must be a positive integer; got {k!r}.")
    return int(k)


#: JSON value types in words (one, several), for messages about fields read from files.
_TYPE_WORDS = {str: ("a string", "strings"), int: ("a whole number", "whole numbers"), float: ("a number", "numbers"),
               bool: ("true or false", "true/false values"), dict: ("an object", "objects"), list: ("a list", "lists"),
               type(None): ("null", "nulls")}


def type_phrase(t, *, plural=False) -> str:
    """``t`` (a type) in words: ``int`` -> ``"a whole number"``, ``dict`` -> ``"an object"``; with
    ``plural``, ``str`` -> ``"strings"``. Another class: its name after "a" or "an" (plural: with an "s")."""
    if t in _TYPE_WORDS:
        return _TYPE_WORDS[t][bool(plural)]
    name = t.__name__
    return f"{name}s" if plural else f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def is_int(x) -> bool:
    """Whether ``x`` is an integer (Python or numpy), not a bool."""
    return isinstance(x, (Integral, np.integer)) and not isinstance(x, (bool, np.bool_))


def is_number(x) -> bool:
    """Whether ``x`` is a real number (Python or numpy), not a bool."""
    return isinstance(x, (Real, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_))

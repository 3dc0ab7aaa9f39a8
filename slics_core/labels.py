"""The label bundle of a collection: :class:`Labels`, one frozen value checked once.

A collection's labels are five things that only make sense together: general labels ``Y`` (items ×
concepts, 0/1), the concept names, optional sub-labels ``Z`` (items × sub-labels, 0/1), the sub-label
names and ``sub_to_concept`` (the concept of each sub-label). Every container of a collection
(:class:`slics_core.datasets.ImageDataset`, :class:`slics_core.data.LabelledEmbeddings`,
:class:`slics_core.data.EvalData`, :class:`slics_core.explorer.workspace.Workspace`) carries one
:class:`Labels`, handed on from one to the next, never copied field by field.

The rules, checked at construction and nowhere else (one line naming the culprit):

* ``Y`` is 2-D with 0/1 values, one column per concept name; ``Z`` (when given) 0/1 with as many
  rows as ``Y`` and one column per sub-label name;
* names are strings, unique among concepts and among sub-labels;
* ``Z``, its names and ``sub_to_concept`` come together; ``sub_to_concept`` names an existing
  concept for every sub-label (:func:`check_sub_to_concept`);
* an item with a sub-label has that sub-label's concept.

The arrays are held read-only (copied in when writeable), so a bundle handed on cannot change under
its holders.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from slics_core._validation import check_labels

__all__ = ["Labels", "CarriesLabels", "check_sub_to_concept", "ARRAY_KINDS"]

#: The arrays of a bundle as files store them, with their allowed dtype kinds.
ARRAY_KINDS = {"Y": "biu", "Z": "biu", "sub_to_concept": "iu"}


def _frozen(a: np.ndarray) -> np.ndarray:
    """``a`` read-only (a copy when it was writeable)."""
    if a.flags.writeable:
        a = a.copy()
        a.flags.writeable = False
    return a


def _matrix(M, name: str) -> np.ndarray:
    """A 2-D 0/1 matrix as bool (``check_labels``'s rule; zero columns allowed: no labels)."""
    try:
        arr = np.asarray(M)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"labels {name} must be a 0/1 matrix: {exc}") from None
    if arr.ndim != 2:
        raise ValueError(f"labels {name} must be 2-D (items × columns, 0/1); got shape {arr.shape}.")
    if arr.shape[1] == 0:
        return np.zeros(arr.shape, dtype=bool)
    return check_labels(arr, arr.shape[0], name=name)


def _names(names, what: str, n_columns: int, matrix: str) -> tuple:
    if names is None:
        names = ()
    if isinstance(names, (str, bytes)):
        raise ValueError(f"{what} names must be a list of strings, not the single string {names!r}.")
    names = list(names)
    bad = next((i for i, s in enumerate(names) if not isinstance(s, str)), None)
    if bad is not None:
        raise ValueError(f"{what} name {bad} is {names[bad]!r}, not a string; give every {what} a text name.")
    if len(names) != n_columns:
        raise ValueError(f"{len(names)} {what} names for {n_columns} columns of {matrix}; give one name per column.")
    first = {}
    for i, s in enumerate(names):
        if s in first:
            raise ValueError(f"{what} name {s!r} appears twice (columns {first[s]} and {i}); names must be unique.")
        first[s] = i
    return tuple(str(s) for s in names)


def check_sub_to_concept(sub_to_concept, n_concepts: int, n_sub: int | None = None) -> np.ndarray:
    """``sub_to_concept`` as a 1-D int array, checked: whole numbers, one per sub-label (``n_sub``,
    when given), each a concept column in ``[0, n_concepts)``.

    The one rule for a sub-label's concept (:class:`Labels` and the metrics' loose arrays use it).

    Raises
    ------
    ValueError
        One line naming the first bad entry.
    """
    arr = np.asarray(sub_to_concept)
    if arr.dtype == bool or arr.dtype.kind not in "iuf":
        raise ValueError(f"sub_to_concept must hold concept columns (whole numbers); got dtype {arr.dtype}.")
    arr = arr.reshape(-1)
    if arr.dtype.kind == "f" and not np.all(np.isfinite(arr) & (arr == np.round(arr))):
        raise ValueError("sub_to_concept must hold concept columns (whole numbers); got fractions.")
    arr = arr.astype(np.int64)
    if n_sub is not None and arr.size != n_sub:
        raise ValueError(f"sub_to_concept has {arr.size} entries for {n_sub} sub-label columns; "
                         "give one concept per sub-label.")
    out = np.flatnonzero((arr < 0) | (arr >= n_concepts))
    if out.size:
        raise ValueError(f"sub_to_concept maps sub-label column {int(out[0])} to concept {int(arr[out[0]])}, "
                         f"outside 0..{n_concepts - 1}; every sub-label needs an existing concept.")
    return arr


@dataclass(frozen=True, eq=False)
class Labels:
    """A collection's labels, checked once (see the module docstring).

    Parameters
    ----------
    Y : array-like of shape (n, S), 0/1
        General labels (``S`` may be 0: an unlabelled collection).
    concept_names : sequence of str, length S
    Z : array-like of shape (n, L), 0/1, optional
        Sub-labels.
    sub_names : sequence of str, length L
    sub_to_concept : array-like of int, shape (L,)
        The concept column of each sub-label (needed with ``Z``).

    Attributes
    ----------
    Y : ndarray of bool, read-only
    concept_names : tuple of str
    Z : ndarray of bool, read-only, or None
    sub_names : tuple of str
    sub_to_concept : ndarray of int64, read-only, or None

    Raises
    ------
    ValueError
        Any rule broken (one line naming the culprit).
    """

    Y: np.ndarray
    concept_names: tuple
    Z: np.ndarray | None = None
    sub_names: tuple = ()
    sub_to_concept: np.ndarray | None = None

    def __post_init__(self):
        Y = _matrix(self.Y, "Y")
        concepts = _names(self.concept_names, "concept", Y.shape[1], "Y")
        Z, s2c, subs = self.Z, self.sub_to_concept, self.sub_names
        if Z is None:
            if s2c is not None or (subs is not None and len(subs)):
                raise ValueError("sub_to_concept or sub-label names given without sub-labels Z; give all three "
                                 "or none.")
            subs = ()
        else:
            Z = _matrix(Z, "Z")
            if Z.shape[0] != Y.shape[0]:
                raise ValueError(f"sub-labels Z have {Z.shape[0]} rows but Y has {Y.shape[0]}; they must match.")
            if s2c is None:
                raise ValueError("sub-labels Z need sub_to_concept (the concept of every sub-label column).")
            subs = _names(subs, "sub-label", Z.shape[1], "Z")
            s2c = check_sub_to_concept(s2c, len(concepts), Z.shape[1])
            missing = Z & ~Y[:, s2c]
            if missing.any():
                i, k = (int(v) for v in np.argwhere(missing)[0])
                raise ValueError(f"item {i} has sub-label {subs[k]!r} but not its concept "
                                 f"{concepts[s2c[k]]!r}; an item with a sub-label must have that concept.")
            Z, s2c = _frozen(Z), _frozen(s2c)
        for name, value in (("Y", _frozen(Y)), ("concept_names", concepts), ("Z", Z), ("sub_names", subs),
                            ("sub_to_concept", s2c)):
            object.__setattr__(self, name, value)

    # ------------------------------------------------------------------ sizes
    @property
    def n(self) -> int:
        """Number of items."""
        return int(self.Y.shape[0])

    @property
    def n_concepts(self) -> int:
        return int(self.Y.shape[1])

    @property
    def n_sub(self) -> int:
        """Number of sub-labels (0 without ``Z``)."""
        return 0 if self.Z is None else int(self.Z.shape[1])

    def __len__(self) -> int:
        return self.n

    def __eq__(self, other) -> bool:
        if not isinstance(other, Labels):
            return NotImplemented

        def same(a, b):
            return a is b or (a is not None and b is not None and np.array_equal(a, b))

        return (self.concept_names == other.concept_names and self.sub_names == other.sub_names
                and same(self.Y, other.Y) and same(self.Z, other.Z)
                and same(self.sub_to_concept, other.sub_to_concept))

    __hash__ = None

    def __repr__(self) -> str:
        return (f"Labels(n={self.n}, concepts={list(self.concept_names)!r}, "
                f"sub_labels={self.n_sub})")

    # ------------------------------------------------------------------ derived bundles
    def take(self, rows) -> Labels:
        """The labels of items ``rows`` (bool mask or row numbers), in that order."""
        rows = np.asarray(rows)
        rows = np.flatnonzero(rows) if rows.dtype == bool else rows.astype(np.int64).reshape(-1)
        return Labels(self.Y[rows], self.concept_names, None if self.Z is None else self.Z[rows], self.sub_names,
                      self.sub_to_concept)

    def keep_concepts(self, keep) -> Labels:
        """The labels of concept columns ``keep`` (in that order) and of their sub-labels only; ``Z`` is
        None when no sub-label is left."""
        keep = [int(j) for j in np.asarray(keep).reshape(-1)]
        new_column = {j: i for i, j in enumerate(keep)}
        Y, names = self.Y[:, keep], [self.concept_names[j] for j in keep]
        if self.Z is None:
            return Labels(Y, names)
        ks = [k for k, c in enumerate(self.sub_to_concept) if int(c) in new_column]
        if not ks:
            return Labels(Y, names)
        return Labels(Y, names, self.Z[:, ks], [self.sub_names[k] for k in ks],
                      [new_column[int(self.sub_to_concept[k])] for k in ks])

    # ------------------------------------------------------------------ reading
    def names_of(self, i: int) -> dict:
        """Concept and sub-label names of item ``i`` (``sub_labels`` only when there are sub-labels)."""
        out = {"concepts": [self.concept_names[j] for j in np.flatnonzero(self.Y[i])]}
        if self.Z is not None:
            out["sub_labels"] = [self.sub_names[k] for k in np.flatnonzero(self.Z[i])]
        return out

    # ------------------------------------------------------------------ files
    def to_arrays(self) -> dict:
        """The bundle as arrays (an embedding cache's ``labels.npz``: 0/1 as uint8, names as text)."""
        out = {"Y": self.Y.astype(np.uint8), "concept_names": np.array(self.concept_names, dtype=str)}
        if self.Z is not None:
            out.update(Z=self.Z.astype(np.uint8), sub_names=np.array(self.sub_names, dtype=str),
                       sub_to_concept=self.sub_to_concept.astype(np.int64))
        return out

    @classmethod
    def from_arrays(cls, arrays) -> Labels:
        """The bundle of :meth:`to_arrays`'s mapping (names may be text arrays; ``Z`` and its fields optional)."""
        return cls(arrays["Y"], [str(s) for s in arrays["concept_names"]], arrays.get("Z"),
                   [str(s) for s in arrays.get("sub_names", [])], arrays.get("sub_to_concept"))


class CarriesLabels:
    """Base of the containers that carry a :class:`Labels` as ``labels``: its fields, read-only.

    ``concept_names`` and ``sub_names`` are given as lists (new each time), the arrays as they are held
    (read-only).
    """

    __slots__ = ()
    labels: Labels

    @property
    def Y(self) -> np.ndarray:
        return self.labels.Y

    @property
    def concept_names(self) -> list:
        return list(self.labels.concept_names)

    @property
    def Z(self) -> np.ndarray | None:
        return self.labels.Z

    @property
    def sub_names(self) -> list:
        return list(self.labels.sub_names)

    @property
    def sub_to_concept(self) -> np.ndarray | None:
        return self.labels.sub_to_concept

    def _check_labels(self, n_items: int, what: str) -> None:
        """TypeError unless ``labels`` is a :class:`Labels`; ValueError unless it has ``n_items`` rows."""
        if not isinstance(self.labels, Labels):
            raise TypeError(f"labels must be a slics_core.labels.Labels, not {type(self.labels).__name__}")
        if self.labels.n != n_items:
            raise ValueError(f"{self.labels.n} label rows for {n_items} {what}; they must match.")

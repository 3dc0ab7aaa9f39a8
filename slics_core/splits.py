"""The train / validation / query / pool split of every tool (sec. 4.1 of the paper).

:func:`make_split` drops unlabelled items and draws seeded disjoint training, validation and query
sets; the rest is the candidate pool. :func:`split_sizes` gives the default sizes.

Choices (the paper is silent): default split sizes are the paper's validation (500) and query (1000)
sizes, clamped to a tenth and a fifth of the labelled items for small collections, and a training set
of 60 % of what is left; at least 20 labelled items are needed.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from slics_core._validation import check_labels

__all__ = ["Split", "split_sizes", "make_split"]


@dataclass
class Split:
    """Disjoint index sets into the original arrays.

    Attributes
    ----------
    train, val, query, pool : ndarray of int
    dropped : ndarray of int
        Items without any label (removed before splitting).
    seed : int or None
    """

    train: np.ndarray
    val: np.ndarray
    query: np.ndarray
    pool: np.ndarray
    dropped: np.ndarray
    seed: int | None = None

    def sizes(self):
        return {k: int(getattr(self, k).size) for k in ("train", "val", "query", "pool", "dropped")}


def split_sizes(n_labelled, n_train=None, n_val=None, n_query=None):
    """Split sizes for ``n_labelled`` items: given sizes as they are, defaults (None) as in the module docstring.

    Returns
    -------
    (n_train, n_val, n_query) : tuple of int
    """
    n_labelled = int(n_labelled)
    n_val = min(500, n_labelled // 10) if n_val is None else int(n_val)
    n_query = min(1000, n_labelled // 5) if n_query is None else int(n_query)
    if n_train is None:
        n_train = int(0.6 * (n_labelled - n_val - n_query))
    return int(n_train), n_val, n_query


def make_split(Y, n_train=None, n_val=None, n_query=None, seed=0) -> Split:
    """Split a labelled collection as in the paper (sec. 4.1): the split of every tool.

    Items with no positive label are dropped; the others are shuffled with
    ``seed`` and cut into ``n_train`` training, ``n_val`` validation
    and ``n_query`` query items; every remaining item is a retrieval
    candidate.

    Parameters
    ----------
    Y : array-like of shape (n, S)
        Binary concept labels.
    n_train, n_val, n_query : int, optional
        Set sizes (e.g. 2000 / 500 / 1000 for MIRFlickr25K, 20000 / 500 / 1000
        for COCO); None: :func:`split_sizes`'s defaults.
    seed : int or None

    Returns
    -------
    Split
    """
    Y = np.asarray(Y)
    if Y.ndim != 2:
        raise ValueError(f"Y must be 2-D (n, S); got shape {Y.shape}.")
    Y = check_labels(Y, Y.shape[0])
    labelled = np.flatnonzero(Y.any(axis=1))
    dropped = np.flatnonzero(~Y.any(axis=1))
    if labelled.size < 20:
        raise ValueError(f"only {labelled.size} labelled items; SLiCS needs at least 20 (training, validation, "
                         "query and pool items)")
    for name, v in (("n_train", n_train), ("n_val", n_val), ("n_query", n_query)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0):
            raise ValueError(f"{name} must be a non-negative int; got {v!r}.")
    n_train, n_val, n_query = split_sizes(labelled.size, n_train, n_val, n_query)
    need = n_train + n_val + n_query
    if labelled.size <= need:
        raise ValueError(
            f"{labelled.size} labelled items are not enough for {n_train} training + {n_val} validation + "
            f"{n_query} query items and a non-empty candidate pool; use smaller sets."
        )
    perm = np.random.default_rng(seed).permutation(labelled)
    a, b, c = n_train, n_train + n_val, need
    return Split(np.sort(perm[:a]), np.sort(perm[a:b]), np.sort(perm[b:c]), np.sort(perm[c:]),
                 dropped, seed)

"""The search-index family's common ground: what every index over a pool is, its shared helpers, and the one rule
that chooses an index's kind.

:class:`Index`
    The protocol every index follows (:mod:`slics_core.retrieval`'s ``ExactIndex``, ``FaissIndex``,
    ``FaissIVFIndex``, ``StreamingIndex``, ``QuantizedPool``; :mod:`slics_core.ondisk_index`'s ``OnDiskIndex``):
    ``n_pool`` and ``dim``, ``backend`` (its name), ``exact`` (whether its results are those of exact search, so
    its recall is 1.0 by construction) and ``search(queries, k) -> (positions, scores)``: cosine on unit rows,
    best first, ties to the smaller position.
:func:`check_queries`, :func:`unit_f32`, :func:`prepared_rows`, :func:`best_first`, :func:`merge_top`
    The query check, the float32 unit rows an index holds and compares (through :func:`slics_core.rows.unit_rows`,
    a zero row kept at zero: it has no direction and scores 0), a pool's raw rows made into those, and the
    ordering and merging of per-row candidate lists.
:func:`index_kind`
    The kind of index a pool gets, chosen here only (by :func:`slics_core.retrieval.build_index`'s ``"auto"`` and
    by :func:`slics_core.explorer.workspace.open_pool_index`, which the workspace builder uses too): an in-memory
    pool is searched exactly (numpy, or FAISS's flat index from :data:`FAISS_MIN_POOL` rows); a pool of shards is
    searched exactly, streamed block by block, below :data:`EXACT_MAX_ROWS` rows, and through the on-disk IVF-PQ
    index from there. The measurements behind both thresholds are in docs/scale.md ("Exact or IVF-PQ").
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from slics_core.rows import unit_rows

__all__ = [
    "Index",
    "FAISS_MIN_POOL",
    "EXACT_MAX_ROWS",
    "RECALL_FLOOR",
    "KINDS",
    "index_kind",
    "check_queries",
    "unit_f32",
    "prepared_rows",
    "best_first",
    "merge_top",
]

#: Rows of an in-memory pool from which ``"auto"`` searches it with FAISS's flat (still exact) index instead of
#: numpy: on the 2-core development machine numpy was faster for a 100 000 x 512 pool and a dozen query vectors
#: (``benchmarks/bench_retrieval.py``), hence the high threshold.
FAISS_MIN_POOL = 1_000_000

#: Rows of a sharded pool from which it gets the on-disk IVF-PQ index; below, exact streamed search (recall 1.0).
#: Measured (docs/scale.md, "Exact or IVF-PQ"; ``benchmarks/bench_index_kind.py``: 512-d float16 shards, the
#: index's defaults, one search of 12 query vectors, the shared 2-core machine): IVF-PQ's recall@20 against exact
#: search is 0.56 at 5 000 rows, 0.89 at 20 000 (too few rows to train its code books), 0.955 at 50 000 and 1.0
#: at 100 000 and 300 000, its search 0.05-0.14 CPU-s throughout; exact streamed search costs 0.08 CPU-s at
#: 5 000 rows, 0.19 at 20 000, 0.73 at 50 000 and grows with the rows (1.2 at 100 000). This is the smallest
#: measured size at which the index's recall clears :data:`RECALL_FLOOR`.
EXACT_MAX_ROWS = 50_000

#: The recall@k against exact search below which an approximate index's recall is reported with how to raise it.
RECALL_FLOOR = 0.95

#: The kinds :func:`index_kind` returns: ``"exact"`` (numpy over rows in memory, or streamed over shards),
#: ``"faiss"`` (FAISS's exact flat index, in memory) and ``"ondisk"`` (the approximate on-disk IVF-PQ index).
KINDS = ("exact", "faiss", "ondisk")


@runtime_checkable
class Index(Protocol):
    """A search index over a pool (see the module docstring)."""

    n_pool: int
    dim: int
    backend: str
    exact: bool

    def search(self, queries, k):
        """``(positions, scores)``, both ``(n_queries, min(k, n_pool))``: int64 positions, float32 cosines, best
        first, ties to the smaller position."""


def index_kind(n_rows, *, sharded=False, faiss_min_pool=None, exact_max_rows=None) -> str:
    """The kind of index a pool of ``n_rows`` gets: the one rule (see the module docstring).

    Parameters
    ----------
    n_rows : int
    sharded : bool
        The pool is shards read through memory maps (True) or rows in memory (False).
    faiss_min_pool, exact_max_rows : int, optional
        The thresholds; default :data:`FAISS_MIN_POOL` and :data:`EXACT_MAX_ROWS`.

    Returns
    -------
    {"exact", "faiss", "ondisk"}
        In memory: ``"faiss"`` from ``faiss_min_pool`` rows, else ``"exact"``. Sharded: ``"ondisk"`` from
        ``exact_max_rows`` rows, else ``"exact"`` (streamed).
    """
    n_rows = int(n_rows)
    if n_rows < 0:
        raise ValueError(f"n_rows must be >= 0; got {n_rows}.")
    if sharded:
        limit = EXACT_MAX_ROWS if exact_max_rows is None else int(exact_max_rows)
        return "ondisk" if n_rows >= limit else "exact"
    limit = FAISS_MIN_POOL if faiss_min_pool is None else int(faiss_min_pool)
    return "faiss" if n_rows >= limit else "exact"


def check_queries(queries, dim) -> np.ndarray:
    """``queries`` as a float32 ``(n_queries, dim)`` array (one vector becomes one row).

    Raises
    ------
    ValueError
        Another width or rank, or a NaN or infinite value.
    """
    Q = np.asarray(queries, dtype=np.float32)
    if Q.ndim == 1:
        Q = Q.reshape(1, -1)
    if Q.ndim != 2 or Q.shape[1] != dim:
        raise ValueError(f"queries must have shape (n_queries, {dim}); got {Q.shape}.")
    if not np.isfinite(Q).all():
        raise ValueError("queries contain NaN or infinite values.")
    return Q


def unit_f32(X) -> np.ndarray:
    """Float32 unit rows; a zero row (e.g. a zero component) stays zero and scores 0 against everything."""
    return unit_rows(np.asarray(X, dtype=np.float32), zero="keep", dtype=np.float32)


def prepared_rows(raw, transform=None) -> np.ndarray:
    """A pool's raw rows as the unit rows an index compares: float32, ``transform`` (e.g. a workspace's
    preprocessing, ``Workspace.preprocess``) applied first when given, then :func:`unit_f32`."""
    X = np.asarray(raw, dtype=np.float32)
    return unit_f32(X if transform is None else transform(X))


def best_first(idx, val, k=None):
    """Each row's candidates ordered by decreasing value, ties to the smaller index, cut to ``k`` (all if None).

    Returns
    -------
    idx : ndarray of int64, val : ndarray (the dtype of ``val``)
    """
    idx, val = np.asarray(idx), np.asarray(val)
    order = np.lexsort((idx, -val), axis=1)
    if k is not None:
        order = order[:, :k]
    return np.take_along_axis(idx, order, axis=1).astype(np.int64), np.take_along_axis(val, order, axis=1)


def merge_top(idx_a, val_a, idx_b, val_b, k):
    """The ``k`` best of two per-row candidate lists (largest value first, ties to the smaller index)."""
    return best_first(np.concatenate([idx_a, idx_b], axis=1), np.concatenate([val_a, val_b], axis=1), k)

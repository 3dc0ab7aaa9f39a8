"""The pool a workspace searches, and what a search of it returns: the one place that knows its coordinate systems.

A workspace's candidate pool is one of three kinds, each a :class:`Pool`:

* ``"memory"``: rows of the workspace's ``X`` (``index["pool"]`` of an ordinary workspace), with their labels;
  searched through :meth:`Workspace.pool_index` (:func:`slics_core.explorer.workspace.open_pool_index`);
* ``"shards"``: a sharded workspace's clip-retrieval shards on disk (positions in shard order, not rows of ``X``;
  no labels), searched through the same opener (exact streamed search, or the on-disk IVF-PQ index);
* ``"quantized"``: the memory pool's rows, each token replaced by its nearest codeword (TiTok, sec. 4.4.1;
  :mod:`slics_core.explorer.quantized`), searched through look-up tables; labels as the memory pool's.

:meth:`Pool.search` returns :class:`Hits`: positions in the pool, cosines, ids, the hits' label rows (``labels``,
``sub_labels``; None for a pool without labels), workspace rows (``rows``; None where hits are not rows of ``X``,
so they cannot be made the query) and each hit's thumbnail. A page asks ``hits.labels is None`` (no relevance
borders, no P@k) instead of which kind the pool is.

The labelled pool every label-based score ranks (Evaluate: mAP@k, the d0 sweep, stability) is
:func:`labelled_pool`: the workspace's own pool when it is rows of ``X``; for a sharded workspace a memory pool over
:func:`labelled_rows` (the labelled cache's own candidate rows), whose index is built once, kept on the pool.

Workspaces keep their pools (``ws.pool``, ``ws.eval_pool``, ``ws.quantized_pool``): opened once per instance.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from slics_core.explorer.quantized import has_quantized_pool, quantized_pool_index
from slics_core.retrieval import ExactIndex, build_index

__all__ = ["POOL_KINDS", "Hits", "Pool", "memory_pool", "workspace_pool", "quantized_pool", "labelled_pool",
           "labelled_rows", "cache_candidates"]

#: The kinds of pool (see the module docstring).
POOL_KINDS = ("memory", "shards", "quantized")


@dataclass(frozen=True, eq=False)
class Hits:
    """One ranked list of pool items, best first (what :meth:`Pool.search` returns per query); compared by identity
    (its fields are arrays).

    Attributes
    ----------
    positions : ndarray of int, shape (k,)
        Positions in the pool (rows of the pool's index).
    scores : ndarray of shape (k,)
        Cosine of each hit with the query.
    rows : ndarray of int, shape (k,), or None
        Workspace rows of the hits (rows of ``X``: a hit can be made the query); None for a pool that is not rows
        of ``X`` (shards).
    labels : ndarray of bool, shape (k, S), or None
        The hits' general labels (``Y`` rows); None when the pool carries no labels.
    sub_labels : ndarray of bool, shape (k, L), or None
        The hits' sub-labels (``Z`` rows); None without labels or sub-labels.
    pool : Pool
        The pool searched (ids and thumbnails are read from it).
    """

    positions: np.ndarray
    scores: np.ndarray
    rows: np.ndarray | None
    labels: np.ndarray | None
    sub_labels: np.ndarray | None
    pool: Pool = field(repr=False, compare=False)

    def __len__(self) -> int:
        return int(len(self.positions))

    @functools.cached_property
    def ids(self) -> list:
        """The hits' item ids (str): the workspace's ids of their rows (the row number when it has none), or a
        shard row's id from its metadata. Read once, when first asked for."""
        return [self.pool.id_of(int(p)) for p in self.positions]

    def thumbnail(self, i: int, size: int = 128):
        """The ``i``-th hit's thumbnail fitted in a ``size`` square: a PIL image (a grey tile with an X when the file
        is unreadable), or a checked http(s) URL (str) for a remote shard thumbnail the viewer's browser loads
        (:meth:`Workspace.thumbnail`, :meth:`Workspace.pool_thumbnail`)."""
        return self.pool.thumbnail(int(self.positions[int(i)]), size)


class Pool:
    """A candidate pool: its kind, size, index and what its positions are (see the module docstring).

    Build one with :func:`memory_pool`, :func:`workspace_pool`, :func:`quantized_pool` or :func:`labelled_pool`.

    Parameters
    ----------
    kind : {"memory", "shards", "quantized"}
    n : int
        Items in the pool.
    index : search index or callable
        The pool's index (``n_pool``, ``search(Q, k) -> (positions, scores)``), or a callable returning it (asked at
        each search: the workspace keeps the opened index, and drops it after a new one is built), or a callable
        with ``kept=True`` (built at the first search, then kept on the pool).
    rows : array-like of int, optional
        Workspace row of each position; None when positions are not rows of ``X``.
    Y, Z : array-like of bool, optional
        Labels by workspace row (needs ``rows``); None for a pool without labels.
    ids : sequence of str, optional
        Item ids by workspace row (default: the row number).
    id_of : callable, optional
        ``id_of(position) -> str`` for a pool without ``rows``.
    thumbnail : callable, optional
        ``thumbnail(row_or_position, size)``: by workspace row when the pool has ``rows``, else by position.
    """

    def __init__(self, kind, n, index, *, rows=None, Y=None, Z=None, ids=None, id_of=None, thumbnail=None,
                 kept=False):
        if kind not in POOL_KINDS:
            raise ValueError(f"pool kind must be one of {POOL_KINDS}; got {kind!r}")
        if (Y is not None or Z is not None) and rows is None:
            raise ValueError("a pool's labels are by workspace row: give rows= with Y=")
        self.kind, self.n = kind, int(n)
        self.rows = None if rows is None else np.asarray(rows, dtype=np.int64).ravel()
        if self.rows is not None and self.rows.size != self.n:
            raise ValueError(f"a pool of {self.n} items got {self.rows.size} rows")
        self._Y = None if Y is None else np.asarray(Y, dtype=bool)
        self._Z = None if Z is None else np.asarray(Z, dtype=bool)
        self._ids, self._id_of, self._thumbnail = ids, id_of, thumbnail
        self._index, self._kept = index, bool(kept)

    def __repr__(self) -> str:
        return f"Pool(kind={self.kind!r}, n={self.n}, labelled={self.labelled})"

    @property
    def labelled(self) -> bool:
        """Whether the pool's items carry labels (relevance borders and P@k can be shown)."""
        return self._Y is not None

    @property
    def index(self):
        """The pool's search index (opened or built on first use)."""
        if not callable(self._index) or hasattr(self._index, "search"):
            return self._index
        if not self._kept:
            return self._index()
        self._index = self._index()
        return self._index

    # ------------------------------------------------------------------ searching
    def search(self, Q, k: int):
        """The top-``k`` items by cosine with each query, best first.

        Parameters
        ----------
        Q : array-like of shape (d,) or (m, d)
            Non-zero query vectors.
        k : int
            Hits per query (clipped to the pool's size).

        Returns
        -------
        Hits, or list of Hits
            One :class:`Hits` for a 1-D ``Q``; a list, one per row, for a 2-D ``Q``.
        """
        Q = np.asarray(Q, dtype=np.float32)
        if Q.ndim not in (1, 2):
            raise ValueError(f"queries must be (d,) or (m, d); got shape {Q.shape}")
        if self.n == 0:
            raise ValueError("the pool is empty")
        index = self.index
        if index.n_pool != self.n:
            raise ValueError(f"the index holds {index.n_pool} items but the pool has {self.n}")
        pos, sc = index.search(np.atleast_2d(Q), int(k))
        hits = [self.hits(p, s) for p, s in zip(pos, sc)]
        return hits[0] if Q.ndim == 1 else hits

    def hits(self, positions, scores) -> Hits:
        """:class:`Hits` of given pool positions (best first) and their scores: a search's, or another ranking's
        (the Atoms page's top items by an atom's coefficient)."""
        pos = np.asarray(positions, dtype=np.int64).ravel()
        sc = np.asarray(scores).ravel()
        if pos.shape != sc.shape:
            raise ValueError(f"{pos.size} positions for {sc.size} scores")
        if pos.size and (pos.min() < 0 or pos.max() >= self.n):
            raise IndexError(f"pool positions must be in 0..{self.n - 1}")
        rows = None if self.rows is None else self.rows[pos]
        labels = None if self._Y is None else self._Y[rows]
        sub = None if self._Z is None or self._Y is None else self._Z[rows]
        return Hits(pos, sc, rows, labels, sub, self)

    def empty(self) -> Hits:
        """:class:`Hits` with no item (a gallery with nothing to show)."""
        return self.hits(np.zeros(0, np.int64), np.zeros(0))

    # ------------------------------------------------------------------ items
    def id_of(self, position: int) -> str:
        """The id of the item at ``position`` (see :attr:`Hits.ids`)."""
        if self.rows is None:
            if self._id_of is None:
                return str(int(position))
            return str(self._id_of(int(position)))
        row = int(self.rows[int(position)])
        return str(self._ids[row]) if self._ids else str(row)

    def thumbnail(self, position: int, size: int = 128):
        """The thumbnail of the item at ``position`` (see :meth:`Hits.thumbnail`)."""
        if self._thumbnail is None:
            raise ValueError(f"this {self.kind} pool has no images")
        key = int(position) if self.rows is None else int(self.rows[int(position)])
        return self._thumbnail(key, int(size))


# ---------------------------------------------------------------------- making pools
def memory_pool(X, rows, *, Y=None, Z=None, ids=None, thumbnail=None, index=None, kind="memory") -> Pool:
    """A pool of rows of ``X``: ``index`` (an index over ``X[rows]``, or a callable opening it) or, by default,
    exact search over ``X[rows]`` built at the first search and kept."""
    rows = np.asarray(rows, dtype=np.int64).ravel()
    if index is None:
        X_ = X
        index, kept = (lambda: ExactIndex(np.asarray(X_)[rows])), True
    else:
        kept = False
    return Pool(kind, rows.size, index, rows=rows, Y=Y, Z=Z, ids=ids, thumbnail=thumbnail, kept=kept)


def workspace_pool(ws) -> Pool:
    """``ws``'s own pool: its shards (kind ``"shards"``, no labels) when it has them, else its rows
    ``index["pool"]`` (``"memory"``, with labels); searched through :meth:`Workspace.pool_index`."""
    if ws.pool_shards is not None:
        return Pool("shards", ws.n_pool, ws.pool_index, id_of=lambda p: ws.pool_item(p)["id"],
                    thumbnail=ws.pool_thumbnail)
    return memory_pool(ws.X, ws.index["pool"], Y=ws.Y, Z=ws.Z, ids=ws.ids, thumbnail=ws.thumbnail,
                       index=ws.pool_index)


def quantized_pool(ws) -> Pool | None:
    """``ws``'s pool searched quantized (kind ``"quantized"``:
    :func:`~slics_core.explorer.quantized.quantized_pool_index`, built at the first search and kept), or None when it
    has none (no token codebook, or a sharded pool)."""
    if ws.pool_shards is not None or not has_quantized_pool(ws):
        return None
    rows = np.asarray(ws.index["pool"], dtype=np.int64)
    return Pool("quantized", rows.size, lambda: quantized_pool_index(ws), rows=rows, Y=ws.Y, Z=ws.Z, ids=ws.ids,
                thumbnail=ws.thumbnail, kept=True)


def cache_candidates(ws) -> np.ndarray:
    """The labelled rows of ``ws.X`` in none of train, val and query."""
    used = np.zeros(len(ws), dtype=bool)
    for name in ("train", "val", "query"):
        used[np.asarray(ws.index.get(name, []), dtype=int)] = True
    return np.flatnonzero(~used & np.asarray(ws.Y).any(axis=1))


def labelled_rows(ws) -> np.ndarray:
    """Rows of ``ws.X`` that every label-based score ranks (mAP@k, Recall@k, the d0 sweep, stability): the one
    place that chooses them.

    An ordinary workspace: its pool, ``index["pool"]``. A sharded workspace, whose pool is shards without labels:
    the labelled cache's own candidate rows, i.e. the labelled rows of ``X`` in none of train, val and query
    (the rows :func:`slics_core.splits.make_split` made the pool, which the build's d0 sweep ranked); when there
    are none (a split given by hand that uses every row), the training rows, which are never queries.
    """
    if ws.pool_shards is None:
        return np.asarray(ws.index.get("pool", []), dtype=int)
    rest = cache_candidates(ws)
    return rest if rest.size else np.asarray(ws.index.get("train", []), dtype=int)


def labelled_pool(ws) -> Pool:
    """The labelled pool of ``ws``'s scores (Evaluate): ``ws.pool`` itself when it is rows of ``X`` (one index for
    every page); for a sharded workspace a memory pool over :func:`labelled_rows`, with its own index
    (``build_index(X[rows], "auto")``, built at the first search and kept)."""
    if ws.pool_shards is None:
        return ws.pool
    rows = labelled_rows(ws)
    return Pool("memory", rows.size, lambda: build_index(ws.X[rows], "auto"), rows=rows, Y=ws.Y, Z=ws.Z,
                ids=ws.ids, thumbnail=ws.thumbnail, kept=True)

"""Concept-filtered and unfiltered retrieval (sec. 3.5 and 4.4 of the paper).

A query embedding ``x`` is disentangled with a fitted :class:`slics_core.SLiCS`
model; candidate images of a pool are ranked by the cosine similarity between
their embedding and one concept component of the query:

* ``mode="partial"`` (default): ``tilde-v_j``, the nearest point of concept
  ``j``'s cone to ``x`` (eq. 3, :meth:`SLiCS.project`);
* ``mode="full"``: ``v_j = B_j a_j`` from the full disentanglement with the
  query's active concepts (:meth:`SLiCS.components`).

Both are computed by :func:`slics_core.methods.components_of`, the one home of the modes.

The unfiltered baseline (UF) ranks by the whole query embedding.

Search back-ends
----------------
``"exact"``
    numpy matrix product + :func:`numpy.argpartition`; the default.
``"faiss"``
    a ``faiss.IndexFlatIP`` over the unit-normalised pool. This is still an
    exact (brute-force) search -- it returns the same top-k as ``"exact"`` up
    to float32 ties -- but uses FAISS's multi-threaded kernels and a heap
    instead of a full partition, which pays off on large pools.
``"ivf"``
    an approximate search: a FAISS inverted-file index (``IndexIVFFlat``,
    inner product on unit vectors; k-means lists) that scans only the
    ``nprobe`` lists nearest to each query (:class:`FaissIVFIndex`). For
    pools of a million items and more; its recall@k against the exact search
    is what ``benchmarks/bench_retrieval.py --million`` prints. Never chosen
    by ``"auto"``.
``StreamingIndex``
    exact search over a pool read block by block (a sharded workspace's memory-mapped shards,
    :mod:`slics_core.shards`): each block's top-k merged into the running top-k (:func:`merge_top`),
    memory bounded by one block; not a ``build_index`` backend (a sharded workspace opens it:
    :func:`slics_core.explorer.workspace.open_pool_index`).
``"ondisk"``
    an approximate search whose inverted lists stay on disk (FAISS IVF-PQ, exact
    re-ranking of the best candidates from the pool's shards), for pools larger
    than memory: :mod:`slics_core.ondisk_index` (docs/scale.md). Never chosen by
    ``"auto"``.
``"auto"``
    the kind :func:`slics_core.search_index.index_kind` chooses for rows in memory:
    ``"faiss"`` from ``faiss_min_pool`` rows (default :data:`FAISS_MIN_POOL`), else ``"exact"``.

Every index here follows :class:`slics_core.search_index.Index` (``n_pool``, ``dim``,
``backend``, ``exact``, ``search``) and uses that module's query check, unit rows and merge.

Quantized pools (sec. 4.4.1)
----------------------------
:class:`QuantizedPool` stores each candidate as one codebook index per token
(product quantization with a shared codebook, as for TiTok). Scores are
computed from per-query look-up tables ``G^j[t, k] = <v_j^t, c_k>`` and are
equal to the cosine against the de-quantized candidate vectors.
:meth:`QuantizedPool.search` is the look-up-table search of the paper (the pool
is held as ``n_pool x n_tokens`` indices); :meth:`QuantizedPool.float_index`
gives an :class:`ExactIndex` over the de-quantized pool, with the same cosines,
for scoring thousands of query vectors at once (evaluation), where one BLAS
product beats ``n_tokens`` gathers per query vector in numpy.

Conventions: rows are samples; a query component that is exactly zero (the
query has no positive projection on a concept's cone) has no direction, and
all its scores are defined as 0 (the ranking then falls back to pool order).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from slics_core._validation import check_embeddings, check_k
from slics_core.extras import require
from slics_core.methods import check_mode, components_of
from slics_core.ondisk_index import build_ondisk_index
from slics_core.search_index import (
    FAISS_MIN_POOL,
    best_first,
    check_queries,
    index_kind,
    merge_top,
    prepared_rows,
    unit_f32,
)

__all__ = [
    "FAISS_MIN_POOL",
    "top_k",
    "ExactIndex",
    "FaissIndex",
    "FaissIVFIndex",
    "StreamingIndex",
    "merge_top",
    "build_index",
    "RetrievalResult",
    "ConceptRetriever",
    "token_count",
    "quantize_tokens",
    "QuantizedPool",
]

# maximum number of float32 scores materialised at once by the exact search
_SCORE_BLOCK = 16_000_000


def top_k(scores, k):
    """Indices and values of the ``k`` largest entries of every row.

    Ties are broken by the smaller column index, so the result is
    deterministic.

    Parameters
    ----------
    scores : ndarray of shape (n_queries, n_pool)
    k : int
        Number of results; clipped to ``n_pool``.

    Returns
    -------
    indices : ndarray of int64, shape (n_queries, k)
        Sorted by decreasing score.
    values : ndarray of shape (n_queries, k)
    """
    scores = np.asarray(scores)
    if scores.ndim != 2:
        raise ValueError(f"scores must be 2-D (n_queries, n_pool); got shape {scores.shape}.")
    n_pool = scores.shape[1]
    k = int(min(check_k(k), n_pool))
    if k < n_pool:
        part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        # include every column tied with the k-th value so that the
        # tie-break below is by index, independent of argpartition's choice
        kth = np.take_along_axis(scores, part, axis=1).min(axis=1, keepdims=True)
        tied_rows = np.flatnonzero(np.count_nonzero(scores >= kth, axis=1) > k)
        for i in tied_rows:
            cand = np.flatnonzero(scores[i] >= kth[i])
            part[i] = cand[np.lexsort((cand, -scores[i, cand]))[:k]]
    else:
        part = np.broadcast_to(np.arange(n_pool), scores.shape)
    vals = np.take_along_axis(scores, part, axis=1)
    order = np.lexsort((part, -vals), axis=1)
    idx = np.take_along_axis(part, order, axis=1).astype(np.int64)
    return idx, np.take_along_axis(vals, order, axis=1)


class ExactIndex:
    """Exact cosine search with numpy.

    Parameters
    ----------
    pool : array-like of shape (n_pool, d)
        Candidate embeddings (any norm; they are unit-normalised here).
    """

    backend = "exact"
    exact = True

    def __init__(self, pool):
        pool = check_embeddings(pool, name="pool", dtype=np.float32)
        self.vectors = unit_f32(pool)
        self.n_pool, self.dim = self.vectors.shape

    def scores(self, queries):
        """Cosine similarity of every query with every pool vector, (q, n_pool)."""
        Q = unit_f32(check_queries(queries, self.dim))
        return Q @ self.vectors.T

    def search(self, queries, k):
        """Top-``k`` pool indices and cosines for every query row.

        Returns
        -------
        indices : ndarray of int64, shape (n_queries, k)
        scores : ndarray of float32, shape (n_queries, k)
        """
        k = min(check_k(k), self.n_pool)
        Q = unit_f32(check_queries(queries, self.dim))
        block = max(1, _SCORE_BLOCK // max(self.n_pool, 1))
        out_i = np.empty((Q.shape[0], k), dtype=np.int64)
        out_s = np.empty((Q.shape[0], k), dtype=np.float32)
        for start in range(0, Q.shape[0], block):
            s = Q[start:start + block] @ self.vectors.T
            out_i[start:start + block], out_s[start:start + block] = top_k(s, k)
        return out_i, out_s


class FaissIndex:
    """Exact cosine search with a ``faiss.IndexFlatIP`` on unit-normalised vectors.

    Parameters
    ----------
    pool : array-like of shape (n_pool, d)
    """

    backend = "faiss"
    exact = True

    def __init__(self, pool):
        faiss = require("faiss", "the 'faiss' search back-end")

        pool = check_embeddings(pool, name="pool", dtype=np.float32)
        vectors = np.ascontiguousarray(unit_f32(pool))
        self.n_pool, self.dim = vectors.shape
        self.index = faiss.IndexFlatIP(self.dim)
        self.index.add(vectors)

    def search(self, queries, k):
        """Top-``k`` pool indices and cosines for every query row (see :meth:`ExactIndex.search`)."""
        k = min(check_k(k), self.n_pool)
        Q = np.ascontiguousarray(unit_f32(check_queries(queries, self.dim)))
        scores, idx = self.index.search(Q, k)
        return best_first(idx, scores)  # FAISS does not order exact ties by index: re-sort for determinism


class FaissIVFIndex:
    """Approximate cosine search with a FAISS ``IndexIVFFlat`` over unit-normalised vectors.

    The pool is cut into ``nlist`` k-means cells (trained on a sample); a query
    scans the ``nprobe`` cells whose centroids are nearest to it. With
    ``nprobe == nlist`` the search is exact.

    Parameters
    ----------
    pool : array-like of shape (n_pool, d)
    nlist : int, optional
        Cells; default ``min(1024, max(1, round(sqrt(n_pool))))``.
    nprobe : int, optional
        Cells scanned per query; default ``min(nlist, max(8, nlist // 32))`` (32 of 1024 cells).
    train_size : int, optional
        Rows used to train the k-means (a seeded sample); default ``min(n_pool, 64 * nlist)``.
    random_state : int
        Seed of the sample and of the k-means.
    """

    backend = "ivf"
    exact = False

    def __init__(self, pool, *, nlist=None, nprobe=None, train_size=None, random_state=0):
        faiss = require("faiss", "the 'ivf' search back-end")

        pool = check_embeddings(pool, name="pool", dtype=np.float32)
        vectors = np.ascontiguousarray(unit_f32(pool))
        self.n_pool, self.dim = vectors.shape
        self.nlist = int(nlist) if nlist is not None else int(min(1024, max(1, round(np.sqrt(self.n_pool)))))
        if self.nlist < 1 or self.nlist > self.n_pool:
            raise ValueError(f"nlist must be in [1, {self.n_pool}] (the pool size); got {nlist!r}.")
        self.nprobe = int(nprobe) if nprobe is not None else min(self.nlist, max(8, self.nlist // 32))
        if not 1 <= self.nprobe <= self.nlist:
            raise ValueError(f"nprobe must be in [1, nlist={self.nlist}]; got {nprobe!r}.")
        n_train = int(min(self.n_pool, train_size or 64 * self.nlist))
        rng = np.random.default_rng(random_state)
        sample = vectors[np.sort(rng.choice(self.n_pool, size=n_train, replace=False))]
        self._quantizer = faiss.IndexFlatIP(self.dim)
        self.index = faiss.IndexIVFFlat(self._quantizer, self.dim, self.nlist, faiss.METRIC_INNER_PRODUCT)
        self.index.cp.niter = 10
        self.index.cp.seed = int(random_state)
        self.index.cp.max_points_per_centroid = max(64, -(-n_train // self.nlist))
        self.index.train(sample)
        self.index.add(vectors)
        self.index.nprobe = self.nprobe

    def search(self, queries, k):
        """Approximate top-``k`` pool indices and cosines for every query row (see :meth:`ExactIndex.search`).

        A query whose scanned cells hold fewer than ``k`` items is searched again over
        every cell, so every row has ``k`` real results.
        """
        k = min(check_k(k), self.n_pool)
        Q = np.ascontiguousarray(unit_f32(check_queries(queries, self.dim)))
        scores, idx = self.index.search(Q, k)
        short = np.flatnonzero((idx < 0).any(axis=1))
        if short.size:  # a query whose cells hold fewer than k items: scan every cell for it
            self.index.nprobe = self.nlist
            try:
                scores[short], idx[short] = self.index.search(Q[short], k)
            finally:
                self.index.nprobe = self.nprobe
        return best_first(idx, scores)


class StreamingIndex:
    """Exact cosine search over memory-mapped shards, one block at a time (bounded memory).

    Parameters
    ----------
    shards : slics_core.shards.PoolShards
        Anything with ``len()``, ``dim`` and ``blocks(block_rows)`` yielding ``(start, raw rows)``.
    transform : callable, optional
        Raw rows -> the workspace's preprocessed rows (``Workspace.preprocess``); default identity.
    block_rows : int
    """

    backend = "shards-exact"
    exact = True

    def __init__(self, shards, transform=None, *, block_rows: int = 16_384):
        self.shards = shards
        self.transform = transform
        self.block_rows = int(block_rows)
        self.n_pool, self.dim = len(shards), shards.dim

    def search(self, queries, k):
        """Top-``k`` positions and cosines for every query row (:meth:`slics_core.retrieval.ExactIndex.search`).

        Returns
        -------
        positions : ndarray of int64, shape (n_queries, k)
            Global positions in shard order, best first (ties to the smaller position).
        scores : ndarray of float32, shape (n_queries, k)
        """
        k = min(check_k(k), self.n_pool)
        Q = unit_f32(check_queries(queries, self.dim))
        best_i = np.empty((Q.shape[0], 0), dtype=np.int64)
        best_s = np.empty((Q.shape[0], 0), dtype=np.float32)
        for start, raw in self.shards.blocks(self.block_rows):
            s = Q @ prepared_rows(raw, self.transform).T
            i, v = top_k(s, min(k, s.shape[1]))
            best_i, best_s = merge_top(best_i, best_s, i + start, v.astype(np.float32), k)
        return best_i, best_s


def build_index(pool, backend="auto", *, faiss_min_pool=None, folder=None):
    """Build a search index over ``pool``.

    Parameters
    ----------
    pool : array-like of shape (n_pool, d), or a sequence of such shards (``"ondisk"`` only)
    backend : {"auto", "exact", "faiss", "ivf", "ondisk"}
        ``"ivf"`` is approximate (:class:`FaissIVFIndex` with its defaults); ``"ondisk"`` is the
        IVF-PQ index of :func:`slics_core.ondisk_index.build_ondisk_index`, written to ``folder``.
    faiss_min_pool : int, optional
        Pool size from which ``"auto"`` uses FAISS (default :data:`FAISS_MIN_POOL`).
    folder : path-like, optional
        Where ``"ondisk"`` writes its files (required for it).

    Returns
    -------
    index : ExactIndex, FaissIndex, FaissIVFIndex or OnDiskIndex
    """
    if backend not in ("auto", "exact", "faiss", "ivf", "ondisk"):
        raise ValueError(f"backend must be 'auto', 'exact', 'faiss', 'ivf' or 'ondisk'; got {backend!r}.")
    if backend == "ondisk":
        if folder is None:
            raise ValueError("backend='ondisk' writes its index to a folder: give folder=PATH.")
        return build_ondisk_index(pool, folder)
    if backend == "auto":  # the one kind rule (slics_core.search_index.index_kind)
        n = np.shape(pool)[0] if np.ndim(pool) >= 1 else 0
        backend = index_kind(n, faiss_min_pool=faiss_min_pool)
    if backend == "ivf":
        return FaissIVFIndex(pool)
    return FaissIndex(pool) if backend == "faiss" else ExactIndex(pool)


@dataclass
class RetrievalResult:
    """Top-k results of a concept-filtered search.

    Attributes
    ----------
    indices : ndarray of int64, shape (n_queries, n_concepts, k)
        Pool row indices, best first.
    scores : ndarray of float32, shape (n_queries, n_concepts, k)
        Cosine similarities.
    concepts : ndarray of int, shape (n_concepts,)
        The concept index of each middle-axis slot.
    """

    indices: np.ndarray
    scores: np.ndarray
    concepts: np.ndarray


class ConceptRetriever:
    """Concept-filtered retrieval from a candidate pool.

    Parameters
    ----------
    model : fitted SLiCS
    pool : array-like of shape (n_pool, d)
        Candidate embeddings, preprocessed like the model's training data.
    mode : {"partial", "full"}
        Component used for ranking (see :func:`slics_core.methods.components_of`).
    backend : {"auto", "exact", "faiss"}
        Search back-end (see module docstring).
    faiss_min_pool : int, optional
        Pool size from which ``"auto"`` uses FAISS (default :data:`FAISS_MIN_POOL`).

    Examples
    --------
    >>> r = ConceptRetriever(model, X_pool)                # doctest: +SKIP
    >>> res = r.search(X_query, k=20)                      # doctest: +SKIP
    >>> res.indices[0, j]   # top-20 pool rows for concept j of query 0
    """

    def __init__(self, model, pool, *, mode="partial", backend="auto", faiss_min_pool=None):
        self.model = model
        self.mode = check_mode(mode)
        self.index = build_index(pool, backend, faiss_min_pool=faiss_min_pool)
        n_features = getattr(model, "n_features_in_", None)
        if n_features is not None and n_features != self.index.dim:
            raise ValueError(
                f"pool has {self.index.dim} features but the model was fitted on {n_features}."
            )

    @property
    def backend(self):
        return self.index.backend

    def search(self, X_query, k=20, *, concepts=None, Y_query=None):
        """Rank the pool by each concept component of each query.

        Parameters
        ----------
        X_query : array-like of shape (n_queries, d) or (d,)
        k : int
            Results per (query, concept).
        concepts : sequence of int, optional
            Concepts to search; all by default.
        Y_query : array-like of shape (n_queries, S), optional
            Active concepts (needed for ``mode="full"``).

        Returns
        -------
        RetrievalResult
        """
        X = np.asarray(X_query, dtype=np.float64)
        if X.ndim == 1:
            X = X.reshape(1, -1)
        if Y_query is not None:
            Y_query = np.asarray(Y_query)
            if Y_query.ndim == 1:
                Y_query = Y_query.reshape(1, -1)
        V = components_of(self.model, X, self.mode, active=Y_query)
        n, S, d = V.shape
        if concepts is None:
            concepts = np.arange(S)
        else:
            concepts = np.asarray(concepts, dtype=int).reshape(-1)
            if concepts.size and (concepts.min() < 0 or concepts.max() >= S):
                raise ValueError(f"concepts must be in [0, {S}); got {concepts.tolist()}.")
        V = V[:, concepts, :]
        idx, sc = self.index.search(V.reshape(-1, d), k)
        kk = idx.shape[1]
        return RetrievalResult(idx.reshape(n, len(concepts), kk), sc.reshape(n, len(concepts), kk), concepts)

    def search_unfiltered(self, X_query, k=20):
        """UF baseline: rank the pool by the whole query embedding.

        Returns
        -------
        indices : ndarray of int64, shape (n_queries, k)
        scores : ndarray of float32, shape (n_queries, k)
        """
        return self.index.search(X_query, k)


# --------------------------------------------------------------------------
# quantized pools
# --------------------------------------------------------------------------

def _split_tokens(X, n_tokens):
    X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"embeddings must be 2-D (n, n_tokens * token_dim); got shape {X.shape}.")
    if n_tokens < 1 or X.shape[1] % n_tokens:
        raise ValueError(
            f"embedding dimension {X.shape[1]} is not a multiple of n_tokens={n_tokens}."
        )
    return X.reshape(X.shape[0], n_tokens, X.shape[1] // n_tokens)


def token_count(dim, codebook):
    """Tokens per embedding of width ``dim`` for a codebook of shape (K, token_dim).

    Raises
    ------
    ValueError
        ``dim`` is not a multiple of the codebook's token dimension.
    """
    C = np.asarray(codebook)
    if C.ndim != 2 or C.shape[0] < 1 or C.shape[1] < 1:
        raise ValueError(f"codebook must be 2-D (K, token_dim); got shape {C.shape}.")
    if int(dim) % C.shape[1]:
        raise ValueError(f"embedding width {dim} is not a multiple of the codebook's token dimension {C.shape[1]}; "
                         "the codebook does not belong to these embeddings.")
    return int(dim) // C.shape[1]


def quantize_tokens(X, codebook, n_tokens):
    """Nearest codebook entry (L2) of every token, as in product quantization.

    Parameters
    ----------
    X : array-like of shape (n, n_tokens * token_dim)
        Concatenated token embeddings.
    codebook : array-like of shape (K, token_dim)
    n_tokens : int

    Returns
    -------
    codes : ndarray of int32, shape (n, n_tokens)
    """
    faiss = require("faiss", "quantizing with a codebook")

    C = np.ascontiguousarray(np.asarray(codebook, dtype=np.float32))
    if C.ndim != 2:
        raise ValueError(f"codebook must be 2-D (K, token_dim); got shape {C.shape}.")
    X = check_embeddings(X, name="X", dtype=np.float32, allow_zero_rows=True)
    T = _split_tokens(X, n_tokens)
    if T.shape[2] != C.shape[1]:
        raise ValueError(f"token dimension {T.shape[2]} does not match codebook dimension {C.shape[1]}.")
    index = faiss.IndexFlatL2(C.shape[1])
    index.add(C)
    _, codes = index.search(np.ascontiguousarray(T.reshape(-1, C.shape[1])), 1)
    return codes.reshape(X.shape[0], n_tokens).astype(np.int32)


class QuantizedPool:
    """Candidate pool stored as one codebook index per token.

    Scores of a query vector ``v = [v^t]_t`` (e.g. a concept component) are
    ``sum_t G[t, k_t] / (||v|| ||x~||)`` with the look-up table
    ``G[t, k] = <v^t, c_k>``; this equals ``cos(v, x~)`` for the de-quantized
    candidate ``x~ = [c_{k_t}]_t``. The candidate norms are precomputed (they
    are ``sqrt(n_tokens)`` for a unit-norm codebook).

    Parameters
    ----------
    codes : array-like of int, shape (n_pool, n_tokens)
    codebook : array-like of shape (K, token_dim)
    """

    backend = "quantized"
    exact = True

    def __init__(self, codes, codebook):
        C = np.asarray(codebook, dtype=np.float32)
        if C.ndim != 2 or not np.isfinite(C).all():
            raise ValueError(f"codebook must be a finite 2-D array (K, token_dim); got shape {C.shape}.")
        codes = np.asarray(codes)
        if codes.ndim != 2 or not np.issubdtype(codes.dtype, np.integer):
            raise ValueError(f"codes must be a 2-D integer array (n_pool, n_tokens); got {codes.dtype} {codes.shape}.")
        if codes.size and (codes.min() < 0 or codes.max() >= C.shape[0]):
            raise ValueError(f"codes must index the codebook: values in [0, {C.shape[0]}).")
        self.codebook = C
        self.codes = codes.astype(np.int32)
        self.n_pool, self.n_tokens = codes.shape
        self.dim = self.n_tokens * C.shape[1]
        sq = np.einsum("kd,kd->k", C, C)
        self._norms = np.sqrt(sq[self.codes].sum(axis=1)).astype(np.float32)
        # token-major copy of the codes: one contiguous gather per token
        self._codes_t = np.ascontiguousarray(self.codes.T)

    @classmethod
    def from_embeddings(cls, X, codebook, n_tokens=None):
        """Quantize ``X`` token by token with :func:`quantize_tokens`.

        ``n_tokens`` defaults to ``X``'s width over the codebook's token dimension
        (:func:`token_count`).
        """
        if n_tokens is None:
            n_tokens = token_count(np.shape(X)[1] if np.ndim(X) == 2 else -1, codebook)
        return cls(quantize_tokens(X, codebook, n_tokens), codebook)

    def float_index(self):
        """An :class:`ExactIndex` over the de-quantized pool: the same cosines as :meth:`scores`.

        Holds ``n_pool x dim`` floats (the LUT search holds only the codes); faster
        in numpy when thousands of query vectors are scored at once.
        """
        return ExactIndex(self.dequantize())

    def dequantize(self):
        """The de-quantized pool ``[c_{k_t}]_t``, shape (n_pool, n_tokens * token_dim)."""
        return self.codebook[self.codes].reshape(self.n_pool, self.dim)

    def lookup_tables(self, V):
        """Look-up tables ``G[q, t, k] = <v_q^t, c_k>`` for query rows ``V`` (q, dim)."""
        V = check_queries(V, self.dim)
        Vt = V.reshape(V.shape[0], self.n_tokens, -1)
        return np.einsum("qtd,kd->qtk", Vt, self.codebook)

    def scores(self, V):
        """Cosine of every query row with every de-quantized candidate, (q, n_pool)."""
        V = check_queries(V, self.dim)
        G = self.lookup_tables(V).astype(np.float32)  # (q, n_tokens, K)
        raw = np.zeros((V.shape[0], self.n_pool), dtype=np.float32)
        for t in range(self.n_tokens):  # sum_t G[q, t, k_t]: one gather per token for all query rows
            raw += np.take(G[:, t, :], self._codes_t[t], axis=1)
        qn = np.linalg.norm(V, axis=1, keepdims=True)
        denom = qn * self._norms[None, :]
        return np.divide(raw, denom, out=np.zeros_like(raw), where=denom > 0)

    def search(self, V, k=20):
        """Top-``k`` candidates by LUT cosine for every query row."""
        k = min(check_k(k), self.n_pool)
        V = check_queries(V, self.dim)
        out_i = np.empty((V.shape[0], k), dtype=np.int64)
        out_s = np.empty((V.shape[0], k), dtype=np.float32)
        block = max(1, _SCORE_BLOCK // max(self.n_pool, 1))
        for start in range(0, V.shape[0], block):
            out_i[start:start + block], out_s[start:start + block] = top_k(self.scores(V[start:start + block]), k)
        return out_i, out_s

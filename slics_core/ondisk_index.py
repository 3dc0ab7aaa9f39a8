"""An approximate nearest-neighbour index kept on disk, for pools larger than memory.

The pool is a sequence of 2-D shards (``np.memmap`` float16 or float32, e.g. clip-retrieval's
``img_emb/img_emb_N.npy``), addressed globally in shard order: the position of row ``r`` of shard
``s`` is the number of rows in the shards before ``s`` plus ``r``.

:func:`build_ondisk_index`
    Trains a FAISS ``IndexIVFPQ`` (inner product on unit rows, ``n_list`` k-means lists,
    ``pq_m`` bytes per row) once on a seeded sample of the shards, encodes the shards one at a
    time into an in-memory block each, and merges the blocks into one ``lists.ivfdata`` file
    (``faiss.OnDiskInvertedLists``, :func:`faiss.contrib.ondisk.merge_ondisk`). The folder then
    holds ``index.faiss`` (centroids, codebooks, list sizes and offsets), ``lists.ivfdata`` (the
    codes and positions) and ``ondisk.json`` (the search settings and the shards' row counts).
    Memory during the build: the training sample plus one shard's codes.
:func:`open_ondisk_index`
    Opens such a folder with ``IO_FLAG_ONDISK_SAME_DIR | IO_FLAG_READ_ONLY``: the lists are
    looked for next to ``index.faiss`` (FAISS stores the absolute path of the ``.ivfdata`` at
    build time, so a moved folder would not open otherwise) and opened ``"r"`` instead of
    ``"r+"`` (the folder may be on a read-only mount). ``IO_FLAG_MMAP`` is never used: with
    faiss 1.15.1, searching an on-disk index read with it ends the process with a segmentation
    fault. Adding to an on-disk index is never done either (slow, and it can corrupt the lists,
    faiss #3498): a changed pool means a new build.
:class:`OnDiskIndex`
    An :class:`slics_core.search_index.Index`: ``search(Q, k)`` with the family's conventions (cosine on
    unit rows, ``(positions, scores)`` best first, ties by the smaller position; the query check, unit rows
    and ordering are that module's).
    When the shards are given, the top ``rerank`` candidates of the compressed search are read
    from the shards and ranked by their exact cosine (docs/scale.md measures what it gains).

Measurements and the choice of FAISS over the other candidates are in docs/scale.md.
"""
from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import numpy as np

from slics_core._validation import check_k
from slics_core.errors import FileSystemError, damaged_file_error
from slics_core.extras import require
from slics_core.formats import atomic_write_json, read_json, release_pages
from slics_core.search_index import best_first, check_queries, prepared_rows, unit_f32

__all__ = [
    "INDEX_FILE",
    "LISTS_FILE",
    "SETTINGS_FILE",
    "default_rerank",
    "OnDiskIndex",
    "build_ondisk_index",
    "open_ondisk_index",
]

#: The FAISS index (centroids, PQ codebooks, list sizes and offsets) inside an index folder.
INDEX_FILE = "index.faiss"
#: The inverted lists (PQ codes and pool positions), memory-mapped by FAISS.
LISTS_FILE = "lists.ivfdata"
#: Search settings and the shards' row counts.
SETTINGS_FILE = "ondisk.json"

_FORMAT = 1
#: Candidates re-ranked exactly by default up to 10^6 rows (:func:`default_rerank` grows it beyond): recall@20
#: 0.997 (and 0.98 with 500) at 10^6 rows with 64-byte codes, where 200 gave 0.77 (docs/scale.md, "Choosing
#: the defaults").
DEFAULT_RERANK = 1000


def default_rerank(n) -> int:
    """The re-ranking depth of an index over ``n`` rows: :data:`DEFAULT_RERANK` up to 10^6 rows, then growing
    as sqrt(n / 10^6) (3 162 at 10^7). Measured (docs/scale.md): at 10^7 rows 1 000 gave recall@20 0.87,
    2 000 0.955, 4 000 0.997; the depth a recall needs grows with the pool (more rows share a PQ code's
    neighbourhood)."""
    return int(max(DEFAULT_RERANK, round(DEFAULT_RERANK * np.sqrt(max(int(n), 1) / 1e6))))

_BLOCKS = ".blocks"      # per-shard blocks while building, removed after the merge
_CHUNK = 16_384          # rows converted to float32 at once while building and sampling (bounds the peak)
_REBUILD = "build the index again (slics_core.ondisk_index.build_ondisk_index)"


def _faiss():
    return require("faiss", "the on-disk index")


def _check_shards(shards, dim=None):
    """The shards as a list, their start offsets (n_shards + 1) and the common width."""
    if isinstance(shards, np.ndarray) and shards.ndim == 2:
        shards = [shards]
    shards = list(shards)
    if not shards:
        raise ValueError("shards is empty: give at least one 2-D array of pool rows.")
    for i, s in enumerate(shards):
        shape = np.shape(s)
        if len(shape) != 2:
            raise ValueError(f"shard {i} must be 2-D (rows, features); got shape {shape}.")
        if dim is None:
            dim = int(shape[1])
        if shape[1] != dim:
            raise ValueError(f"shard {i} has {shape[1]} features; the others (or dim) have {dim}.")
    offsets = np.concatenate([[0], np.cumsum([np.shape(s)[0] for s in shards])]).astype(np.int64)
    if offsets[-1] == 0:
        raise ValueError("the shards hold no rows.")
    return shards, offsets, int(dim)


def _read_rows(shards, offsets, positions):
    """Rows at sorted unique global ``positions`` as float32, read shard by shard."""
    out = np.empty((positions.size, np.shape(shards[0])[1]), dtype=np.float32)
    which = np.searchsorted(offsets, positions, side="right") - 1
    for s in np.unique(which):
        sel = np.flatnonzero(which == s)
        out[sel] = np.asarray(shards[s][positions[sel] - offsets[s]], dtype=np.float32)
        release_pages(shards[s])
    return out


def _largest_divisor_at_most(dim, m):
    return max(q for q in range(1, max(1, min(dim, m)) + 1) if dim % q == 0)


def _defaults(n, dim, n_list, pq_m, train_rows):
    n_list = int(n_list) if n_list is not None else int(min(65_536, max(1, round(np.sqrt(n)))))
    if not 1 <= n_list <= n:
        raise ValueError(f"n_list must be in [1, {n}] (the pool size); got {n_list!r}.")
    pq_m = int(pq_m) if pq_m is not None else _largest_divisor_at_most(dim, max(1, dim // 8))
    if pq_m < 1 or dim % pq_m:
        raise ValueError(f"pq_m must divide the width {dim}; got {pq_m!r}.")
    # k-means wants ~39 rows per list and each of the pq_m codebooks 256 centroids: ~10 000 rows
    train_rows = int(train_rows) if train_rows is not None else int(min(n, max(64 * n_list, 20_000), 500_000))
    if not 1 <= train_rows <= n:
        raise ValueError(f"train_rows must be in [1, {n}] (the pool size); got {train_rows!r}.")
    return n_list, pq_m, train_rows


def _default_nprobe(n_list):
    return int(min(n_list, max(16, n_list // 16)))


def build_ondisk_index(shards, folder, *, dim=None, n_list=None, pq_m=None, train_rows=None,
                       random_state=0, rerank=None, transform=None, progress=None):
    """Build an IVF-PQ index whose lists live on disk in ``folder``, one shard in memory at a time.

    Parameters
    ----------
    shards : sequence of array-likes of shape (n_s, d)
        The pool in order (``np.memmap`` float16/float32 shards are read in chunks); a single 2-D
        array is one shard. Rows need not be unit: they are normalised (a zero row stays zero).
    folder : path-like
        Created if missing; ``index.faiss``, ``lists.ivfdata`` and ``ondisk.json`` in it are
        replaced.
    dim : int, optional
        The expected width (checked against the shards).
    n_list : int, optional
        Inverted lists; default ``round(sqrt(n))``.
    pq_m : int, optional
        Bytes per row (PQ sub-quantizers of 8 bits); must divide ``d``; default ``d // 8`` (8-dimensional
        codebooks; docs/scale.md measures ``d // 16`` and ``d // 8``).
    train_rows : int, optional
        Rows of the seeded training sample; default ``min(n, max(64 * n_list, 20 000), 500 000)``.
    random_state : int
        Seed of the sample and of the k-means.
    rerank : int, optional
        Candidates re-ranked by their exact cosine when the index is searched with its shards
        (0: never; default :func:`default_rerank` of the pool's size); saved with the index.
    transform : callable, optional
        Raw shard rows (float32, ``(b, d)``) -> the rows to index, e.g. a workspace's preprocessing
        (``Workspace.preprocess``: the training mean subtracted, then unit rows). Applied to the
        training sample, to every row added and, given again to :func:`open_ondisk_index`, to the
        re-ranked rows, so that the index ranks what exact search over the transformed rows ranks.
    progress : callable, optional
        ``progress(rows_done, rows_total)``, called after each shard is encoded.

    Returns
    -------
    OnDiskIndex
        Opened from ``folder``, searching ``shards``.
    """
    faiss = _faiss()
    shards, offsets, dim = _check_shards(shards, dim)
    n = int(offsets[-1])
    n_list, pq_m, train_rows = _defaults(n, dim, n_list, pq_m, train_rows)
    rerank = default_rerank(n) if rerank is None else int(rerank)
    if rerank < 0:
        raise ValueError(f"rerank must be >= 0 (0: no re-ranking); got {rerank!r}.")
    folder = Path(folder).absolute()
    folder.mkdir(parents=True, exist_ok=True)
    for name in (INDEX_FILE, SETTINGS_FILE, LISTS_FILE):  # a half-built folder has no index.faiss
        (folder / name).unlink(missing_ok=True)

    rng = np.random.default_rng(random_state)
    sample = np.sort(rng.choice(n, size=train_rows, replace=False))
    train = np.concatenate([prepared_rows(_read_rows(shards, offsets, sample[i:i + _CHUNK]), transform)
                            for i in range(0, sample.size, _CHUNK)])
    quantizer = faiss.IndexFlatIP(dim)
    index = faiss.IndexIVFPQ(quantizer, dim, n_list, pq_m, 8, faiss.METRIC_INNER_PRODUCT)
    index.cp.niter = 10
    index.cp.seed = int(random_state)
    index.cp.max_points_per_centroid = max(64, -(-train_rows // n_list))
    index.pq.cp.seed = int(random_state)
    index.pq.cp.niter = 10
    index.train(train)
    del train
    trained = faiss.serialize_index(index)

    blocks = folder / _BLOCKS
    shutil.rmtree(blocks, ignore_errors=True)
    blocks.mkdir()
    names = []
    try:
        for s, shard in enumerate(shards):
            block = faiss.deserialize_index(trained)
            for start in range(0, np.shape(shard)[0], _CHUNK):
                rows = prepared_rows(shard[start:start + _CHUNK], transform)
                release_pages(shard)  # one chunk resident at a time, not the whole shard read so far
                block.add_with_ids(rows, np.arange(start, start + rows.shape[0], dtype=np.int64) + offsets[s])
            names.append(str(blocks / f"block_{s}.index"))
            faiss.write_index(block, names[-1])
            del block
            if progress is not None:
                progress(int(offsets[s + 1]), n)
        merged = faiss.deserialize_index(trained)
        require("faiss.contrib.ondisk", "the on-disk index").merge_ondisk(merged, names, str(folder / LISTS_FILE))
        atomic_write_json(folder / SETTINGS_FILE, {
            "format": _FORMAT, "n": n, "dim": dim, "n_list": n_list, "pq_m": pq_m,
            "train_rows": train_rows, "random_state": int(random_state), "rerank": rerank,
            "nprobe": _default_nprobe(n_list), "shard_rows": np.diff(offsets).tolist(),
            "transformed": transform is not None})
        faiss.write_index(merged, str(folder / INDEX_FILE))
        del merged
    finally:
        shutil.rmtree(blocks, ignore_errors=True)
    return open_ondisk_index(folder, shards, transform=transform)


def _missing(path, what):
    return FileSystemError(
        f"{str(path)!r} is missing, so {what}; {_REBUILD}, or give the folder that holds it.",
        path=path, errno=errno.ENOENT)


def _faiss_problem(exc):
    """The useful end of a FAISS error (``Error in ... at file:line: Error: '...' failed: <this>``)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text.rsplit("failed: ", 1)[-1]


def open_ondisk_index(folder, shards=None, *, nprobe=None, rerank=None, transform=None):
    """Open an index folder written by :func:`build_ondisk_index`, wherever it now lies.

    Parameters
    ----------
    folder : path-like
    shards : sequence of array-likes, optional
        The pool the index was built from (checked by row counts and width); needed for exact
        re-ranking, else the search returns the compressed (PQ) cosines.
    nprobe : int, optional
        Lists scanned per query (default: the one saved, ``max(16, n_list // 16)``).
    rerank : int, optional
        Candidates re-ranked (default: the one saved at build time).
    transform : callable, optional
        The ``transform`` the index was built with, applied to the re-ranked rows read from the shards.

    Returns
    -------
    OnDiskIndex
    """
    faiss = _faiss()
    folder = Path(folder).absolute()
    if not folder.is_dir():
        raise _missing(folder, "there is no on-disk index to open")
    index_path, lists_path, settings_path = folder / INDEX_FILE, folder / LISTS_FILE, folder / SETTINGS_FILE
    for path in (index_path, settings_path, lists_path):
        if not path.is_file():
            raise _missing(path, f"the on-disk index in {str(folder)!r} cannot be opened")
    settings = read_json(settings_path, fix=_REBUILD)
    try:
        n, dim, n_list = int(settings["n"]), int(settings["dim"]), int(settings["n_list"])
        shard_rows = [int(r) for r in settings["shard_rows"]]
        saved_nprobe, saved_rerank = int(settings["nprobe"]), int(settings["rerank"])
    except (KeyError, TypeError, ValueError) as exc:
        raise damaged_file_error(settings_path, f"a setting is missing or wrong: {exc}", _REBUILD) from exc
    flags = faiss.IO_FLAG_ONDISK_SAME_DIR | faiss.IO_FLAG_READ_ONLY  # never IO_FLAG_MMAP: search segfaults
    try:
        index = faiss.read_index(str(index_path), flags)
    except RuntimeError as exc:
        bad = lists_path if str(lists_path) in str(exc) or LISTS_FILE in str(exc) else index_path
        raise damaged_file_error(bad, _faiss_problem(exc), _REBUILD) from exc
    ivf = faiss.extract_index_ivf(index)
    lists = faiss.downcast_InvertedLists(ivf.invlists)
    if not isinstance(lists, faiss.OnDiskInvertedLists) or index.ntotal != n or index.d != dim \
            or ivf.nlist != n_list:
        raise damaged_file_error(index_path, f"it is not the on-disk index {SETTINGS_FILE} describes "
                                 f"({n} x {dim}, {n_list} lists)", _REBUILD)
    if os.path.getsize(lists_path) < lists.totsize:  # reading past its end would kill the process (SIGBUS)
        raise damaged_file_error(lists_path, f"{os.path.getsize(lists_path)} bytes, fewer than the "
                                 f"{lists.totsize} the index refers to", _REBUILD)
    if shards is not None:
        shards, offsets, sdim = _check_shards(shards)
        if sdim != dim or np.diff(offsets).tolist() != shard_rows:
            raise ValueError(
                f"the shards ({len(offsets) - 1} shards, {int(offsets[-1])} rows x {sdim}) are not those the "
                f"index in {str(folder)!r} was built from ({len(shard_rows)} shards, {n} rows x {dim}); "
                "give the same shards in the same order, or build the index again.")
    idx = OnDiskIndex(index, folder, n=n, dim=dim, shards=shards,
                      nprobe=saved_nprobe if nprobe is None else nprobe,
                      rerank=saved_rerank if rerank is None else rerank, transform=transform)
    return idx


class OnDiskIndex:
    """An opened on-disk IVF-PQ index (see :func:`open_ondisk_index`).

    Attributes
    ----------
    n, dim : int
        Pool rows and width (``n_pool`` is ``n``, as for the in-memory indices).
    folder : Path
    nprobe : int
        Lists scanned per query.
    rerank : int
        Candidates re-ranked by the exact cosine when ``shards`` is set (0: none).
    shards : list or None
    transform : callable or None
        Applied to re-ranked rows read from the shards (see :func:`build_ondisk_index`).
    """

    backend = "ondisk"
    exact = False

    def __init__(self, index, folder, *, n, dim, shards=None, nprobe, rerank, transform=None):
        self.index, self.folder, self.n, self.dim = index, Path(folder), int(n), int(dim)
        self.n_pool = self.n
        self.n_list = int(_faiss().extract_index_ivf(index).nlist)
        if not 1 <= int(nprobe) <= self.n_list:
            raise ValueError(f"nprobe must be in [1, n_list={self.n_list}]; got {nprobe!r}.")
        if int(rerank) < 0:
            raise ValueError(f"rerank must be >= 0 (0: no re-ranking); got {rerank!r}.")
        self.nprobe, self.rerank = int(nprobe), int(rerank)
        self.shards, self.transform = shards, transform
        self._offsets = None if shards is None else _check_shards(shards)[1]

    def _search(self, Q, k):
        faiss = _faiss()  # nprobe goes with each call, not onto the shared index: searches may run in threads
        scores, idx = self.index.search(Q, k, params=faiss.SearchParametersIVF(nprobe=self.nprobe))
        short = np.flatnonzero((idx < 0).any(axis=1))
        if short.size:  # the scanned lists hold fewer than k rows: scan every list for that query
            every = faiss.SearchParametersIVF(nprobe=self.n_list)
            scores[short], idx[short] = self.index.search(Q[short], k, params=every)
        return scores, idx

    def search(self, queries, k):
        """Approximate top-``k`` pool positions and cosines for every query row.

        Returns
        -------
        positions : ndarray of int64, shape (n_queries, k)
            Global positions in shard order, best first (ties: smaller position first).
        scores : ndarray of float32, shape (n_queries, k)
            Exact cosines of the re-ranked rows when the shards are given and ``rerank > 0``,
            else the compressed (PQ) estimates.
        """
        k = min(check_k(k), self.n)
        Q = np.ascontiguousarray(unit_f32(check_queries(queries, self.dim)))
        exact = self.shards is not None and self.rerank > 0
        scores, idx = self._search(Q, min(self.n, max(k, self.rerank)) if exact else k)
        if exact:
            scores, idx = self._exact(Q, idx)
        idx, scores = best_first(idx, scores, k)
        return idx, scores.astype(np.float32)

    def _exact(self, Q, idx):
        """Exact cosines of the candidates ``idx`` (read from the shards once for all queries)."""
        flat = idx[idx >= 0]
        uniq, inverse = np.unique(flat, return_inverse=True)
        rows = prepared_rows(_read_rows(self.shards, self._offsets, uniq), self.transform)
        scores = np.full(idx.shape, -np.inf, dtype=np.float32)
        where = np.nonzero(idx >= 0)
        scores[where] = np.einsum("ij,ij->i", rows[inverse], Q[where[0]])
        return scores, idx

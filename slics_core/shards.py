"""Pools larger than memory: clip-retrieval shards read shard by shard through memory maps.

clip-retrieval writes ``img_emb/img_emb_{N}.npy`` (float16 or float32, ``(n_N, d)``) and
``metadata/metadata_{N}.parquet`` (one row per embedding, same order), numbered shards matched
by number. :func:`clip_retrieval_files` lists and pairs them (the one reader of the layout, also
used by :func:`slics_core.precomputed.load_precomputed`, which reads them whole).

:class:`PoolShards` maps every shard (:func:`slics_core.formats.load_npy` with ``mmap_mode="r"``,
header and size checked first) and never holds more than one block of rows in memory. A pool row is
addressed as ``(shard, row)`` or as its *position*: the global row number in shard order
(shard 0's rows first). :func:`seeded_sample` draws the positions of the sample a workspace keeps
in memory (maps, heatmaps).

:meth:`PoolShards.blocks` feeds :class:`slics_core.retrieval.StreamingIndex`, the exact search over the
shards (block-wise cosine top-``k``, bounded memory).

Thumbnails: a metadata row's local file (id column) when it exists; a ``url`` column only when the
workspace opted in (:func:`remote_url`: http/https only, percent-encoded; the server fetches
nothing, a viewer's browser loads it).
"""
from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import quote, urlsplit

import numpy as np

from slics_core.errors import damaged_file_error
from slics_core.extras import require
from slics_core.formats import check_regular_file, load_npy, release_pages

__all__ = ["BLOCK_ROWS", "ID_COLUMNS", "SAMPLE_ROWS", "PoolShards", "clip_retrieval_files", "id_column", "read_pandas",
           "remote_url", "seeded_sample"]

#: Id columns of a metadata table, in order of preference.
ID_COLUMNS = ("image_path", "path", "image", "file", "filename", "file_name", "id", "key")
#: Rows of the pool a sharded workspace keeps in memory (maps and heatmaps).
SAMPLE_ROWS = 20_000
#: Rows read (and preprocessed in float64) at once when streaming the shards.
BLOCK_ROWS = 16_384
#: Characters a thumbnail URL keeps as they are (RFC 3986's reserved and unreserved ones, less the quote ``'``).
_URL_SAFE = ":/?#[]@!$&()*+,;=%-._~"
_FIX = "export the shards again (clip-retrieval's img_emb/ and metadata/ layout)"


def read_pandas():
    """pandas, imported when a metadata table is read (an optional library: one line names its extra)."""
    return require("pandas", "reading metadata tables")


def _parquet_rows(path) -> int:
    """Rows of a Parquet file, from its footer (size and file type checked first)."""
    check_regular_file(path, _FIX)
    try:
        import pyarrow.parquet as pq
    except ImportError:  # pandas may read Parquet through another engine
        pq = None
    try:
        if pq is not None:
            return int(pq.ParquetFile(path).metadata.num_rows)
        return len(read_pandas().read_parquet(path))
    except (OSError, ValueError) as exc:
        raise damaged_file_error(path, exc, _FIX) from None


def id_column(df, source):
    """The id column of a metadata table (the first of :data:`ID_COLUMNS` present)."""
    col = next((c for c in ID_COLUMNS if c in df.columns), None)
    if col is None:
        raise ValueError(f"{source}: needs an id column (one of {', '.join(ID_COLUMNS)}); found {list(df.columns)}")
    return col


def _numbered(folder, prefix, suffix):
    found = []
    for p in Path(folder).iterdir():
        m = re.fullmatch(re.escape(prefix) + r"_?(\d+)" + re.escape(suffix), p.name)
        if m:
            found.append((int(m.group(1)), p))
    return sorted(found)


def clip_retrieval_files(folder) -> list:
    """``[(img_emb_N.npy, metadata_N.parquet), ...]`` of a clip-retrieval folder, by shard number.

    Raises
    ------
    FileNotFoundError
        No ``img_emb/`` and ``metadata/`` folders there.
    ValueError
        No shards, or an embedding file without its metadata file (or the reverse), named.
    """
    src = Path(folder)
    emb_dir, meta_dir = src / "img_emb", src / "metadata"
    if not emb_dir.is_dir() or not meta_dir.is_dir():
        raise FileNotFoundError(f"{str(src)!r} is not in clip-retrieval's layout (img_emb/ and metadata/ folders)")
    emb = dict(_numbered(emb_dir, "img_emb", ".npy"))
    meta = dict(_numbered(meta_dir, "metadata", ".parquet"))
    if not emb:
        raise ValueError(f"{str(src)!r}: no img_emb/img_emb_N.npy files ({len(meta)} metadata_*.parquet files)")
    lone = sorted(set(emb) ^ set(meta))
    if lone:
        n = lone[0]
        have, lack = (emb[n], meta_dir / f"metadata_{n}.parquet") if n in emb else \
            (meta[n], emb_dir / f"img_emb_{n}.npy")
        raise ValueError(f"{str(have)!r} has no partner {str(lack)!r} ({len(emb)} img_emb_*.npy files for "
                         f"{len(meta)} metadata_*.parquet files); add it or remove the lone file")
    return [(emb[n], meta[n]) for n in sorted(emb)]


def remote_url(value) -> str | None:
    """``value`` as a thumbnail URL a viewer's browser may load, or None.

    Only an http(s) URL with a host and no spaces or control characters; returned percent-encoded
    (quotes, ``<``, ``>``, backslashes, backticks and non-ASCII as ``%XX``), so it cannot leave an HTML
    attribute or a Markdown image and names exactly the host it shows.
    """
    if not isinstance(value, str) or not value or len(value) > 2048:
        return None
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in value):
        return None
    try:
        parts = urlsplit(value)
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return None
    return quote(value, safe=_URL_SAFE)


def seeded_sample(n_rows: int, n: int = SAMPLE_ROWS, seed: int = 0) -> np.ndarray:
    """Sorted positions of ``min(n, n_rows)`` pool rows drawn without replacement with ``seed``."""
    n_rows = int(n_rows)
    n = min(int(n), n_rows)
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(n_rows, size=n, replace=False)).astype(np.int64)


class PoolShards:
    """The shards of a clip-retrieval folder, memory-mapped (see the module docstring).

    Parameters
    ----------
    folder : path
    dim : int, optional
        Required embedding width (a shard of another width is refused, named).
    counts : sequence of int, optional
        Rows per shard recorded when the workspace was built: a shard that changed since is refused.

    Attributes
    ----------
    files : list of (Path, Path)
    counts : ndarray of int64
    offsets : ndarray of int64
        Position of each shard's first row (``len(counts) + 1`` entries).
    dim : int
    dtype : numpy.dtype of the first shard
    """

    def __init__(self, folder, *, dim=None, counts=None):
        self.folder = Path(folder)
        self.files = clip_retrieval_files(self.folder)
        if counts is not None and len(counts) != len(self.files):
            raise ValueError(f"{str(self.folder)!r} holds {len(self.files)} shards, the workspace was built on "
                             f"{len(counts)}; rebuild it with `slics workspace --pool-shards`")
        self._maps = []
        for i, (ef, _) in enumerate(self.files):
            want_rows = None if counts is None else int(counts[i])

            def check(shape, _dtype, ef=ef, want_rows=want_rows, dim=dim):
                if len(shape) != 2 or shape[0] < 1:
                    raise damaged_file_error(ef, f"shape {shape}, expected (rows, dim)", _FIX)
                if dim is not None and shape[1] != int(dim):
                    raise damaged_file_error(ef, f"{shape[1]}-d embeddings, expected {int(dim)}", _FIX)
                if want_rows is not None and shape[0] != want_rows:
                    raise damaged_file_error(ef, f"{shape[0]} rows where the workspace recorded {want_rows}",
                                             "rebuild the workspace with `slics workspace --pool-shards`")

            self._maps.append(load_npy(ef, "f", fix=_FIX, mmap_mode="r", check=check))
            if dim is None:
                dim = self._maps[0].shape[1]
        widths = {m.shape[1] for m in self._maps}
        if len(widths) > 1:
            bad = next(ef for (ef, _), m in zip(self.files, self._maps) if m.shape[1] != self._maps[0].shape[1])
            raise damaged_file_error(bad, f"widths {sorted(widths)} differ between shards", _FIX)
        self.counts = np.array([m.shape[0] for m in self._maps], dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.counts)]).astype(np.int64)
        self.dim = int(self._maps[0].shape[1])
        self.dtype = self._maps[0].dtype
        self._meta = {}
        if counts is None:  # a new pool (a build): every metadata table must have its shard's rows
            self.check_metadata()

    def check_metadata(self) -> None:
        """Refuse (DamagedFileError, naming the file) a metadata table whose row count is not its shard's.

        Reads only each Parquet file's footer, not its rows. :class:`PoolShards` calls it when a pool is
        opened for a build (no recorded ``counts``), so a mismatch is refused there, not when an item is shown.
        """
        for (ef, mf), n in zip(self.files, self.counts):
            rows = _parquet_rows(mf)
            if rows != n:
                raise damaged_file_error(mf, f"{rows} rows of metadata for the {int(n)} embeddings of {ef.name}", _FIX)

    def __len__(self) -> int:
        return int(self.offsets[-1])

    @property
    def arrays(self) -> list:
        """The shards' memory maps in shard order (raw rows; what :mod:`slics_core.ondisk_index` indexes)."""
        return list(self._maps)

    def describe(self) -> dict:
        """JSON-ready record of the shards (a workspace header keeps it)."""
        return {"folder": str(self.folder.resolve()), "counts": [int(c) for c in self.counts], "dim": self.dim,
                "dtype": str(self.dtype), "n_rows": len(self)}

    # ------------------------------------------------------------------ addressing
    def locate(self, positions):
        """``(shard, row)`` arrays of global positions (IndexError outside ``0..len-1``)."""
        pos = np.asarray(positions, dtype=np.int64)
        if pos.size and (pos.min() < 0 or pos.max() >= len(self)):
            raise IndexError(f"pool positions must be in 0..{len(self) - 1}")
        shard = np.searchsorted(self.offsets, pos, side="right") - 1
        return shard, pos - self.offsets[shard]

    def position(self, shard, row):
        """Global positions of ``(shard, row)`` pairs."""
        shard, row = np.asarray(shard, dtype=np.int64), np.asarray(row, dtype=np.int64)
        if np.any(row < 0) or np.any(row >= self.counts[shard]):
            raise IndexError("row outside its shard")
        return self.offsets[shard] + row

    # ------------------------------------------------------------------ rows
    def rows(self, positions) -> np.ndarray:
        """The raw embeddings (float32) at ``positions``, in that order."""
        pos = np.asarray(positions, dtype=np.int64).ravel()
        out = np.empty((pos.size, self.dim), dtype=np.float32)
        shard, row = self.locate(pos)
        for s in np.unique(shard):
            at = np.flatnonzero(shard == s)
            out[at] = self._maps[s][row[at]]
            self._check_finite(s, out[at], row[at])
        return out

    def _check_finite(self, shard, block, rows):
        """Refuse, naming the shard file and its first bad row, rows holding NaN or infinity."""
        bad = ~np.isfinite(block).all(axis=1)
        if bad.any():
            first = int(np.asarray(rows)[np.flatnonzero(bad)[0]])
            raise damaged_file_error(self.files[shard][0], f"{int(bad.sum())} of the rows read hold NaN or infinity "
                                                           f"(row {first} of the shard first)", _FIX)

    def blocks(self, block_rows: int = BLOCK_ROWS):
        """``(start, raw)`` over the pool in shard order: ``raw`` float32 ``(b, d)`` of positions
        ``start .. start + b - 1``, never crossing a shard, at most ``block_rows`` rows."""
        block_rows = max(1, int(block_rows))
        for s, m in enumerate(self._maps):
            for a in range(0, m.shape[0], block_rows):
                block = np.array(m[a:a + block_rows], dtype=np.float32)
                release_pages(m)  # the copy is what the caller holds; the mapped pages leave the resident set
                self._check_finite(s, block, np.arange(a, a + len(block)))
                yield int(self.offsets[s] + a), block

    # ------------------------------------------------------------------ metadata
    def metadata(self, shard: int):
        """Metadata table of one shard (read once; its row count checked against the embeddings)."""
        shard = int(shard)
        if shard not in self._meta:
            mf = self.files[shard][1]
            try:
                t = read_pandas().read_parquet(mf)
            except (OSError, ValueError) as exc:
                raise damaged_file_error(mf, exc, _FIX) from None
            if len(t) != self.counts[shard]:
                raise damaged_file_error(mf, f"{len(t)} rows for the {self.counts[shard]} of "
                                             f"{self.files[shard][0].name}", _FIX)
            self._meta = {shard: t}  # one table at a time: bounded memory
        return self._meta[shard]

    def item(self, position: int, *, remote: bool = False) -> dict:
        """``shard``, ``row``, ``id``, ``path`` (an existing local file or None) and ``url`` (an escaped
        http(s) URL when ``remote`` and the table has a ``url`` column, else None) of one pool row."""
        s, r = (int(v[0]) for v in self.locate([int(position)]))
        t = self.metadata(s)
        rec = t.iloc[r]
        ident = str(rec[id_column(t, str(self.files[s][1]))])
        cand = Path(ident)
        if not cand.is_absolute():
            cand = self.folder / ident
        path = str(cand) if cand.is_file() else None
        url = remote_url(rec["url"]) if remote and "url" in t.columns else None
        return {"shard": s, "row": r, "id": ident, "path": path, "url": url}

    def remote_hosts(self, positions=None, limit: int = 5) -> list:
        """Hosts the ``url`` column points to (of ``positions``, default every row), sorted, at most ``limit``."""
        hosts = set()
        shards = range(len(self.files)) if positions is None else np.unique(self.locate(positions)[0])
        for s in shards:
            t = self.metadata(int(s))
            if "url" not in t.columns:
                continue
            for u in t["url"]:
                if remote_url(u) is not None:
                    hosts.add(urlsplit(u).hostname.lower())
                    if len(hosts) > limit:
                        return sorted(hosts)[:limit] + ["…"]
        return sorted(hosts)

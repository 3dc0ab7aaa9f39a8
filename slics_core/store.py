"""Embedding cache directory: resumable, atomic, self-describing.

Layout of a cache directory::

    meta.json          encoder id, dimension, preprocessing, batch size, decoding, item ids, state
    labels.npz         labels of the dataset (Y, concept names, optional sub-labels)
    batches/b00000.npz one file per finished batch (embeddings, positions, failures)
    embeddings.npy     all embeddings (written by finalize)
    ids.json           ids of the embedded items, aligned with embeddings.npy
    failed.json        items that could not be loaded, with the reason

Every file is written to a temporary name in the same folder and renamed
(:func:`os.replace`), so a reader never sees a half-written file. A run that
is interrupted keeps its finished batches; :func:`slics_core.embed.embed_dataset` with the
same cache directory, encoder and batch size computes only the missing ones.
Batch files are checked when they are listed (readable, the right positions,
finite embeddings of the right width); a damaged one is reported with a
warning and computed again.

File-system errors (disk full, read-only, permissions, a file where the
cache folder should be) and damaged files are raised as the one-line errors
of :mod:`slics_core.errors`, naming the file concerned.
"""
from __future__ import annotations

import errno
import hashlib
import json
import warnings
from pathlib import Path

import numpy as np

from slics_core.errors import DamagedFileError, FileSystemError, damaged_file_error, reading, writing
from slics_core.formats import (
    atomic_save_npy,
    atomic_save_npz,
    atomic_write_json,
    load_npy,
    load_npz,
    read_json,
)

__all__ = ["EmbeddingStore"]

FORMAT = "slics-embedding-cache"
VERSION = 1

#: How images of a cache without a ``decode`` entry (made before it was recorded) were decoded.
LEGACY_DECODE = {"draft_size": None}
#: Arrays of a batch file and their dtype kinds.
_BATCH_MEMBERS = {"positions": "iu", "embeddings": "f", "failed_positions": "iu", "failed_reasons": "U"}
#: Optional arrays of ``labels.npz`` beside ``Y`` (:meth:`slics_core.datasets.ImageDataset.labels_dict`).
_LABEL_MEMBERS = {"concept_names": "U", "Z": "biu", "sub_names": "U", "sub_to_concept": "iu"}


def _ids_digest(ids):
    h = hashlib.sha256()
    for i in ids:
        h.update(str(i).encode("utf-8") + b"\0")
    return h.hexdigest()



#: What each identity field of a cache means, in a mismatch message.
_MISMATCH_WORDS = {"encoder_id": "encoder", "batch_size": "batch_size", "ids_sha256": "item list:",
                   "decode": "image decoding (decode)"}


def _describe_items(n_items, dataset) -> str:
    """``"600 items of emoji (scale 0.2)"``: a cache's item list in words, for a mismatch message."""
    info = dataset if isinstance(dataset, dict) else {}
    name = info.get("name") or info.get("dataset") or "an unnamed dataset"
    details = ", ".join(f"{k} {v}" for k, v in sorted(info.items()) if k not in ("name", "dataset")
                        and isinstance(v, (int, float, str)) and len(str(v)) <= 40)
    return f"{n_items} items of {name}{f' ({details})' if details else ''}"


class EmbeddingStore:
    """An embedding cache directory (see module docstring).

    Parameters
    ----------
    path : path-like
    """

    def __init__(self, path):
        self.path = Path(path)

    # -- metadata ---------------------------------------------------------------------------
    @property
    def meta_path(self):
        return self.path / "meta.json"

    def exists(self):
        """Whether the folder holds a cache (a ``meta.json``)."""
        return self.meta_path.is_file()

    def _check_folder(self):
        if self.path.exists() and not self.path.is_dir():
            raise FileSystemError(f"cache {str(self.path)!r} is a file, not a folder; give the path of a folder "
                                  "(it is created if missing).", path=self.path, errno=errno.ENOTDIR)

    def meta(self):
        """The cache's ``meta.json`` as a dict.

        Raises
        ------
        FileNotFoundError
            No cache in the folder.
        ValueError
            ``meta.json`` is damaged (:class:`~slics_core.errors.DamagedFileError`)
            or not a SLiCS cache's.
        """
        self._check_folder()
        if not self.exists():
            raise FileNotFoundError(f"no embedding cache at {str(self.path)!r} (run 'slics embed' first)")
        meta = read_json(self.meta_path, fix="run 'slics embed' again with --overwrite to re-create the cache")
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise ValueError(f"{str(self.path)!r} is not a SLiCS embedding cache.")
        return meta

    def begin(self, ids, encoder_id, dim, batch_size, preprocessing=None, dataset=None, overwrite=False,
              decode=None):
        """Create the cache or check that an existing one belongs to the same run.

        Parameters
        ----------
        ids : sequence
            Item ids, in order.
        encoder_id : str
        dim : int
            Embedding width (-1 when unknown).
        batch_size : int
        preprocessing, dataset : dict, optional
            Recorded in ``meta.json``.
        overwrite : bool
            Discard an existing cache.
        decode : dict, optional
            How images are decoded (``{"draft_size": int or None}``); part of
            the identity of the cache, like the encoder and the batch size.

        Returns
        -------
        meta : dict

        Raises
        ------
        ValueError
            The folder holds a cache of another encoder, batch size, decoding
            or item list (and ``overwrite`` is false).
        """
        self._check_folder()
        ids = [str(i) for i in ids]
        digest = _ids_digest(ids)
        decode = dict(decode or LEGACY_DECODE)
        if self.exists() and not overwrite:
            meta = self.meta()
            mismatch = [k for k, mine, theirs in (
                ("encoder_id", encoder_id, meta.get("encoder_id")), ("batch_size", batch_size, meta.get("batch_size")),
                ("ids_sha256", digest, meta.get("ids_sha256")), ("decode", decode, meta.get("decode", LEGACY_DECODE)))
                if mine != theirs]
            if mismatch:
                theirs = {"encoder_id": meta.get("encoder_id"), "batch_size": meta.get("batch_size"),
                          "decode": meta.get("decode", LEGACY_DECODE),
                          "ids_sha256": _describe_items(meta.get("n_items"), meta.get("dataset"))}
                mine = {"encoder_id": encoder_id, "batch_size": batch_size, "decode": decode,
                        "ids_sha256": _describe_items(len(ids), dataset)}
                differences = "; ".join(f"{_MISMATCH_WORDS[k]} {theirs[k]} there, {mine[k]} in this run"
                                        for k in mismatch)
                raise ValueError(f"cache {str(self.path)!r} holds another run's embeddings ({differences}); "
                                 "use another directory or --overwrite.")
            return meta
        with writing(self.path):
            if overwrite and self.path.exists():
                for p in list(self.batch_dir.glob("*.npz")) if self.batch_dir.is_dir() else []:
                    p.unlink()
                for name in ("embeddings.npy", "ids.json", "failed.json", "positions.json"):
                    if (self.path / name).exists():
                        (self.path / name).unlink()
            self.batch_dir.mkdir(parents=True, exist_ok=True)
        meta = {"format": FORMAT, "version": VERSION, "encoder_id": str(encoder_id), "dim": int(dim),
                "batch_size": int(batch_size), "n_items": len(ids), "ids_sha256": digest,
                "preprocessing": preprocessing or {}, "dataset": dataset or {}, "decode": decode, "complete": False}
        atomic_write_json(self.path / "items.json", ids)
        atomic_write_json(self.meta_path, meta)
        return meta

    # -- batches ----------------------------------------------------------------------------
    @property
    def batch_dir(self):
        return self.path / "batches"

    def batch_path(self, b):
        return self.batch_dir / f"b{b:05d}.npz"

    def n_batches(self, meta=None):
        """Number of batches of the cache."""
        meta = meta or self.meta()
        return -(-int(meta["n_items"]) // int(meta["batch_size"]))

    def read_batch(self, b, meta=None):
        """Read and check batch ``b``.

        Returns
        -------
        positions : ndarray of int64, shape (k,)
        embeddings : ndarray of float32, shape (k, d)
        failed_positions : ndarray of int64
        failed_reasons : ndarray of str

        Raises
        ------
        slics_core.errors.DamagedFileError
            The file cannot be read, or does not hold exactly the positions
            of batch ``b`` (embedded or failed), finite embeddings of the
            cache's width.
        slics_core.errors.FileSystemError
            The file cannot be opened (missing, permissions).
        """
        meta = meta or self.meta()
        path = self.batch_path(b)
        fix = "it is computed again by 'slics embed'"
        z = load_npz(path, _BATCH_MEMBERS, dense=("embeddings",), fix=fix)
        pos, emb = z["positions"], z["embeddings"]
        fpos, reasons = z["failed_positions"], z["failed_reasons"]
        bs, n, dim = int(meta["batch_size"]), int(meta["n_items"]), int(meta.get("dim", -1))
        expected = np.arange(b * bs, min(n, (b + 1) * bs))
        problem = None
        if pos.ndim != 1 or emb.ndim != 2 or emb.shape[0] != pos.size or fpos.ndim != 1 or reasons.shape != fpos.shape:
            problem = (f"shapes do not match (positions {pos.shape}, embeddings {emb.shape}, "
                       f"failures {fpos.shape}/{reasons.shape})")
        elif not np.array_equal(np.sort(np.concatenate([pos, fpos]).astype(np.int64)), expected):
            problem = f"it does not hold positions {expected[0] if expected.size else 0}..{b * bs + expected.size - 1}"
        elif pos.size and dim > 0 and emb.shape[1] != dim:
            problem = f"embeddings have width {emb.shape[1]}, the cache {dim}"
        elif not np.isfinite(emb).all():
            problem = "embeddings contain NaN or infinite values"
        if problem:
            raise damaged_file_error(path, problem, fix)
        return pos.astype(np.int64), emb.astype(np.float32, copy=False), fpos.astype(np.int64), reasons

    def finished_batches(self, validate=True):
        """Indices of the batches whose files are present (and, by default, intact).

        Parameters
        ----------
        validate : bool, default True
            Read every batch file (:meth:`read_batch`); a damaged one is left
            out with a :class:`RuntimeWarning` naming it, so that
            :func:`embed_dataset` computes it again.
        """
        if not self.batch_dir.is_dir():
            return set()
        done = set()
        for p in self.batch_dir.glob("b*.npz"):
            try:
                done.add(int(p.stem[1:]))
            except ValueError:
                continue
        if not validate or not done:
            return done
        meta = self.meta()
        n_batches = self.n_batches(meta)
        good = set()
        for b in sorted(done):
            if b >= n_batches:
                continue
            try:
                self.read_batch(b, meta)
            except DamagedFileError as exc:
                warnings.warn(str(exc), RuntimeWarning, stacklevel=2)
                continue
            good.add(b)
        return good

    def write_batch(self, b, positions, embeddings, failed_positions=(), failed_reasons=()):
        """Write batch ``b`` atomically.

        Parameters
        ----------
        b : int
        positions : sequence of int, length k
            Positions (in the item list) of the embedded items.
        embeddings : array-like, shape (k, d)
            With ``k == 0`` any empty array is accepted (a batch with no
            readable image).
        failed_positions, failed_reasons : sequences
            Items that could not be loaded, and why.
        """
        positions = np.asarray(positions, dtype=np.int64).reshape(-1)
        E = np.asarray(embeddings, dtype=np.float32)
        if positions.size == 0:
            E = E.reshape(0, E.shape[1] if E.ndim == 2 else 0)
        else:
            if E.ndim == 1 and E.size % positions.size == 0:
                E = E.reshape(positions.size, -1)
            if E.ndim != 2 or E.shape[0] != positions.size:
                raise ValueError(f"batch {b}: {E.shape} embeddings for {positions.size} positions.")
        atomic_save_npz(self.batch_path(b), positions=positions, embeddings=E,
                        failed_positions=np.asarray(failed_positions, dtype=np.int64).reshape(-1),
                        failed_reasons=np.array(list(failed_reasons), dtype=str).reshape(-1))

    def finalize(self):
        """Merge the batch files into ``embeddings.npy`` / ``ids.json`` / ``failed.json``.

        Raises
        ------
        ValueError
            A batch is missing or damaged (run ``slics embed`` again).
        """
        meta = self.meta()
        ids = read_json(self.path / "items.json", fix="run 'slics embed' again with --overwrite to re-create the cache")
        n_batches = self.n_batches(meta)
        pos, emb, failed, missing, damaged = [], [], [], [], []
        for b in range(n_batches):
            if not self.batch_path(b).is_file():
                missing.append(b)
                continue
            try:
                p, e, fp, fr = self.read_batch(b, meta)
            except DamagedFileError as exc:
                warnings.warn(str(exc), RuntimeWarning, stacklevel=2)
                damaged.append(b)
                continue
            pos.append(p)
            if p.size:
                emb.append(e)
            failed += [{"id": ids[int(q)], "position": int(q), "reason": str(r)} for q, r in zip(fp, fr)]
        if missing or damaged:
            raise ValueError(f"cache {str(self.path)!r} is incomplete: {len(missing)} batch(es) missing"
                             + (f", {len(damaged)} damaged" if damaged else "") + "; rerun embed.")
        pos = np.concatenate(pos) if pos else np.zeros(0, np.int64)
        if emb:
            widths = {e.shape[1] for e in emb}
            if len(widths) > 1:
                raise ValueError(f"cache {str(self.path)!r} has batches of different widths {sorted(widths)}; "
                                 "re-create it with --overwrite.")
            E = np.concatenate(emb)
        else:
            E = np.zeros((0, max(int(meta.get("dim", 0)), 0)), np.float32)
        atomic_save_npy(self.path / "embeddings.npy", E)
        atomic_write_json(self.path / "ids.json", [ids[int(p)] for p in pos])
        atomic_write_json(self.path / "positions.json", [int(p) for p in pos])
        atomic_write_json(self.path / "failed.json", failed)
        meta["complete"] = True
        meta["n_embedded"] = int(pos.size)
        meta["n_failed"] = len(failed)
        atomic_write_json(self.meta_path, meta)
        return meta

    # -- reading ----------------------------------------------------------------------------
    _REBUILD = "run 'slics embed' again with the same arguments to rebuild it from the batch files"

    def load(self):
        """Return ``(embeddings, ids, meta)`` of a finished cache."""
        meta = self.meta()
        if not meta.get("complete"):
            raise ValueError(f"cache {str(self.path)!r} is not complete (interrupted?); rerun 'slics embed' to resume.")
        E = load_npy(self.path / "embeddings.npy", "f", fix=self._REBUILD)
        ids = read_json(self.path / "ids.json", fix=self._REBUILD)
        if E.ndim != 2 or E.shape[0] != len(ids):
            raise damaged_file_error(self.path, f"{E.shape} embeddings for {len(ids)} ids", self._REBUILD,
                                     what="cache")
        return E, ids, meta

    def positions(self):
        """Positions (in the item list) of the rows of :meth:`load`'s embeddings."""
        return np.asarray(read_json(self.path / "positions.json", fix=self._REBUILD), dtype=np.int64)

    def failed(self):
        """Items that could not be loaded: list of ``{"id", "position", "reason"}``."""
        p = self.path / "failed.json"
        return read_json(p, fix=self._REBUILD) if p.is_file() else []

    def save_labels(self, **arrays):
        """Save the dataset's label arrays (rows aligned with the item list) as ``labels.npz``."""
        atomic_save_npz(self.path / "labels.npz", **arrays)

    def load_labels(self):
        """Labels aligned with :meth:`load`'s embeddings (rows of failed items removed)."""
        p = self.path / "labels.npz"
        if not p.is_file():
            raise FileNotFoundError(f"cache {str(self.path)!r} has no labels (embedded without a label file?).")
        lab = load_npz(p, {"Y": "biu"}, optional=_LABEL_MEMBERS, fix="run 'slics embed' again to write the labels")
        pos = self.positions()
        for k in ("Y", "Z"):
            if k in lab:
                lab[k] = lab[k][pos].astype(bool)
        return lab

    def save_codebook(self, codebook):
        """Save a token codebook ``(K, token_dim)`` (TiTok's) for quantized pools (``codebook.npz``).

        Rows are stored as given (TiTok's are unit-norm). The cache's embeddings must be
        concatenations of tokens of width ``token_dim``.

        Raises
        ------
        ValueError
            Not a finite 2-D array, or the cache's width is not a multiple of ``token_dim``.
        """
        C = np.asarray(codebook, dtype=np.float32)
        if C.ndim != 2 or C.shape[0] < 1 or C.shape[1] < 1 or not np.isfinite(C).all():
            raise ValueError(f"a codebook must be a finite (K, token_dim) array; got shape {C.shape}.")
        dim = int(self.meta().get("dim", -1))
        if dim > 0 and dim % C.shape[1]:
            raise ValueError(f"codebook tokens have {C.shape[1]} dimensions but the cache's embeddings {dim}, "
                             "not a multiple: the codebook does not belong to this cache.")
        n_tokens = dim // C.shape[1] if dim > 0 else None
        self.save_array("codebook", C, n_tokens=n_tokens, token_dim=int(C.shape[1]))

    def load_codebook(self):
        """The codebook saved by :meth:`save_codebook`, shape (K, token_dim), or None (caches without one)."""
        C, _ = self.load_array("codebook")
        return None if C is None else np.asarray(C, dtype=np.float32)

    def save_array(self, name, array, **info):
        """Save an extra array (``name.npz``) with JSON-able ``info``."""
        atomic_save_npz(self.path / f"{name}.npz", array=np.asarray(array), info=np.array(json.dumps(info)))

    def load_array(self, name):
        """``(array, info)`` saved by :meth:`save_array`, or ``(None, None)``."""
        p = self.path / f"{name}.npz"
        if not p.is_file():
            return None, None
        fix = "delete it; it is computed again when needed"
        z = load_npz(p, {"array": "biufcU", "info": "U"}, fix=fix)
        with reading(p, fix):
            return z["array"], json.loads(str(z["info"]))


# ------------------------------------------------------------------------------------ embedding

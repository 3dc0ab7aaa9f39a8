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
is interrupted keeps its finished batches; :func:`embed_dataset` with the
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
import functools
import hashlib
import inspect
import json
import os
import sys
import warnings
from pathlib import Path

import numpy as np

from slics_core._validation import check_k
from slics_core.errors import DamagedFileError, FileSystemError, damaged_file_error, reading, writing
from slics_core.extras import require
from slics_core.formats import (
    atomic_save_npy,
    atomic_save_npz,
    atomic_write_json,
    load_npy,
    load_npz,
    read_json,
)
from slics_core.images import ImageLoadError, load_image

__all__ = ["EmbeddingStore", "embed_dataset", "default_workers", "TRANSFERS", "image_route"]

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
                raise ValueError(
                    f"cache {str(self.path)!r} was made with a different {', '.join(mismatch)}; "
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
def default_workers():
    """Decoding processes :func:`embed_dataset` uses by default.

    One CPU is left to the main process (which runs the model); at most 16.
    0 (decode in the main process) on a single-CPU machine. The number of
    workers changes the speed, never the embeddings.
    """
    try:
        n_cpu = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        n_cpu = os.cpu_count() or 1
    return max(0, min(16, n_cpu - 1))


class _LoadAndPreprocess:
    """Map-style dataset: position -> ``(position, tensor or None, failure reason)``.

    Picklable (paths, a loader and a transform; never the model), so it runs
    in DataLoader worker processes.
    """

    def __init__(self, paths, loader, transform):
        self.paths = paths
        self.loader = loader
        self.transform = transform

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, p):
        try:
            image = self.loader(self.paths[p])
        except ImageLoadError as exc:
            return p, None, str(exc)
        return p, self.transform(image), ""


def _collate(items):
    """Items of one batch -> ``(positions, stacked tensor or None, failed positions, reasons)``."""
    default_collate = require("torch.utils.data").default_collate

    ok = [(p, x) for p, x, _ in items if x is not None]
    failed = [(p, r) for p, x, r in items if x is None]
    # default_collate stacks straight into shared memory in a worker (no extra copy on the way out)
    batch = default_collate([x for _, x in ok]) if ok else None
    return [p for p, _ in ok], batch, [p for p, _ in failed], [r for _, r in failed]


def _tensor_batches(paths, batches, loader, transform, workers, pin_memory):
    """Preprocessed batches, decoded by ``workers`` DataLoader processes (0: in this process)."""
    DataLoader = require("torch.utils.data").DataLoader

    data = _LoadAndPreprocess(paths, loader, transform)
    kwargs = {"prefetch_factor": 2} if workers > 0 else {}
    it = iter(DataLoader(data, batch_sampler=batches, num_workers=workers, collate_fn=_collate,
                         pin_memory=pin_memory, **kwargs))
    try:
        yield from it
    finally:
        shutdown = getattr(it, "_shutdown_workers", None)  # at once, not when the iterator is collected
        if shutdown is not None:
            shutdown()


def _image_batches(paths, batches, loader):
    """Batches of PIL images, decoded one by one in this process (encoders without ``encode_tensors``)."""
    for batch in batches:
        images, pos, fpos, freason = [], [], [], []
        for p in batch:
            try:
                images.append(loader(paths[p]))
                pos.append(p)
            except ImageLoadError as exc:
                fpos.append(p)
                freason.append(str(exc))
        yield pos, images, fpos, freason


def _accepts_batch_size(fn):
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "batch_size" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def _on_cuda(encoder):
    return str(getattr(encoder, "device", "")).startswith("cuda")


#: How a decoded image crosses from a decoding worker to the model: ``uint8`` (the encoder's resize and
#: crop in the worker, scaling and normalisation on the model's device: 3 bytes a pixel) or ``float32``
#: (the encoder's whole preprocessing in the worker: 12 bytes a pixel). Both give the same embeddings.
TRANSFERS = ("uint8", "float32")


def image_route(encoder, transfer=None):
    """``(transform, encode, transfer)`` of an encoder with a tensor-level API, else None.

    ``transform`` (picklable, run by the decoding workers) turns a PIL image
    into the tensor that crosses the process boundary; ``encode`` turns a
    stacked batch of them into ``(n, d)`` embeddings. ``transfer`` (one of
    :data:`TRANSFERS`; default ``uint8`` where the encoder offers
    ``uint8_transform()``, else ``float32``) picks the route.

    Raises
    ------
    ValueError
        An unknown ``transfer``, or ``uint8`` for an encoder that does not offer it.
    """
    if transfer is not None and transfer not in TRANSFERS:
        raise ValueError(f"transfer must be one of {', '.join(TRANSFERS)}; got {transfer!r}.")
    if not (callable(getattr(encoder, "image_transform", None)) and callable(getattr(encoder, "encode_tensors", None))):
        if transfer == "uint8":
            raise ValueError(f"encoder {getattr(encoder, 'id', encoder)!r} has no tensor-level API: no uint8 transfer.")
        return None
    uint8 = getattr(encoder, "uint8_transform", None)
    uint8 = uint8() if callable(uint8) and transfer != "float32" else None
    if uint8 is None and transfer == "uint8":
        raise ValueError(f"encoder {getattr(encoder, 'id', encoder)!r} offers no uint8 transform; "
                         "use transfer='float32'.")
    if uint8 is not None:
        return uint8, encoder.encode_tensors, "uint8"
    return encoder.image_transform(), encoder.encode_tensors, "float32"


def _check_workers(workers):
    if workers is None:
        return default_workers()
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 0:
        raise ValueError(f"workers must be a non-negative int (0 = decode in the main process); got {workers!r}.")
    return int(workers)


def begin_run(paths, ids, encoder, cache_dir, *, batch_size=64, preprocessing=None, dataset_info=None, labels=None,
              overwrite=False, image_loader=None, draft=None):
    """Check the arguments, create or reopen the cache: ``(store, loader, todo, n_batches)``.

    The first half of :func:`embed_dataset` (whose parameters these are),
    shared with :func:`slics_core.ray_embed.embed_dataset_ray`: ``loader``
    is the image loader the decoding workers use (draft decoding as the
    cache records), ``todo`` the batch indices whose files are missing or
    damaged.
    """
    if len(paths) != len(ids):
        raise ValueError(f"{len(paths)} paths for {len(ids)} ids.")
    batch_size = check_k(batch_size, "batch_size")
    if draft not in (None, True, False):
        raise ValueError(f"draft must be True, False or None; got {draft!r}.")
    store = EmbeddingStore(cache_dir)
    draft_size = getattr(encoder, "draft_size", None) if image_loader is None else None
    if draft is None:
        resuming = not overwrite and store.exists()
        draft = bool(store.meta().get("decode", LEGACY_DECODE)["draft_size"]) if resuming else True
    decode = {"draft_size": int(draft_size) if draft and draft_size else None}
    loader = image_loader or (functools.partial(load_image, draft=decode["draft_size"]) if decode["draft_size"]
                              else load_image)
    store.begin(ids, getattr(encoder, "id", type(encoder).__name__), getattr(encoder, "dim", -1), batch_size,
                preprocessing, dataset_info, overwrite=overwrite, decode=decode)
    if labels is not None:
        store.save_labels(**labels)
    n_batches = -(-len(paths) // batch_size)
    done = store.finished_batches()
    return store, loader, [b for b in range(n_batches) if b not in done], n_batches


def check_embeddings(E, n):
    """An encoder's output for ``n`` images as finite float32 ``(n, d)``, else a ValueError."""
    E = np.asarray(E, dtype=np.float32)
    if E.ndim != 2 or E.shape[0] != n or not np.isfinite(E).all():
        raise ValueError(f"encoder returned {E.shape} (finite={np.isfinite(E).all()}) for {n} images.")
    return E


def write_result(store, b, pos, E, fpos, freason, encoder=None):
    """Write batch ``b`` (``E`` None: no readable image); a file-system error says the run resumes."""
    if E is None:
        E = np.zeros((0, max(int(getattr(encoder, "dim", 0) or 0), 0)), dtype=np.float32)
    try:
        store.write_batch(b, pos, E, fpos, freason)
    except FileSystemError as exc:
        raise FileSystemError(f"{exc} The batches already written are kept: the same command resumes.",
                              path=exc.path, errno=exc.errno) from exc


def embed_dataset(paths, ids, encoder, cache_dir, *, batch_size=64, preprocessing=None, dataset_info=None,
                  labels=None, overwrite=False, progress=True, image_loader=None, workers=None, draft=None,
                  transfer=None):
    """Embed images into a cache directory, in batches, resumably.

    Each batch of ``batch_size`` items is one call of the encoder and one
    batch file; batches already in the cache (and intact) are reused.

    Encoders with a tensor-level API (``image_transform()`` giving a
    picklable ``PIL image -> tensor`` and ``encode_tensors(batch)``, as
    :class:`~slics_core.encoders.OpenCLIPEncoder`,
    :class:`~slics_core.encoders.DINOv2Encoder` and
    :class:`~slics_core.encoders.TiTokEncoder` have) get their images
    decoded and preprocessed by ``workers`` processes (a torch
    ``DataLoader``) while the model runs, in pinned memory when the encoder
    is on CUDA. Other encoders (``encode_images(list of PIL images)`` only)
    get their images decoded in this process and passed one batch at a time.
    The embeddings do not depend on ``workers``.

    Parameters
    ----------
    paths, ids : sequences of the same length
    encoder : object with ``encode_images(list of PIL images) -> (n, d)``, ``dim`` and ``id``
    cache_dir : path-like
    batch_size : int
        Images per encoder call and per batch file.
    preprocessing : dict, optional
        Recorded in ``meta.json`` (e.g. the embedding preprocessing to apply).
    labels : dict of arrays, optional
        Saved as ``labels.npz`` (rows aligned with ``paths``).
    progress : bool
        Show a progress bar (tqdm when available) on stderr.
    image_loader : callable(path) -> PIL image, optional
        Default :func:`slics_core.images.load_image`. It raises
        :class:`~slics_core.images.ImageLoadError` for unreadable items.
        With ``workers > 0`` it runs in worker processes.
    workers : int, optional
        Decoding processes (tensor-level encoders only); 0 decodes in this
        process. Default :func:`default_workers`.
    draft : bool, optional
        Decode JPEGs at reduced scale, no smaller than the encoder's
        ``draft_size`` (see :func:`slics_core.images.load_image`); only
        with the default loader. This changes the pixels slightly, so it is
        recorded in the cache and a cache is always resumed the way it was
        begun. Default (None): as the existing cache was made, else True.
    transfer : {"uint8", "float32"}, optional
        What the workers hand over (:data:`TRANSFERS`); the embeddings are
        the same. Default: ``uint8`` where the encoder offers it.

    Returns
    -------
    store : EmbeddingStore
    stats : dict
        ``computed`` and ``reused`` batches, ``failed`` items.

    Raises
    ------
    ValueError
        Bad arguments, or a cache made by another encoder / batch size /
        decoding / item list in ``cache_dir``.
    slics_core.errors.FileSystemError
        The cache cannot be written (disk full, read-only, permissions, ...).
    """
    workers = _check_workers(workers)
    route = image_route(encoder, transfer)
    store, loader, todo, n_batches = begin_run(paths, ids, encoder, cache_dir, batch_size=batch_size,
                                               preprocessing=preprocessing, dataset_info=dataset_info,
                                               labels=labels, overwrite=overwrite, image_loader=image_loader,
                                               draft=draft)
    batch_size = int(store.meta()["batch_size"])
    batches = [list(range(b * batch_size, min(len(paths), (b + 1) * batch_size))) for b in todo]
    if route is not None:
        transform, encode, _ = route
        source = _tensor_batches(paths, batches, loader, transform, workers, _on_cuda(encoder))
    else:
        source = _image_batches(paths, batches, loader)
        kw = {"batch_size": batch_size} if _accepts_batch_size(encoder.encode_images) else {}
        encode = functools.partial(encoder.encode_images, **kw)
    bar = None
    if progress:
        try:
            tqdm = require("tqdm").tqdm

            bar = tqdm(total=n_batches, initial=n_batches - len(todo), desc="embed", unit="batch", file=sys.stderr)
        except ImportError:
            bar = None
    try:
        for b, (pos, inputs, fpos, freason) in zip(todo, source):
            E = check_embeddings(encode(inputs), len(pos)) if pos else None
            write_result(store, b, pos, E, fpos, freason, encoder)
            if bar is not None:
                bar.update(1)
            elif progress:
                print(f"embed: batch {b + 1}/{n_batches}", file=sys.stderr)
    finally:
        close = getattr(source, "close", None)
        if close is not None:
            close()  # stops DataLoader workers at once, also on an error or interruption
        if bar is not None:
            bar.close()
    meta = store.finalize()
    return store, {"computed": len(todo), "reused": n_batches - len(todo), "failed": meta["n_failed"]}

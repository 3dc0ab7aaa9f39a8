"""Embedding a dataset into the cache (:mod:`slics_core.store`): the local pipeline :func:`embed_dataset` (images
decoded in ``DataLoader`` workers, handed over as uint8 or float32 tensors: :func:`image_route`), and the steps it
shares with the Ray backend (:mod:`slics_core.ray_embed`): :func:`begin_run`, :func:`check_embeddings`,
:func:`write_result`.
"""
from __future__ import annotations

import functools
import inspect
import os
import sys

import numpy as np

from slics_core._validation import check_k
from slics_core.errors import FileSystemError
from slics_core.extras import require
from slics_core.images import ImageLoadError, load_image
from slics_core.store import LEGACY_DECODE, EmbeddingStore

__all__ = ["embed_dataset", "default_workers", "TRANSFERS", "image_route", "begin_run", "check_embeddings",
           "write_result"]


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

"""Embedding a dataset into the cache (:mod:`slics_core.store`): the local pipeline :func:`embed_dataset` (images
decoded in ``DataLoader`` workers, handed over as uint8 or float32 tensors, or read there and decoded on the model's
device: :data:`TRANSFERS`, :func:`image_route`, :func:`default_transfer`), and the steps it shares with the Ray
backend (:mod:`slics_core.ray_embed`): :func:`begin_run`, :func:`check_encoder_output`, :func:`write_result`.
"""
from __future__ import annotations

import functools
import inspect
import io
import os
import sys
import traceback
import warnings

import numpy as np
from PIL import Image

from slics_core._validation import check_k
from slics_core.errors import FileSystemError
from slics_core.extras import require
from slics_core.images import MAX_PIXELS, ImageLoadError, load_image
from slics_core.store import LEGACY_DECODE, EmbeddingStore

__all__ = ["embed_dataset", "default_workers", "TRANSFERS", "default_transfer", "image_route", "begin_run",
           "check_encoder_output", "write_result"]


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
            if isinstance(self.transform, _JpegBytes):
                return p, self.transform.read(self.paths[p], self.loader), ""
            image = self.loader(self.paths[p])
        except ImageLoadError as exc:
            return p, None, str(exc)
        return p, self.transform(image), ""


def _collate(items, stack=True):
    """Items of one batch -> ``(positions, stacked tensor (a list with stack=False) or None, failed positions,
    reasons)``."""
    default_collate = require("torch.utils.data").default_collate

    ok = [(p, x) for p, x, _ in items if x is not None]
    failed = [(p, r) for p, x, r in items if x is None]
    # default_collate stacks straight into shared memory in a worker (no extra copy on the way out)
    batch = ([x for _, x in ok] if not stack else default_collate([x for _, x in ok])) if ok else None
    return [p for p, _ in ok], batch, [p for p, _ in failed], [r for _, r in failed]


def _tensor_batches(paths, batches, loader, transform, workers, pin_memory):
    """Preprocessed batches, decoded by ``workers`` DataLoader processes (0: in this process); lists of tensors
    of different shapes on the ``jpeg`` route."""
    DataLoader = require("torch.utils.data").DataLoader

    data = _LoadAndPreprocess(paths, loader, transform)
    kwargs = {"prefetch_factor": 2} if workers > 0 else {}
    collate = functools.partial(_collate, stack=not isinstance(transform, _JpegBytes))
    # persistent_workers=False (the default): the workers stop when the batches run out, and when the
    # iterator is deleted (its __del__); on an early end (the consumer's error or interruption closes this
    # generator) or an error of the loader, ``it`` is the last reference, so deleting it stops them at once
    it = iter(DataLoader(data, batch_sampler=batches, num_workers=workers, collate_fn=collate,
                         pin_memory=pin_memory, persistent_workers=False, **kwargs))
    try:
        yield from it
    except BaseException as exc:
        traceback.clear_frames(exc.__traceback__)  # the loader's frames in the traceback would keep ``it`` alive
        raise
    finally:
        del it


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


#: How an image crosses from a decoding worker to the model: ``uint8`` (the encoder's resize and crop in the
#: worker, scaling and normalisation on the model's device: 3 bytes a pixel), ``float32`` (the encoder's whole
#: preprocessing in the worker: 12 bytes a pixel), both giving the same embeddings; or ``jpeg`` (the worker only
#: reads the file: its compressed bytes cross; the model's device decodes a batch with
#: ``torchvision.io.decode_jpeg``, resizes and crops with torch: see :class:`_JpegBytes` for the files that fall
#: back to the ``uint8`` route). The ``jpeg`` route's resize differs from PIL's by at most 1 in 255 per pixel,
#: so it is recorded in the cache (``decode``) and a cache is always resumed on the route it was begun with.
TRANSFERS = ("uint8", "float32", "jpeg")


def default_transfer(encoder, decode=None):
    """The transfer :func:`embed_dataset` uses when none is given: ``jpeg`` for a cache begun on that route
    (``decode``: its recorded decoding, None for a new cache), else None (:func:`image_route`'s choice: ``uint8``
    where the encoder offers it, else ``float32``).

    The ``jpeg`` route stays opt-in, on the CPU and on CUDA alike: on the CPU decoding in the main process
    serialises what the workers did in parallel, and its speed on a GPU is not measured here (the prepared
    command is in ``benchmarks/README.md``); it also moves the pixels slightly, so a default must not switch a
    user's caches to it unmeasured.
    """
    if decode and decode.get("device_decode"):
        return "jpeg"
    return None


class _JpegBytes:
    """The ``jpeg`` route's worker step: a path -> the file's bytes (a 1-D uint8 tensor) for the device to decode,
    or, for a file the device decoding would not treat as :func:`~slics_core.images.load_image` does, the
    ``uint8`` route's tensor ``(3, H, W)`` of the decoded image (``fallback``).

    Handed over as bytes: a baseline or progressive JPEG (by its content, not its name) in RGB (YCbCr) or grey,
    with no EXIF orientation other than upright, ending in the end-of-image marker, of at most ``max_pixels``
    (:data:`~slics_core.images.MAX_PIXELS`, from the header) and of at most ``3 * max_pixels`` bytes (a file is
    never read whole beyond that). Everything else falls back: PNG, GIF and every other
    format, CMYK/YCCK JPEGs (Pillow converts them differently), EXIF-rotated JPEGs (:func:`load_image` turns
    them upright), truncated JPEGs, JPEGs whose compressed data are damaged (:func:`slics_core._jpeg.jpeg_damage`)
    and unreadable files (:func:`load_image` reports them as every route does).
    A JPEG that the device then cannot decode is decoded by :func:`load_image` in the main process
    (:class:`_DeviceDecode`), so damaged files are reported as failed as on the other routes.
    """

    def __init__(self, fallback, max_pixels=MAX_PIXELS):
        self.fallback = fallback
        self.max_pixels = max_pixels

    def __call__(self, image):
        return self.fallback(image)

    def plain_jpeg(self, data) -> bool:
        """Whether ``data`` (a file's bytes) may be decoded on the device (see the class notes)."""
        from slics_core._jpeg import jpeg_damage  # numba: imported when a JPEG is checked

        if not data.startswith(b"\xff\xd8") or not data.rstrip(b"\0").endswith(b"\xff\xd9"):
            return False
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # the pixel limit here speaks
                im = Image.open(io.BytesIO(data))  # the header only: nothing is decoded
            with im:
                w, h = im.size
                return (im.format == "JPEG" and im.mode in ("RGB", "L") and w * h <= self.max_pixels
                        and im.getexif().get(0x0112, 1) == 1 and jpeg_damage(data) is None)
        except Exception:  # any header Pillow cannot read: load_image names the problem
            return False

    def read(self, path, loader):
        """``path`` -> 1-D uint8 tensor of its bytes, or the fallback's ``(3, H, W)`` tensor of ``loader(path)``."""
        torch = require("torch")

        try:
            with open(path, "rb") as fh:
                # more bytes than the largest image's RGB pixels: not read whole here, load_image judges it
                data = fh.read(3 * self.max_pixels + 1)
        except OSError:
            data = b""  # load_image reports it (missing file, permissions, ...)
        if len(data) > 3 * self.max_pixels:
            data = b""
        if self.plain_jpeg(data):
            return torch.frombuffer(bytearray(data), dtype=torch.uint8)
        return self.fallback(loader(path))


def _device_steps(uint8_transform):
    """The geometric steps of a :class:`~slics_core.encoders.base.UInt8Transform` as steps that also take a batch
    of uint8 tensors: torchvision's ``Resize`` and ``CenterCrop`` (the same objects: their sizes, interpolation
    and antialiasing are the encoder's own), RGB conversions dropped (decoding gives RGB). None when another
    step is there (no ``jpeg`` route for that encoder)."""
    steps = []
    for step in getattr(uint8_transform, "steps", None) or ():
        name, module = type(step).__name__, type(step).__module__
        if name in ("Resize", "CenterCrop") and module.startswith("torchvision."):
            steps.append(step)
        elif "convert" in name.lower() and ("mode" in name.lower() or "rgb" in name.lower()):
            continue
        else:
            return None
    return steps if steps else None


#: Pixels the ``jpeg`` route decodes on the device at once (then resizes and drops): a decoded pixel is 3 bytes,
#: and the antialiased resize holds a few float copies of it, so 16 MP bounds a chunk to a few hundred MB where a
#: batch decoded whole held all its full-size images together (four 100-MP JPEGs: 7.9 GB). An image larger than
#: this is decoded alone.
DEVICE_DECODE_PIXELS = 16 * 2**20


def jpeg_pixels(data) -> int:
    """Pixels of a JPEG from its header (bytes or a 1-D uint8 tensor; nothing is decoded), 0 when unreadable."""
    raw = data if isinstance(data, (bytes, bytearray)) else data.numpy().tobytes()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(raw)) as im:
                return int(im.size[0]) * int(im.size[1])
    except Exception:  # the decoder reports it
        return 0


def pixel_chunks(pixels, budget) -> list:
    """Consecutive runs of indices of ``pixels`` whose sums stay within ``budget`` (an item over it alone)."""
    chunks, current, total = [], [], 0
    for i, n in enumerate(pixels):
        if current and total + n > budget:
            chunks.append(current)
            current, total = [], 0
        current.append(i)
        total += n
    if current:
        chunks.append(current)
    return chunks


class _DeviceDecode:
    """The ``jpeg`` route's main-process step: a batch of the workers' tensors (file bytes or fallback pixels)
    -> one uint8 batch ``(n, 3, S, S)`` on the encoder's device.

    File bytes are decoded together (``torchvision.io.decode_jpeg`` with a list: batched on CUDA), then resized
    and cropped there by the encoder's own steps (images of one size at once). A file the batched call refuses
    is decoded alone, else by ``loader`` and the fallback transform in this process; a file that fails there
    too is returned as failed, with :func:`~slics_core.images.load_image`'s reason.
    """

    def __init__(self, encoder, paths, loader, reader, steps):
        self.device = getattr(encoder, "device", "cpu")
        self.paths, self.loader, self.reader, self.steps = paths, loader, reader, steps

    def _decode(self, raw):
        torchvision_io = require("torchvision.io")

        kw = {"device": self.device, "mode": torchvision_io.ImageReadMode.RGB}
        try:
            return list(torchvision_io.decode_jpeg(raw, **kw))
        except RuntimeError:
            out = []
            for data in raw:
                try:
                    out.append(torchvision_io.decode_jpeg(data, **kw))
                except RuntimeError:
                    out.append(None)
            return out

    def __call__(self, pos, items, fpos, freason):
        torch = require("torch")

        out = [None] * len(items)
        raw = [k for k, x in enumerate(items) if x.ndim == 1]
        for k in range(len(items)):
            if items[k].ndim != 1:
                out[k] = items[k].to(self.device, non_blocking=True)
        # decoded in chunks of at most DEVICE_DECODE_PIXELS full-size pixels, each resized before the next
        for chunk in pixel_chunks([jpeg_pixels(items[k]) for k in raw], DEVICE_DECODE_PIXELS):
            ks = [raw[i] for i in chunk]
            by_shape = {}
            for k, image in zip(ks, self._decode([items[k] for k in ks])):
                if image is None:
                    try:
                        out[k] = self.reader.fallback(self.loader(self.paths[pos[k]])).to(self.device)
                    except ImageLoadError as exc:
                        fpos, freason = fpos + [pos[k]], freason + [str(exc)]
                else:
                    by_shape.setdefault(tuple(image.shape), []).append((k, image))
            for group in by_shape.values():
                x = torch.stack([image for _, image in group])
                for step in self.steps:
                    x = step(x)
                for (k, _), image in zip(group, x):
                    out[k] = image
        keep = [k for k in range(len(items)) if out[k] is not None]
        order = sorted(range(len(fpos)), key=lambda i: fpos[i])
        batch = torch.stack([out[k] for k in keep]) if keep else None
        return [pos[k] for k in keep], batch, [fpos[i] for i in order], [freason[i] for i in order]


def image_route(encoder, transfer=None):
    """``(transform, encode, transfer)`` of an encoder with a tensor-level API, else None.

    ``transform`` (picklable, run by the decoding workers) turns a PIL image
    into the tensor that crosses the process boundary (on the ``jpeg``
    route: a :class:`_JpegBytes`, which reads the file itself and turns only
    the images that fall back into tensors); ``encode`` turns a stacked
    batch of them into ``(n, d)`` embeddings. ``transfer`` (one of
    :data:`TRANSFERS`; default ``uint8`` where the encoder offers
    ``uint8_transform()``, else ``float32``) picks the route.

    Raises
    ------
    ValueError
        An unknown ``transfer``, or ``uint8`` / ``jpeg`` for an encoder that does not offer it.
    """
    if transfer is not None and transfer not in TRANSFERS:
        raise ValueError(f"transfer must be one of {', '.join(TRANSFERS)}; got {transfer!r}.")
    if not (callable(getattr(encoder, "image_transform", None)) and callable(getattr(encoder, "encode_tensors", None))):
        if transfer in ("uint8", "jpeg"):
            raise ValueError(f"encoder {getattr(encoder, 'id', encoder)!r} has no tensor-level API: "
                             f"no {transfer} transfer.")
        return None
    uint8 = getattr(encoder, "uint8_transform", None)
    uint8 = uint8() if callable(uint8) and transfer != "float32" else None
    if uint8 is None and transfer in ("uint8", "jpeg"):
        raise ValueError(f"encoder {getattr(encoder, 'id', encoder)!r} offers no uint8 transform; "
                         "use transfer='float32'.")
    if transfer == "jpeg":
        if _device_steps(uint8) is None:
            raise ValueError(f"encoder {getattr(encoder, 'id', encoder)!r} resizes with steps other than "
                             "torchvision's Resize and CenterCrop: no jpeg transfer; use transfer='uint8'.")
        return _JpegBytes(uint8), encoder.encode_tensors, "jpeg"
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
              overwrite=False, image_loader=None, draft=None, device_decode=False):
    """Check the arguments, create or reopen the cache: ``(store, loader, todo, n_batches)``.

    The first half of :func:`embed_dataset` (whose parameters these are),
    shared with :func:`slics_core.ray_embed.embed_dataset_ray`: ``loader``
    is the image loader the decoding workers use (draft decoding as the
    cache records), ``todo`` the batch indices whose files are missing or
    damaged. ``device_decode``: the ``jpeg`` transfer (full-size decoding,
    recorded in the cache's ``decode``).
    """
    if len(paths) != len(ids):
        raise ValueError(f"{len(paths)} paths for {len(ids)} ids.")
    batch_size = check_k(batch_size, "batch_size")
    if draft not in (None, True, False):
        raise ValueError(f"draft must be True, False or None; got {draft!r}.")
    if device_decode and draft:
        raise ValueError("the jpeg transfer decodes JPEGs at full size on the device: no draft decoding "
                         "(leave draft unset, or use the uint8 transfer).")
    if device_decode and image_loader is not None:
        raise ValueError("the jpeg transfer reads the image files itself: no image_loader (use the uint8 transfer).")
    store = EmbeddingStore(cache_dir)
    draft_size = getattr(encoder, "draft_size", None) if image_loader is None and not device_decode else None
    if draft is None:
        resuming = not overwrite and store.exists()
        draft = bool(store.meta().get("decode", LEGACY_DECODE)["draft_size"]) if resuming else True
    decode = {"draft_size": int(draft_size) if draft and draft_size else None}
    if device_decode:
        decode["device_decode"] = True
    loader = image_loader or functools.partial(load_image, draft=decode["draft_size"], check_data=True)
    store.begin(ids, getattr(encoder, "id", type(encoder).__name__), getattr(encoder, "dim", -1), batch_size,
                preprocessing, dataset_info, overwrite=overwrite, decode=decode)
    if labels is not None:
        store.save_labels(**labels)
    n_batches = -(-len(paths) // batch_size)
    done = store.finished_batches()
    return store, loader, [b for b in range(n_batches) if b not in done], n_batches


def check_encoder_output(E, n):
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
    transfer : {"uint8", "float32", "jpeg"}, optional
        What the workers hand over (:data:`TRANSFERS`): ``uint8`` and
        ``float32`` give the same embeddings; ``jpeg`` (the file's bytes,
        decoded on the encoder's device, full size: no draft decoding)
        moves them slightly and is recorded in the cache. Default:
        :func:`default_transfer` (``jpeg`` when resuming a cache begun on
        it, else ``uint8`` where the encoder offers it).

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
    if transfer is None:
        old = EmbeddingStore(cache_dir)
        transfer = default_transfer(encoder, old.meta().get("decode") if not overwrite and old.exists() else None)
    route = image_route(encoder, transfer)
    store, loader, todo, n_batches = begin_run(paths, ids, encoder, cache_dir, batch_size=batch_size,
                                               preprocessing=preprocessing, dataset_info=dataset_info,
                                               labels=labels, overwrite=overwrite, image_loader=image_loader,
                                               draft=draft, device_decode=transfer == "jpeg")
    batch_size = int(store.meta()["batch_size"])
    batches = [list(range(b * batch_size, min(len(paths), (b + 1) * batch_size))) for b in todo]
    finish = None
    if route is not None:
        transform, encode, _ = route
        source = _tensor_batches(paths, batches, loader, transform, workers, _on_cuda(encoder))
        if isinstance(transform, _JpegBytes):
            finish = _DeviceDecode(encoder, paths, loader, transform, _device_steps(transform.fallback))
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
            if finish is not None and pos:
                pos, inputs, fpos, freason = finish(pos, inputs, fpos, freason)
            E = check_encoder_output(encode(inputs), len(pos)) if pos else None
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

"""The one image decoder: files and uploaded bytes to 8-bit RGB.

:func:`load_image` opens one image file robustly (PNG named .jpg, CMYK,
16-bit, palette/alpha, EXIF orientation) or raises :class:`ImageLoadError`
naming it (the embedding cache skips and reports such files); :func:`list_images`
lists a folder's image files. :func:`upright_rgb` is the one decoding of an
opened image (its pixels, EXIF orientation, :func:`to_rgb`: any Pillow mode to
8-bit RGB) and :func:`decode_cost` the one estimate of the memory a decode
takes, both also used by :mod:`slics_core.explorer.uploads` (the app's
untrusted uploads, decoded from bytes after stricter header checks).

:data:`MAX_PIXELS` (120 megapixels) is the one pixel limit, for dataset images
and uploads alike. Why 120 MP: it accepts every camera image a user brings
(108-MP phone sensors give 12000 x 9000 = 108 MP), and it stays under
Pillow's own hard limit (``2 * Image.MAX_IMAGE_PIXELS``, about 179 MP, above
which Pillow refuses a file with a bare ``DecompressionBombError``), so the
header check here, which names the file and its size, is always the guard
that speaks. A larger limit would never be reached (Pillow refuses first), a
much smaller one would refuse real photos.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

__all__ = [
    "IMAGE_EXTENSIONS",
    "MAX_PIXELS",
    "ImageLoadError",
    "decode_cost",
    "list_images",
    "load_image",
    "to_rgb",
    "upright_rgb",
]

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp")
#: The one pixel limit (width x height) of a decoded image; see the module notes for the choice.
MAX_PIXELS = 120_000_000


class ImageLoadError(ValueError):
    """An image file that cannot be decoded."""



#: Peak bytes per decoded pixel by mode, measured (benchmarks/bench_uploads.py, docs/security.md) and
#: rounded up: the decoded frame (Pillow stores RGB in four bytes), its RGB conversion (16-bit and
#: float images through a float32 copy) and one more copy (EXIF rotation, resizing).
_BYTES_PER_PIXEL = {"1": 11, "L": 11, "P": 11, "I;16": 16, "I;16B": 16, "I;16L": 16, "I;16N": 16, "I": 18, "F": 18}
_DEFAULT_BYTES_PER_PIXEL = 14
#: libwebp decodes into a buffer of its own first.
_FORMAT_EXTRA = {"WEBP": 8}


def _jpeg_scale(size, max_side) -> int:
    """The DCT scale (1, 2, 4 or 8) a JPEG of ``size`` is decoded at for a result of ``max_side``."""
    s = 1
    while max_side is not None and s < 8 and max(size) / (2 * s) >= max_side:
        s *= 2
    return s


def decode_cost(size, mode, fmt, max_side) -> int:
    """Bytes decoding an image of ``size`` and ``mode`` takes (an upper bound measured per mode and
    format): the decoded frame (at the reduced DCT scale of a JPEG), its RGB conversion and one more
    copy (EXIF rotation or resizing)."""
    w, h = size
    if fmt == "JPEG":
        s = _jpeg_scale(size, max_side)
        w, h = -(-w // s), -(-h // s)
    return w * h * (_BYTES_PER_PIXEL.get(mode, _DEFAULT_BYTES_PER_PIXEL) + _FORMAT_EXTRA.get(fmt, 0))


def load_image(path, *, max_pixels=MAX_PIXELS, draft=None, max_decode_bytes=None, check_data=False):
    """Open an image as 8-bit RGB, whatever its format quirks.

    Handles files whose extension lies about the format (PIL reads the
    content), CMYK / YCbCr / palette / grey / alpha images, 16-bit and
    32-bit integer or float images (scaled to 8 bit), and the EXIF
    orientation tag (the pixels are rotated and the tag is dropped).

    Parameters
    ----------
    path : path-like
    max_pixels : int
        Larger images are refused (decompression bombs).
    draft : int, optional
        Smallest side the caller needs (e.g. the model's resize target). A
        JPEG is then decoded at 1/2, 1/4 or 1/8 scale (PIL's
        :meth:`~PIL.Image.Image.draft`: the JPEG decoder skips the fine
        detail, so decoding and the later resize cost less) as long as both
        sides stay at least ``draft`` pixels; other formats are decoded at
        full size.
    max_decode_bytes : int, optional
        Refuse an image whose decoding would take more memory
        (:func:`decode_cost`, judged from the header); the app passes one
        so a huge file in a shared workspace cannot exhaust the server.
    check_data : bool
        Also walk a JPEG's compressed data (:func:`slics_core._jpeg.jpeg_damage`) and refuse one whose data are
        damaged in a way the decoder passes over (it would decode with grey or garbled parts and no error). The
        embedding cache's loader sets it (about one more decode's CPU time; docs/scale.md).

    Raises
    ------
    ImageLoadError
        If the file is missing, not an image, truncated, or larger than
        ``max_pixels``.
    """
    path = os.fspath(path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(path) as im:
                w, h = im.size
                if w * h > max_pixels:
                    raise ImageLoadError(f"{path}: {w}x{h} pixels is larger than the limit of {max_pixels}.")
                if draft and im.format == "JPEG":
                    im.draft("RGB", (int(draft), int(draft)))
                cost = decode_cost(im.size, im.mode, im.format, None)  # (size after any draft)
                if max_decode_bytes is not None and cost > max_decode_bytes:
                    raise ImageLoadError(f"{path}: {w}x{h} pixels ({im.mode}, {im.format}) would take about "
                                         f"{cost / 2**20:.0f} MB to decode, over the {max_decode_bytes / 2**20:.0f} MB "
                                         "allowed here.")
                rgb = upright_rgb(im)
                if check_data and im.format == "JPEG":
                    _refuse_damaged_jpeg(path, w * h)
                return rgb
    except ImageLoadError:
        raise
    except FileNotFoundError:
        raise ImageLoadError(f"{path}: no such file.") from None
    except (UnidentifiedImageError, Image.DecompressionBombError) as exc:
        raise ImageLoadError(f"{path}: not a readable image ({exc.__class__.__name__}).") from None
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        raise ImageLoadError(f"{path}: damaged image ({exc}).") from None


def _refuse_damaged_jpeg(path, pixels) -> None:
    """Raise :class:`ImageLoadError` when the JPEG at ``path`` (``pixels`` large) has damaged compressed data that
    Pillow decoded without a word (its size is checked: at most 3 bytes a pixel and 1 MiB more are read)."""
    from slics_core._jpeg import jpeg_damage  # numba: compiled code, imported when a JPEG is checked

    limit = 3 * pixels + 2**20
    with open(path, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise ImageLoadError(f"{path}: a {len(data)}-byte JPEG file for {pixels} pixels is not a plain JPEG.")
    why = jpeg_damage(data)
    if why is not None:
        raise ImageLoadError(f"{path}: damaged JPEG ({why}): it decodes, with grey or garbled parts.")


def upright_rgb(im):
    """Decode the current frame of the opened image ``im`` (the first, when freshly opened) as upright 8-bit RGB.

    The pixels are decoded (:meth:`PIL.Image.Image.load`, at any reduced scale the caller
    set with ``draft``), turned upright by the EXIF orientation tag, and converted by
    :func:`to_rgb`. An EXIF block that Pillow cannot interpret leaves the pixels as stored
    (the image itself is fine).
    """
    im.load()
    try:
        upright = ImageOps.exif_transpose(im)
    except Exception:
        upright = im
    return to_rgb(upright)


def to_rgb(im):
    """``im`` (any Pillow mode) as an 8-bit RGB image: alpha composited on white, 16/32-bit and float
    images scaled to 8 bit, palette, grey, bilevel, CMYK and YCbCr converted."""
    mode = im.mode
    if mode in ("I;16", "I;16B", "I;16L", "I;16N", "I", "F"):
        # one float32 working copy, scaled in place (a 16-bit value never lands on a .5 tie: float32 is exact
        # enough); float64 temporaries cost 28 bytes a pixel, this 7
        arr = np.array(im, dtype=np.float32)  # a writable copy (an F image's own buffer is read-only)
        if mode == "F":
            lo, hi = float(arr.min()), float(arr.max())
            if hi > lo:
                arr -= lo
                arr *= 255.0 / (hi - lo)
            else:
                arr[:] = 0
        else:
            hi = 65535.0 if mode.startswith("I;16") or arr.max() > 255 else 255.0
            arr *= 255.0 / hi
        np.rint(arr, out=arr)
        np.clip(arr, 0, 255, out=arr)
        im = Image.fromarray(arr.astype(np.uint8), "L")
        del arr
        return im.convert("RGB")
    if mode == "P" and "transparency" in im.info:
        im = im.convert("RGBA")
        mode = "RGBA"
    if mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        rgba = im.convert("RGBA")
        bg = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(bg, rgba).convert("RGB")
    if mode == "RGB":
        return im.copy()
    return im.convert("RGB")


def list_images(folder):
    """All files with an image extension under ``folder`` (recursive, sorted)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"no image folder at {str(folder)!r}")
    return sorted(str(p) for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS)

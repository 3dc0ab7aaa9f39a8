"""Decoding untrusted image uploads (the app's query images).

:func:`load_upload` turns the bytes of an uploaded file into an 8-bit RGB
:class:`PIL.Image.Image`, or raises :class:`UploadError` whose message can be
shown to the user as is. It guards against:

* empty files and files over ``max_bytes`` (checked before decoding);
* files that are not images in an accepted format (text, PDF, archives...):
  only the formats in :data:`ACCEPTED_FORMATS` are even tried, so Pillow
  plug-ins that call external programs (EPS -> Ghostscript) or parse exotic
  containers are never reached;
* decompression bombs: the pixel count in the header is compared with
  ``max_pixels`` *before* any pixel is decoded, and Pillow's own guard
  (:class:`PIL.Image.DecompressionBombWarning` / ``Error``) is turned into an
  :class:`UploadError` too;
* memory: the memory decoding will take (:func:`~slics_core.images.decode_cost`: the decoded
  frame, its RGB conversion and one more copy, at the size it is decoded at) is
  compared with ``max_decode_bytes`` (512 MiB) from the header, so a small
  PNG declaring 110 megapixels is refused before it costs gigabytes; JPEGs
  are judged at the reduced DCT scale they are decoded at;
* truncated or corrupt files (checksums verified with
  :meth:`PIL.Image.Image.verify`, then a full decode).

Conversions (those of :func:`slics_core.images.load_image`, through the one
:func:`~slics_core.images.to_rgb`): EXIF orientation applied, CMYK / YCbCr,
alpha (LA, RGBA, palette with transparency) composited on white, 16/32-bit
integer and float images scaled to 8 bit, greyscale and bilevel, and the
first frame of animated GIF / WebP / APNG.

Large photos are scaled down while they are decoded: a JPEG is decoded at a
reduced DCT scale (``Image.draft``: 1/2, 1/4 or 1/8, never below ``max_side``
on its longer side), so a 100-megapixel phone photo never occupies more than
a few tens of megabytes; other formats are decoded whole and then reduced.
The result's longer side is at most ``max_side`` (2048 px; encoders look at
224-518 px).

Choices: an EXIF block that Pillow cannot interpret leaves the pixels as
stored (the image itself is fine); the default ``max_pixels`` is the one
pixel limit :data:`slics_core.images.MAX_PIXELS` (120 megapixels, why is
written there); between Pillow's warning level (about 89 MP) and
``max_pixels`` the header check here is the guard.
"""
from __future__ import annotations

import io
import warnings

from PIL import Image, UnidentifiedImageError

from slics_core.images import MAX_PIXELS, decode_cost, upright_rgb

__all__ = ["UploadError", "ACCEPTED_FORMATS", "DEFAULT_MAX_BYTES", "DEFAULT_MAX_PIXELS", "DEFAULT_MAX_SIDE",
           "DEFAULT_MAX_DECODE_BYTES", "load_upload", "upload_bytes"]

#: Pillow format names tried when decoding an upload.
ACCEPTED_FORMATS = ("PNG", "JPEG", "GIF", "WEBP", "BMP", "TIFF")  # JPEG covers MPO (multi-picture phone JPEGs)
DEFAULT_MAX_BYTES = 20 * 2**20
DEFAULT_MAX_PIXELS = MAX_PIXELS
DEFAULT_MAX_SIDE = 2048
#: Memory one upload may take to decode (estimated from its header by :func:`decode_cost`).
DEFAULT_MAX_DECODE_BYTES = 512 * 2**20

# magic numbers of common non-image uploads, for a more helpful message
_KNOWN_NON_IMAGES = (
    (b"%PDF", "a PDF document"),
    (b"PK\x03\x04", "a ZIP archive (or an Office document)"),
    (b"\x1f\x8b", "a gzip archive"),
    (b"<svg", "an SVG drawing (vector images are not accepted)"),
    (b"<?xml", "an XML/SVG document"),
)

class UploadError(ValueError):
    """An upload that cannot be used; ``str(exc)`` is a message for the user."""

def _name(filename) -> str:
    return f"“{filename}”" if filename else "The uploaded file"

def _mb(n: int) -> str:
    return f"{n / 2**20:.1f} MB"

def upload_bytes(data) -> bytes:
    """The bytes of ``data``: bytes-like, or an object with ``getvalue()`` / ``read()`` (Streamlit's UploadedFile)."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    if hasattr(data, "getvalue"):
        return bytes(data.getvalue())
    if hasattr(data, "read"):
        return bytes(data.read())
    raise TypeError(f"expected bytes or a file-like object, got {type(data).__name__}")

def _describe_non_image(head: bytes) -> str | None:
    stripped = head.lstrip()
    for magic, what in _KNOWN_NON_IMAGES:
        if stripped.startswith(magic):
            return what
    try:
        text = head[:512].decode("utf-8")
    except UnicodeDecodeError:
        return None
    if text and all(ch.isprintable() or ch in "\r\n\t" for ch in text):
        return "a text file"
    return None

def load_upload(data, filename=None, *, max_bytes: int = DEFAULT_MAX_BYTES,
                max_pixels: int | None = DEFAULT_MAX_PIXELS, max_side: int | None = DEFAULT_MAX_SIDE,
                max_decode_bytes: int | None = DEFAULT_MAX_DECODE_BYTES):
    """Decode an untrusted upload into an 8-bit RGB image.

    Parameters
    ----------
    data : bytes-like or file-like
        The file's content (a Streamlit ``UploadedFile`` works too).
    filename : str, optional
        Only used in messages.
    max_bytes : int, default 20 MiB
        Larger files are refused before decoding.
    max_pixels : int or None, default 120 000 000
        Largest accepted ``width * height``; checked from the header, before
        decoding. ``None`` leaves only Pillow's own decompression-bomb guard
        (which then also raises :class:`UploadError`).
    max_side : int or None, default 2048
        Longest side of the returned image; larger images are scaled down
        (JPEGs while decoding). ``None`` keeps the full size.
    max_decode_bytes : int or None, default 512 MiB
        Memory decoding may take, estimated from the header before any pixel
        is decoded; ``None``: no limit.

    Returns
    -------
    image : PIL.Image.Image
        Mode ``"RGB"``, upright (EXIF orientation applied), first frame of an
        animation, transparency composited on white, longest side at most
        ``max_side``.

    Raises
    ------
    UploadError
        Empty, too large, not an image, truncated/corrupt, or too many pixels.
    """

    raw = upload_bytes(data)
    who = _name(filename)
    if len(raw) == 0:
        raise UploadError(f"{who} is empty (0 bytes).")
    if max_bytes is not None and len(raw) > max_bytes:
        raise UploadError(f"{who} is {_mb(len(raw))}; the limit is {_mb(max_bytes)}. "
                          "Please upload a smaller image.")
    Image.init()
    formats = [f for f in ACCEPTED_FORMATS if f in Image.OPEN]  # a Pillow built without WebP lacks it
    fmt = "image"
    with warnings.catch_warnings():
        # Pillow's decompression-bomb *warning* (between 1x and 2x MAX_IMAGE_PIXELS) becomes an error
        # unless our own header check (max_pixels) is the guard
        warnings.simplefilter("error" if max_pixels is None else "ignore", Image.DecompressionBombWarning)
        try:
            # 1) header + checksums (verify() leaves the image unusable, so it is reopened below)
            with Image.open(io.BytesIO(raw), formats=formats) as probe:
                w, h = probe.size
                fmt = probe.format
                if max_pixels is not None and w * h > max_pixels:
                    raise UploadError(f"{who} is {w}×{h} = {w * h / 1e6:.1f} megapixels; the limit is "
                                      f"{max_pixels / 1e6:.0f} megapixels (possible decompression bomb).")
                if w < 1 or h < 1:
                    raise UploadError(f"{who} has no pixels ({w}×{h}).")
                cost = decode_cost((w, h), probe.mode, fmt, max_side)
                if max_decode_bytes is not None and cost > max_decode_bytes:
                    raise UploadError(f"{who} is {w}×{h} ({w * h / 1e6:.1f} megapixels, {probe.mode}, {fmt}): decoding "
                                      f"it would take about {_mb(cost)} of memory, over the {_mb(max_decode_bytes)} an "
                                      "upload may use; scale it down (or save it as JPEG) and upload it again.")
                probe.verify()
            # 2) decode the first frame
            with Image.open(io.BytesIO(raw), formats=formats) as im:
                if getattr(im, "n_frames", 1) > 1:
                    im.seek(0)
                if max_side is not None and im.format == "JPEG" and max(im.size) > max_side:
                    # decode at the smallest DCT scale that keeps the longer side >= max_side
                    w, h = im.size
                    scale = max_side / max(w, h)
                    im.draft(None, (max(1, int(w * scale + 0.999)), max(1, int(h * scale + 0.999))))
                out = upright_rgb(im)
        except UploadError:
            raise
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
            raise UploadError(f"{who} declares more pixels than can be decoded safely (decompression bomb "
                              f"guard: {exc})") from None
        except UnidentifiedImageError:
            what = _describe_non_image(raw[:2048])
            accepted = ", ".join(formats)
            if what:
                raise UploadError(f"{who} is {what}, not an image. Accepted formats: {accepted}.") from None
            raise UploadError(f"{who} is not an image in an accepted format ({accepted}).") from None
        except MemoryError:
            raise UploadError(f"{who} needs too much memory to decode.") from None
        except (OSError, SyntaxError, ValueError, EOFError, IndexError, TypeError, KeyError) as exc:
            detail = str(exc) or type(exc).__name__
            raise UploadError(f"{who} is truncated or corrupt ({fmt} "
                              f"decoding failed: {detail}).") from None
    if out.mode != "RGB":  # upright_rgb always returns RGB; keep the contract explicit
        out = out.convert("RGB")
    if max_side is not None and max(out.size) > max_side:
        out.thumbnail((max_side, max_side), Image.Resampling.LANCZOS, reducing_gap=3.0)
    return out

"""What every encoder shares: the :class:`Encoder` protocol and the checks and conversions around a forward pass.

The protocol is described in :mod:`slics_core.encoders`. The helpers here check the inputs of
``encode_images`` / ``encode_texts`` (PIL images, strings, batch sizes) with one-line messages, move a
preprocessed batch to the model's device, and turn the model's output into a finite float32 array.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
from PIL import Image

from slics_core._validation import check_k
from slics_core.extras import require

__all__ = ["Encoder", "PILTransform", "UInt8Transform", "check_batch_size", "check_images", "check_texts", "to_numpy",
           "to_device", "resize_size", "split_normalize"]


@runtime_checkable
class Encoder(Protocol):
    """What every encoder provides (see :mod:`slics_core.encoders`)."""

    id: str
    dim: int
    has_text: bool

    def encode_images(self, images: Sequence, batch_size: int = 32) -> np.ndarray: ...

    def encode_texts(self, texts: Sequence[str], batch_size: int = 256) -> np.ndarray: ...


def check_batch_size(batch_size) -> int:
    """A positive integer batch size, else a one-line ValueError (:func:`slics_core._validation.check_k`)."""
    return check_k(batch_size, "batch_size")


def check_images(images) -> list:
    """A list of RGB PIL images (one image alone is wrapped; other modes are converted), else a ValueError."""
    if isinstance(images, Image.Image):
        images = [images]
    if isinstance(images, (str, bytes, os.PathLike)) or not hasattr(images, "__len__"):
        raise ValueError("images must be a list of PIL images (open files with PIL.Image.open first)")
    out = []
    for i, im in enumerate(images):
        if not isinstance(im, Image.Image):
            raise ValueError(f"images[{i}] is a {type(im).__name__}, not a PIL image")
        if im.width < 1 or im.height < 1:
            raise ValueError(f"images[{i}] is empty ({im.width}x{im.height})")
        out.append(im if im.mode == "RGB" else im.convert("RGB"))
    return out


def check_texts(texts) -> list[str]:
    """A list of strings (one string alone is wrapped), else a ValueError naming the culprit."""
    if isinstance(texts, str):
        texts = [texts]
    if not hasattr(texts, "__len__"):
        raise ValueError("texts must be a list of strings")
    out = []
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise ValueError(f"texts[{i}] is a {type(t).__name__}, not a string")
        out.append(t)
    return out


def to_numpy(t) -> np.ndarray:
    """A model output as a float32 NumPy array; NaN or infinite values raise FloatingPointError."""
    arr = t.detach().float().cpu().numpy().astype(np.float32, copy=False)
    if not np.all(np.isfinite(arr)):
        raise FloatingPointError("the encoder produced NaN or infinite values (try float32 / CPU)")
    return arr


def to_device(pixels, device, dtype, normalize=None):
    """Move a (pinned) CPU batch to ``device`` without blocking, then cast it there.

    A ``uint8`` batch (from :class:`UInt8Transform`) is scaled to [0, 1] and
    normalised on ``device`` in float32 with ``normalize = (mean, std)``, as
    torchvision's ``ToTensor`` and ``Normalize`` would have done in the
    worker, and only then cast to ``dtype``: the values are the float32
    route's, while a quarter of the bytes crossed the process boundary and
    the host-to-device copy.
    """
    torch = require("torch")

    if pixels.dtype != torch.uint8:
        return pixels.to(device, non_blocking=True).to(dtype)
    if normalize is None:
        raise ValueError("a uint8 batch needs the encoder's normalisation (mean, std)")
    x = pixels.to(device, non_blocking=True).to(torch.float32).div(255)
    mean, std = (torch.as_tensor(v, dtype=torch.float32, device=x.device).view(-1, 1, 1) for v in normalize)
    return x.sub_(mean).div_(std).to(dtype)


class PILTransform:
    """Picklable ``PIL image -> (3, H, W) float tensor`` of one encoder.

    Checks the image like ``encode_images`` does (PIL, non-empty, converted
    to RGB) and applies the encoder's own preprocessing. It holds only the
    preprocessing (never the model), so DataLoader workers can run it.

    Parameters
    ----------
    transform : callable
        RGB PIL image -> tensor.
    """

    def __init__(self, transform):
        self.transform = transform

    def __call__(self, image):
        return self.transform(check_images([image])[0])


class UInt8Transform:
    """Picklable ``PIL image -> (3, H, W) uint8 tensor``: an encoder's preprocessing up to its ``ToTensor``.

    The geometric steps (resize, crop, mode conversion) run on the PIL image
    in the worker; the scaling and normalisation that followed them run on
    the model's device (:func:`to_device` with the ``(mean, std)`` that
    :func:`split_normalize` found).
    """

    def __init__(self, steps):
        self.steps = list(steps)

    def __call__(self, image):
        torch = require("torch")

        image = check_images([image])[0]
        for step in self.steps:
            image = step(image)
        image = image if image.mode == "RGB" else image.convert("RGB")
        return torch.from_numpy(np.array(image, dtype=np.uint8)).permute(2, 0, 1).contiguous()


def split_normalize(transform):
    """``(UInt8Transform, (mean, std))`` of a ``Compose`` ending in ``ToTensor, Normalize``, else None.

    The steps before ``ToTensor`` must be PIL-level ones (a step whose class
    name mentions ``Tensor`` anywhere else means None: the float32 route is
    kept for such encoders).
    """
    steps = list(getattr(transform, "transforms", ()))
    if len(steps) < 2 or "totensor" not in type(steps[-2]).__name__.lower():
        return None
    norm = steps[-1]
    if type(norm).__name__ != "Normalize" or getattr(norm, "inplace", False):
        return None
    if any("tensor" in type(s).__name__.lower() for s in steps[:-2]):
        return None
    mean, std = tuple(float(v) for v in norm.mean), tuple(float(v) for v in norm.std)
    return UInt8Transform(steps[:-2]), (mean, std)


def resize_size(transform):
    """Largest target side of the first resize step of a torchvision-style transform, else None."""
    for step in getattr(transform, "transforms", ()):
        if "resize" not in type(step).__name__.lower():
            continue
        size = getattr(step, "size", None)
        if isinstance(size, (int, np.integer)):
            return int(size)
        if isinstance(size, (tuple, list)) and size and all(isinstance(v, (int, np.integer)) for v in size):
            return int(max(size))
        return None
    return None

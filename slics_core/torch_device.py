"""The one device and dtype rule of every torch model (encoders, generators).

A model runs on the GPU in half precision when CUDA is available, otherwise on
the CPU in float32; ``device`` and ``half`` override either choice. torch is
imported only when a function is called.
"""
from __future__ import annotations

from slics_core.extras import require

__all__ = ["default_device", "device_dtype"]


def default_device() -> str:
    """``"cuda"`` when a CUDA GPU is usable, else ``"cpu"``."""
    torch = require("torch", "an image encoder or generator")
    return "cuda" if torch.cuda.is_available() else "cpu"


def device_dtype(device=None, half=None):
    """``(torch.device, dtype)`` of a model.

    Parameters
    ----------
    device : str or torch.device, optional
        Default :func:`default_device`.
    half : bool, optional
        float16 when true, float32 when false; default: float16 exactly when the device is CUDA.
    """
    torch = require("torch", "an image encoder or generator")
    device = torch.device(device if device is not None else default_device())
    if half is None:
        half = device.type == "cuda"
    return device, (torch.float16 if half else torch.float32)

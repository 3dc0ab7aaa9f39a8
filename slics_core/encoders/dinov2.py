"""DINOv2 through transformers (``facebook/dinov2-base``): the embedding is the layer-normed CLS token.

As in DINOv2's ``x_norm_clstoken``: the final layer norm is applied to the CLS token of the last
layer. transformers and torch are imported only when a model is built.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from slics_core import weights as _weights
from slics_core.encoders.base import PILTransform, check_batch_size, check_images, to_device, to_numpy
from slics_core.extras import require
from slics_core.torch_device import device_dtype

__all__ = ["DINOv2Encoder"]


class _ProcessorTransform:
    """A transformers image processor applied to one image: ``(3, H, W)`` tensor."""

    def __init__(self, processor):
        self.processor = processor

    def __call__(self, image):
        return self.processor(images=[image], return_tensors="pt")["pixel_values"][0]


class DINOv2Encoder:
    """DINOv2 through transformers; the embedding is the (layer-normed) CLS token.

    Parameters
    ----------
    model : transformers.Dinov2Model
    processor : image processor (e.g. ``BitImageProcessor``)
    id : str
    device, half : optional
    """

    has_text = False

    def __init__(self, model, processor, id: str, device=None, half=None):
        self.device, self.dtype = device_dtype(device, half)
        self.model = model.to(self.device, dtype=self.dtype).eval()
        self.processor = processor
        self.id = id
        self.dim = int(model.config.hidden_size)

    @classmethod
    def from_pretrained(cls, model: str | os.PathLike = "dinov2-base", *, cache_dir=None,
                        allow_download: bool = False, device=None, half=None):
        """Load DINOv2 from a preset name (``"dinov2-base"``), hub repo id or local folder."""
        if os.path.isdir(str(model)):
            folder = Path(model)
            ident = f"dinov2:dir:{folder.resolve()}"
        else:
            name = str(model)
            if name == "facebook/dinov2-base":
                name = "dinov2-base"
            try:
                preset = _weights.get_preset(name)
            except ValueError:
                preset = _weights.ModelPreset(name=name, kind="transformers", repo_id=name,
                                              description=f"DINOv2 ({name})", files=("config.json",))
            folder = _weights.resolve(preset, cache_dir=cache_dir, allow_download=allow_download)
            ident = f"dinov2:{preset.repo_id}"
        transformers = require("transformers", "the DINOv2 encoder")
        AutoImageProcessor, Dinov2Model = transformers.AutoImageProcessor, transformers.Dinov2Model

        model_ = Dinov2Model.from_pretrained(folder, local_files_only=True)
        processor = AutoImageProcessor.from_pretrained(folder, local_files_only=True)
        return cls(model_, processor, ident, device=device, half=half)

    @classmethod
    def random(cls, config=None, processor=None, seed: int = 0, *, device=None, half=None):
        """Randomly initialised DINOv2 of the given ``Dinov2Config`` (default: ViT-B/14 shape)."""
        transformers = require("transformers", "the DINOv2 encoder")
        torch = require("torch")
        Dinov2Config, Dinov2Model = transformers.Dinov2Config, transformers.Dinov2Model
        BitImageProcessor = transformers.BitImageProcessor

        config = config if config is not None else Dinov2Config()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(seed))
            model_ = Dinov2Model(config)
        if processor is None:
            size = int(config.image_size)
            processor = BitImageProcessor(
                size={"shortest_edge": size}, crop_size={"height": size, "width": size},
                do_center_crop=True, image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225])
        return cls(model_, processor, f"dinov2:random-h{config.hidden_size}-seed{int(seed)}",
                   device=device, half=half)

    @property
    def draft_size(self) -> int | None:
        """Smallest side a decoded image needs (the processor's resize target), or None."""
        if not getattr(self.processor, "do_resize", True):
            return None
        size = getattr(self.processor, "size", None) or {}
        if "shortest_edge" in size:
            return int(size["shortest_edge"])
        sides = [int(size[k]) for k in ("height", "width") if k in size]
        return max(sides) if sides else None

    def image_transform(self) -> PILTransform:
        """The per-image preprocessing, ``PIL image -> (3, H, W)`` tensor (picklable, no model)."""
        return PILTransform(_ProcessorTransform(self.processor))

    def encode_tensors(self, pixels) -> np.ndarray:
        """CLS embeddings ``(n, dim)`` float32 of a preprocessed batch ``(n, 3, H, W)``."""
        torch = require("torch")

        with torch.inference_mode():
            res = self.model(pixel_values=to_device(pixels, self.device, self.dtype))
            return to_numpy(res.last_hidden_state[:, 0])

    def encode_images(self, images, batch_size: int = 32) -> np.ndarray:
        """CLS embeddings ``(n, dim)`` float32."""
        images = check_images(images)
        batch_size = check_batch_size(batch_size)
        out = []
        for start in range(0, len(images), batch_size):
            pix = self.processor(images=images[start:start + batch_size], return_tensors="pt")["pixel_values"]
            out.append(self.encode_tensors(pix))
        return np.concatenate(out) if out else np.zeros((0, self.dim), np.float32)

    def encode_texts(self, texts, batch_size: int = 256) -> np.ndarray:
        raise NotImplementedError("DINOv2 is an image-only model; it has no text encoder")

    def __repr__(self) -> str:
        return f"DINOv2Encoder(id={self.id!r}, dim={self.dim}, device={self.device}, dtype={self.dtype})"

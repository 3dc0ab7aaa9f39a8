"""open_clip encoders: real weights by preset or checkpoint, ``local-dir`` folders, random initialisations.

:class:`OpenCLIPEncoder` wraps any open_clip CLIP-like model (presets ``RN50/openai``,
``ViT-B-32/openai``, ``ViT-L-14/openai``, a local checkpoint file, an open_clip ``local-dir`` folder
such as the emoji world's shipped encoders, or a randomly initialised architecture). open_clip and
torch are imported only when a model is built.
"""
from __future__ import annotations

import difflib
import importlib.util
import os
import pickle
import sys
from pathlib import Path

import numpy as np

from slics_core import weights as _weights
from slics_core.encoders.base import (
    PILTransform,
    check_batch_size,
    check_images,
    check_texts,
    resize_size,
    split_normalize,
    to_device,
    to_numpy,
)
from slics_core.errors import refused_pickle_error
from slics_core.extras import require
from slics_core.torch_device import device_dtype

__all__ = ["OpenCLIPEncoder", "shipped_architectures", "unknown_architecture_message"]


def shipped_architectures() -> list[str] | None:
    """The architectures open_clip knows, read without importing open_clip (and torch) when it is not imported
    yet: the ones it ships (its ``model_configs/*.json``); once imported, ``open_clip.list_models()``, which also
    lists configs code added at run time (``open_clip.add_model_config``). None when open_clip is not installed."""
    if "open_clip" in sys.modules:
        return list(sys.modules["open_clip"].list_models())
    spec = importlib.util.find_spec("open_clip")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "model_configs"
    return sorted(p.stem for p in folder.glob("*.json")) if folder.is_dir() else None


def unknown_architecture_message(arch: str, known=None) -> str:
    """The one message for an open_clip architecture open_clip does not have (with the closest names)."""
    known = shipped_architectures() if known is None else known
    close = difflib.get_close_matches(arch, known or (), n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    return (f"unknown open_clip model {arch!r}: {hint}open_clip has {len(known or ())} architectures "
            "(python -c \"import open_clip; print(open_clip.list_models())\"); `slics models` lists the presets")


class OpenCLIPEncoder:
    """A CLIP model from open_clip.

    Use :meth:`from_pretrained` for real weights, :meth:`random` for a randomly
    initialised model of any open_clip architecture (tests, demos).

    Parameters
    ----------
    model : open_clip.CLIP-like module
        Provides ``encode_image`` / ``encode_text``.
    preprocess : callable
        PIL image -> (3, H, W) tensor.
    tokenizer : callable
        list of str -> (n, context) token tensor.
    id : str
        Cache identifier for model + weights.
    device, half : optional
        Defaults: CUDA + float16 when available, else CPU + float32.
    """

    has_text = True

    def __init__(self, model, preprocess, tokenizer, id: str, device=None, half=None):
        self.device, self.dtype = device_dtype(device, half)
        self.model = model.to(self.device, dtype=self.dtype).eval()
        self.preprocess = preprocess
        self.tokenizer = tokenizer
        self.id = id
        self.dim = int(self._infer_dim())

    def _infer_dim(self) -> int:
        torch = require("torch")

        proj = getattr(self.model, "text_projection", None)
        if isinstance(proj, torch.Tensor) and proj.ndim == 2:
            return proj.shape[1]
        visual = getattr(self.model, "visual", None)
        out = getattr(visual, "output_dim", None)
        if out:
            return int(out)
        return int(self.encode_texts(["a"]).shape[1])

    # constructors
    @classmethod
    def from_pretrained(cls, model: str = "ViT-B-32", pretrained: str | os.PathLike | None = "openai",
                        *, cache_dir=None, allow_download: bool = False, device=None, half=None,
                        quick_gelu: bool | None = None):
        """Load an open_clip model with real weights.

        Parameters
        ----------
        model : str or ModelPreset
            open_clip architecture (``"RN50"``, ``"ViT-B-32"``, ``"ViT-L-14"``),
            a preset name ``"ARCH/TAG"`` or a
            :class:`~slics_core.weights.ModelPreset` (then ``pretrained`` is
            ignored).
        pretrained : str, path or ModelPreset
            Pretrained tag (``"openai"``), a local checkpoint file, or a preset.
        cache_dir : path, optional
            Hugging Face hub cache to look in.
        allow_download : bool, default False
            Download missing weights when the network is reachable; otherwise
            missing weights raise :class:`slics_core.weights.MissingWeightsError`
            at once.
        quick_gelu : bool, optional
            Force QuickGELU (needed for OpenAI weights); default: from the
            preset, or ``True`` for a local file whose name mentions
            ``openai``.
        """
        # Weights are located (or reported missing) before the heavy open_clip import.
        if isinstance(model, _weights.ModelPreset) or isinstance(pretrained, _weights.ModelPreset):
            preset = model if isinstance(model, _weights.ModelPreset) else pretrained
            arch, tag = preset.arch, preset
        elif "/" in str(model) and not os.path.exists(str(model)):
            arch, tag = str(model).split("/", 1)
        else:
            arch, tag = str(model), pretrained
        if tag is None:
            raise ValueError("pretrained must be a tag such as 'openai' or a checkpoint file; "
                             "use OpenCLIPEncoder.random() for random weights")
        if isinstance(tag, _weights.ModelPreset):
            path = _weights.resolve(tag, cache_dir=cache_dir, allow_download=allow_download)
            ident = f"open_clip:{tag.name}"
            if quick_gelu is None:
                quick_gelu = tag.quick_gelu
        elif os.path.isfile(str(tag)):
            path = Path(tag)
            ident = f"open_clip:{arch}/file:{path.resolve()}:{path.stat().st_size}"
            if quick_gelu is None:
                quick_gelu = "openai" in path.name.lower()
        elif os.path.exists(str(tag)) or os.sep in str(tag) or str(tag).endswith((".pt", ".bin", ".safetensors")):
            raise FileNotFoundError(f"checkpoint file {tag} does not exist")
        else:
            preset = _weights.get_preset(f"{arch}/{tag}")
            path = _weights.resolve(preset, cache_dir=cache_dir, allow_download=allow_download)
            ident = f"open_clip:{arch}/{tag}"
            if quick_gelu is None:
                quick_gelu = preset.quick_gelu
        open_clip = require("open_clip", "an open_clip encoder")

        if arch not in open_clip.list_models():
            raise ValueError(unknown_architecture_message(arch, open_clip.list_models()))
        try:
            model_, _, preprocess = open_clip.create_model_and_transforms(
                arch, pretrained=str(path), force_quick_gelu=bool(quick_gelu))
        except pickle.UnpicklingError:  # torch's own advice (weights_only=False) is not passed on
            raise refused_pickle_error(path) from None
        tokenizer = open_clip.get_tokenizer(arch)
        return cls(model_, preprocess, tokenizer, ident, device=device, half=half)

    @classmethod
    def from_local_dir(cls, folder, *, device=None, half=None, name: str | None = None):
        """An open_clip ``local-dir`` checkpoint (``open_clip_config.json`` + weights in one folder).

        ``name`` is used in the id instead of the folder (the shipped emoji encoders).
        """
        folder = Path(folder)
        if not (folder / "open_clip_config.json").is_file():
            raise FileNotFoundError(f"no open_clip model in {folder} (missing open_clip_config.json)")
        weights = [folder / f for f in _weights.OPEN_CLIP_FILES if (folder / f).is_file()]
        if not weights:
            raise FileNotFoundError(f"no weights in {folder} (expected one of {', '.join(_weights.OPEN_CLIP_FILES)})")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        open_clip = require("open_clip", "an open_clip encoder")

        try:
            model_, _, preprocess = open_clip.create_model_and_transforms(f"local-dir:{folder}")
        except pickle.UnpicklingError:  # torch's own advice (weights_only=False) is not passed on
            raise refused_pickle_error(weights[0]) from None
        except RuntimeError as exc:  # size mismatch / corrupt file
            raise ValueError(f"could not load the open_clip model in {folder}: {exc}") from exc
        tokenizer = open_clip.get_tokenizer(f"local-dir:{folder}")
        w = weights[0]
        ident = f"open_clip:{name or folder.resolve()}/file:{w.resolve()}:{w.stat().st_size}"
        return cls(model_, preprocess, tokenizer, ident, device=device, half=half)

    @classmethod
    def random(cls, model: str = "ViT-B-32", seed: int = 0, *, device=None, half=None, **model_kwargs):
        """A randomly initialised open_clip model (same classes, no weights).

        ``model`` is any name in ``open_clip.list_models()`` (including configs
        added with ``open_clip.add_model_config``); ``seed`` fixes the weights.
        """
        open_clip = require("open_clip", "an open_clip encoder")
        torch = require("torch")

        if model not in open_clip.list_models():
            raise ValueError(unknown_architecture_message(model, open_clip.list_models()))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(seed))
            model_, _, preprocess = open_clip.create_model_and_transforms(model, pretrained=None, **model_kwargs)
        tokenizer = open_clip.get_tokenizer(model)
        size = model_kwargs.get("force_image_size")
        return cls(model_, preprocess, tokenizer,
                   f"open_clip:{model}/random-seed{int(seed)}" + (f"@{size}" if size else ""),
                   device=device, half=half)

    # encoding
    @property
    def draft_size(self) -> int | None:
        """Smallest side a decoded image needs (the preprocessing's resize target), or None.

        :func:`slics_core.images.load_image` decodes JPEGs at 1/2, 1/4 or
        1/8 scale when both sides stay at least this large.
        """
        size = resize_size(self.preprocess)
        if size is None:
            image_size = getattr(getattr(self.model, "visual", None), "image_size", None)
            if isinstance(image_size, (int, np.integer)):
                size = int(image_size)
            elif isinstance(image_size, (tuple, list)) and image_size:
                size = int(max(image_size))
        return size

    def image_transform(self) -> PILTransform:
        """The per-image preprocessing, ``PIL image -> (3, H, W)`` tensor (picklable, no model)."""
        return PILTransform(self.preprocess)

    def uint8_transform(self):
        """The preprocessing up to its ``ToTensor`` (``PIL image -> (3, H, W)`` uint8), or None.

        :meth:`encode_tensors` finishes a batch of these on the device (see
        :func:`~slics_core.encoders.base.to_device`).
        """
        split = split_normalize(self.preprocess)
        return None if split is None else split[0]

    def encode_tensors(self, pixels) -> np.ndarray:
        """Embeddings ``(n, dim)`` float32 of a preprocessed batch ``(n, 3, H, W)`` (one forward pass).

        ``pixels`` is a CPU tensor (pinned for a fast copy to the GPU) or
        already on the encoder's device: float (from :meth:`image_transform`)
        or uint8 (from :meth:`uint8_transform`, normalised on the device).
        """
        torch = require("torch")

        split = split_normalize(self.preprocess) if pixels.dtype == torch.uint8 else None
        with torch.inference_mode():
            x = to_device(pixels, self.device, self.dtype, None if split is None else split[1])
            return to_numpy(self.model.encode_image(x))

    def encode_images(self, images, batch_size: int = 32) -> np.ndarray:
        """Image embeddings, ``(n, dim)`` float32 (not normalised)."""
        torch = require("torch")

        images = check_images(images)
        batch_size = check_batch_size(batch_size)
        out = []
        for start in range(0, len(images), batch_size):
            batch = [self.preprocess(im) for im in images[start:start + batch_size]]
            out.append(self.encode_tensors(torch.stack(batch)))
        return np.concatenate(out) if out else np.zeros((0, self.dim), np.float32)

    def encode_texts(self, texts, batch_size: int = 256) -> np.ndarray:
        """Text embeddings, ``(n, dim)`` float32 (not normalised)."""
        torch = require("torch")

        texts = check_texts(texts)
        batch_size = check_batch_size(batch_size)
        out = []
        with torch.inference_mode():
            for start in range(0, len(texts), batch_size):
                tokens = self.tokenizer(texts[start:start + batch_size]).to(self.device)
                out.append(to_numpy(self.model.encode_text(tokens)))
        return np.concatenate(out) if out else np.zeros((0, self.dim), np.float32)

    @property
    def text_projection(self) -> np.ndarray | None:
        """The text tower's projection ``(width, dim)`` (``x @ P``), if it has one.

        Used by :class:`slics_core.generators.ImageToPromptSD` to map a joint
        space embedding back to the text transformer's output space.
        """
        torch = require("torch")

        proj = getattr(self.model, "text_projection", None)
        if isinstance(proj, torch.Tensor) and proj.ndim == 2:
            return proj.detach().float().cpu().numpy()
        weight = getattr(proj, "weight", None)  # nn.Linear variant: y = x W^T
        if isinstance(weight, torch.Tensor):
            return weight.detach().float().cpu().numpy().T
        return None

    def __repr__(self) -> str:
        return f"OpenCLIPEncoder(id={self.id!r}, dim={self.dim}, device={self.device}, dtype={self.dtype})"

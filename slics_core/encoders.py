"""Image (and text) encoders that produce the embeddings SLiCS works on.

One small protocol, :class:`Encoder`:

``encode_images(images, batch_size=32) -> (n, d) float32``
    ``images`` is a list of PIL images (anything else is rejected with a
    clear message).
``encode_texts(texts, batch_size=256) -> (n, d) float32``
    Only for models with a text tower (CLIP); image-only models raise
    :class:`NotImplementedError`. ``has_text`` tells which.
``dim``
    Embedding dimension.
``id``
    String naming model *and* weights (e.g. ``"open_clip:ViT-B-32/openai"``),
    suitable as a cache key. Randomly initialised models get ids that say so
    (``"open_clip:RN50/random-seed0"``) so they never collide with real ones.

Implementations:

* :class:`OpenCLIPEncoder` - open_clip models by name and pretrained tag,
  or a local checkpoint file (presets ``RN50/openai``, ``ViT-B-32/openai``,
  ``ViT-L-14/openai``); :func:`concept_text_embeddings` gives zero-shot
  concept text embeddings with the paper's template
  ``"This is a picture of {}."`` or an ensemble of templates.
* :class:`DINOv2Encoder` - DINOv2 through transformers
  (``facebook/dinov2-base``), CLS-token embedding (final layer norm applied,
  as in DINOv2's ``x_norm_clstoken``).
* TiTok: :func:`load_titok_tokens` / :func:`load_titok_codebook` import
  pre-quantisation tokens ``(n, 32, 12)`` and the codebook from ``.npy`` /
  ``.npz`` files; :class:`TiTokEncoder` computes the tokens with a TiTok
  model object the user's environment can import (1d-tokenizer).

Embeddings are returned raw (not normalised): the paper uses raw CLIP
embeddings for zero-shot labels and normalised / centred ones elsewhere;
:mod:`slics_core.preprocessing` does that step. All models run under
``torch.inference_mode()``, on the GPU in half precision when CUDA is
available and on the CPU in float32 otherwise; outputs are always float32
NumPy arrays.
"""
from __future__ import annotations

import importlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence, runtime_checkable

import numpy as np

from slics_core import weights as _weights
from slics_core.extras import require
from slics_core.rows import unit_rows

__all__ = [
    "Encoder",
    "OpenCLIPEncoder",
    "DINOv2Encoder",
    "TiTokEncoder",
    "PAPER_TEMPLATE",
    "ENSEMBLE_TEMPLATES",
    "concept_text_embeddings",
    "load_titok_tokens",
    "load_titok_codebook",
    "default_device",
    "EMOJI_ENCODERS",
    "EncoderSpec",
    "parse_encoder_spec",
    "create_encoder",
    "encoder_spec_of",
]

#: The prompt template of the paper (sec. 3.5).
PAPER_TEMPLATE = "This is a picture of {}."

#: A small ensemble of photo-style templates (used with ``templates="ensemble"``).
ENSEMBLE_TEMPLATES = (
    "This is a picture of {}.",
    "a photo of {}.",
    "a photo of the {}.",
    "a close-up photo of {}.",
    "a cropped photo of {}.",
    "a bright photo of {}.",
    "a dark photo of {}.",
    "a blurry photo of {}.",
    "a good photo of {}.",
    "an image containing {}.",
)


@runtime_checkable
class Encoder(Protocol):
    """What every encoder provides (see the module docstring)."""

    id: str
    dim: int
    has_text: bool

    def encode_images(self, images: Sequence, batch_size: int = 32) -> np.ndarray: ...

    def encode_texts(self, texts: Sequence[str], batch_size: int = 256) -> np.ndarray: ...


# ----------------------------------------------------------------- utilities
def default_device():
    """``"cuda"`` when a CUDA GPU is usable, else ``"cpu"``."""
    torch = require("torch", "an image encoder")

    return "cuda" if torch.cuda.is_available() else "cpu"


def _device_dtype(device=None, half=None):
    import torch

    device = torch.device(device if device is not None else default_device())
    if half is None:
        half = device.type == "cuda"
    return device, (torch.float16 if half else torch.float32)


def _check_batch_size(batch_size) -> int:
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    return int(batch_size)


def _check_images(images) -> list:
    from PIL import Image

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


def _check_texts(texts) -> list[str]:
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


def _to_numpy(t) -> np.ndarray:
    arr = t.detach().float().cpu().numpy().astype(np.float32, copy=False)
    if not np.all(np.isfinite(arr)):
        raise FloatingPointError("the encoder produced NaN or infinite values (try float32 / CPU)")
    return arr


def _to_device(pixels, device, dtype):
    """Move a (pinned) CPU batch to ``device`` without blocking, then cast it there."""
    return pixels.to(device, non_blocking=True).to(dtype)


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
        return self.transform(_check_images([image])[0])


def _resize_size(transform):
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


# ------------------------------------------------------------------ open_clip
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
        self.device, self.dtype = _device_dtype(device, half)
        self.model = model.to(self.device, dtype=self.dtype).eval()
        self.preprocess = preprocess
        self.tokenizer = tokenizer
        self.id = id
        self.dim = int(self._infer_dim())

    def _infer_dim(self) -> int:
        import torch

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
            raise ValueError(f"unknown open_clip model {arch!r}")
        model_, _, preprocess = open_clip.create_model_and_transforms(
            arch, pretrained=str(path), force_quick_gelu=bool(quick_gelu))
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
        import torch

        if model not in open_clip.list_models():
            raise ValueError(f"unknown open_clip model {model!r}")
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
        size = _resize_size(self.preprocess)
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

    def encode_tensors(self, pixels) -> np.ndarray:
        """Embeddings ``(n, dim)`` float32 of a preprocessed batch ``(n, 3, H, W)`` (one forward pass).

        ``pixels`` is a CPU tensor (pinned for a fast copy to the GPU) or
        already on the encoder's device.
        """
        import torch

        with torch.inference_mode():
            return _to_numpy(self.model.encode_image(_to_device(pixels, self.device, self.dtype)))

    def encode_images(self, images, batch_size: int = 32) -> np.ndarray:
        """Image embeddings, ``(n, dim)`` float32 (not normalised)."""
        import torch

        images = _check_images(images)
        batch_size = _check_batch_size(batch_size)
        out = []
        for start in range(0, len(images), batch_size):
            out.append(self.encode_tensors(torch.stack([self.preprocess(im) for im in images[start:start + batch_size]])))
        return np.concatenate(out) if out else np.zeros((0, self.dim), np.float32)

    def encode_texts(self, texts, batch_size: int = 256) -> np.ndarray:
        """Text embeddings, ``(n, dim)`` float32 (not normalised)."""
        import torch

        texts = _check_texts(texts)
        batch_size = _check_batch_size(batch_size)
        out = []
        with torch.inference_mode():
            for start in range(0, len(texts), batch_size):
                tokens = self.tokenizer(texts[start:start + batch_size]).to(self.device)
                out.append(_to_numpy(self.model.encode_text(tokens)))
        return np.concatenate(out) if out else np.zeros((0, self.dim), np.float32)

    @property
    def text_projection(self) -> np.ndarray | None:
        """The text tower's projection ``(width, dim)`` (``x @ P``), if it has one.

        Used by :class:`slics_core.generators.ImageToPromptSD` to map a joint
        space embedding back to the text transformer's output space.
        """
        import torch

        proj = getattr(self.model, "text_projection", None)
        if isinstance(proj, torch.Tensor) and proj.ndim == 2:
            return proj.detach().float().cpu().numpy()
        weight = getattr(proj, "weight", None)  # nn.Linear variant: y = x W^T
        if isinstance(weight, torch.Tensor):
            return weight.detach().float().cpu().numpy().T
        return None

    def __repr__(self) -> str:
        return f"OpenCLIPEncoder(id={self.id!r}, dim={self.dim}, device={self.device}, dtype={self.dtype})"


def concept_text_embeddings(encoder, concepts: Sequence[str], templates="paper",
                            batch_size: int = 256) -> np.ndarray:
    """Zero-shot text embeddings of concept words, one unit-norm row per concept.

    Each concept is put in every template; the template embeddings are
    L2-normalised, averaged, and the average is normalised again (the usual
    CLIP prompt ensemble; with one template this is just its unit-norm
    embedding).

    Parameters
    ----------
    encoder : Encoder with ``has_text``
    concepts : list of str
    templates : "paper", "ensemble", str or list of str
        ``"paper"`` is ``["This is a picture of {}."]``; ``"ensemble"`` is
        :data:`ENSEMBLE_TEMPLATES`; a string or list is used as given (each
        template must contain ``{}``).

    Returns
    -------
    W : ndarray of shape (len(concepts), encoder.dim), float32, unit-norm rows
    """
    if not getattr(encoder, "has_text", False):
        raise ValueError(f"{getattr(encoder, 'id', encoder)!r} has no text encoder; "
                         "zero-shot concept embeddings need a CLIP model")
    concepts = _check_texts(concepts)
    if not concepts:
        raise ValueError("concepts is empty")
    if isinstance(templates, str):
        templates = {"paper": [PAPER_TEMPLATE], "ensemble": list(ENSEMBLE_TEMPLATES)}.get(templates, [templates])
    templates = _check_texts(templates)
    if not templates:
        raise ValueError("templates is empty")
    for t in templates:
        if "{}" not in t:
            raise ValueError(f"template {t!r} has no '{{}}' placeholder for the concept word")
    prompts = [t.format(c) for c in concepts for t in templates]
    E = encoder.encode_texts(prompts, batch_size=batch_size).astype(np.float64)
    E = unit_rows(E, zero="keep", tol=1e-12)
    W = E.reshape(len(concepts), len(templates), -1).mean(axis=1)
    W = unit_rows(W, zero="keep", tol=1e-12)
    return W.astype(np.float32)


# ---------------------------------------------------------------------- DINOv2
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
        self.device, self.dtype = _device_dtype(device, half)
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
        require("transformers", "the DINOv2 encoder")
        from transformers import AutoImageProcessor, Dinov2Model

        model_ = Dinov2Model.from_pretrained(folder, local_files_only=True)
        processor = AutoImageProcessor.from_pretrained(folder, local_files_only=True)
        return cls(model_, processor, ident, device=device, half=half)

    @classmethod
    def random(cls, config=None, processor=None, seed: int = 0, *, device=None, half=None):
        """Randomly initialised DINOv2 of the given ``Dinov2Config`` (default: ViT-B/14 shape)."""
        require("transformers", "the DINOv2 encoder")
        import torch
        from transformers import BitImageProcessor, Dinov2Config, Dinov2Model

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
        import torch

        with torch.inference_mode():
            res = self.model(pixel_values=_to_device(pixels, self.device, self.dtype))
            return _to_numpy(res.last_hidden_state[:, 0])

    def encode_images(self, images, batch_size: int = 32) -> np.ndarray:
        """CLS embeddings ``(n, dim)`` float32."""
        images = _check_images(images)
        batch_size = _check_batch_size(batch_size)
        out = []
        for start in range(0, len(images), batch_size):
            pix = self.processor(images=images[start:start + batch_size], return_tensors="pt")["pixel_values"]
            out.append(self.encode_tensors(pix))
        return np.concatenate(out) if out else np.zeros((0, self.dim), np.float32)

    def encode_texts(self, texts, batch_size: int = 256) -> np.ndarray:
        raise NotImplementedError("DINOv2 is an image-only model; it has no text encoder")

    def __repr__(self) -> str:
        return f"DINOv2Encoder(id={self.id!r}, dim={self.dim}, device={self.device}, dtype={self.dtype})"


# ----------------------------------------------------------------------- TiTok
def _per_token_normalise(tokens: np.ndarray) -> np.ndarray:
    """Per-token L2 normalisation via :mod:`slics_core.preprocessing`."""
    from slics_core import preprocessing

    fn = getattr(preprocessing, "normalize_tokens", None)
    if fn is None:  # pragma: no cover - depends on the lead's module
        raise ImportError("slics_core.preprocessing has no per-token normaliser (normalize_tokens)")
    return fn(tokens)


def _read_array(path, key, what):
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} file {path} does not exist")
    try:
        data = np.load(path, allow_pickle=False)
    except Exception as exc:
        raise ValueError(f"{path} is not a readable .npy/.npz file ({exc})") from None
    if isinstance(data, np.lib.npyio.NpzFile):
        with data:
            keys = list(data.keys())
            if key is None:
                if len(keys) != 1:
                    raise ValueError(f"{path} holds arrays {keys}; say which one with key=")
                key = keys[0]
            if key not in keys:
                raise ValueError(f"{path} has no array {key!r} (it has {keys})")
            return np.asarray(data[key])
    return np.asarray(data)


def load_titok_tokens(path, key: str | None = None, n_tokens: int = 32, token_dim: int = 12,
                      normalize: bool = True) -> np.ndarray:
    """Import TiTok pre-quantisation token embeddings.

    Parameters
    ----------
    path : path to ``.npy`` or ``.npz``
        Array of shape ``(n, n_tokens, token_dim)``, ``(n, n_tokens*token_dim)``
        or TiTok's own layout ``(n, token_dim, 1, n_tokens)``.
    key : str, optional
        Array name inside an ``.npz`` (default ``"tokens"`` if present, else
        the only array).
    normalize : bool, default True
        L2-normalise each token (sec. 4.1 of the paper).

    Returns
    -------
    X : ndarray of shape (n, n_tokens * token_dim), float32
        Tokens concatenated in order.
    """
    if key is None and str(path).endswith(".npz") and Path(path).is_file():
        try:
            with np.load(path, allow_pickle=False) as z:
                key = "tokens" if "tokens" in z.files else None
        except Exception:
            key = None
    arr = _read_array(path, key, "TiTok tokens")
    tokens = _titok_layout(arr, n_tokens, token_dim, source=str(path))
    if normalize:
        tokens = np.asarray(_per_token_normalise(tokens), dtype=np.float64)
    return tokens.reshape(len(tokens), n_tokens * token_dim).astype(np.float32)


def _titok_layout(arr: np.ndarray, n_tokens: int, token_dim: int, source: str) -> np.ndarray:
    if not np.issubdtype(arr.dtype, np.number):
        raise ValueError(f"{source}: expected numbers, got dtype {arr.dtype}")
    arr = arr.astype(np.float64)
    if arr.ndim == 4 and arr.shape[1:] == (token_dim, 1, n_tokens):
        arr = arr[:, :, 0, :].transpose(0, 2, 1)
    elif arr.ndim == 2 and arr.shape[1] == n_tokens * token_dim:
        arr = arr.reshape(len(arr), n_tokens, token_dim)
    if arr.ndim != 3 or arr.shape[1:] != (n_tokens, token_dim):
        raise ValueError(f"{source}: expected shape (n, {n_tokens}, {token_dim}), got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{source}: tokens contain NaN or infinite values")
    return arr


def load_titok_codebook(path, key: str | None = None, token_dim: int | None = 12, normalize: bool = True) -> np.ndarray:
    """Import the TiTok codebook ``(K, token_dim)`` (rows L2-normalised by default; ``token_dim=None``: any width)."""
    if key is None and str(path).endswith(".npz") and Path(path).is_file():
        try:
            with np.load(path, allow_pickle=False) as z:
                key = "codebook" if "codebook" in z.files else None
        except Exception:
            key = None
    C = _read_array(path, key, "TiTok codebook")
    if C.ndim != 2 or (token_dim is not None and C.shape[1] != token_dim) or len(C) == 0 or C.shape[1] == 0:
        raise ValueError(f"{path}: expected a codebook of shape (K, {token_dim or 'token_dim'}), got {C.shape}")
    if not np.issubdtype(C.dtype, np.number):
        raise ValueError(f"{path}: expected numbers in the codebook, got dtype {C.dtype}")
    C = C.astype(np.float64)
    if not np.all(np.isfinite(C)):
        raise ValueError(f"{path}: codebook contains NaN or infinite values")
    if normalize:
        C = np.asarray(_per_token_normalise(C[:, None, :]))[:, 0, :]
    return C.astype(np.float32)


class _ResizeToUnit:
    """PIL image -> ``(3, size, size)`` float tensor in ``[0, 1]`` (bicubic resize, TiTok's input)."""

    def __init__(self, size):
        self.size = int(size)

    def __call__(self, image):
        import torch

        arr = np.asarray(image.resize((self.size, self.size), resample=3), dtype=np.float32) / 255.0
        return torch.from_numpy(arr).permute(2, 0, 1)


class TiTokEncoder:
    """Adapter computing TiTok pre-quantisation tokens with a TiTok model object.

    ``titok`` is a model from the TiTok code base (``modeling.titok.TiTok`` of
    bytedance/1d-tokenizer) or anything with the same parts: ``encoder``
    called as ``encoder(pixel_values=x, latent_tokens=latent_tokens)`` and
    returning ``(B, token_dim, 1, n_tokens)``, and ``latent_tokens``.
    Images are resized to ``image_size`` and scaled to ``[0, 1]``.
    The embedding is the per-token-normalised concatenation, ``dim =
    n_tokens * token_dim`` (384 for TiTok-L-32).
    """

    has_text = False

    def __init__(self, titok, image_size: int = 256, id: str = "titok", device=None, half=None):
        if not hasattr(titok, "encoder") or not hasattr(titok, "latent_tokens"):
            raise ValueError("titok must have .encoder and .latent_tokens (a TiTok model)")
        self.device, self.dtype = _device_dtype(device, half)
        self.titok = titok.to(self.device, dtype=self.dtype).eval()
        self.image_size = int(image_size)
        self.id = id
        self.n_tokens = int(titok.latent_tokens.shape[0])
        self.token_dim = None
        self.dim = None
        from PIL import Image

        probe = self._raw_tokens([Image.new("RGB", (self.image_size, self.image_size))])
        self.token_dim = probe.shape[2]
        self.dim = self.n_tokens * self.token_dim

    @property
    def draft_size(self) -> int:
        """Smallest side a decoded image needs (``image_size``)."""
        return self.image_size

    def image_transform(self) -> PILTransform:
        """The per-image preprocessing, ``PIL image -> (3, S, S)`` tensor in ``[0, 1]`` (picklable)."""
        return PILTransform(_ResizeToUnit(self.image_size))

    def _tokens_from_pixels(self, pixels) -> np.ndarray:
        import torch

        with torch.inference_mode():
            z = self.titok.encoder(pixel_values=_to_device(pixels, self.device, self.dtype),
                                   latent_tokens=self.titok.latent_tokens)
        z = _to_numpy(z)
        if z.ndim != 4 or z.shape[2] != 1 or z.shape[3] != self.n_tokens:
            raise ValueError(f"TiTok encoder returned shape {z.shape}, expected (B, d, 1, {self.n_tokens})")
        return z[:, :, 0, :].transpose(0, 2, 1)  # (B, n_tokens, token_dim)

    def _raw_tokens(self, images) -> np.ndarray:
        import torch

        resize = _ResizeToUnit(self.image_size)
        return self._tokens_from_pixels(torch.stack([resize(im) for im in images]))

    def encode_tokens(self, images, batch_size: int = 32) -> np.ndarray:
        """Raw pre-quantisation tokens ``(n, n_tokens, token_dim)``."""
        images = _check_images(images)
        batch_size = _check_batch_size(batch_size)
        out = [self._raw_tokens(images[s:s + batch_size]) for s in range(0, len(images), batch_size)]
        return np.concatenate(out) if out else np.zeros((0, self.n_tokens, self.token_dim), np.float32)

    def _normalised(self, tokens) -> np.ndarray:
        normed = np.asarray(_per_token_normalise(tokens.astype(np.float64)))
        return normed.reshape(len(tokens), -1).astype(np.float32)

    def encode_tensors(self, pixels) -> np.ndarray:
        """Per-token-normalised, concatenated tokens ``(n, dim)`` of a batch from :meth:`image_transform`."""
        return self._normalised(self._tokens_from_pixels(pixels))

    def encode_images(self, images, batch_size: int = 32) -> np.ndarray:
        """Per-token-normalised, concatenated tokens ``(n, dim)``."""
        return self._normalised(self.encode_tokens(images, batch_size))

    @property
    def codebook(self):
        """The model's quantizer codebook ``(K, token_dim)``, rows L2-normalised, or None.

        Read from ``titok.quantize.embedding.weight`` (TiTok's ``VectorQuantizer``) or a
        ``titok.codebook`` array/tensor; ``slics embed`` stores it with the cache so that
        ``slics evaluate`` can also score quantized pools (Table 3).
        """
        C = getattr(getattr(getattr(self.titok, "quantize", None), "embedding", None), "weight", None)
        if C is None:
            C = getattr(self.titok, "codebook", None)
        if C is None:
            return None
        C = np.asarray(_to_numpy(C) if hasattr(C, "detach") else C, dtype=np.float64)
        if C.ndim != 2 or C.shape[1] != self.token_dim:
            raise ValueError(f"TiTok codebook has shape {C.shape}, expected (K, {self.token_dim})")
        return np.asarray(_per_token_normalise(C[:, None, :]))[:, 0, :].astype(np.float32)

    def encode_texts(self, texts, batch_size: int = 256) -> np.ndarray:
        raise NotImplementedError("TiTok is an image tokenizer; it has no text encoder")


# ---------------------------------------------------------------------- the encoder resolver
#: Shipped encoders of the offline emoji world (open_clip ``local-dir`` checkpoints in ``assets/models``).
EMOJI_ENCODERS = ("emoji-small", "emoji-large")
_RANDOM = re.compile(r"^(?P<arch>[^/@:]+)/random(?:@(?P<size>\d+))?$")
_FACTORY = re.compile(r"^(?P<mod>[A-Za-z_][\w.]*):(?P<attr>[A-Za-z_]\w*)$")
_CHECKPOINT_SUFFIXES = (".pt", ".pth", ".bin", ".safetensors")


@dataclass(frozen=True)
class EncoderSpec:
    """A parsed encoder name (see :func:`parse_encoder_spec`).

    Attributes
    ----------
    kind : {"emoji", "preset", "random", "local", "checkpoint", "factory"}
    text : str
        Canonical spelling; :func:`create_encoder` of it gives the same encoder again.
    arch, tag, path, image_size, module, attr : parts used by the kind.
    """

    kind: str
    text: str
    arch: str | None = None
    tag: str | None = None
    path: str | None = None
    image_size: int | None = None
    module: str | None = None
    attr: str | None = None

    @property
    def is_code(self) -> bool:
        """Whether resolving it imports and calls arbitrary Python code (``module:factory``)."""
        return self.kind == "factory"


def parse_encoder_spec(spec) -> EncoderSpec:
    """Parse an encoder name; the only place where encoder names are read.

    Accepted forms
    --------------
    ``emoji-small`` / ``emoji-large``
        The offline emoji world's CLIP models, shipped in ``assets/models``.
    ``ARCH/TAG`` (``ViT-B-32/openai``, ``RN50/openai``, ``ViT-L-14/openai``, any open_clip
    ``ARCH/TAG``) and ``dinov2-base``
        Real weights (:mod:`slics_core.weights`; ``slics download NAME`` fetches them).
    ``ARCH/random`` or ``ARCH/random@SIZE``
        A real open_clip architecture with random weights (seed 0, so the same spec
        gives the same encoder), optionally at input size ``SIZE`` pixels: dry runs, tests.
    ``local:DIR``
        An open_clip ``local-dir`` folder (``open_clip_config.json`` + weights).
    ``ARCH/PATH`` with ``PATH`` a checkpoint file (``.pt``, ``.bin``, ``.safetensors``)
        open_clip architecture ``ARCH`` with the weights in ``PATH``.
    ``module:factory``
        ``factory()`` from an importable module returns the encoder (your own model).
        Only from the command line or Python (``trusted=True``), never from a data file.

    Raises
    ------
    ValueError
        Not one of these forms (the message lists them).
    """
    if isinstance(spec, EncoderSpec):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"encoder name must be a non-empty string, got {spec!r}")
    text = spec.strip()
    if text in EMOJI_ENCODERS:
        return EncoderSpec("emoji", text, arch=text)
    if text.startswith("local:"):
        path = os.path.abspath(os.path.expanduser(text[len("local:"):]))
        return EncoderSpec("local", f"local:{path}", path=path)
    m = _RANDOM.match(text)
    if m:
        size = int(m["size"]) if m["size"] else None
        if size is not None and not 16 <= size <= 1024:
            raise ValueError(f"encoder {text!r}: image size must be between 16 and 1024 pixels")
        return EncoderSpec("random", text, arch=m["arch"], image_size=size)
    m = _FACTORY.match(text)
    if m and "/" not in text:
        return EncoderSpec("factory", text, module=m["mod"], attr=m["attr"])
    if "/" in text:
        arch, tag = text.split("/", 1)
        if tag.lower().endswith(_CHECKPOINT_SUFFIXES) or os.sep in tag or tag.startswith("~"):
            path = os.path.abspath(os.path.expanduser(tag))
            return EncoderSpec("checkpoint", f"{arch}/{path}", arch=arch, path=path)
        if arch and tag:
            return EncoderSpec("preset", text, arch=arch, tag=tag)
    if text.lower() in {k.lower() for k in _weights.PRESETS}:
        return EncoderSpec("preset", _weights.get_preset(text).name)
    raise ValueError(f"unknown encoder {text!r}: use a preset (ViT-B-32/openai, RN50/openai, ViT-L-14/openai, "
                     "dinov2-base, emoji-small, emoji-large), ARCH/random[@SIZE], local:DIR, ARCH/CHECKPOINT.pt "
                     "or module:factory")


def create_encoder(spec, *, trusted: bool = True, device=None, half=None, cache_dir=None,
                   allow_download: bool = False):
    """The encoder named by ``spec`` (see :func:`parse_encoder_spec` for the forms).

    Parameters
    ----------
    spec : str or EncoderSpec
    trusted : bool, default True
        ``False`` for names read from data (embedding caches, workspace files, URLs):
        ``module:factory`` is then refused, so a data file can never make the program
        import and call code.
    device, half : see :class:`OpenCLIPEncoder`.
    cache_dir, allow_download : see :func:`slics_core.weights.resolve`.

    Returns
    -------
    encoder
        Has ``encode_images``, ``dim``, ``id`` and ``spec`` (the canonical name, which
        resolves back to the same encoder); CLIP models also ``encode_texts``.

    Raises
    ------
    ValueError
        Unknown form, or ``module:factory`` with ``trusted=False``.
    FileNotFoundError
        Weights, folder, file or module missing (the message says how to get them).
    """
    s = parse_encoder_spec(spec)
    if s.kind == "factory":
        if not trusted:
            raise ValueError(f"encoder {s.text!r} names Python code (module:factory); such names are accepted "
                             "only on the command line or from Python, not from data files or links")
        try:
            module = importlib.import_module(s.module)
        except ImportError as exc:
            raise FileNotFoundError(f"encoder {s.text!r}: cannot import module {s.module!r} ({exc})") from None
        factory = getattr(module, s.attr, None)
        if factory is None:
            raise ValueError(f"encoder {s.text!r}: module {s.module!r} has no {s.attr!r}")
        enc = factory() if callable(factory) else factory
    elif s.kind == "emoji":
        folder = _weights.EMOJI_MODELS_DIR / s.text
        enc = OpenCLIPEncoder.from_local_dir(folder, device=device, half=half, name=s.text)
    elif s.kind == "local":
        enc = OpenCLIPEncoder.from_local_dir(s.path, device=device, half=half)
    elif s.kind == "random":
        kw = {"force_image_size": s.image_size} if s.image_size else {}
        enc = OpenCLIPEncoder.random(s.arch, seed=0, device=device, half=half, **kw)
    elif s.kind == "checkpoint":
        if not os.path.isfile(s.path):
            raise FileNotFoundError(f"encoder {s.text!r}: checkpoint file {s.path} does not exist")
        enc = OpenCLIPEncoder.from_pretrained(s.arch, s.path, cache_dir=cache_dir, device=device, half=half)
    else:
        preset = _weights.get_preset(s.text)
        if preset.kind == "open_clip":
            enc = OpenCLIPEncoder.from_pretrained(f"{preset.arch}/{preset.tag}", cache_dir=cache_dir,
                                                  allow_download=allow_download, device=device, half=half)
        elif preset.kind == "transformers":
            enc = DINOv2Encoder.from_pretrained(preset.name, cache_dir=cache_dir,
                                                allow_download=allow_download, device=device, half=half)
        else:
            raise ValueError(f"{preset.name!r} is a generator, not an encoder")
    if not hasattr(enc, "encode_images"):
        raise ValueError(f"encoder {s.text!r} has no encode_images method")
    try:
        enc.spec = s.text
    except AttributeError:  # a user object that refuses new attributes
        pass
    return enc


def encoder_spec_of(meta: dict) -> str | None:
    """The encoder name recorded in an embedding cache's ``meta.json`` (None when it names none).

    Caches written by ``slics embed`` record the name as given (``encoder_spec``); older
    ones only the encoder's ``id`` (``open_clip:ViT-B-32/openai``), read back here.
    """
    spec = (meta.get("dataset") or {}).get("encoder_spec") or meta.get("encoder_spec")
    if spec:
        return str(spec)
    ident = str(meta.get("encoder_id") or "")
    if ident.startswith("open_clip:"):
        rest = ident[len("open_clip:"):]
        if "/file:" not in rest and "/random-seed" not in rest:
            return rest
        if rest.split("/", 1)[0] in EMOJI_ENCODERS:
            return rest.split("/", 1)[0]
    if ident == "dinov2:facebook/dinov2-base":
        return "dinov2-base"
    return None

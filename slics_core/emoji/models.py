"""The emoji world's CLIP-style encoders: open_clip configs, loading, embedding.

Both encoders are ordinary open_clip models built from the custom configs
below and stored as open_clip "local-dir" folders (``open_clip_config.json`` +
``open_clip_model.safetensors`` in half precision) under ``assets/models/``::

    open_clip.create_model_and_transforms("local-dir:assets/models/emoji-small")
    open_clip.get_tokenizer("local-dir:assets/models/emoji-small")

so they load through exactly the code path of a real CLIP checkpoint.
:func:`load_emoji_clip` does this and checks the result.
"""
from __future__ import annotations

import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path

import numpy as np

from slics_core.emoji.catalog import MODELS_DIR, SUPERCATEGORIES
from slics_core.errors import damaged_file_error
from slics_core.extras import require
from slics_core.formats import atomic_write_bytes
from slics_core.rows import unit_rows

__all__ = [
    "EMOJI_CLIP_CONFIGS",
    "PREPROCESS_CFG",
    "model_dir",
    "create_emoji_clip",
    "load_emoji_clip",
    "save_emoji_clip",
    "images_to_tensor",
    "encode_images",
    "encode_texts",
    "zero_shot_scores",
    "precision_at_2",
    "weights_digest",
]

#: open_clip model configs. "small" (the ViT-B/32 analogue, for retrieval) is a small ModifiedResNet:
#: at 64 px a convolutional tower learns the sprites far faster than a patch-16 ViT on a CPU
#: budget (docs/emoji_world.md); "large" (the ViT-L/14 analogue, conditions the generator) is a
#: wider ResNet with a wider embedding.
EMOJI_CLIP_CONFIGS: dict[str, dict] = {
    "small": {  # open_clip ModifiedResNet (the RN50 family): stem /4, 4 stages to 2x2, attention pool
        "embed_dim": 64,
        "vision_cfg": {"image_size": 64, "layers": [1, 1, 1, 1], "width": 16, "head_width": 32},
        "text_cfg": {"context_length": 32, "vocab_size": 49408, "width": 64, "heads": 2,
                     "layers": 2, "mlp_ratio": 2.0},
    },
    "large": {  # a wider ModifiedResNet and a wider embedding
        "embed_dim": 96,
        "vision_cfg": {"image_size": 64, "layers": [1, 1, 1, 1], "width": 24, "head_width": 32},
        "text_cfg": {"context_length": 32, "vocab_size": 49408, "width": 64, "heads": 2,
                     "layers": 2, "mlp_ratio": 2.0},
    },
}

#: Image preprocessing (open_clip ``PreprocessCfg`` fields); CLIP's mean and std.
PREPROCESS_CFG = {
    "size": 64,
    "mode": "RGB",
    "mean": [0.48145466, 0.4578275, 0.40821073],
    "std": [0.26862954, 0.26130258, 0.27577711],
    "interpolation": "bicubic",
    "resize_mode": "shortest",
    "fill_color": 0,
}

WEIGHTS_NAME = "open_clip_model.safetensors"


def model_dir(name: str, root: str | Path | None = None) -> Path:
    """Folder of the ``"small"`` or ``"large"`` emoji encoder."""
    if name not in EMOJI_CLIP_CONFIGS:
        raise ValueError(f"unknown emoji encoder {name!r}; choose from {sorted(EMOJI_CLIP_CONFIGS)}")
    return Path(root or MODELS_DIR) / f"emoji-{name}"


@lru_cache(maxsize=8)
def _file_digest(path: str, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


def weights_digest(name: str = "small", root: str | Path | None = None) -> str:
    """Digest of the contents of an emoji encoder's weights file (``""`` when it is missing)."""
    w = model_dir(name, root) / WEIGHTS_NAME
    if not w.is_file():
        return ""
    st = w.stat()
    return _file_digest(str(w), st.st_size, st.st_mtime_ns)


def create_emoji_clip(name: str, seed: int = 0, model_cfg: dict | None = None):
    """A randomly initialised emoji encoder (for training); returns the open_clip model.

    ``model_cfg`` (an open_clip model config) replaces ``EMOJI_CLIP_CONFIGS[name]``.
    """
    torch = require("torch")

    if name not in EMOJI_CLIP_CONFIGS:
        raise ValueError(f"unknown emoji encoder {name!r}; choose from {sorted(EMOJI_CLIP_CONFIGS)}")
    torch.manual_seed(seed)
    cfg = json.loads(json.dumps(model_cfg or EMOJI_CLIP_CONFIGS[name]))
    CLIP = require("open_clip.model").CLIP

    return CLIP(**cfg)


def save_emoji_clip(model, name: str, root: str | Path | None = None, metrics: dict | None = None,
                    model_cfg: dict | None = None) -> Path:
    """Write ``model`` as an open_clip local-dir folder with fp16 safetensors weights.

    ``model_cfg`` is the config ``model`` was built from (default ``EMOJI_CLIP_CONFIGS[name]``).
    """
    save_file = require("safetensors.torch").save_file

    out = model_dir(name, root)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to("cpu").half().contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(out / WEIGHTS_NAME))
    os.chmod(out / WEIGHTS_NAME, 0o644)  # safetensors writes 0600
    cfg = {"model_cfg": model_cfg or EMOJI_CLIP_CONFIGS[name], "preprocess_cfg": PREPROCESS_CFG}
    if metrics:
        cfg["training"] = metrics
    atomic_write_bytes(out / "open_clip_config.json", (json.dumps(cfg, indent=2) + "\n").encode("utf-8"))
    return out


def load_emoji_clip(name: str = "small", root: str | Path | None = None, device: str = "cpu"):
    """Load a shipped emoji encoder through open_clip's ``local-dir:`` path.

    Returns
    -------
    model : open_clip.CLIP in eval mode (float32)
    preprocess : callable PIL image -> tensor (open_clip's validation transform)
    tokenizer : open_clip tokenizer (callable list of str -> LongTensor)
    """
    folder = model_dir(name, root)
    if not (folder / "open_clip_config.json").is_file():
        raise FileNotFoundError(f"emoji encoder config missing: {folder / 'open_clip_config.json'}")
    if not (folder / WEIGHTS_NAME).is_file():
        raise FileNotFoundError(
            f"emoji encoder weights missing: {folder / WEIGHTS_NAME} "
            f"(train them with `python -m slics_core.emoji.training.train_clip --size {name}`)"
        )
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    open_clip = require("open_clip")
    SafetensorError = require("safetensors").SafetensorError

    try:
        model, _, preprocess = open_clip.create_model_and_transforms(f"local-dir:{folder}", device=device)
    except (RuntimeError, SafetensorError) as exc:  # size mismatch / corrupt file
        raise damaged_file_error(folder / WEIGHTS_NAME, exc, fix="reinstall slics-explorer (or restore the file "
                                 f"from the repository's assets/models/emoji-{name})") from None
    model.eval()
    tokenizer = open_clip.get_tokenizer(f"local-dir:{folder}")
    return model, preprocess, tokenizer


def images_to_tensor(images: np.ndarray, size: int = 64):
    """uint8 (n, H, W, 3) arrays -> normalised float tensor (n, 3, size, size).

    Same result as open_clip's validation transform for square images of side
    ``size`` (no resize needed); other sizes are resized bicubically first.
    """
    torch = require("torch")

    images = np.asarray(images)
    if images.ndim != 4 or images.shape[-1] != 3 or images.dtype != np.uint8:
        raise ValueError(f"images must be uint8 (n, H, W, 3), got {images.dtype} {images.shape}")
    x = torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).float() / 255.0
    if x.shape[-1] != size or x.shape[-2] != size:
        x = torch.nn.functional.interpolate(x, size=(size, size), mode="bicubic", align_corners=False)
        x = x.clamp(0, 1)
    mean = torch.tensor(PREPROCESS_CFG["mean"]).view(1, 3, 1, 1)
    std = torch.tensor(PREPROCESS_CFG["std"]).view(1, 3, 1, 1)
    return (x - mean) / std


def encode_images(model, images: np.ndarray, batch_size: int = 256, normalize: bool = True) -> np.ndarray:
    """Image embeddings (n, embed_dim) of uint8 images, float32."""
    torch = require("torch")

    size = model.visual.image_size
    size = size[0] if isinstance(size, (tuple, list)) else size
    out = []
    with torch.no_grad():
        for i in range(0, len(images), batch_size):
            f = model.encode_image(images_to_tensor(images[i:i + batch_size], size))
            if normalize:
                f = torch.nn.functional.normalize(f, dim=-1)
            out.append(f.float().numpy())
    if not out:
        return np.zeros((0, model.text_projection.shape[1]), dtype=np.float32)
    return np.concatenate(out)


def encode_texts(model, tokenizer, texts, normalize: bool = True) -> np.ndarray:
    """Text embeddings (n, embed_dim) of a list of strings, float32."""
    torch = require("torch")

    texts = [str(t) for t in texts]
    with torch.no_grad():
        f = model.encode_text(tokenizer(texts))
        if normalize:
            f = torch.nn.functional.normalize(f, dim=-1)
    return f.float().numpy()


def zero_shot_scores(model, tokenizer, image_embeddings: np.ndarray, words=SUPERCATEGORIES,
                     template: str = "a picture of {}") -> np.ndarray:
    """Cosine similarities (n, len(words)) between unit image embeddings and prompt embeddings."""
    w = encode_texts(model, tokenizer, [template.format(x) for x in words])
    x = np.asarray(image_embeddings, dtype=np.float32)
    x = unit_rows(x, zero="keep")
    return x @ w.T


def precision_at_2(scores: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """(precision of top-min(2, #true) concepts, precision of top-2 concepts)."""
    order = np.argsort(-scores, axis=1)
    n_true = labels.sum(1)
    hits_k, total_k, hits2 = 0, 0, 0
    for i in range(len(scores)):
        k = int(min(2, n_true[i]))
        hits_k += int(labels[i, order[i, :k]].sum())
        total_k += k
        hits2 += int(labels[i, order[i, :2]].sum())
    return hits_k / max(total_k, 1), hits2 / (2 * max(len(scores), 1))

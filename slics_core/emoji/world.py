"""The offline emoji world as a data source of the one workspace pipeline.

:func:`render_emoji_world` renders the emoji scenes (one seeded set), embeds
them with the shipped ``emoji-small`` encoder through the ordinary encoder
resolver (:func:`slics_core.encoders.create_encoder`), and returns them as
:class:`slics_core.data.LabelledEmbeddings` with the split drawn by
:func:`slics_core.data.make_split`, exactly like any embedded dataset. The
workspace builder (:func:`slics_core.explorer.workspace.build_workspace`) then
centres, fits and chooses ``d0`` as for every other source.

Emoji-specific parts, carried in ``extras``: the scene images (``images``,
uint8, so thumbnails need no files), their captions, and the ``emoji-large``
embeddings (``cond``) the emoji generator is conditioned on. Sub-labels are
the 71 COCO categories that have an emoji; the caption vocabulary is the words
the tiny text encoder was trained on (category and supercategory names).
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from slics_core.data import LabelledEmbeddings, make_split
from slics_core.emoji.catalog import (
    ALL_COCO_CATEGORIES,
    CATEGORIES,
    EMOJI_FOR_CATEGORY,
    SUB_TO_CONCEPT,
    SUPERCATEGORIES,
)
from slics_core.emoji.models import WEIGHTS_NAME, model_dir
from slics_core.emoji.scenes import ZERO_SHOT_TEMPLATE, make_scenes
from slics_core.encoders import create_encoder

__all__ = ["EmojiWorldConfig", "WORLD_SEED", "default_cache_dir", "config_from_env", "render_emoji_world",
           "emoji_vocabulary", "models_fingerprint"]

CACHE_VERSION = 3  # 3: the one workspace pipeline (one render, make_split, registry methods)
WORLD_SEED = 3003
ENCODER = "emoji-small"
CONDITION_ENCODER = "emoji-large"


def default_cache_dir() -> Path:
    """``$SLICS_EMOJI_CACHE`` or ``~/.cache/slics/emoji``."""
    env = os.environ.get("SLICS_EMOJI_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "slics" / "emoji"


@dataclass
class EmojiWorldConfig:
    """Sizes and settings of the emoji world (they key its cache)."""

    n_train: int = 3000
    n_val: int = 500
    n_query: int = 1000
    n_pool: int = 3000
    d0_values: tuple = (3, 5, 8, 10, 15, 20)
    n_iter: int = 10
    seed: int = WORLD_SEED

    def __post_init__(self):
        for k in ("n_train", "n_val", "n_query", "n_pool", "n_iter"):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{k} must be a positive int, got {v!r}")
        self.d0_values = tuple(int(d) for d in self.d0_values)
        if not self.d0_values or min(self.d0_values) < 1:
            raise ValueError(f"d0_values must be positive ints, got {self.d0_values!r}")

    @property
    def n_total(self) -> int:
        return self.n_train + self.n_val + self.n_query + self.n_pool

    def key(self) -> str:
        blob = json.dumps({**self.__dict__, "d0_values": list(self.d0_values), "version": CACHE_VERSION},
                          sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def config_from_env() -> EmojiWorldConfig:
    """The configuration scaled by ``$SLICS_EMOJI_SCALE`` (default 1; 0.2 gives 600/100/200/600 scenes)."""
    raw = os.environ.get("SLICS_EMOJI_SCALE", "").strip()
    if not raw:
        return EmojiWorldConfig()
    try:
        s = float(raw)
    except ValueError:
        raise ValueError(f"SLICS_EMOJI_SCALE must be a number, got {raw!r}") from None
    if not 0 < s <= 10:
        raise ValueError(f"SLICS_EMOJI_SCALE must be in (0, 10], got {s}")
    b = EmojiWorldConfig()
    return EmojiWorldConfig(n_train=max(60, int(b.n_train * s)), n_val=max(20, int(b.n_val * s)),
                            n_query=max(20, int(b.n_query * s)), n_pool=max(60, int(b.n_pool * s)),
                            d0_values=b.d0_values, n_iter=b.n_iter, seed=b.seed)


def models_fingerprint() -> str:
    """Short hash of the shipped encoder weights, so new weights never reuse an old cache."""
    h = hashlib.sha256()
    for name in ("small", "large"):
        w = model_dir(name) / WEIGHTS_NAME
        if w.is_file():
            h.update(f"{w.stat().st_size}:{w.stat().st_mtime_ns}".encode())
    return h.hexdigest()[:8]


def emoji_vocabulary() -> list:
    """The caption vocabulary: the words the emoji text encoder was trained on."""
    return sorted(set(CATEGORIES) | set(SUPERCATEGORIES))


def _embed(encoder, images, progress, stage, batch=256):
    out = []
    for s in range(0, len(images), batch):
        out.append(np.asarray(encoder.encode_images([Image.fromarray(a) for a in images[s:s + batch]],
                                                    batch_size=batch), dtype=np.float32))
        if progress:
            progress(stage, min(len(images), s + batch), len(images))
    return np.concatenate(out)


def render_emoji_world(config: EmojiWorldConfig | None = None, progress=None, encoder=None):
    """Render and embed the emoji world.

    Parameters
    ----------
    config : EmojiWorldConfig, optional
    progress : callable ``progress(stage, done, total)``, optional
    encoder : the ``emoji-small`` encoder, optional
        Passed by callers that use it afterwards (loaded here otherwise).

    Returns
    -------
    data : slics_core.data.LabelledEmbeddings
        ``encoder="emoji-small"``, ``preprocessing="clip"``; ``extras``: ``images``,
        ``captions``, ``cond`` (``emoji-large`` embeddings for the generator).
    split : slics_core.evaluation.Split
        ``n_train`` / ``n_val`` / ``n_query`` scenes, the rest (``n_pool``) is the pool.
    """
    cfg = config or EmojiWorldConfig()
    scenes = make_scenes(cfg.n_total, seed=cfg.seed,
                         progress=(lambda d, n: progress("render scenes", d, n)) if progress else None)
    keep = [i for i, c in enumerate(ALL_COCO_CATEGORIES) if c in EMOJI_FOR_CATEGORY]
    small = encoder if encoder is not None else create_encoder(ENCODER, device="cpu", half=False)
    raw = _embed(small, scenes.images, progress, f"embed with {ENCODER}")
    prompts = [ZERO_SHOT_TEMPLATE.format(w) for w in SUPERCATEGORIES]
    concept_text = np.asarray(small.encode_texts(prompts), dtype=np.float32)
    large = create_encoder(CONDITION_ENCODER, device="cpu", half=False)
    cond = _embed(large, scenes.images, progress, f"embed with {CONDITION_ENCODER} (generator conditioning)")
    data = LabelledEmbeddings(
        raw=raw, ids=[f"scene-{i}" for i in range(cfg.n_total)], Y=np.asarray(scenes.general, bool),
        concept_names=list(SUPERCATEGORIES), Z=np.asarray(scenes.sub, bool)[:, keep],
        sub_names=[ALL_COCO_CATEGORIES[i] for i in keep],
        sub_to_concept=np.asarray(SUB_TO_CONCEPT, dtype=int)[keep], concept_text=concept_text, encoder=ENCODER,
        preprocessing="clip", name="emoji world",
        extras={"images": np.asarray(scenes.images, dtype=np.uint8), "captions": list(scenes.captions),
                "cond": cond})
    split = make_split(data.Y, cfg.n_train, cfg.n_val, cfg.n_query, seed=cfg.seed)
    return data, split

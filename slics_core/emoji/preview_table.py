"""Precomputed ``emoji-small`` embeddings of the app's preview: a cold start without torch on its path.

On a cold cache the app first builds a *preview* (the first 512 scenes of the emoji world, see
:func:`slics_core.explorer.emoji_build.start_emoji_workspace`). Embedding those scenes takes 0.3 s of
model time, but loading the encoder first imports torch, torchvision and open_clip: about 8 s of CPU
on a 2-core laptop, most of the time to first interaction. ``assets/emoji/preview_table.npz`` holds
the embeddings the preview asks for (its scene images and the texts it embeds: concept prompts and
the caption vocabulary), keyed by a hash of each image's pixels or each text.

:class:`TableEncoder` answers a batch from the table when every item of the batch is in it, and
otherwise loads the real encoder and computes the batch. A changed renderer, sprite or text thus costs
time, never correctness; the table is used only with the weights it was written with
(:func:`load_table` checks a digest of their contents). The whole world is always embedded by the real
encoder (the staged build re-embeds the preview's scenes when the table answered them), so the
cached workspace is the same as a direct build's.

Maintainers rewrite the table after retraining ``emoji-small`` or changing the scenes::

    python -m slics_core.emoji.preview_table          # writes assets/emoji/preview_table.npz

and ``tests/test_preview_table.py`` re-embeds the preview and compares it with the shipped table.
"""
from __future__ import annotations

import hashlib
from functools import partial
from pathlib import Path

import numpy as np

from slics_core.data import vocabulary_embeddings
from slics_core.emoji.models import weights_digest
from slics_core.emoji.world import (
    ENCODER,
    config_from_env,
    emoji_vocabulary,
    render_emoji_preview,
    world_encoder,
)
from slics_core.formats import atomic_save_npz, load_npz
from slics_core.weights import ASSETS_DIR

__all__ = [
    "TABLE_PATH",
    "TableEncoder",
    "image_key",
    "load_table",
    "preview_encoder",
    "text_key",
    "weights_digest",
    "write_table",
]

#: The shipped table (about 160 kB).
TABLE_PATH = ASSETS_DIR / "emoji" / "preview_table.npz"


def image_key(image) -> str:
    """Key of an image in the table: a hash of its pixels (shape, dtype and bytes)."""
    arr = np.ascontiguousarray(np.asarray(image))
    h = hashlib.sha256(f"{arr.shape}|{arr.dtype}|".encode())
    h.update(arr.tobytes())
    return "i:" + h.hexdigest()[:32]


def text_key(text: str) -> str:
    """Key of a text in the table."""
    return "t:" + hashlib.sha256(str(text).encode("utf-8")).hexdigest()[:32]


class TableEncoder:
    """An encoder that answers from a table of precomputed embeddings and computes what is not in it.

    Parameters
    ----------
    table : dict str -> 1-D float32 array
        Keys from :func:`image_key` / :func:`text_key`.
    load : callable () -> encoder
        Loads the real encoder (called at most once, on the first miss or by :meth:`real`).
    record : bool
        Add what the real encoder computes to the table (how :func:`write_table` builds it).

    Attributes
    ----------
    id : str
    dim : int
    has_text : bool
    hits, misses : int
        Items answered from the table / computed by the real encoder.
    """

    has_text = True

    def __init__(self, table: dict, load, *, record: bool = False):
        self.table = table
        self._load = load
        self._real = None
        self.record = bool(record)
        self.hits = self.misses = 0
        self.id = f"table:{ENCODER}"
        first = next(iter(table.values()), None)
        self.dim = 0 if first is None else int(first.shape[0])

    def real(self):
        """The real encoder (loaded once)."""
        if self._real is None:
            self._real = self._load()
            self.dim = int(self._real.dim)
        return self._real

    def _answer(self, keys, compute) -> np.ndarray:
        if keys and all(k in self.table for k in keys):
            self.hits += len(keys)
            return np.stack([self.table[k] for k in keys]).astype(np.float32)
        self.misses += len(keys)
        out = np.asarray(compute(), dtype=np.float32)
        if self.record:
            self.table.update({k: v.copy() for k, v in zip(keys, out)})
        return out

    def encode_images(self, images, batch_size: int = 32) -> np.ndarray:
        images = list(images)
        return self._answer([image_key(im) for im in images],
                            lambda: self.real().encode_images(images, batch_size=batch_size))

    def encode_texts(self, texts, batch_size: int = 256) -> np.ndarray:
        texts = [str(t) for t in texts]
        return self._answer([text_key(t) for t in texts],
                            lambda: self.real().encode_texts(texts, batch_size=batch_size))


def load_table(path=TABLE_PATH) -> dict | None:
    """The table at ``path`` as a dict, or None when it is missing, unreadable or written for other weights."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        z = load_npz(path, {"keys": "U", "vectors": "f", "weights_digest": "U"}, dense=("vectors",))
        keys, vectors, digest = z["keys"], z["vectors"], str(z["weights_digest"])
    except (OSError, ValueError, KeyError):
        return None
    if digest != weights_digest("small") or vectors.ndim != 2 or len(keys) != len(vectors):
        return None
    return {str(k): v for k, v in zip(keys, vectors.astype(np.float32))}


def preview_encoder(load=None, path=TABLE_PATH) -> TableEncoder | None:
    """A :class:`TableEncoder` over the shipped table (None when there is no usable table).

    ``load`` loads the real encoder on a miss (default: ``emoji-small`` on the CPU).
    """
    table = load_table(path)
    if table is None:
        return None
    return TableEncoder(table, load or partial(world_encoder, ENCODER))


def write_table(path=TABLE_PATH, config=None) -> Path:
    """Embed what the preview of ``config`` (default: the app's world) asks for and write the table.

    Returns the path written (atomically, :func:`slics_core.formats.atomic_save_npz`).
    """
    rec = TableEncoder({}, partial(world_encoder, ENCODER), record=True)
    render_emoji_preview(config or config_from_env(), encoder=rec)
    vocabulary_embeddings(rec, emoji_vocabulary())
    keys = sorted(rec.table)
    atomic_save_npz(path, compressed=True, keys=np.asarray(keys),
                    vectors=np.stack([rec.table[k] for k in keys]).astype(np.float32),
                    weights_digest=np.asarray(weights_digest("small")))
    return Path(path)


if __name__ == "__main__":
    out = write_table()
    print(f"wrote {out} ({out.stat().st_size / 1024:.0f} kB, {len(load_table(out) or {})} entries)")

"""The emoji world's generator: image-to-prompt taken literally.

An embedding in the generator's conditioning space (the large encoder's centred
space, ``c = normalize(normalize(x_large) - mean)``; an aligned component
``tilde v_j`` is fed as is, with its own length) is first **read** as a
description of a scene: the probability that each of the 71 emoji objects is in
it (:meth:`EmojiGenerator.read`), from a small multi-label network (one hidden
layer, :func:`build_reader`) trained only on renders of the world and their
large embeddings (:mod:`slics_core.emoji.training.train_generator`: scenes, single-object
renders, and sums of two rows labelled with both rows' objects; no SLiCS output
is involved). The description is then **drawn** with the world's own sprites
(:meth:`EmojiGenerator.layout`, :func:`render_reading`):

* an object read with ``p >= OWN_PLACE_MIN`` gets a place of its own; a concept
  with no such object gets one place for its most likely object when the concept
  as a whole (``1 - prod(1 - p)`` over its objects) reaches :data:`SHOW_MIN`;
  when nothing does, the strongest concept is still drawn if it reaches
  :data:`FAINT_MIN` (faint); at most four places, strongest first (one place:
  centred; two: side by side; three or four: the 2x2 grid of the world's scenes);
* each place draws its object with opacity ``min(1, strength / FULL_OPACITY_AT)``
  (strength: the object's probability, or its concept's for a concept place),
  so an unsure reading is a faint picture;
* the next candidates of the same concept (``p >= ALTERNATIVE_MIN``), at most two,
  are drawn small in the lower corners of the place, with opacity by their own
  probability: the "second candidates";
* the background is plain and light (the embedding's background is not read).

A short or zero vector is read as no object (the trained reader gives every object
``p < 0.01`` at zero), so it draws little or nothing; a sum of two concepts'
components is read as both. Why this generator and these constants (measured
with the judge): docs/emoji_world.md.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image
from scipy.special import erf, expit

from slics_core.emoji.catalog import (
    CATEGORIES,
    CATEGORY_SUPER,
    MODELS_DIR,
    SUPERCATEGORIES,
)
from slics_core.emoji.scenes import load_sprites
from slics_core.emoji.weight_folders import load_state, read_weights, write_weights
from slics_core.extras import require
from slics_core.rows import unit_rows

__all__ = ["EmojiGenerator", "build_reader", "READER_CONFIG", "Reading", "Place", "generator_dir", "render_reading",
           "OWN_PLACE_MIN", "SHOW_MIN", "FAINT_MIN", "FULL_OPACITY_AT", "ALTERNATIVE_MIN", "IMAGE_SIZE", "BACKGROUND"]

WEIGHTS_NAME = "reader.safetensors"
#: :meth:`EmojiGenerator.read` rounds the conditioning rows to this grid, so float-rounding
#: differences of one embedding (a picture embedded alone or in a batch) give the same pixels.
CONDITION_GRID = 1e-3
#: A concept place is drawn when the concept is read with at least this probability.
SHOW_MIN = 0.35
#: When no place reaches its threshold, the strongest concept is still drawn (faint) from this probability.
FAINT_MIN = 0.1
#: Opacity of a place is ``min(1, strength / FULL_OPACITY_AT)``.
FULL_OPACITY_AT = 0.5
#: Second candidates of a place need at least this probability.
ALTERNATIVE_MIN = 0.1
#: An object with at least this probability gets a place of its own.
OWN_PLACE_MIN = 0.65
IMAGE_SIZE = 64
BACKGROUND = (246, 245, 240)
_CONCEPT_OF = np.array([SUPERCATEGORIES.index(CATEGORY_SUPER[c]) for c in CATEGORIES])


def generator_dir(root=None) -> Path:
    return Path(root or MODELS_DIR) / "emoji-generator"


def _check_rows(embeddings, dim: int) -> np.ndarray:
    E = np.asarray(embeddings, dtype=np.float32)
    if E.ndim == 1:
        E = E[None]
    if E.ndim != 2 or E.shape[1] != dim:
        raise ValueError(f"embeddings must have shape (n, {dim}), got {E.shape}")
    if not np.all(np.isfinite(E)):
        raise ValueError("embeddings contain NaN or inf")
    return E


@dataclass
class Place:
    """One drawn object of a :class:`Reading`.

    Attributes
    ----------
    category : str
    strength : float
        The object's probability (own place) or its concept's (concept place).
    alternatives : list of (str, float)
        Next candidates of the same concept with their probabilities.
    """

    category: str
    strength: float
    alternatives: list = field(default_factory=list)

    @property
    def opacity(self) -> float:
        return float(min(1.0, self.strength / FULL_OPACITY_AT))


@dataclass
class Reading:
    """What an embedding was read as: the places to draw, strongest first (at most four)."""

    places: list


def _paste(canvas: np.ndarray, sprite: Image.Image, side: int, cx: float, cy: float, opacity: float):
    """Alpha-blend ``sprite`` resized to ``side`` px, its visible content centred at (cx, cy), into ``canvas``."""
    if opacity <= 0 or side < 2:
        return
    sp = sprite.resize((side, side), Image.BILINEAR)
    rgba = np.asarray(sp, dtype=np.float32) / 255.0
    x0b, y0b, x1b, y1b = sp.getchannel("A").getbbox() or (0, 0, side, side)
    x0 = int(round(cx - (x0b + x1b) / 2))
    y0 = int(round(cy - (y0b + y1b) / 2))
    H, W = canvas.shape[:2]
    xa, ya, xb, yb = max(0, x0), max(0, y0), min(W, x0 + side), min(H, y0 + side)
    if xa >= xb or ya >= yb:
        return
    part = rgba[ya - y0:yb - y0, xa - x0:xb - x0]
    a = part[..., 3:] * float(opacity)
    canvas[ya:yb, xa:xb] = canvas[ya:yb, xa:xb] * (1 - a) + part[..., :3] * 255.0 * a


#: Centres (fractions of the side) and sprite sides of 1, 2, 3-4 places.
_LAYOUTS = {1: ([(0.5, 0.5)], 0.70), 2: ([(0.27, 0.5), (0.73, 0.5)], 0.46),
            3: ([(0.27, 0.27), (0.73, 0.27), (0.27, 0.73), (0.73, 0.73)], 0.44)}


def render_reading(reading: Reading, sprites: dict, size: int = IMAGE_SIZE) -> np.ndarray:
    """Draw ``reading`` (uint8 ``(size, size, 3)``): each place's sprite with its opacity, its second
    candidates a third as large in the place's lower corners, on the plain light background."""
    canvas = np.empty((size, size, 3), np.float32)
    canvas[:] = BACKGROUND
    n = len(reading.places)
    if n:
        centres, frac = _LAYOUTS[min(n, 3)]
        side = max(8, int(round(frac * size)))
        small = max(6, int(round(side * 0.36)))
        for place, (fx, fy) in zip(reading.places, centres):
            cx, cy = fx * size, fy * size
            _paste(canvas, sprites[place.category], side, cx, cy, place.opacity)
            for k, (cat, p) in enumerate(place.alternatives[:2]):
                ax = cx + (side / 2 - small / 2) * (1 if k == 0 else -1)
                _paste(canvas, sprites[cat], small, ax, cy + side / 2 - small / 2,
                       min(1.0, p / FULL_OPACITY_AT))
    return canvas.round().clip(0, 255).astype(np.uint8)


READER_CONFIG = {"hidden": 256}


def build_reader(dim: int, config: dict | None = None):
    """The reader network (random weights): ``Linear(dim, hidden)``, GELU, ``Linear(hidden, 71)`` (logits)."""
    torch = require("torch")

    cfg = dict(READER_CONFIG, **(config or {}))
    return torch.nn.Sequential(torch.nn.Linear(dim, int(cfg["hidden"])), torch.nn.GELU(),
                               torch.nn.Linear(int(cfg["hidden"]), len(CATEGORIES)))


class EmojiGenerator:
    """The reader (a small multi-label network, 71 objects) + the centring mean of its space.

    Use :meth:`load` for the shipped weights; :meth:`read` gives object probabilities,
    :meth:`describe` the decoded "prompt", :meth:`generate` the pictures.

    Parameters
    ----------
    net : torch.nn.Module or dict of arrays
        Maps conditioning rows ``(n, dim)`` to 71 logits (:func:`build_reader`): the module while it
        is trained, or its weights as numpy arrays (:meth:`load`; then no torch is imported).
    mean : array (dim,)
        Centring mean of the conditioning space (:meth:`condition`).
    config : dict, optional
    """

    #: One deterministic pass per image: ``seed`` and ``steps`` of :meth:`generate` have no effect.
    deterministic = True
    classes = CATEGORIES

    def __init__(self, net, mean, config: dict | None = None):
        self.net = net.eval() if hasattr(net, "state_dict") else None
        self._arrays = None if self.net is not None else {k: np.asarray(v, dtype=np.float32) for k, v in net.items()}
        self.mean = np.asarray(mean, dtype=np.float32)
        self.dim = int(self.mean.shape[0])
        self.config = dict(READER_CONFIG, **(config or {}))
        self._sprites = None

    @classmethod
    def load(cls, root=None) -> EmojiGenerator:
        """The reader on disk, as numpy arrays: reading and drawing need no torch."""
        folder = generator_dir(root)
        meta, state = read_weights(folder, WEIGHTS_NAME, "emoji generator",
                                   "python -m slics_core.emoji.training.train_generator", as_numpy=True)
        if list(meta.get("classes", [])) != list(CATEGORIES) or "mean" not in meta:
            raise ValueError(f"emoji generator in {folder} reads other objects; retrain it with "
                             "`python -m slics_core.emoji.training.train_generator`")
        dim, hidden = len(meta["mean"]), int(dict(READER_CONFIG, **(meta.get("config") or {}))["hidden"])
        shapes = {"0.weight": (hidden, dim), "0.bias": (hidden,), "2.weight": (len(CATEGORIES), hidden),
                  "2.bias": (len(CATEGORIES),)}
        got = {k: tuple(v.shape) for k, v in state.items()}
        if got != shapes:
            raise ValueError(f"emoji generator weights in {folder} do not fit its config: {got} (expected {shapes})")
        gen = cls(state, meta["mean"], meta.get("config"))
        gen.training = meta.get("training", {})
        return gen

    def save(self, root=None, metrics: dict | None = None) -> Path:
        meta = {"config": self.config, "classes": list(CATEGORIES), "mean": [float(v) for v in self.mean],
                "training": metrics or {}}
        net = self.net
        if net is None:  # loaded from disk: the same weights as a module, to write them in the one format
            torch = require("torch")

            net = load_state(build_reader(self.dim, self.config),
                             {k: torch.from_numpy(v) for k, v in self._arrays.items()}, "memory", "emoji generator")
        return write_weights(generator_dir(root), WEIGHTS_NAME, net, meta)

    def _layers(self) -> tuple:
        """``(W1, b1, W2, b2)`` as float32 arrays (from the module while it is being trained)."""
        st = self._arrays if self.net is None else \
            {k: v.detach().cpu().float().numpy() for k, v in self.net.state_dict().items()}
        return st["0.weight"], st["0.bias"], st["2.weight"], st["2.bias"]

    def condition(self, raw_embeddings: np.ndarray) -> np.ndarray:
        """Raw large-encoder image embeddings -> centred, unit conditioning vectors."""
        x = np.asarray(raw_embeddings, dtype=np.float32)
        x = unit_rows(x, zero="keep")
        return unit_rows(x - self.mean, zero="keep")

    def read(self, embeddings) -> np.ndarray:
        """Object probabilities ``(n, 71)`` (columns: :data:`CATEGORIES`) of conditioning rows ``(n, dim)``.

        Rows are taken with their length (a short component is a weak reading), rounded to a grid
        of :data:`CONDITION_GRID`. The network (:func:`build_reader`: linear, exact GELU, linear,
        sigmoid) is evaluated in float32 with numpy.
        """
        E = _check_rows(embeddings, self.dim)
        E = (np.round(E / CONDITION_GRID) * CONDITION_GRID).astype(np.float32)
        W1, b1, W2, b2 = self._layers()
        h = E @ W1.T + b1
        h = 0.5 * h * (1.0 + erf(h / np.float32(np.sqrt(2.0))))
        return expit(h @ W2.T + b2).astype(np.float64)

    def describe(self, embeddings, top: int = 3, min_probability: float = 0.05) -> list:
        """The decoded "prompt" of each row: up to ``top`` ``(object, probability)`` pairs, most likely
        first, those of at least ``min_probability`` (the most likely one always)."""
        out = []
        for p in self.read(embeddings):
            order = np.argsort(-p, kind="stable")[:max(1, int(top))]
            out.append([(CATEGORIES[k], float(p[k])) for i, k in enumerate(order)
                        if i == 0 or p[k] >= min_probability])
        return out

    @staticmethod
    def layout(p: np.ndarray) -> Reading:
        """The places to draw for one row of object probabilities (see the module doc)."""
        p = np.asarray(p, dtype=np.float64)
        places, own_concepts = [], set()
        # own places: objects read as clearly present
        for k in np.argsort(-p, kind="stable"):
            if p[k] < OWN_PLACE_MIN:
                break
            places.append(Place(CATEGORIES[k], float(p[k])))
            own_concepts.add(int(_CONCEPT_OF[k]))
        concept_places = []
        for j in range(len(SUPERCATEGORIES)):
            if j in own_concepts:
                continue
            members = np.flatnonzero(_CONCEPT_OF == j)
            strength = 1.0 - float(np.prod(1.0 - p[members]))
            concept_places.append(Place(CATEGORIES[members[np.argmax(p[members])]], strength))
        concept_places.sort(key=lambda pl: -pl.strength)
        places += [pl for pl in concept_places if pl.strength >= SHOW_MIN]
        if not places and concept_places and concept_places[0].strength >= FAINT_MIN:
            places.append(concept_places[0])  # a weak reading: its strongest concept, faint
        places.sort(key=lambda pl: -pl.strength)
        places = places[:4]
        drawn = {pl.category for pl in places}
        for pl in places:
            j = _CONCEPT_OF[CATEGORIES.index(pl.category)]
            members = [k for k in np.flatnonzero(_CONCEPT_OF == j) if CATEGORIES[k] not in drawn]
            members.sort(key=lambda k: -p[k])
            pl.alternatives = [(CATEGORIES[k], float(p[k])) for k in members[:2] if p[k] >= ALTERNATIVE_MIN]
        return Reading(places)

    def generate(self, embeddings, *, seed: int = 0, steps: int | None = None, size: int = IMAGE_SIZE) -> np.ndarray:
        """Images ``(n, size, size, 3)`` uint8 of conditioning rows ``(n, dim)``: each row read
        (:meth:`read`), laid out (:meth:`layout`) and drawn (:func:`render_reading`).

        ``seed`` and ``steps`` are accepted for the uniform generator signature (a diffusion
        sampler uses them); this generator is deterministic, so they have no effect.
        """
        if self._sprites is None:
            self._sprites = load_sprites()
        P = self.read(embeddings)
        if not len(P):
            return np.zeros((0, size, size, 3), np.uint8)
        return np.stack([render_reading(self.layout(p), self._sprites, size) for p in P])

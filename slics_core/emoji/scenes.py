"""Seeded generator of emoji scenes: COCO in miniature.

A scene is a small RGB image with 1-4 emoji objects on a varied background,
its general labels (COCO's 12 supercategories), its sub-labels (COCO's 80
categories; the 9 without an emoji are never set) and a caption naming every
object's category and supercategory.

Scene ``i`` of seed ``s`` is drawn from its own generator
``numpy.random.default_rng([s, i])``, so a scene does not depend on how many
others are generated with it, and the same (seed, index) gives the same pixels.

Examples
--------
>>> from slics_core.emoji.scenes import make_scenes
>>> scenes = make_scenes(8, seed=0)
>>> scenes.images.shape, scenes.general.shape, scenes.sub.shape
((8, 64, 64, 3), (8, 12), (8, 80))
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
from PIL import Image, ImageEnhance

from slics_core.emoji.catalog import (
    ALL_COCO_CATEGORIES,
    CATEGORIES,
    CATEGORY_SUPER,
    SPRITES_DIR,
    SUPERCATEGORIES,
    sprite_filename,
)
from slics_core.tasks import run_tasks

__all__ = [
    "SceneSet",
    "load_sprites",
    "render_scene",
    "make_scenes",
    "render_single_object",
    "make_single_object_scenes",
    "make_caption",
    "N_SUPER_PROBS",
    "ZERO_SHOT_TEMPLATE",
    "BACKGROUND_KINDS",
]

#: Probability of 1, 2, 3, 4 distinct supercategories in a scene (mean 2.3, as COCO's 2.303).
N_SUPER_PROBS = (0.30, 0.25, 0.30, 0.15)

#: Prompt used for zero-shot concept classification (``{}`` is a concept word).
ZERO_SHOT_TEMPLATE = "a picture of {}"

_SUPER_INDEX = {s: i for i, s in enumerate(SUPERCATEGORIES)}
_SUB_INDEX = {c: i for i, c in enumerate(ALL_COCO_CATEGORIES)}
_CATS_OF_SUPER = {s: [c for c in CATEGORIES if CATEGORY_SUPER[c] == s] for s in SUPERCATEGORIES}


@dataclass
class SceneSet:
    """A batch of scenes.

    Attributes
    ----------
    images : ndarray of shape (n, H, W, 3), uint8
    general : ndarray of shape (n, 12), int8
        Supercategory labels, columns in :data:`SUPERCATEGORIES` order.
    sub : ndarray of shape (n, 80), int8
        Category labels, columns in COCO's order (:data:`ALL_COCO_CATEGORIES`).
    captions : list of str
    objects : list of list of str
        The category of every object drawn, per scene.
    seed, start : int
        Scenes are ``(seed, start), (seed, start + 1), ...``.
    """

    images: np.ndarray
    general: np.ndarray
    sub: np.ndarray
    captions: list
    objects: list
    seed: int = 0
    start: int = 0
    general_names: tuple = field(default=SUPERCATEGORIES)
    sub_names: tuple = field(default=ALL_COCO_CATEGORIES)

    def __len__(self) -> int:
        return len(self.images)

    def pil(self, i: int) -> Image.Image:
        """Scene ``i`` as a PIL image."""
        return Image.fromarray(self.images[i])


@lru_cache(maxsize=4)
def _load_sprites_cached(directory: str) -> dict:
    sprites = {}
    missing = []
    for c in CATEGORIES:
        path = Path(directory) / sprite_filename(c)
        if not path.is_file():
            missing.append(path.name)
            continue
        try:
            with Image.open(path) as im:
                im.load()
                sprites[c] = im.convert("RGBA")
        except (OSError, ValueError) as exc:
            raise ValueError(f"sprite {path} is not a readable image: {exc}") from exc
    if missing:
        raise FileNotFoundError(
            f"{len(missing)} emoji sprites missing in {directory} (e.g. {missing[0]}); "
            "run scripts/render_emoji_sprites.py"
        )
    return sprites


def load_sprites(directory: str | Path | None = None) -> dict:
    """Load every category's RGBA sprite (cached). Raises if any is missing or unreadable."""
    return _load_sprites_cached(str(directory or SPRITES_DIR))


_NUMBERS = {2: "two", 3: "three", 4: "four"}


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def make_caption(categories, rng: np.random.Generator | None = None) -> str:
    """Caption naming each distinct category with its supercategory.

    ``categories`` is the list of objects' categories (repeats allowed). With an
    ``rng`` the template and the order are drawn from it, else the first
    template and the given order are used.
    """
    cats = list(dict.fromkeys(categories))
    if not cats:
        raise ValueError("a caption needs at least one category")
    counts = {c: list(categories).count(c) for c in cats}
    if rng is not None:
        cats = [cats[i] for i in rng.permutation(len(cats))]
        t = int(rng.integers(3))
    else:
        t = 0
    parts = []
    for c in cats:
        s = CATEGORY_SUPER[c]
        noun = f"{_article(c)} {c}" if counts[c] == 1 else f"{_NUMBERS[counts[c]]} {c}s"
        if t == 0:
            parts.append(f"{noun} ({s})")
        elif t == 1:
            parts.append(f"{noun} which is {s}")
        else:
            parts.append(f"{s}: {noun}")
    body = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return ("a picture of " if t != 2 else "a scene with ") + body


#: Names of :func:`_background`'s kinds, in the order of its draw (what a scene's layout reports).
BACKGROUND_KINDS = ("plain", "gradient", "horizon", "striped", "textured")


def _background(rng: np.random.Generator, size: int, info: dict | None = None) -> np.ndarray:
    kind = int(rng.integers(5))
    c1 = rng.uniform(0.15, 1.0, 3)
    c2 = rng.uniform(0.15, 1.0, 3)
    if info is not None:
        info.update(background=BACKGROUND_KINDS[kind], colour=tuple(float(v) for v in c1))
    y = np.linspace(0.0, 1.0, size)[:, None, None]
    x = np.linspace(0.0, 1.0, size)[None, :, None]
    if kind == 0:  # flat
        bg = np.broadcast_to(c1, (size, size, 3)).copy()
    elif kind == 1:  # vertical gradient
        bg = c1 * (1 - y) + c2 * y + 0 * x
    elif kind == 2:  # horizon: sky over ground
        h = rng.uniform(0.4, 0.75)
        bg = np.where(y < h, c1 * (0.8 + 0.2 * y), c2 * (0.9 + 0.1 * (1 - y))) + 0 * x
    elif kind == 3:  # stripes
        period = rng.uniform(6, 16)
        angle = rng.uniform(0, np.pi)
        phase = (np.cos(angle) * x + np.sin(angle) * y) * size / period
        mask = (np.floor(phase) % 2)[..., :1]
        bg = c1 * mask + (0.6 * c1 + 0.4 * c2) * (1 - mask)
    else:  # smooth noise texture
        coarse = rng.uniform(-1, 1, (4, 4, 1))
        tex = np.asarray(
            Image.fromarray(((coarse[..., 0] + 1) * 127.5).astype(np.uint8)).resize(
                (size, size), Image.BICUBIC
            ),
            dtype=float,
        )[..., None] / 255.0
        bg = c1 * (0.7 + 0.3 * tex) + c2 * 0.3 * (1 - tex)
    bg = bg + rng.normal(0, 0.02, (size, size, 3))
    return np.clip(bg * 255.0, 0, 255).astype(np.uint8)


def _jitter(sprite: Image.Image, rng: np.random.Generator) -> Image.Image:
    alpha = sprite.getchannel("A")
    rgb = sprite.convert("RGB")
    rgb = ImageEnhance.Brightness(rgb).enhance(rng.uniform(0.75, 1.25))
    rgb = ImageEnhance.Color(rgb).enhance(rng.uniform(0.6, 1.4))
    rgb = ImageEnhance.Contrast(rgb).enhance(rng.uniform(0.8, 1.2))
    out = rgb.convert("RGBA")
    out.putalpha(alpha)
    return out


def _sample_objects(rng: np.random.Generator) -> list:
    k = int(rng.choice(4, p=N_SUPER_PROBS)) + 1
    supers = [SUPERCATEGORIES[i] for i in rng.choice(len(SUPERCATEGORIES), size=k, replace=False)]
    cats = [_CATS_OF_SUPER[s][int(rng.integers(len(_CATS_OF_SUPER[s])))] for s in supers]
    n_extra = int(rng.binomial(4 - k, 0.3))
    for _ in range(n_extra):
        s = supers[int(rng.integers(k))]
        cats.append(_CATS_OF_SUPER[s][int(rng.integers(len(_CATS_OF_SUPER[s])))])
    return cats


def render_scene(
    seed: int, index: int, image_size: int = 64, sprites: dict | None = None, layout: bool = False
):
    """Render scene ``index`` of ``seed``; returns (uint8 image (H, W, 3), list of categories).

    With ``layout`` a third item says where things are, as the generator drew them: ``{"background":
    one of BACKGROUND_KINDS, "colour": its main RGB colour in [0, 1], "cells": per object its quadrant
    (0 top-left, 1 top-right, 2 bottom-left, 3 bottom-right; None for a lone centred object)}``.
    """
    if image_size < 32:
        raise ValueError(f"image_size must be >= 32, got {image_size}")
    sprites = sprites if sprites is not None else load_sprites()
    rng = np.random.default_rng([int(seed), int(index)])
    cats = _sample_objects(rng)
    info: dict = {}
    canvas = Image.fromarray(_background(rng, image_size, info)).convert("RGBA")
    n = len(cats)
    cells = rng.permutation(4)
    info["cells"] = [None] if n == 1 else [int(cells[k]) for k in range(n)]
    half = image_size / 2.0
    for obj, c in enumerate(cats):
        if n == 1:
            side = rng.uniform(0.45, 0.7) * image_size
            cx, cy = half + rng.uniform(-0.12, 0.12) * image_size, half + rng.uniform(-0.12, 0.12) * image_size
        else:
            side = rng.uniform(0.32, 0.46) * image_size
            cell = int(cells[obj])
            cx = (cell % 2 + 0.5) * half + rng.uniform(-0.08, 0.08) * image_size
            cy = (cell // 2 + 0.5) * half + rng.uniform(-0.08, 0.08) * image_size
        side = max(8, int(round(side)))
        sp = sprites[c].resize((side, side), Image.BILINEAR)
        if rng.random() < 0.5:
            sp = sp.transpose(Image.FLIP_LEFT_RIGHT)
        sp = sp.rotate(float(rng.uniform(-15, 15)), resample=Image.BILINEAR, expand=True)
        sp = _jitter(sp, rng)
        x0 = int(round(cx - sp.width / 2))
        y0 = int(round(cy - sp.height / 2))
        canvas.paste(sp, (x0, y0), sp)
    if layout:
        return np.asarray(canvas.convert("RGB")), cats, info
    return np.asarray(canvas.convert("RGB")), cats


#: Scenes per task when scenes are rendered on worker processes (``make_scenes(n_jobs=)``).
SCENE_CHUNK = 256


def make_scenes(
    n: int, seed: int = 0, start: int = 0, image_size: int = 64, sprites_dir=None, progress=None, n_jobs: int = 1
) -> SceneSet:
    """Generate scenes ``start .. start + n - 1`` of ``seed``.

    Parameters
    ----------
    n : int
        Number of scenes (>= 0).
    seed : int
        World seed; with ``start`` it fixes every pixel and label.
    start : int
        Index of the first scene.
    image_size : int
        Side of the square images (>= 32).
    sprites_dir : path, optional
        Sprite folder (default: the shipped ``assets/emoji/sprites``).
    progress : callable, optional
        Called as ``progress(done, n)`` every 256 scenes and at the end.
    n_jobs : int
        Worker processes rendering chunks of :data:`SCENE_CHUNK` scenes side by side
        (:func:`slics_core.tasks.run_tasks`); every scene is drawn from its own generator, so the scenes are
        the same for every ``n_jobs``.
    """
    if n_jobs > 1 and n > SCENE_CHUNK:
        chunks = [(int(seed), int(start) + a, min(SCENE_CHUNK, int(n) - a), image_size, sprites_dir)
                  for a in range(0, int(n), SCENE_CHUNK)]
        parts = run_tasks(_scene_chunk, chunks, n_jobs=n_jobs, stage="render scenes",
                          progress=None if progress is None else
                          (lambda _stage, done, total: progress(min(int(n), done * SCENE_CHUNK), int(n))))
        return concat_scenes(parts, seed=seed, start=start)
    return _scene_set(
        n, seed, start, image_size, sprites_dir,
        render=lambda idx, sprites: render_scene(seed, idx, image_size, sprites),
        caption=lambda idx, cats: make_caption(cats, np.random.default_rng([int(seed), int(idx), 1])),
        progress=progress)


def _scene_chunk(_shared, chunk) -> SceneSet:
    """One task of :func:`make_scenes` on a worker: ``chunk = (seed, start, n, image_size, sprites_dir)``."""
    seed, start, n, image_size, sprites_dir = chunk
    return make_scenes(n, seed=seed, start=start, image_size=image_size, sprites_dir=sprites_dir)


def concat_scenes(parts, *, seed: int, start: int) -> SceneSet:
    """The scene sets ``parts`` (consecutive scenes of one seed, in order) as one :class:`SceneSet`."""
    return SceneSet(np.concatenate([p.images for p in parts]), np.concatenate([p.general for p in parts]),
                    np.concatenate([p.sub for p in parts]), [c for p in parts for c in p.captions],
                    [o for p in parts for o in p.objects], seed=int(seed), start=int(start))


def _scene_set(n, seed, start, image_size, sprites_dir, render, caption, progress=None) -> SceneSet:
    """Render scenes ``start .. start + n - 1`` (``render(index, sprites) -> (image, categories)``)
    and label / caption them (``caption(index, categories) -> str``)."""
    if int(n) != n or n < 0:
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    n = int(n)
    sprites = load_sprites(sprites_dir)
    images = np.empty((n, image_size, image_size, 3), dtype=np.uint8)
    general = np.zeros((n, len(SUPERCATEGORIES)), dtype=np.int8)
    sub = np.zeros((n, len(ALL_COCO_CATEGORIES)), dtype=np.int8)
    captions, objects = [], []
    for i in range(n):
        img, cats = render(start + i, sprites)
        images[i] = img
        for c in cats:
            general[i, _SUPER_INDEX[CATEGORY_SUPER[c]]] = 1
            sub[i, _SUB_INDEX[c]] = 1
        captions.append(caption(start + i, cats))
        objects.append(cats)
        if progress is not None and ((i + 1) % 256 == 0 or i + 1 == n):
            progress(i + 1, n)
    return SceneSet(images, general, sub, captions, objects, seed=int(seed), start=int(start))


#: Stream tag of single-object renders: ``default_rng([seed, index, SINGLE_OBJECT_STREAM])``, so they
#: never share random numbers with the scene ``(seed, index)`` (drawn from ``default_rng([seed, index])``).
SINGLE_OBJECT_STREAM = 7


def _light_background(rng: np.random.Generator, size: int) -> np.ndarray:
    """A plain light background: flat (p = 0.6) or a gentle vertical gradient of two light colours."""
    c1 = rng.uniform(0.82, 1.0, 3)
    if rng.random() < 0.6:
        bg = np.broadcast_to(c1, (size, size, 3)).copy()
    else:
        c2 = np.clip(c1 + rng.uniform(-0.1, 0.1, 3), 0.75, 1.0)
        y = np.linspace(0.0, 1.0, size)[:, None, None]
        bg = c1 * (1 - y) + c2 * y + np.zeros((1, size, 1))
    bg = bg + rng.normal(0, 0.01, (size, size, 3))
    return np.clip(bg * 255.0, 0, 255).astype(np.uint8)


def render_single_object(
    seed: int, index: int, image_size: int = 64, sprites: dict | None = None, category: str | None = None,
    scale: tuple = (0.6, 0.75), max_rotation: float = 10.0, max_shift: float = 0.03, return_mask: bool = False,
):
    """Render one sprite, centred, on a plain light background (the generator's training target).

    Render ``index`` of ``seed`` draws, from ``numpy.random.default_rng([seed, index, 7])``, a
    supercategory uniformly, then one of its categories uniformly (unless ``category`` is given),
    a side of ``scale`` times the image side, a horizontal flip (p = 0.5), a rotation within
    ``+-max_rotation`` degrees, a mild brightness/saturation/contrast jitter and a centre within
    ``+-max_shift`` times the side of the image centre; the centre is that of the sprite's visible
    content (the bounding box of its alpha), so every object is centred however its emoji sits
    in its square.

    Parameters
    ----------
    seed, index : int
    image_size : int
        Side of the square image (>= 32).
    sprites : dict, optional
        Category -> RGBA sprite (default :func:`load_sprites`).
    category : str, optional
        Draw this category (one of :data:`slics_core.emoji.catalog.CATEGORIES`).
    scale : (float, float)
        Range of the sprite's side as a fraction of the image side, within (0, 1].
    max_rotation, max_shift : float
        Jitter bounds (degrees; fraction of the image side).
    return_mask : bool
        Also return the sprite's alpha mask in the image, float (H, W) in [0, 1].

    Returns
    -------
    image : ndarray (H, W, 3) uint8
    category : str
    mask : ndarray (H, W) float, only with ``return_mask``
    """
    if image_size < 32:
        raise ValueError(f"image_size must be >= 32, got {image_size}")
    lo, hi = float(scale[0]), float(scale[1])
    if not 0 < lo <= hi <= 1:
        raise ValueError(f"scale must satisfy 0 < low <= high <= 1, got {scale!r}")
    sprites = sprites if sprites is not None else load_sprites()
    if category is not None and category not in sprites:
        raise ValueError(f"no sprite for category {category!r}")
    rng = np.random.default_rng([int(seed), int(index), SINGLE_OBJECT_STREAM])
    sup = SUPERCATEGORIES[int(rng.integers(len(SUPERCATEGORIES)))]
    cat = _CATS_OF_SUPER[sup][int(rng.integers(len(_CATS_OF_SUPER[sup])))]
    if category is not None:
        cat = category
    canvas = Image.fromarray(_light_background(rng, image_size)).convert("RGBA")
    side = max(8, int(round(rng.uniform(lo, hi) * image_size)))
    sp = sprites[cat].resize((side, side), Image.BILINEAR)
    if rng.random() < 0.5:
        sp = sp.transpose(Image.FLIP_LEFT_RIGHT)
    sp = sp.rotate(float(rng.uniform(-max_rotation, max_rotation)), resample=Image.BILINEAR, expand=True)
    alpha = sp.getchannel("A")
    rgb = sp.convert("RGB")
    rgb = ImageEnhance.Brightness(rgb).enhance(rng.uniform(0.85, 1.15))
    rgb = ImageEnhance.Color(rgb).enhance(rng.uniform(0.8, 1.2))
    rgb = ImageEnhance.Contrast(rgb).enhance(rng.uniform(0.9, 1.1))
    sp = rgb.convert("RGBA")
    sp.putalpha(alpha)
    half = image_size / 2.0
    cx = half + rng.uniform(-max_shift, max_shift) * image_size
    cy = half + rng.uniform(-max_shift, max_shift) * image_size
    # centre the sprite's visible content (its alpha bounding box), not its square box: some
    # emoji sit off-centre in their box (a couch is drawn low)
    bx0, by0, bx1, by1 = alpha.getbbox() or (0, 0, sp.width, sp.height)
    x0, y0 = int(round(cx - (bx0 + bx1) / 2)), int(round(cy - (by0 + by1) / 2))
    canvas.paste(sp, (x0, y0), sp)
    image = np.asarray(canvas.convert("RGB"))
    if not return_mask:
        return image, cat
    m = Image.new("L", (image_size, image_size), 0)
    m.paste(alpha, (x0, y0))
    return image, cat, np.asarray(m, dtype=np.float32) / 255.0


def make_single_object_scenes(
    n: int, seed: int = 0, start: int = 0, image_size: int = 64, sprites_dir=None, **render_kw
) -> SceneSet:
    """Renders ``start .. start + n - 1`` of :func:`render_single_object` as a :class:`SceneSet`.

    Labels and captions are those of a one-object scene (``make_caption([category])``);
    ``render_kw`` goes to :func:`render_single_object` (``scale``, ``max_rotation``, ...).
    """
    def render(idx, sprites):
        img, c = render_single_object(seed, idx, image_size, sprites, **render_kw)
        return img, [c]

    return _scene_set(n, seed, start, image_size, sprites_dir, render=render,
                      caption=lambda idx, cats: make_caption(cats))

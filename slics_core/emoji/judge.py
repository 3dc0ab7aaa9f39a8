"""An independent judge of generated emoji pictures: which object, if any, an image shows.

A small CNN (:func:`build_judge`) classifying a 64x64 RGB image (read at
32x32, the generator's native resolution) into one of the 71 emoji
categories or :data:`NO_OBJECT`. It never sees a generated image, an
encoder or a SLiCS output: it is trained (:mod:`slics_core.emoji.training.train_classifier`)
only on clean renders of the emoji world and on "no object" images, so it
judges the generator from outside (unlike ``generation_concept_accuracy``,
whose judge is the large encoder the generator was trained to satisfy).

Training data, all drawn from ``numpy.random.default_rng([seed, index, stream])``
(:func:`judge_training_set`):

* **objects**: one sprite per image (:func:`slics_core.emoji.scenes.render_single_object`
  with wider jitter than the generator's targets: side 40-90 % of the frame, centre
  within +-10 %, rotation within +-20 degrees), on the plain light background
  (p = 0.7) or pasted on a multi-object scene background (p = 0.3); then a mild
  Gaussian blur (sigma 0-1 px at 64 px, p = 0.5).
* **no object** (:func:`no_object_images`), four kinds in equal shares:
  (a) a single-object render blurred beyond recognition (Gaussian sigma 3.5-7 px);
  (b) the pixel average of 3-6 renders of different supercategories (a ghost
  mixture of objects, the "blob mixing the categories" a deterministic decoder
  draws when a component does not tell its categories apart), blurred by 0-1.5 px;
  (c) a colour field: a scene background or a light background, no sprite;
  (d) 2-3 overlapping soft-edged ellipses of random colours on a light background
  (Gaussian blurred 1.5-4 px).

The judge's verdict for an image is the arg-max class; its concept
(supercategory) is the category's.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

from slics_core.emoji.catalog import (
    CATEGORIES,
    CATEGORY_SUPER,
    MODELS_DIR,
    SUPERCATEGORIES,
)
from slics_core.emoji.scenes import (
    _background,
    _light_background,
    load_sprites,
    render_single_object,
)
from slics_core.emoji.weight_folders import load_state, read_weights, write_weights
from slics_core.extras import require

__all__ = ["CLASSES", "JUDGE_CONFIG", "NO_OBJECT", "EmojiJudge", "build_judge", "judge_dir",
           "judge_training_set", "no_object_images", "object_images", "judge_rates"]

NO_OBJECT = "no object"
#: The judge's classes: the 71 emoji categories, then :data:`NO_OBJECT`.
CLASSES: tuple[str, ...] = (*CATEGORIES, NO_OBJECT)
JUDGE_CONFIG = {"channels": [16, 32, 64, 128], "input_size": 32, "dropout": 0.2}
WEIGHTS_NAME = "judge.safetensors"
OBJECT_STREAM, NO_OBJECT_STREAM = 11, 13


def judge_dir(root=None) -> Path:
    return Path(root or MODELS_DIR) / "emoji-judge"


def build_judge(config: dict | None = None):
    """The CNN (random weights): 4 x (3x3 conv, batch norm, ReLU, 2x2 max-pool), mean pool, linear."""
    torch = require("torch")
    nn = require("torch").nn

    cfg = dict(JUDGE_CONFIG, **(config or {}))
    layers, c_in = [], 3
    for c in cfg["channels"]:
        layers += [nn.Conv2d(c_in, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU(inplace=True),
                   nn.MaxPool2d(2)]
        c_in = c
    size = int(cfg["input_size"])

    class Judge(nn.Module):
        def __init__(self):
            super().__init__()
            self.cfg = cfg
            self.features = nn.Sequential(*layers)
            self.drop = nn.Dropout(cfg["dropout"])
            self.head = nn.Linear(c_in, len(CLASSES))

        def forward(self, x):  # x: (n, 3, H, W) in [0, 1]
            if x.shape[-1] != size:
                x = torch.nn.functional.interpolate(x, size=(size, size), mode="area")
            h = self.features((x - 0.5) / 0.25).mean(dim=(2, 3))
            return self.head(self.drop(h))

    return Judge()


# ----------------------------------------------------------------------------- data
def _blur(img: np.ndarray, sigma: float) -> np.ndarray:
    if sigma <= 0.05:
        return img
    return np.asarray(Image.fromarray(img).filter(ImageFilter.GaussianBlur(float(sigma))))


def object_images(n: int, seed: int, start: int = 0, image_size: int = 64, categories=None):
    """Clean object renders for the judge: ``(images (n, H, W, 3) uint8, class indices (n,))``.

    Render ``i`` draws its category uniformly from the 71 (or cycles through
    ``categories`` in order), then its jitter, background and blur from
    ``default_rng([seed, start + i, 11])`` (see the module doc).
    """
    sprites = load_sprites()
    images = np.empty((n, image_size, image_size, 3), np.uint8)
    labels = np.empty(n, np.int64)
    for i in range(n):
        idx = start + i
        rng = np.random.default_rng([int(seed), idx, OBJECT_STREAM])
        cat = categories[idx % len(categories)] if categories is not None else CATEGORIES[int(rng.integers(71))]
        img, _, mask = render_single_object(int(seed) * 100003 + OBJECT_STREAM, idx, image_size, sprites,
                                            category=cat, scale=(0.4, 0.9), max_rotation=20.0, max_shift=0.1,
                                            return_mask=True)
        if rng.random() < 0.3:
            bg = _background(rng, image_size).astype(np.float32)
            img = (img * mask[..., None] + bg * (1 - mask[..., None])).round().clip(0, 255).astype(np.uint8)
        if rng.random() < 0.5:
            img = _blur(img, rng.uniform(0.0, 1.0))
        images[i], labels[i] = img, CLASSES.index(cat)
    return images, labels


def no_object_images(n: int, seed: int, start: int = 0, image_size: int = 64) -> np.ndarray:
    """``n`` "no object" images (uint8), the four kinds of the module doc in turn (``index % 4``)."""
    sprites = load_sprites()
    out = np.empty((n, image_size, image_size, 3), np.uint8)
    base = int(seed) * 100003 + NO_OBJECT_STREAM
    for i in range(n):
        idx = start + i
        rng = np.random.default_rng([int(seed), idx, NO_OBJECT_STREAM])
        kind = idx % 4
        if kind == 0:  # a render blurred beyond recognition
            img, _ = render_single_object(base, idx, image_size, sprites, scale=(0.4, 0.9), max_shift=0.1)
            img = _blur(img, rng.uniform(3.5, 7.0))
        elif kind == 1:  # a ghost mixture of objects of different supercategories
            k = int(rng.integers(3, 7))
            supers = rng.choice(len(SUPERCATEGORIES), size=k, replace=False)
            stack = []
            for j, s in enumerate(supers):
                cats = [c for c in CATEGORIES if CATEGORY_SUPER[c] == SUPERCATEGORIES[s]]
                cat = cats[int(rng.integers(len(cats)))]
                im, _ = render_single_object(base, idx * 8 + j + 1, image_size, sprites, category=cat,
                                             scale=(0.5, 0.85), max_shift=0.06)
                stack.append(im.astype(np.float32))
            img = _blur(np.mean(stack, axis=0).round().astype(np.uint8), rng.uniform(0.0, 1.5))
        elif kind == 2:  # a colour field, no sprite
            img = _background(rng, image_size) if rng.random() < 0.5 else _light_background(rng, image_size)
        else:  # soft coloured ellipses on a light background
            canvas = Image.fromarray(_light_background(rng, image_size))
            draw = ImageDraw.Draw(canvas)
            for _ in range(int(rng.integers(2, 4))):
                w, h = rng.uniform(0.25, 0.7, 2) * image_size
                cx, cy = image_size / 2 + rng.uniform(-0.15, 0.15, 2) * image_size
                colour = tuple(int(v) for v in rng.integers(0, 256, 3))
                draw.ellipse([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], fill=colour)
            img = _blur(np.asarray(canvas), rng.uniform(1.5, 4.0))
        out[i] = img
    return out


def judge_training_set(n_objects: int, n_no_object: int, seed: int):
    """Objects (categories cycled in order, so every class has ``n_objects // 71`` or one more) and
    no-object images, shuffled by ``seed``: ``(images, labels)``."""
    X1, y1 = object_images(n_objects, seed, categories=CATEGORIES)
    X0 = no_object_images(n_no_object, seed)
    X = np.concatenate([X1, X0])
    y = np.concatenate([y1, np.full(n_no_object, CLASSES.index(NO_OBJECT), np.int64)])
    order = np.random.default_rng([int(seed), 99]).permutation(len(X))
    return X[order], y[order]


# ----------------------------------------------------------------------------- model
class EmojiJudge:
    """The trained judge. :meth:`load` reads the shipped weights; :meth:`predict` gives class indices."""

    def __init__(self, net, config: dict | None = None):
        self.net = net.eval()
        self.config = dict(JUDGE_CONFIG, **(config or {}))

    @classmethod
    def load(cls, root=None) -> EmojiJudge:
        folder = judge_dir(root)
        meta, state = read_weights(folder, WEIGHTS_NAME, "emoji judge",
                                   "python -m slics_core.emoji.training.train_classifier")
        if list(meta.get("classes", [])) != list(CLASSES):
            raise ValueError(f"emoji judge in {folder} was trained for other classes; retrain it with "
                             "`python -m slics_core.emoji.training.train_classifier`")
        net = load_state(build_judge(meta["config"]), state, folder, "emoji judge")
        judge = cls(net, meta["config"])
        judge.training = meta.get("training", {})
        return judge

    def save(self, root=None, metrics: dict | None = None) -> Path:
        meta = {"config": self.config, "classes": list(CLASSES), "training": metrics or {}}
        return write_weights(judge_dir(root), WEIGHTS_NAME, self.net, meta)

    def predict_proba(self, images: np.ndarray, batch_size: int = 256) -> np.ndarray:
        """Class probabilities (n, 72) for uint8 images (n, H, W, 3) (or a list of PIL images)."""
        torch = require("torch")

        arr = np.stack([np.asarray(im.convert("RGB") if hasattr(im, "convert") else im) for im in images]) \
            if len(images) else np.zeros((0, 64, 64, 3), np.uint8)
        if arr.ndim != 4 or arr.shape[-1] != 3:
            raise ValueError(f"images must have shape (n, H, W, 3), got {arr.shape}")
        out = []
        with torch.no_grad():
            for i in range(0, len(arr), int(batch_size)):
                x = torch.from_numpy(arr[i:i + int(batch_size)]).permute(0, 3, 1, 2).float() / 255.0
                out.append(torch.softmax(self.net(x), dim=1).numpy())
        return np.concatenate(out) if out else np.zeros((0, len(CLASSES)), np.float32)

    def predict(self, images, batch_size: int = 256) -> np.ndarray:
        """Class indices into :data:`CLASSES` (the last is :data:`NO_OBJECT`)."""
        return self.predict_proba(images, batch_size).argmax(axis=1)


def judge_rates(pred: np.ndarray, true_categories: list, true_concepts: list) -> dict:
    """Fractions of images judged to show the right concept, the right category, no object.

    Parameters
    ----------
    pred : int array (n,)
        Judge classes (indices into :data:`CLASSES`).
    true_categories, true_concepts : list of sets of str
        Per image, the categories / supercategories it should show (any one counts).
    """
    pred = np.asarray(pred)
    if len(pred) != len(true_categories) or len(pred) != len(true_concepts):
        raise ValueError("pred, true_categories and true_concepts must have the same length")
    n = len(pred)
    names = [CLASSES[int(p)] for p in pred]
    none = np.array([c == NO_OBJECT for c in names], bool)
    cat_ok = np.array([c in t for c, t in zip(names, true_categories)], bool)
    con_ok = np.array([c != NO_OBJECT and CATEGORY_SUPER[c] in t for c, t in zip(names, true_concepts)], bool)
    if n == 0:
        return {"n": 0, "right_concept": None, "right_category": None, "no_object": None}
    return {"n": int(n), "right_concept": round(float(con_ok.mean()), 4),
            "right_category": round(float(cat_ok.mean()), 4), "no_object": round(float(none.mean()), 4)}

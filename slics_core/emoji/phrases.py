"""Scene phrases: captions of several objects made from a scene's own contents, and the fixed test set.

The emoji text towers were first trained on captions that list a scene's categories and
supercategories (:func:`slics_core.emoji.training.train_clip.caption_variants`); a phrase such as "a cat next
to a pizza on a green background" was outside what they had read. :func:`scene_phrases` writes such
phrases from what the scene generator drew (its objects, their quadrants, the background's kind and
colour: ``render_scene(..., layout=True)``), for the text-only retraining
(``train_clip --text-only``). :func:`benchmark_phrases` is the fixed set of 50 two-object phrases of
``benchmarks/bench_text_queries.py``; the training excludes them word for word.
"""
from __future__ import annotations

import colorsys

import numpy as np

from slics_core.emoji.catalog import ALL_COCO_CATEGORIES, EMOJI_FOR_CATEGORY, SUB_TO_CONCEPT

__all__ = ["BENCH_TEMPLATES", "PAIR_TEMPLATES", "benchmark_phrases", "colour_name", "relation", "scene_phrases"]

#: Templates of the benchmark's phrases (``{a}``, ``{b}``: two category names).
BENCH_TEMPLATES = ("a {a} next to a {b}", "a {a} and a {b}", "a {a} with a {b} on a plain background")

#: Templates of the training's two-object phrases (``{a}``/``{b}`` include their article).
PAIR_TEMPLATES = ("{a} next to {b}", "{a} and {b}", "{a} with {b}", "{a} beside {b}", "{a} near {b}",
                  "a picture of {a} and {b}", "a photo of {a} with {b}", "{a} {rel} {b}")


def benchmark_phrases(sub_names=None, sub_to_concept=None, n: int = 50, seed: int = 0) -> list:
    """``[(phrase, sub_a, sub_b)]``: the benchmark's phrases, two sub-labels of different concepts each.

    ``sub_names`` / ``sub_to_concept`` default to the emoji world's 71 categories (a workspace's
    ``sub_names`` and ``sub_to_concept``); the draw is fixed by ``seed``.
    """
    if sub_names is None:
        keep = [i for i, c in enumerate(ALL_COCO_CATEGORIES) if c in EMOJI_FOR_CATEGORY]
        sub_names = [ALL_COCO_CATEGORIES[i] for i in keep]
        sub_to_concept = np.asarray(SUB_TO_CONCEPT, dtype=int)[keep]
    rng = np.random.default_rng(seed)
    subs = list(sub_names)
    s2c = np.asarray(sub_to_concept)
    out, seen = [], set()
    while len(out) < n:
        a, b = (int(v) for v in rng.choice(len(subs), 2, replace=False))
        if s2c[a] == s2c[b] or (a, b) in seen:
            continue
        seen.add((a, b))
        out.append((BENCH_TEMPLATES[len(out) % len(BENCH_TEMPLATES)].format(a=subs[a], b=subs[b]), a, b))
    return out


def colour_name(rgb) -> str:
    """A plain colour word for an RGB colour in [0, 1] (white, grey, black, red, ... pink)."""
    h, s, v = colorsys.rgb_to_hsv(*(float(x) for x in rgb))
    if s < 0.22:
        return "white" if v > 0.85 else ("black" if v < 0.3 else "grey")
    if v < 0.3:
        return "black"
    deg = h * 360
    for limit, name in ((15, "red"), (40, "orange"), (70, "yellow"), (165, "green"), (255, "blue"),
                        (290, "purple"), (340, "pink")):
        if deg < limit:
            return name
    return "red"


def relation(cell_a, cell_b) -> str:
    """Where object a is relative to object b, from their quadrants (0 TL, 1 TR, 2 BL, 3 BR)."""
    if cell_a is None or cell_b is None:
        return "next to"
    if cell_a // 2 == cell_b // 2:
        return "left of" if cell_a % 2 < cell_b % 2 else "right of"
    if cell_a % 2 == cell_b % 2:
        return "above" if cell_a // 2 < cell_b // 2 else "below"
    return "next to"


def _noun(category: str, rng) -> str:
    art = "an" if category[0] in "aeiou" and rng.random() < 0.8 else "a"
    return f"{art} {category}"


def _background_words(layout: dict, rng) -> str:
    kind, colour = layout.get("background"), colour_name(layout.get("colour", (0.5, 0.5, 0.5)))
    if kind == "plain":
        return [f"on a {colour} background", f"on a plain {colour} background", "on a plain background"][
            int(rng.integers(3))]
    return f"on a {kind} background" if rng.random() < 0.5 else f"on a {kind} {colour} background"


def scene_phrases(objects, layout: dict, rng: np.random.Generator, n: int = 4, exclude=frozenset()):
    """``n`` phrases about one scene, and what each asserts (``{"c:<category>"}`` sets).

    Two objects of the scene (one when it has one category) in a template of :data:`PAIR_TEMPLATES`
    ("a cat left of a pizza": the relation is the one drawn), sometimes three objects, and half of the
    time the background ("on a plain green background"). Phrases in ``exclude`` are drawn again.
    """
    cats = list(dict.fromkeys(objects))
    cell = {}
    for c, q in zip(objects, layout.get("cells", [])):
        cell.setdefault(c, q)
    caps, ments = [], []
    while len(caps) < n:
        order = [cats[i] for i in rng.permutation(len(cats))]
        if len(order) == 1:
            text = [_noun(order[0], rng), "a picture of " + _noun(order[0], rng)][int(rng.integers(2))]
            used = order[:1]
        elif len(order) >= 3 and rng.random() < 0.2:
            used = order[:3]
            text = f"{_noun(used[0], rng)}, {_noun(used[1], rng)} and {_noun(used[2], rng)}"
        else:
            used = order[:2]
            t = PAIR_TEMPLATES[int(rng.integers(len(PAIR_TEMPLATES)))]
            text = t.format(a=_noun(used[0], rng), b=_noun(used[1], rng),
                            rel=relation(cell.get(used[0]), cell.get(used[1])))
        if rng.random() < 0.5:
            text += " " + _background_words(layout, rng)
        if text in exclude:
            continue
        caps.append(text)
        ments.append({"c:" + c for c in used})
    return caps, ments

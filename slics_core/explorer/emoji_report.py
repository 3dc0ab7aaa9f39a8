"""Quality report of the emoji world (``slics emoji-report --json``).

* ``zero_shot_precision_at_2``: over the held-out validation and query scenes,
  the fraction of the small encoder's top-``min(2, n_present)`` zero-shot
  supercategories that are present (a one-concept scene can only be judged on
  its top-1). ``zero_shot_precision_at_2_strict`` always judges the top-2
  (a one-concept scene then scores at most 1/2; ceiling 0.85 here).
* ``judged``: generated images judged by the project's own classifier
  (:mod:`slics_core.emoji.judge`, trained only on clean renders and "no
  object" blobs, never on a generated image) for three sets:

  - ``components``: the Generate page's images of the query scenes' concept
    components: over the first ``n_queries`` query scenes and each concept ``j``
    present, ``tilde v_j`` = S-SLiCS partial component (small space) ->
    Procrustes (fitted on training scenes) -> large centred space -> generator.
    Right concept: the judged object's supercategory is ``j``; right category:
    the judged object is one of the scene's objects of concept ``j``.
  - ``whole_scene``: the image of each query's own embedding (right concept /
    category: any of the scene's).
  - ``single_object``: the generator fed directly with the large encoder's
    embedding of a held-out single-object render (what it can draw at all).

  Each gives ``right_concept``, ``right_category`` and ``no_object`` (fractions
  of images); ``strict``: the same with every verdict whose class probability is
  below :data:`STRICT_THRESHOLD` counted as "no object" (a stricter reading of
  the same judge); ``clean`` is the judge on the clean inputs themselves (the query
  scenes, the single-object renders): the ceiling the judge allows. ``components``
  also gives ``reader``: the same fractions for the generator's own most likely
  object (what it read, before drawing).
  ``atom_interpolation``: per concept, the strip between its first two atoms
  (as on the Generate page) judged at a = 0, 0.25, ..., 1.
* ``generation_concept_accuracy`` (kept for comparison with earlier runs; lenient):
  over the same component images, a hit when ``j`` is among the *large encoder's*
  top-2 zero-shot concepts of the generated image. Its judge is the encoder the
  generator was trained to satisfy (consistency loss), so it measures that the
  pipeline carries the concept into the image, not that a person (or an
  independent classifier) sees an object of it.
* ``map_at_20``: the methods table (every fitted method of the registry; general
  and sub-label mAP@20 of partial components; the oracle row flagged, ``map_best`` naming
  the best non-oracle method of each column) from
  :func:`slics_core.explorer.scoring.methods_table` on the query set against the
  candidate pool (the workspace's own models, no refitting).

Generation and the methods table use the workspace's ``chosen_d0`` (best
validation sub-label mAP@20 of S-SLiCS, as in the paper) unless a ``d0`` is
given; the report prints it as ``chosen_d0`` with the validation curve
``d0_validation``.
"""
from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw

from slics_core.emoji.catalog import CATEGORIES, CATEGORY_SUPER, SUPERCATEGORIES
from slics_core.emoji.generator import EmojiGenerator
from slics_core.emoji.judge import CLASSES, NO_OBJECT, EmojiJudge, judge_rates
from slics_core.emoji.models import encode_images, load_emoji_clip, precision_at_2, zero_shot_scores
from slics_core.emoji.scenes import load_sprites, render_single_object
from slics_core.explorer.generation import load_workspace_generator
from slics_core.explorer.scoring import methods_table
from slics_core.generators import concept_atoms, interpolate_atoms
from slics_core.methods import DEFAULT_METHOD, contenders, is_oracle
from slics_core.rows import ZERO_NORM, unit_rows

__all__ = ["zero_shot_precision", "generation_concept_accuracy", "judged_generation", "methods_map",
           "emoji_report", "contact_sheet"]

#: A strict verdict needs at least this judge probability for its class, else it is "no object".
STRICT_THRESHOLD = 0.5

#: Seed of the held-out single-object renders of ``judged.single_object`` (the generator was trained
#: on renders of other seeds; the judge on renders of its own streams).
SINGLE_OBJECT_SEED = 4242


def zero_shot_precision(ws) -> dict:
    idx = np.concatenate([ws.index["val"], ws.index["query"]])
    raw = ws.raw[idx]
    raw = unit_rows(raw, name="embeddings")
    text = unit_rows(ws.concept_text, name="concept text embeddings")
    p_k, p_2 = precision_at_2(raw @ text.T, ws.Y[idx].astype(int))
    return {"zero_shot_precision_at_2": round(p_k, 4), "zero_shot_precision_at_2_strict": round(p_2, 4),
            "zero_shot_n_scenes": int(len(idx))}


def generation_concept_accuracy(ws, d0=None, n_queries: int = 200) -> dict:
    gen = load_workspace_generator(ws)
    large, _, tok = load_emoji_clip("large")
    d0 = d0 or ws.default_d0
    model = ws.model(DEFAULT_METHOD, d0)
    q = ws.index["query"][:n_queries]
    hits, total = 0, 0
    per_concept = {}
    for j, name in enumerate(SUPERCATEGORIES):
        rows = q[ws.Y[q, j]]
        V = model.project(ws.X[rows], j)
        drawn = np.linalg.norm(V, axis=1) > ZERO_NORM  # a zero component has nothing to draw
        rows, V = rows[drawn], V[drawn]
        if len(rows) == 0:
            continue
        imgs = np.stack([np.asarray(im) for im in gen.generate(V)])
        top2 = np.argsort(-zero_shot_scores(large, tok, encode_images(large, imgs)), axis=1)[:, :2]
        h = int((top2 == j).any(axis=1).sum())
        hits += h
        total += len(rows)
        per_concept[name] = round(h / len(rows), 3)
    return {"generation_concept_accuracy": round(hits / max(total, 1), 4), "generation_pairs": total,
            "generation_d0": int(d0), "generation_per_concept": per_concept,
            "alignment_train_cosine": round(float(gen.info["alignment_train_cosine"]), 4)}


def _scene_truth(ws, rows):
    """Per row, the set of categories and the set of supercategories of the scene."""
    cats, concepts = [], []
    for i in rows:
        names = [ws.sub_names[k] for k in np.flatnonzero(ws.Z[i])] if ws.Z is not None else []
        cats.append({c for c in names if c in CATEGORY_SUPER})
        concepts.append({ws.concept_names[j] for j in np.flatnonzero(ws.Y[i])})
    return cats, concepts


def _judge(judge, images, true_categories, true_concepts) -> dict:
    """``judge_rates`` of the judge's verdicts on ``images``, with the strict reading under ``strict``."""
    proba = judge.predict_proba(np.stack([np.asarray(im) for im in images]))
    pred = proba.argmax(axis=1)
    strict = np.where(proba.max(axis=1) >= STRICT_THRESHOLD, pred, CLASSES.index(NO_OBJECT))
    out = judge_rates(pred, true_categories, true_concepts)
    out["strict"] = judge_rates(strict, true_categories, true_concepts)
    return out


def judged_generation(ws, d0=None, n_queries: int = 200, n_single: int = 355, judge=None) -> dict:
    """The ``judged`` block of the report (see the module doc)."""
    judge = judge if judge is not None else EmojiJudge.load()
    gen = load_workspace_generator(ws)
    d0 = d0 or ws.default_d0
    model = ws.model(DEFAULT_METHOD, d0)
    q = ws.index["query"][:n_queries]
    cats_q, concepts_q = _scene_truth(ws, q)
    pos = {int(r): k for k, r in enumerate(q)}

    # (i) components, as the Generate page draws them
    images, read, t_cat, t_con, per_concept = [], [], [], [], {}
    for j, name in enumerate(ws.concept_names):
        rows = q[ws.Y[q, j]]
        V = model.project(ws.X[rows], j)
        keep = np.linalg.norm(V, axis=1) > ZERO_NORM
        rows, V = rows[keep], V[keep]
        if len(rows) == 0:
            continue
        imgs = gen.generate(V)
        tc = [{c for c in cats_q[pos[int(r)]] if CATEGORY_SUPER[c] == name} for r in rows]
        per_concept[name] = _judge(judge, imgs, tc, [{name}] * len(rows))
        images += imgs
        described = gen.describe(V)
        read += [CLASSES.index(d[0][0]) for d in described] if described is not None else []
        t_cat += tc
        t_con += [{name}] * len(rows)
    components = _judge(judge, images, t_cat, t_con)
    if len(read) == len(t_cat):
        components["reader"] = judge_rates(np.asarray(read), t_cat, t_con)
    components["per_concept_right_concept"] = {k: v["right_concept"] for k, v in per_concept.items()}

    # (ii) the query's own embedding; clean: the query scenes themselves
    whole = _judge(judge, gen.generate(ws.X[q]), cats_q, concepts_q)
    whole["clean"] = judge_rates(judge.predict(ws.images[q]), cats_q, concepts_q) if ws.images is not None else None

    # (iii) single objects straight into the generator
    raw_gen = EmojiGenerator.load()
    large, _, _ = load_emoji_clip("large")
    cats = [CATEGORIES[i % len(CATEGORIES)] for i in range(n_single)]
    sprites = load_sprites()
    renders = np.stack([render_single_object(SINGLE_OBJECT_SEED, i, 64, sprites, category=c)[0]
                        for i, c in enumerate(cats)])
    drawn = raw_gen.generate(raw_gen.condition(encode_images(large, renders)))
    t_cat1, t_con1 = [{c} for c in cats], [{CATEGORY_SUPER[c]} for c in cats]
    single = _judge(judge, drawn, t_cat1, t_con1)
    single["clean"] = judge_rates(judge.predict(renders), t_cat1, t_con1)

    # atom interpolation strips (Fig. 3), as on the Generate page: first two atoms of each concept
    alphas = np.linspace(0.0, 1.0, 5)
    strips = {}
    for j, name in enumerate(ws.concept_names):
        atoms = concept_atoms(model, j)
        if atoms.shape[0] < 2:
            continue
        imgs = np.stack([np.asarray(im) for im in gen.generate(interpolate_atoms(atoms[0], atoms[1], alphas))])
        labels = [CLASSES[int(k)] for k in judge.predict(imgs)]
        strips[name] = {"judged": labels,
                        "mean_abs_pixel_change_end_to_end": round(float(np.abs(imgs[-1].astype(float)
                                                                               - imgs[0].astype(float)).mean()), 1)}
    n_objects_change = sum(1 for v in strips.values() if v["judged"][0] != v["judged"][-1]
                           and "no object" not in (v["judged"][0], v["judged"][-1]))
    return {"judged": {"components": components, "whole_scene": whole, "single_object": single,
                       "judge_heldout": getattr(judge, "training", {}).get("heldout"),
                       "atom_interpolation": {"alphas": [round(float(a), 2) for a in alphas],
                                              "strips_object_to_other_object": n_objects_change,
                                              "n_strips": len(strips), "per_concept": strips},
                       "d0": int(d0), "n_queries": int(len(q))}}


def methods_map(ws, d0=None) -> dict:
    """``map_at_20``: every fitted method's general and sub-label mAP@20 (an oracle's entry says
    ``"oracle": true``); ``map_best``: the best method of each column among the non-oracle ones
    (:func:`slics_core.methods.contenders`); ``map_d0``."""
    d0 = d0 or ws.default_d0
    recs = methods_table(ws, d0, k=20, modes=("partial",))
    table = {r["method"]: {"general": round(float(r["general"]), 4), "sub": round(float(r["sub"]), 4)} for r in recs}
    best = {}
    for key in ("general", "sub"):
        ranked = [r for r in contenders(recs) if np.isfinite(r[key])]
        best[key] = max(ranked, key=lambda r: r[key])["method"] if ranked else None
    for m in table:
        if is_oracle(m):
            table[m]["oracle"] = True
    for m, why in ws.skipped.items():
        table[m] = {"general": None, "sub": None, "skipped": why}
    return {"map_at_20": table, "map_best": best, "map_d0": int(d0)}


def emoji_report(ws, progress=None) -> dict:
    """All quality numbers as one JSON-ready dict."""
    out = {"n_scenes": {k: int(len(v)) for k, v in ws.index.items()},
           "chosen_d0": ws.default_d0, "d0_validation": list(ws.d0_scores)}
    out.update(zero_shot_precision(ws))
    for name, fn in (("judged", lambda: judged_generation(ws)), ("generation", lambda: generation_concept_accuracy(ws)),
                     ("map", lambda: methods_map(ws))):
        if progress:
            progress(name, 0, 1)
        try:
            out.update(fn())
        except (ImportError, FileNotFoundError, ValueError) as exc:
            out[f"{name}_error"] = f"{type(exc).__name__}: {exc}"
    return out


def contact_sheet(ws, n_queries: int = 16, seed: int = 0, d0=None, cell: int = 96, judge=None):
    """A labelled sheet of ``n_queries`` random query scenes (``seed``): per row the scene, the
    image of its own embedding and the image of each present concept's component (S-SLiCS, partial,
    as on the Generate page), each captioned with what it is and the judge's verdict (the scene
    with its categories).

    Returns
    -------
    PIL.Image.Image
    """
    judge = judge if judge is not None else EmojiJudge.load()
    gen = load_workspace_generator(ws)
    d0 = d0 or ws.default_d0
    model = ws.model(DEFAULT_METHOD, d0)
    q = ws.index["query"]
    rows = np.sort(np.random.default_rng(int(seed)).choice(q, size=min(int(n_queries), len(q)), replace=False))
    cats_q, _ = _scene_truth(ws, rows)
    label_h, pad = 30, 4
    records = []
    for r, cats in zip(rows, cats_q):
        concepts = list(np.flatnonzero(ws.Y[r]))
        V = np.stack([model.project(ws.X[r:r + 1], int(j))[0] for j in concepts])
        keep = [k for k in range(len(concepts)) if np.linalg.norm(V[k]) > ZERO_NORM]
        imgs = [np.asarray(im) for im in gen.generate(np.vstack([ws.X[r:r + 1], V[keep]]))]
        verdicts = [CLASSES[int(k)] for k in judge.predict(np.stack([ws.images[r], *imgs]))]
        words, lines = sorted(cats) or ["?"], ["", ""]
        for w in words:  # the scene's categories on the two label lines
            k = 0 if len(lines[0]) + len(w) + 2 <= 16 and not lines[1] else 1
            lines[k] = f"{lines[k]}, {w}" if lines[k] else w
        titles = [(lines[0], lines[1]), ("own embedding", f"judge: {verdicts[1]}")]
        titles += [(ws.concept_names[concepts[k]], f"judge: {v}") for k, v in zip(keep, verdicts[2:])]
        records.append(([ws.images[r], *imgs], titles))
    n_cols = max(len(t) for _, t in records)
    W, H = n_cols * (cell + pad) + pad, len(records) * (cell + label_h + pad) + pad
    sheet = Image.new("RGB", (W, H), (255, 255, 255))
    draw = ImageDraw.Draw(sheet)
    for i, (imgs, titles) in enumerate(records):
        y = pad + i * (cell + label_h + pad)
        for k, (im, (t1, t2)) in enumerate(zip(imgs, titles)):
            x = pad + k * (cell + pad)
            sheet.paste(Image.fromarray(im).resize((cell, cell), Image.NEAREST), (x, y))
            draw.text((x, y + cell + 1), t1[:16], fill=(0, 0, 0))
            draw.text((x, y + cell + 14), t2[:16], fill=(90, 90, 90))
    return sheet

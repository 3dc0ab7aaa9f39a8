"""Quality report of the emoji world (``slics emoji-report --json``).

* ``zero_shot_precision_at_2``: over the held-out validation and query scenes,
  the fraction of the small encoder's top-``min(2, n_present)`` zero-shot
  supercategories that are present (a one-concept scene can only be judged on
  its top-1). ``zero_shot_precision_at_2_strict`` always judges the top-2
  (a one-concept scene then scores at most 1/2; ceiling 0.85 here).
* ``generation_concept_accuracy``: over query scenes and each concept ``j``
  present, ``tilde v_j`` = S-SLiCS partial component (small space) ->
  Procrustes (fitted on training scenes) -> large centred space -> generator ->
  image; a hit when ``j`` is among the large encoder's top-2 zero-shot concepts
  of the generated image.
* ``map_at_20``: the methods table (every fitted method of the registry; general
  and sub-label mAP@20 of partial components) from
  :func:`slics_core.explorer.scoring.methods_table` on the query set against the
  candidate pool (the workspace's own models, no refitting).

Generation and the methods table use the workspace's ``chosen_d0`` (best
validation sub-label mAP@20 of S-SLiCS, as in the paper) unless a ``d0`` is
given; the report prints it as ``chosen_d0`` with the validation curve
``d0_validation``.
"""
from __future__ import annotations

import numpy as np

from slics_core.emoji.catalog import SUPERCATEGORIES
from slics_core.emoji.models import encode_images, load_emoji_clip, zero_shot_scores
from slics_core.emoji.train_clip import precision_at_2
from slics_core.explorer.scoring import methods_table
from slics_core.explorer.workspace import load_workspace_generator

__all__ = ["zero_shot_precision", "generation_concept_accuracy", "methods_map", "emoji_report"]


def zero_shot_precision(ws) -> dict:
    idx = np.concatenate([ws.index["val"], ws.index["query"]])
    raw = ws.raw[idx]
    raw = raw / np.linalg.norm(raw, axis=1, keepdims=True)
    text = ws.concept_text / np.linalg.norm(ws.concept_text, axis=1, keepdims=True)
    p_k, p_2 = precision_at_2(raw @ text.T, ws.Y[idx].astype(int))
    return {"zero_shot_precision_at_2": round(p_k, 4), "zero_shot_precision_at_2_strict": round(p_2, 4),
            "zero_shot_n_scenes": int(len(idx))}


def generation_concept_accuracy(ws, d0=None, n_queries: int = 200) -> dict:
    gen = load_workspace_generator(ws)
    large, _, tok = load_emoji_clip("large")
    d0 = d0 or ws.default_d0
    model = ws.model("S-SLiCS", d0)
    q = ws.index["query"][:n_queries]
    hits, total = 0, 0
    per_concept = {}
    for j, name in enumerate(SUPERCATEGORIES):
        rows = q[ws.Y[q, j]]
        V = model.project(ws.X[rows], j)
        drawn = np.linalg.norm(V, axis=1) > 1e-12  # a zero component has nothing to draw
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


def methods_map(ws, d0=None) -> dict:
    d0 = d0 or ws.default_d0
    recs = methods_table(ws, d0, k=20, modes=("partial",))
    table = {r["method"]: {"general": round(float(r["general"]), 4), "sub": round(float(r["sub"]), 4)} for r in recs}
    for m, why in ws.skipped.items():
        table[m] = {"general": None, "sub": None, "skipped": why}
    return {"map_at_20": table, "map_d0": int(d0)}


def emoji_report(ws, progress=None) -> dict:
    """All three quality numbers as one JSON-ready dict."""
    out = {"n_scenes": {k: int(len(v)) for k, v in ws.index.items()},
           "chosen_d0": ws.default_d0, "d0_validation": list(ws.d0_scores)}
    out.update(zero_shot_precision(ws))
    for name, fn in (("generation", lambda: generation_concept_accuracy(ws)), ("map", lambda: methods_map(ws))):
        if progress:
            progress(name, 0, 1)
        try:
            out.update(fn())
        except (ImportError, FileNotFoundError, ValueError) as exc:
            out[f"{name}_error"] = f"{type(exc).__name__}: {exc}"
    return out

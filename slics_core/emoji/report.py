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
* ``map_at_20``: the methods table (S-SVD, S-SLiCS, U-SLiCS, UF; general and
  sub-label mAP@20) from :func:`slics_core.evaluation.evaluate_methods` on the
  query set against the candidate pool.

Generation and the methods table use the workspace's ``chosen_d0`` (best
validation sub-label mAP@20 of S-SLiCS, as in the paper) unless a ``d0`` is
given; the report prints it as ``chosen_d0`` with the validation curve
``d0_validation``.
"""
from __future__ import annotations

import numpy as np

from slics_core.emoji.catalog import SUPERCATEGORIES
from slics_core.emoji.train_clip import precision_at_2

__all__ = ["zero_shot_precision", "generation_concept_accuracy", "methods_map", "emoji_report"]


def zero_shot_precision(ws) -> dict:
    idx = np.concatenate([ws.index["val"], ws.index["query"]])
    raw = ws.raw_small[idx]
    raw = raw / np.linalg.norm(raw, axis=1, keepdims=True)
    p_k, p_2 = precision_at_2(raw @ ws.text_small.T, ws.Y[idx].astype(int))
    return {"zero_shot_precision_at_2": round(p_k, 4), "zero_shot_precision_at_2_strict": round(p_2, 4),
            "zero_shot_n_scenes": int(len(idx))}


def generation_concept_accuracy(ws, d0=None, n_queries: int = 200, generator=None, models_root=None) -> dict:
    from slics_core.alignment import ProcrustesAlignment
    from slics_core.emoji.generator import EmojiGenerator
    from slics_core.emoji.models import encode_images, load_emoji_clip, zero_shot_scores

    gen = generator or EmojiGenerator.load(models_root)
    large, _, tok = load_emoji_clip("large", models_root)
    d0 = d0 or _default_d0(ws)
    model = ws.models[("S-SLiCS", d0)]
    tr = ws.index["train"]
    align = ProcrustesAlignment(normalize=True).fit(ws.X_small[tr], gen.condition(ws.raw_large[tr]))
    q = ws.index["query"][:n_queries]
    hits, total = 0, 0
    per_concept = {}
    for j, name in enumerate(SUPERCATEGORIES):
        rows = q[ws.Y[q, j]]
        if len(rows) == 0:
            continue
        v = model.project(ws.X_small[rows], j)
        imgs = gen.generate(align.transform(v))
        top2 = np.argsort(-zero_shot_scores(large, tok, encode_images(large, imgs)), axis=1)[:, :2]
        h = int((top2 == j).any(axis=1).sum())
        hits += h
        total += len(rows)
        per_concept[name] = round(h / len(rows), 3)
    return {"generation_concept_accuracy": round(hits / max(total, 1), 4), "generation_pairs": total,
            "generation_d0": int(d0), "generation_per_concept": per_concept,
            "alignment_train_cosine": round(float(align.train_cosine_), 4)}


def _default_d0(ws) -> int:
    """The workspace's validation choice of ``d0`` (largest fitted one for an old workspace)."""
    chosen = getattr(ws, "chosen_d0", None)
    return int(chosen) if chosen is not None else max(d for (m, d) in ws.models if m == "S-SLiCS")


def methods_map(ws, d0=None) -> dict:
    from slics_core.emoji.workspace import _eval_data
    from slics_core.evaluation import evaluate_methods

    d0 = d0 or _default_d0(ws)
    data, split = _eval_data(ws)
    rows = evaluate_methods(data, split, methods=("S-SVD", "S-SLiCS", "U-SLiCS", "UF"), n_atoms=d0,
                            n_iter=ws.config.n_iter, seeds=(0,), k=20)
    table = {r["method"]: {"general": None if r.get("skipped") else round(float(r["general_mean"]), 4),
                           "sub": None if r.get("skipped") else round(float(r["sub_mean"]), 4),
                           **({"skipped": r["skipped"]} if r.get("skipped") else {})} for r in rows}
    return {"map_at_20": table, "map_d0": int(d0)}


def emoji_report(ws, progress=None, models_root=None) -> dict:
    """All three quality numbers as one JSON-ready dict."""
    out = {"n_scenes": {k: int(len(v)) for k, v in ws.index.items()},
           "chosen_d0": _default_d0(ws), "d0_validation": list(getattr(ws, "d0_scores", []))}
    out.update(zero_shot_precision(ws))
    for name, fn in (("generation", lambda: generation_concept_accuracy(ws, models_root=models_root)),
                     ("map", lambda: methods_map(ws))):
        if progress:
            progress(name, 0, 1)
        try:
            out.update(fn())
        except (ImportError, FileNotFoundError, ValueError, AttributeError) as exc:
            out[f"{name}_error"] = f"{type(exc).__name__}: {exc}"
    return out

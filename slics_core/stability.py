"""Stability of a dictionary across seeds, and U-SLiCS at chosen S~ (issue 31, item 2).

* :func:`seed_stability` - whether the atoms come back across seeds: each seed's atoms matched to the
  first seed's (:func:`slics_core.analysis.match_atoms`, within concept), the mean matched |cos| per concept,
  and the mAP spread over the seeds; :func:`stability_markdown` formats it.
* :func:`evaluate_n_active` - one U-SLiCS row of the methods table per ``S~`` (concepts per image of the
  zero-shot pseudo-labels); :func:`check_n_active` checks the values first.

Both run on :mod:`slics_core.evaluation`'s ranking and scoring.
"""
from __future__ import annotations

import math

import numpy as np

from slics_core.analysis import match_atoms
from slics_core.data import fit_inputs
from slics_core.evaluation import SWEEP_METHOD, _fit_model, evaluate_methods, rank_method, score_split
from slics_core.methods import (
    get_method,
)
from slics_core.retrieval import build_index

__all__ = ["N_ACTIVE_METHOD", "seed_stability", "stability_markdown", "n_active_name", "check_n_active",
           "evaluate_n_active"]


def seed_stability(data, split, seeds=(0, 1, 2), *, method=SWEEP_METHOD, n_atoms=10, n_iter=10, batch_size=None,
                   k=20, mode="partial", backend="auto", normalization="retrieved", ridge=0.0, results=None,
                   progress=None):
    """Do the atoms come back when ``method`` is fitted again with another seed?

    ``method`` (a dictionary method, S-SLiCS by default) is fitted once per seed at ``d0 = n_atoms``; every
    seed's atoms are matched one to one to the first seed's, concept by concept
    (:func:`slics_core.analysis.match_atoms`: Hungarian on \\|cos\\|), and every fit is scored on the query
    split (mAP@k per concept: the mean AP of the (query, concept) pairs of that concept).

    Without mini-batches (``batch_size=None``) the fit may not depend on the seed at all: then every
    matched cosine is 1 and every spread 0, which is the answer.

    Returns
    -------
    records : list of dict
        One per concept, in the model's order: ``concept``, ``matched_cos`` (mean matched \\|cos\\| in
        [0, 1] over the seeds after the first and the concept's atoms; NaN with one seed), ``min_cos``
        (the smallest of them), ``general_mean``, ``general_std``, ``sub_mean``, ``sub_std`` (the concept's
        mAP@k over the seeds: mean and standard deviation), ``n_pairs_general``.
    summary : dict
        ``method``, ``d0``, ``seeds``, ``k``, ``matched_cos`` (over every atom), ``general_mean``,
        ``general_std``, ``sub_mean``, ``sub_std`` (the mAP@k of all pairs over the seeds).
    """
    m = get_method(method)
    if not m.dictionary:
        raise ValueError(f"seed stability compares dictionaries; {m.name} has none.")
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ValueError("seed stability needs at least one seed.")
    inputs = fit_inputs(data, split.train)
    index = build_index(data.X[split.pool], backend)
    S = data.Y.shape[1]
    models, per_concept, overall = [], [], []
    for seed in seeds:
        model = _fit_model(m, inputs, n_atoms, seed, n_iter, batch_size, ridge, results)
        idx, _ = rank_method(m.name, data, split, n_atoms=n_atoms, seed=seed, k=k, mode=mode, model=model,
                             index=index)
        r = score_split(idx, data, split, "query", k, normalization)
        scores = {}
        for label in ("general", "sub"):
            ap, cj = r.get(f"ap_{label}", np.zeros(0)), r.get(f"concept_{label}", np.zeros(0, dtype=int))
            scores[label] = np.array([ap[cj == j].mean() if (cj == j).any() else math.nan for j in range(S)])
        per_concept.append(scores)
        overall.append((r["general"], r["sub"]))
        models.append(model)
        if progress is not None:
            progress(f"{m.name} d0={n_atoms} seed {seed}: gen={r['general']:.3f} sub={r['sub']:.3f}")
    ref = models[0]
    groups = np.asarray(ref.groups_)
    cos = []  # per later seed: |cos| of each of the first seed's atoms with its match
    for model in models[1:]:
        _, c = match_atoms(ref.atoms_, model.atoms_, groups, model.groups_)
        cos.append(np.abs(c))
    cos = np.array(cos).reshape(len(models) - 1, len(groups))
    names = getattr(ref, "concept_names_", None)
    if names is None or len(names) != S:
        names = data.concept_names if data.concept_names is not None and len(data.concept_names) == S else range(S)
    names = list(names)

    def stats(values):
        v = np.asarray(values, dtype=float)
        ok = v[~np.isnan(v)]
        return (float(ok.mean()), float(ok.std())) if ok.size else (math.nan, math.nan)

    records = []
    for j in range(S):
        c = cos[:, groups == j]
        gm, gs = stats([s["general"][j] for s in per_concept])
        sm, ss = stats([s["sub"][j] for s in per_concept])
        records.append({"concept": str(names[j]), "matched_cos": float(c.mean()) if c.size else math.nan,
                        "min_cos": float(c.min()) if c.size else math.nan, "general_mean": gm, "general_std": gs,
                        "sub_mean": sm, "sub_std": ss})
    gm, gs = stats([o[0] for o in overall])
    sm, ss = stats([o[1] for o in overall])
    summary = {"method": m.name, "d0": int(n_atoms), "seeds": seeds, "k": int(k), "mode": mode,
               "matched_cos": float(cos.mean()) if cos.size else math.nan,
               "general_mean": gm, "general_std": gs, "sub_mean": sm, "sub_std": ss}
    return records, summary


def stability_markdown(records, summary):
    """:func:`seed_stability`'s table, one row per concept (column ``matched cos``), and its summary line."""
    k = summary["k"]
    lines = [f"| Concept | matched cos | min cos | Gen. mAP@{k} | Sub. mAP@{k} |", "|---|---:|---:|---:|---:|"]

    def num(v, spread=None):
        if v is None or math.isnan(v):
            return "-"
        return f"{v:.3f}" + ("" if spread is None or math.isnan(spread) else f" ± {spread:.3f}")

    for r in records:
        lines.append(f"| {r['concept']} | {num(r['matched_cos'])} | {num(r['min_cos'])} | "
                     f"{num(r['general_mean'], r['general_std'])} | {num(r['sub_mean'], r['sub_std'])} |")
    lines += ["", f"{summary['method']}, d0={summary['d0']}, {len(summary['seeds'])} seeds, atoms matched to seed "
                  f"{summary['seeds'][0]}'s: mean matched |cos| {num(summary['matched_cos'])}; mAP@{k} over the "
                  f"seeds: Gen. {num(summary['general_mean'], summary['general_std'])}, "
                  f"Sub. {num(summary['sub_mean'], summary['sub_std'])} (mean ± std)."]
    return "\n".join(lines)


#: The method whose ``S~`` (concepts per image of its zero-shot pseudo-labels) :func:`evaluate_n_active` varies.
N_ACTIVE_METHOD = "U-SLiCS"


def n_active_name(n_active, method=N_ACTIVE_METHOD) -> str:
    """The table's name of ``method`` fitted with ``S~ = n_active``: ``"U-SLiCS (S̃=2)"``."""
    return f"{method} (S̃={int(n_active)})"


def check_n_active(values, n_concepts) -> list:
    """The ``S~`` values as ints; ValueError naming the first outside 1..``n_concepts``."""
    values = [int(v) for v in values]
    for v in values:
        if not 1 <= v <= n_concepts:
            raise ValueError(f"S~ (--n-active) must be between 1 and the number of concepts ({n_concepts}); got {v}.")
    return values


def evaluate_n_active(data, split, values, *, method=N_ACTIVE_METHOD, **kwargs):
    """:func:`evaluate_methods` rows of ``method`` (U-SLiCS) fitted with each ``S~`` in ``values``, named by
    :func:`n_active_name` and with an ``n_active`` key; ``kwargs`` go to :func:`evaluate_methods`. ``S~``
    outside 1..S: ValueError."""
    values = check_n_active(values, data.Y.shape[1])
    rows = []
    for v in values:
        for row in evaluate_methods(data, split, [method], n_active=int(v), **kwargs):
            rows.append(dict(row, method=n_active_name(v, method) + row["method"][len(get_method(method).name):],
                             n_active=int(v)))
    return rows

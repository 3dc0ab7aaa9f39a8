"""Stability of a dictionary across seeds and methods, and U-SLiCS at chosen S~ (issue 31, item 2; issue 38).

* :func:`seed_stability` - whether the atoms come back across seeds: each seed's atoms matched to the
  first seed's (:func:`atom_matches`), the mean matched cos per concept and per atom, the same matching against
  other methods' dictionaries at the same d0 (S-SVD, U-SLiCS), and the mAP spread over the seeds;
  :func:`stability_markdown` formats it. :func:`check_n_seeds` bounds the number of seeds (with the memory
  they would take).
* :func:`atom_matches` - one row per atom of a reference dictionary: its matched atom in each other dictionary
  (Hungarian within the concept on the signed cosine, :func:`slics_core.analysis.match_atoms`), the mean and
  the minimum matched cosine.
* :func:`evaluate_n_active` - one U-SLiCS row of the methods table per ``S~`` (concepts per image of the
  zero-shot pseudo-labels); :func:`check_n_active` checks the values first.

Both run on :mod:`slics_core.evaluation`'s ranking and scoring.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from slics_core.analysis import match_atoms
from slics_core.data import fit_inputs
from slics_core.evaluation import SWEEP_METHOD, _fit_model, evaluate_methods, rank_method, score_split
from slics_core.methods import get_method, needs_message
from slics_core.retrieval import build_index

__all__ = ["N_ACTIVE_METHOD", "COMPARE_METHODS", "MAX_SEEDS", "SHARED_BETWEEN_SEEDS", "seed_stability",
           "atom_matches", "check_n_seeds", "stability_memory", "stability_markdown", "n_active_name",
           "check_n_active", "evaluate_n_active"]

#: The most seeds :func:`seed_stability` takes (each is one more fit, and its dictionary is kept).
MAX_SEEDS = 100
#: The dictionaries :func:`seed_stability` also matches the first seed's fit with, at the same d0.
COMPARE_METHODS = ("S-SVD", "U-SLiCS")
#: What the seeds of :func:`seed_stability` share, in words (pages and reports say it beside the numbers).
SHARED_BETWEEN_SEEDS = ("every seed fits the same training items from the same start, the S-SVD dictionary (each "
                        "concept's top singular directions, which no seed changes), for the same epochs; the seed "
                        "only reorders the mini-batches, so the matched cos measures how much the atoms depend on "
                        "the batch order, not on the start")


def atom_matches(reference, others, concept_names=None):
    """One row per atom of ``reference``: its matched atom in each dictionary of ``others``.

    Each other dictionary is matched to ``reference`` one to one by the Hungarian algorithm within each concept
    on the *signed* cosine (:func:`slics_core.analysis.match_atoms` with ``signed=True``: atoms are used with
    non-negative coefficients, so an atom and its negative are opposite).

    Parameters
    ----------
    reference : fitted dictionary model (``atoms_``, ``groups_``)
    others : dict of str to fitted dictionary model
        Named dictionaries (e.g. ``{"seed 1": model}``), each with at least as many atoms as ``reference``.
    concept_names : sequence of str, optional
        Concept names by index (default: the reference's ``concept_names_``, else the concept numbers).

    Returns
    -------
    rows : list of dict
        One per reference atom in its order: ``concept``, ``atom`` (``"<concept> #<k>"``: its rank among its
        concept's atoms), then per other dictionary ``"<name> atom"`` (the matched atom, ``"#<k>"`` in the same
        concept, else ``"<concept> #<k>"``) and ``"<name> cos"`` (signed), then ``mean_cos`` and ``min_cos`` over
        the other dictionaries (NaN when there is none).
    """
    g = np.asarray(reference.groups_).reshape(-1)
    names = concept_names if concept_names is not None else getattr(reference, "concept_names_", None)
    names = [str(n) for n in names] if names is not None else [str(j) for j in range(int(g.max(initial=-1)) + 1)]

    def ranks(groups):
        r = np.zeros(groups.size, dtype=int)
        for c in np.unique(groups):
            r[groups == c] = np.arange(int((groups == c).sum()))
        return r

    rows = [{"concept": names[c], "atom": f"{names[c]} #{k}"} for c, k in zip(g, ranks(g))]
    cos_all = []
    for name, model in others.items():
        og = np.asarray(model.groups_).reshape(-1)
        order, cos = match_atoms(reference.atoms_, model.atoms_, g, og, signed=True)
        orank = ranks(og)
        for a, row in enumerate(rows):
            b = order[a]
            row[f"{name} atom"] = f"#{orank[b]}" if og[b] == g[a] else f"{names[og[b]]} #{orank[b]}"
            row[f"{name} cos"] = float(cos[a])
        cos_all.append(cos)
    C = np.array(cos_all).reshape(len(cos_all), g.size)
    for a, row in enumerate(rows):
        row["mean_cos"] = float(C[:, a].mean()) if len(C) else math.nan
        row["min_cos"] = float(C[:, a].min()) if len(C) else math.nan
    return rows


def stability_memory(n_seeds, n_atoms, dim) -> int:
    """Bytes :func:`seed_stability` keeps for ``n_seeds`` seeds of a dictionary of ``n_atoms`` atoms in ``dim``
    dimensions: every seed's atoms (8 bytes a number) and its row entries (matched atom and cos per atom, about
    200 bytes each as Python objects)."""
    return int(n_seeds) * int(n_atoms) * (8 * int(dim) + 200)


def _size(n_bytes) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:.1f} {unit}"
    return f"{n_bytes / 1e3:.1f} kB"


def check_n_seeds(n_seeds, n_atoms, dim, name="seeds") -> int:
    """``n_seeds`` as an int; ValueError (naming ``name``, e.g. ``"--stability"``, and the memory the study would
    take) when it is below 1 or above :data:`MAX_SEEDS`."""
    n = int(n_seeds)
    if n < 1:
        raise ValueError(f"{name} must be at least 1; got {n}.")
    if n > MAX_SEEDS:
        raise ValueError(f"{name} {n} is above the bound of {MAX_SEEDS} seeds: the study fits once per seed and keeps "
                         f"every seed's dictionary ({n_atoms} atoms x {dim}), about "
                         f"{_size(stability_memory(n, n_atoms, dim))} for {n} seeds; use at most {MAX_SEEDS}.")
    return n


def seed_stability(data, split, seeds=(0, 1, 2), *, method=SWEEP_METHOD, n_atoms=10, n_iter=10, batch_size=None,
                   k=20, mode="partial", backend="auto", normalization="retrieved", ridge=0.0, results=None,
                   progress=None, compare=COMPARE_METHODS):
    """Do the atoms come back when ``method`` is fitted again with another seed, or by another method?

    ``method`` (a dictionary method, S-SLiCS by default) is fitted once per seed at ``d0 = n_atoms``; every
    seed's atoms are matched one to one to the first seed's, concept by concept (:func:`atom_matches`: Hungarian
    on the signed cosine), and every fit is scored on the query split (mAP@k per concept: the mean AP of the
    (query, concept) pairs of that concept). The dictionaries of ``compare`` (S-SVD and U-SLiCS by default, at
    the same d0, seed and batches; a method the data cannot fit is skipped) are matched to the first seed's fit
    the same way, and every pair of these dictionaries too. What the seeds share: :data:`SHARED_BETWEEN_SEEDS`.

    Without mini-batches (``batch_size=None``) the fit may not depend on the seed at all: then every
    matched cosine is 1 and every spread 0, which is the answer.

    Returns
    -------
    records : list of dict
        One per concept, in the model's order: ``concept``, ``matched_cos`` (mean matched signed cos in
        [-1, 1] over the seeds after the first and the concept's atoms; NaN with one seed), ``min_cos``
        (the smallest of them), ``general_mean``, ``general_std``, ``sub_mean``, ``sub_std`` (the concept's
        mAP@k over the seeds: mean and standard deviation).
    summary : dict
        ``method``, ``d0``, ``seeds``, ``k``, ``matched_cos`` (over every atom), ``general_mean``,
        ``general_std``, ``sub_mean``, ``sub_std`` (the mAP@k of all pairs over the seeds), ``compared`` (the
        methods matched) and ``skipped`` (``{method: why}``).
    atoms : dict
        ``seeds``: :func:`atom_matches` of the first seed's fit against every later seed's (columns
        ``"seed <s> atom"``, ``"seed <s> cos"``); ``methods``: the same against each compared method's fit
        (columns ``"<method> atom"``, ``"<method> cos"``); ``pairs``: one row per pair of the dictionaries
        (``a``, ``b``, ``matched_cos``, ``min_cos``: mean and smallest matched signed cos over the atoms).
    """
    m = get_method(method)
    if not m.dictionary:
        raise ValueError(f"seed stability compares dictionaries; {m.name} has none.")
    if not hasattr(seeds, "__len__"):
        seeds = list(itertools.islice(seeds, MAX_SEEDS + 1))
    S = data.Y.shape[1]
    check_n_seeds(len(seeds), S * int(n_atoms), data.X.shape[1])
    seeds = [int(s) for s in seeds]
    inputs = fit_inputs(data, split.train)
    index = build_index(data.X[split.pool], backend)
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
    names = getattr(ref, "concept_names_", None)
    if names is None or len(names) != S:
        names = data.concept_names if data.concept_names is not None and len(data.concept_names) == S else range(S)
    names = [str(n) for n in names]
    seed_rows = atom_matches(ref, {f"seed {s}": model for s, model in zip(seeds[1:], models[1:])}, names)
    # per later seed: signed cos of each of the first seed's atoms with its match
    cos = np.array([[row[f"seed {s} cos"] for row in seed_rows] for s in seeds[1:]]).reshape(len(seeds) - 1,
                                                                                             len(groups))
    compared, skipped = {}, {}
    for name in compare:
        other = get_method(name)
        why = None if other.dictionary else "has no dictionary"
        why = why or ("is the method itself" if other.name == m.name else needs_message(other, inputs))
        if why:
            skipped[other.name] = why
            continue
        compared[other.name] = _fit_model(other, inputs, n_atoms, seeds[0], n_iter, batch_size, ridge, results)
        if progress is not None:
            progress(f"{other.name} d0={n_atoms} seed {seeds[0]} fitted (matched to {m.name})")
    method_rows = atom_matches(ref, compared, names)
    fits = {m.name: ref, **compared}
    pairs = []
    for a, b in itertools.combinations(fits, 2):
        _, c = match_atoms(fits[a].atoms_, fits[b].atoms_, fits[a].groups_, fits[b].groups_, signed=True)
        pairs.append({"a": a, "b": b, "matched_cos": float(c.mean()), "min_cos": float(c.min())})

    def stats(values):
        v = np.asarray(values, dtype=float)
        ok = v[~np.isnan(v)]
        return (float(ok.mean()), float(ok.std())) if ok.size else (math.nan, math.nan)

    records = []
    for j in range(S):
        c = cos[:, groups == j]
        gm, gs = stats([s["general"][j] for s in per_concept])
        sm, ss = stats([s["sub"][j] for s in per_concept])
        records.append({"concept": names[j], "matched_cos": float(c.mean()) if c.size else math.nan,
                        "min_cos": float(c.min()) if c.size else math.nan, "general_mean": gm, "general_std": gs,
                        "sub_mean": sm, "sub_std": ss})
    gm, gs = stats([o[0] for o in overall])
    sm, ss = stats([o[1] for o in overall])
    summary = {"method": m.name, "d0": int(n_atoms), "seeds": seeds, "k": int(k), "mode": mode,
               "matched_cos": float(cos.mean()) if cos.size else math.nan,
               "general_mean": gm, "general_std": gs, "sub_mean": sm, "sub_std": ss,
               "compared": list(compared), "skipped": skipped}
    return records, summary, {"seeds": seed_rows, "methods": method_rows, "pairs": pairs}


def stability_markdown(records, summary, atoms=None):
    """:func:`seed_stability`'s table, one row per concept (column ``matched cos``), its summary line, and (with
    ``atoms``) the methods' table: mean and smallest matched cos of every pair of dictionaries."""
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
                  f"{summary['seeds'][0]}'s (Hungarian within each concept on the signed cos): mean matched cos "
                  f"{num(summary['matched_cos'])}; mAP@{k} over the seeds: Gen. "
                  f"{num(summary['general_mean'], summary['general_std'])}, "
                  f"Sub. {num(summary['sub_mean'], summary['sub_std'])} (mean ± std). Shared: {SHARED_BETWEEN_SEEDS}."]
    if atoms is not None and atoms["pairs"]:
        lines += ["", f"| Dictionaries (d0={summary['d0']}, seed {summary['seeds'][0]}) | matched cos | min cos |",
                  "|---|---:|---:|"]
        lines += [f"| {p['a']} vs {p['b']} | {num(p['matched_cos'])} | {num(p['min_cos'])} |" for p in atoms["pairs"]]
    for name, why in summary.get("skipped", {}).items():
        lines.append(f"{name} not compared: it {why}.")
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

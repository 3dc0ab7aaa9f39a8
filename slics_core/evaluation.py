"""Ranking and scoring: the one evaluation front-end of the CLI and the app (sec. 4.1 and 4.4 of the paper).

* :func:`rank_queries` / :func:`rank_method` - top-``k`` pool rankings of a split's queries by a
  registered method (fitted here, or a model given, e.g. a workspace's); :func:`score_split` - their
  mAP@k, general and sub-label (:func:`slics_core.metrics.evaluate_rankings`).
  :mod:`slics_core.explorer.scoring` is the app's adapter from a workspace to these two.
* :func:`sweep_d0` - the dictionary-size sweep on the validation set
  (Fig. 7) for the partial (``tilde-v_j``) and full (``v_j``) components
  (Fig. 8); :func:`choose_d0` picks ``d0`` by sub-label mAP (the rule's inputs: :data:`SWEEP_METHOD`,
  :data:`SWEEP_MODE`, :data:`SWEEP_BY`); :func:`fallback_d0` is the ``d0`` used when there is no
  validation split to choose on.
* :func:`evaluate_methods` - the methods table (every method of the registry
  :mod:`slics_core.methods`: S-SVD, S-SLiCS, U-SLiCS, UF, F-SpLiCE, SpLiCE),
  mean +- std over seeds for mini-batch runs (Table 2); with a quantized pool
  (:class:`slics_core.retrieval.QuantizedPool`, TiTok) every method is also
  scored against the quantized candidates (Table 3, "Quant. pool");
  :func:`methods_table_markdown` formats it (mAP@k, Recall@20 and Recall@100: :data:`RECALL_KS`);
  seed stability and U-SLiCS rows at chosen ``S~`` are in :mod:`slics_core.stability`.
* :func:`estimate_cost` - what a ``reproduce`` run will cost, from a timed small fit.

The data come from :mod:`slics_core.data` (:class:`~slics_core.data.EvalData`), the split from
:mod:`slics_core.splits`, finished runs are kept by :mod:`slics_core.runs`.
"""
from __future__ import annotations

import math
import time

import numpy as np

from slics_core._validation import check_k
from slics_core.data import fit_inputs
from slics_core.methods import (
    MODE_SYMBOL,
    MODES,
    absent,
    active_concepts,
    active_count,
    check_mode,
    components_of,
    contenders,
    fit_method,
    get_method,
    method_names,
    needs_message,
    uses_active,
)
from slics_core.metrics import evaluate_rankings, recall_at_k
from slics_core.retrieval import build_index
from slics_core.runs import sweep_key, table_key
from slics_core.uncertainty import CONFIDENCE, N_RESAMPLES, bootstrap_mean_interval, query_sums

__all__ = [
    "rank_queries",
    "rank_method",
    "score_split",
    "sweep_d0",
    "choose_d0",
    "evaluate_methods",
    "methods_table_markdown",
    "methods_table_rows",
    "table_runs",
    "estimate_cost",
    "SWEEP_METHOD",
    "SWEEP_MODE",
    "SWEEP_BY",
    "fallback_d0",
    "d0_rule_words",
    "QUANTIZED_SUFFIX",
    "RECALL_KS",
    "ranking_depth",
    "recall_keys",
    "intervals_of",
]

# The paper's rule for d0, read here by every caller (the build, the CLI's sweep, the Evaluate page, the
# pages' sentences): the d0 of SWEEP_METHOD's fitted models whose SWEEP_MODE components have the best
# validation SWEEP_BY mAP@20 (choose_d0); with no validation split, fallback_d0.
#: The method whose dictionary size :func:`sweep_d0` sweeps (the paper's rule for ``d0``).
SWEEP_METHOD = "S-SLiCS"
#: The components the rule scores: ``"partial"`` (``tilde-v_j``, eq. 3).
SWEEP_MODE = "partial"
#: The score that chooses ``d0``: ``"sub"`` (sub-label mAP; general-label mAP when there are no sub-labels).
SWEEP_BY = "sub"
#: The ``k`` of the mAP@k that chooses ``d0`` (the paper's mAP@20).
SWEEP_K = 20

#: The ``k`` of the Recall@k rows of the methods table (beside mAP@k): Recall@20 and Recall@100.
RECALL_KS = (20, 100)


def ranking_depth(k) -> int:
    """How deep the methods table ranks: ``k`` of mAP@k, or the largest of :data:`RECALL_KS` when deeper."""
    return max(check_k(k), *RECALL_KS)


def recall_keys(recall_k) -> tuple:
    """The record keys of Recall@``recall_k``, general and sub-label: ``("recall20_general", "recall20_sub")``."""
    return f"recall{int(recall_k)}_general", f"recall{int(recall_k)}_sub"


def rank_queries(model, method, X_query, index, k=20, *, mode="partial", Y_active=None):
    """Top-``k`` pool rankings of queries by a fitted model, one list per (query, concept).

    Parameters
    ----------
    model : fitted model of ``method`` (the common interface of :mod:`slics_core.methods`)
    method : str or slics_core.methods.Method
    X_query : ndarray of shape (n, d)
    index : search index over the pool (:func:`slics_core.retrieval.build_index`)
    k : int
    mode : {"partial", "full"}
        ``tilde-v_j`` or ``v_j``; a method with one kind of component ignores it.
    Y_active : ndarray of bool, shape (n, S), optional
        Active concepts for ``mode="full"`` (:func:`slics_core.methods.active_concepts`).

    Returns
    -------
    indices : ndarray of int64, shape (n, S, k)
    """

    m = get_method(method)
    check_mode(mode)
    X_query = np.asarray(X_query, dtype=np.float64)
    S = int(model.n_concepts_)
    if not m.filtered:  # one vector per query, the same for every concept (its only mode): rank once
        v = np.asarray(model.project(X_query, 0))
        idx = index.search(v, k)[0]
        return np.repeat(idx[:, None, :], S, axis=1)
    V = components_of(model, X_query, mode, active=Y_active)
    n, S, d = V.shape
    return index.search(V.reshape(-1, d), k)[0].reshape(n, S, -1)


def rank_method(method, data, split, *, queries="query", n_atoms=10, n_iter=10, batch_size=None, seed=0,
                k=20, mode="partial", backend="auto", n_active=None, ridge=0.0, model=None, index=None):
    """Top-``k`` rankings of one registered method for every (query, concept).

    Parameters
    ----------
    method : str
        A name in :data:`slics_core.methods.REGISTRY`.
    data : EvalData
    split : Split
    queries : {"query", "val"}
        Which split provides the queries.
    n_atoms : int
        ``d0`` (dictionary methods).
    n_iter, batch_size, seed, ridge : SLiCS training parameters (seed = random_state).
    k : int
    mode : {"partial", "full"}
        Component of filtered methods (``full`` uses the query's labels, or its
        zero-shot concepts for U-SLiCS).
    backend : search back-end (see :mod:`slics_core.retrieval`).
    n_active : int, optional
        ``S~`` for zero-shot pseudo-labels (default: rounded mean labels per training item).
    model : fitted model, optional
        Use it instead of fitting one.
    index : search index over the pool, optional

    Returns
    -------
    indices : ndarray of int, shape (n_queries, S, k)
    model : the fitted model
    """

    m = get_method(method)
    k = check_k(k)
    check_mode(mode)
    q_idx = getattr(split, queries)
    if model is None:
        model = fit_method(m, fit_inputs(data, split.train, n_active), n_atoms if m.dictionary else None,
                           n_iter=n_iter, batch_size=batch_size, seed=seed, ridge=ridge)
    if index is None:
        index = build_index(data.X[split.pool], backend)
    Y_active = None
    if uses_active(m, mode):
        Y_active = active_concepts(m, Y=data.Y[q_idx], X_raw=None if data.X_raw is None else data.X_raw[q_idx],
                                   concept_text=data.concept_text,
                                   n_active=active_count(data.Y[split.train], n_active),
                                   concept_names=data.concept_names)
    return rank_queries(model, m, data.X[q_idx], index, k, mode=mode, Y_active=Y_active), model


def score_split(indices, data, split, queries="query", k=20, normalization="retrieved", recall_k=(),
                per_query=False):
    """mAP@k of rankings of the queries of ``split`` (``queries``: ``"query"`` or ``"val"``) over its pool,
    and Recall@``rk`` for every ``rk`` in ``recall_k`` with its ceiling (the best any ranking reaches).

    Parameters
    ----------
    indices : ndarray of int, shape (n_queries, S, >=max(k, *recall_k))
        Positions in ``split.pool``, best first (:func:`rank_method`).
    data : EvalData
    split : Split
    recall_k : iterable of int
        ``k`` of the Recall@k scores (e.g. :data:`RECALL_KS`).
    per_query : bool
        Also return ``per_query``: ``{score key: (sums, counts)}``, each score's per-query sums and pair
        counts (:func:`slics_core.uncertainty.query_sums`), for :func:`intervals_of`.

    Returns
    -------
    result : dict
        See :func:`slics_core.metrics.evaluate_rankings`; with ``recall_k``, also the keys
        :func:`recall_keys` names (:func:`slics_core.metrics.recall_at_k`'s ``general`` and ``sub``) and the
        same keys with ``_ceiling`` appended (its ``ceiling_general`` and ``ceiling_sub``).
    """
    q_idx = getattr(split, queries)
    Zq = None if data.Z is None else data.Z[q_idx]
    Zp = None if data.Z is None else data.Z[split.pool]
    out = evaluate_rankings(indices, data.Y[q_idx], data.Y[split.pool], Zq, Zp, data.sub_to_concept, check_k(k),
                            normalization)
    nq = len(q_idx)
    sums = {}
    if per_query:
        for lab in ("general", "sub"):
            if f"ap_{lab}" in out:
                sums[lab] = query_sums(out[f"ap_{lab}"], out[f"query_{lab}"], nq)
    for rk in recall_k:
        r = recall_at_k(indices, data.Y[q_idx], data.Y[split.pool], Zq, Zp, data.sub_to_concept, rk)
        gkey, skey = recall_keys(rk)
        out[gkey], out[skey] = r["general"], r["sub"]
        out[f"{gkey}_ceiling"], out[f"{skey}_ceiling"] = r["ceiling_general"], r["ceiling_sub"]
        if per_query:
            for lab, key in (("general", gkey), ("sub", skey)):
                if r[f"n_pairs_{lab}"]:
                    sums[key] = query_sums(r[f"recall_{lab}"], r[f"query_{lab}"], nq)
    if per_query:
        out["per_query"] = sums
    return out


def intervals_of(per_query, *, n_resamples=N_RESAMPLES, confidence=CONFIDENCE, seed=0):
    """The bootstrap intervals (over queries) of scores from one or several runs on the same queries.

    ``per_query``: ``{score key: [(sums, counts), ...]}``, one ``(sums, counts)`` per run (seed) of
    :func:`score_split`'s ``per_query[key]``; each score's runs are averaged query by query, so its interval is
    that of the mean over runs. Every score is resampled with the same draws of the queries
    (:func:`slics_core.uncertainty.bootstrap_mean_interval` with one column per score: percentile, seeded).

    Returns
    -------
    intervals : dict
        ``{score key: (lo, hi)}``; ``(nan, nan)`` for a key without runs.
    """
    keys = [key for key, runs in per_query.items() if len(runs)]
    out = {key: (math.nan, math.nan) for key in per_query}
    if not keys:
        return out
    sums, counts = [], []
    for key in keys:
        runs = [(np.asarray(s, dtype=np.float64), np.asarray(c, dtype=np.float64)) for s, c in per_query[key]]
        sums.append(np.mean([s for s, _ in runs], axis=0))
        counts.append(runs[0][1])
    lo, hi = bootstrap_mean_interval(np.column_stack(sums), np.column_stack(counts), n_resamples=n_resamples,
                                     confidence=confidence, seed=seed)
    out.update({key: (float(a), float(b)) for key, a, b in zip(keys, lo, hi)})
    return out


def _fit_model(m, inputs, d0, seed, n_iter, batch_size, ridge, results):
    def fit():
        return fit_method(m, inputs, d0 if m.dictionary else None, n_iter=n_iter, batch_size=batch_size, seed=seed,
                          ridge=ridge)

    return fit() if results is None else results.model(m.name, d0 if m.dictionary else None, seed, fit)


def sweep_d0(data, split, d0_values=range(5, 21), *, method=SWEEP_METHOD, modes=MODES, n_iter=10,
             batch_size=None, seed=0, k=SWEEP_K, backend="auto", normalization="retrieved", ridge=0.0, models=None,
             progress=None, results=None, on_run=None):
    """Dictionary-size sweep on the validation set (Fig. 7 / Fig. 8).

    For every ``d0``, ``method`` (S-SLiCS by default) is fitted on the training set
    (or taken from ``models``) and the validation items are the queries against the pool.

    Parameters
    ----------
    data : EvalData
    split : Split
    d0_values : iterable of int
    method : str
        A dictionary method of the registry.
    modes : tuple of {"partial", "full"}
        Components to evaluate (``tilde-v_j`` and/or ``v_j``).
    models : dict, optional
        ``{d0: fitted model}`` to score instead of fitting (a workspace's models).
    progress : callable(str), optional
        Called with a status line after every ``d0``.
    on_run : callable(), optional
        Called after every ``d0`` (one run: computed or read from ``results``).
    results : ResultStore, optional
        Finished ``d0`` values are read from it instead of computed, new ones
        (scores and fitted dictionaries) saved to it as they finish.

    Returns
    -------
    records : list of dict
        One per (d0, mode): ``d0``, ``mode``, ``general``, ``sub``.
    """

    d0_values = [int(d) for d in d0_values]
    if not d0_values:
        raise ValueError("the d0 sweep needs at least one d0 value.")
    m = get_method(method)
    index = None
    records = []
    for d0 in d0_values:
        key = sweep_key(m.name, d0, seed, modes)
        done = None if results is None else results.get(key)
        if done is not None:
            records += done["records"]
        else:
            if index is None:
                index = build_index(data.X[split.pool], backend)
            clock = (time.perf_counter(), time.process_time())
            model = None if models is None else models[d0]
            if model is None:
                model = _fit_model(m, fit_inputs(data, split.train), d0, seed, n_iter, batch_size, ridge, results)
            fit_cpu = time.process_time() - clock[1]
            new = []
            for mode in modes:
                idx, model = rank_method(method, data, split, queries="val", n_atoms=d0, n_iter=n_iter,
                                         batch_size=batch_size, seed=seed, k=k, mode=mode, backend=backend,
                                         ridge=ridge, model=model, index=index)
                r = score_split(idx, data, split, "val", k, normalization)
                new.append({"d0": d0, "mode": mode, "general": r["general"], "sub": r["sub"]})
            records += new
            if results is not None:
                results.put(key, {"records": new, "wall_s": time.perf_counter() - clock[0],
                                  "cpu_s": time.process_time() - clock[1], "fit_cpu_s": fit_cpu})
        if on_run is not None:
            on_run()
        if progress is not None:
            progress(f"d0={d0}: " + ", ".join(f"{x['mode']} gen={x['general']:.3f} sub={x['sub']:.3f}"
                                               for x in records if x["d0"] == d0))
    return records


def choose_d0(records, mode=SWEEP_MODE, by=SWEEP_BY):
    """The ``d0`` with the best validation mAP: the one place that chooses ``d0``.

    The paper's rule: sub-label mAP@20 (:data:`SWEEP_BY`) of S-SLiCS's (:data:`SWEEP_METHOD`) partial
    components (:data:`SWEEP_MODE`) on the validation split. Falls back to the general-label mAP when no
    sub-label score exists. Ties go to the smaller ``d0``. ``records`` are :func:`sweep_d0`'s (records
    with a ``split`` key other than ``"val"`` are ignored). Without a validation split there is nothing to
    choose on: use :func:`fallback_d0`.
    """
    rows = [r for r in records if r.get("mode", mode) == mode and r.get("split", "val") == "val"]
    if not rows:
        raise ValueError(f"no validation sweep records for mode {mode!r}.")
    key = by if not all(math.isnan(r[by]) for r in rows) else "general"
    best = max(rows, key=lambda r: (-math.inf if math.isnan(r[key]) else r[key], -r["d0"]))
    return int(best["d0"])


def fallback_d0(d0_values):
    """The ``d0`` used when it cannot be chosen on validation (no validation split, or not chosen yet):
    the middle of the fitted values (the larger middle one of an even count); None when there are none.

    Why the middle (docs/choices.md): with no score to go by, it is the least extreme of the sizes asked for.
    """
    d = sorted({int(v) for v in d0_values})
    return d[len(d) // 2] if d else None


def d0_rule_words(on_validation=True, k=SWEEP_K, sub_labels=True):
    """The rule that gave a ``d0``, in words (the pages and the CLI say it this one way).

    ``on_validation``: :func:`choose_d0`'s rule (the best validation mAP@``k`` of :data:`SWEEP_METHOD`'s
    :data:`SWEEP_MODE` components, by :data:`SWEEP_BY`; general-label mAP without ``sub_labels``);
    else :func:`fallback_d0`'s.
    """
    if not on_validation:
        return "the middle fitted d0 (the fallback rule when d0 is not chosen on validation, docs/choices.md)"
    score = "sub-label" if (SWEEP_BY == "sub" and sub_labels) else "general-label"
    comp = MODE_SYMBOL[SWEEP_MODE]
    return f"the best validation {score} mAP@{int(k)} of {SWEEP_METHOD} ({comp})"


def table_runs(methods, seeds, batch_size):
    """``[(method, seed), ...]`` that :func:`evaluate_methods` runs (before checking each method's needs)."""
    seeds = list(seeds)
    return [(get_method(m).name, seed) for m in methods
            for seed in (seeds if (get_method(m).stochastic and batch_size is not None) else seeds[:1])]


def estimate_cost(data, split, methods=None, *, d0_values=(), n_atoms=10, n_iter=10, seeds=(0,), batch_size=None,
                  k=20, mode="partial", results=None, quantized=None):
    """Seconds the remaining runs of :func:`sweep_d0` (over ``d0_values``) and :func:`evaluate_methods` should
    take, from a timed small fit and search; and a one-line summary of what is left to do.

    The arguments are those the two functions will be called with (``n_atoms``: the table's ``d0``
    when no sweep is run); runs already in ``results`` cost nothing. Each method is costed from its
    registry entry (:class:`slics_core.methods.Method`): dictionary methods fit atoms (``stochastic``
    ones for ``n_iter`` epochs), filtered methods rank once per concept, and methods that need a
    vocabulary (SpLiCE's sparse coding) are not costed (the summary says so).

    Timed in CPU seconds of this process (a fit runs on one BLAS thread, so on an idle machine its wall
    time is about its CPU time): a calibration taken while other jobs load the machine is not inflated
    by their share of the cores (it was 15x too high under load with wall time).

    Returns
    -------
    seconds : float
    summary : str
    """
    methods = method_names() if methods is None else list(methods)
    d0s = [int(d) for d in d0_values]
    sweep = get_method(SWEEP_METHOD)
    inputs = fit_inputs(data, split.train)
    n_train, S = len(split.train), data.Y.shape[1]
    rows = min(n_train, 2000)
    d0c = int(np.median(d0s)) if d0s else int(n_atoms)
    sub = fit_inputs(data, split.train[:rows])
    # untimed first: the first fit and projection of a process load (or, once per machine, compile) the
    # compiled kernels (that made a full-scale estimate 3:20:28 for 0:13:21 of compute)
    fit_method(sweep, fit_inputs(data, split.train[:min(rows, 200)]), d0c, n_iter=1, batch_size=None,
               seed=0).project(data.X[split.query[:2]], None)
    t = time.process_time()
    fit_method(sweep, sub, d0c, n_iter=0, batch_size=None, seed=0)
    t_init = time.process_time() - t                               # the initialisation alone
    t = time.process_time()
    model = fit_method(sweep, sub, d0c, n_iter=1, batch_size=None, seed=0)
    t_epoch = max(time.process_time() - t - t_init, 0.0) * n_train / rows  # one epoch on the training split
    t_init *= n_train / rows
    nq = min(200, len(split.val) or len(split.query))
    t = time.process_time()
    model.project(data.X[split.query[:nq]], None)
    t_proj = (time.process_time() - t) / nq                        # projection of one query on every concept
    index = build_index(data.X[split.pool])
    probe = data.X[split.query[:256]]
    t = time.process_time()
    index.search(probe, k)
    t_vec = (time.process_time() - t) / len(probe)                  # one ranking vector against the pool

    def fit_s(d0, m):
        if not m.dictionary:
            return 0.0
        # the initialisation (one eigenproblem per concept) hardly depends on d0; the epochs do
        return t_init + (t_epoch * n_iter * d0 / d0c if m.stochastic else 0.0)

    total, n_fits, n_runs, unknown = 0.0, 0, 0, set()
    swept = []
    for d0 in d0s:
        done = None if results is None else results.get(sweep_key(sweep.name, d0, 0, MODES))
        if done is not None:
            swept += done["records"]
            continue
        n_runs += 1
        n_fits += 1
        total += fit_s(d0, sweep) + len(split.val) * (2 * t_proj * d0 / d0c + 2 * S * t_vec)
    if d0s and len(swept) == len(d0s) * len(MODES):
        d0_table = choose_d0(swept)          # the sweep is finished: its choice is known
    else:
        d0_table = fallback_d0(d0s) if d0s else int(n_atoms)  # chosen later: assume the fallback
    pools = ("original",) + (("quantized",) if quantized is not None else ())
    for name, seed in table_runs(methods, tuple(seeds), batch_size):
        m = get_method(name)
        if needs_message(m, inputs):
            continue
        if results is not None and results.get(table_key(name, d0_table, seed, mode, None, pools)) is not None:
            continue
        n_runs += 1
        if "vocabulary" in m.needs:
            unknown.add(name)
        fitted_in_sweep = m.name == sweep.name and seed == 0 and d0s
        if not fitted_in_sweep and m.dictionary:
            n_fits += 1
            total += fit_s(d0_table, m)
        total += len(split.query) * len(pools) * ((S if m.filtered else 1) * t_vec + t_proj)
    note = f" (not counting {', '.join(sorted(unknown))})" if unknown else ""
    return total, (f"{n_runs} runs to do ({n_fits} fits of {n_train} x {data.X.shape[1]}, pool {len(split.pool)})"
                   f"{note}")


def _score_keys():
    """The per-run scores of a table row: mAP (``general``, ``sub``), then Recall@k for :data:`RECALL_KS`."""
    return ("general", "sub") + tuple(key for rk in RECALL_KS for key in recall_keys(rk))


def _kept_keys():
    """What a kept run holds: the scores, Recall@k's ceilings and the per-query sums of the intervals."""
    return _score_keys() + tuple(f"{key}_ceiling" for rk in RECALL_KS for key in recall_keys(rk)) + ("per_query",)


def _table_row(name, runs, skipped, k, normalization, pool, oracle=False):
    row = {"method": name}
    for key in _score_keys():
        v = np.array([r.get(key, math.nan) for r in runs], dtype=float)
        row[f"{key}_mean"] = float(v.mean()) if v.size else math.nan
        row[f"{key}_std"] = float(v.std()) if v.size else math.nan
        if key.startswith("recall"):
            row[f"{key}_ceiling"] = runs[0].get(f"{key}_ceiling", math.nan) if runs else math.nan
    bounds = intervals_of({key: [r["per_query"][key] for r in runs if key in r.get("per_query", {})]
                           for key in _score_keys()})
    for key, (lo, hi) in bounds.items():
        row[f"{key}_lo"], row[f"{key}_hi"] = lo, hi
    return dict(row, **{
        "n_runs": len(runs),
        "runs": [{sk: v for sk, v in r.items() if sk != "per_query"} for r in runs],
        "skipped": skipped,
        "k": int(k),
        "normalization": normalization,
        "pool": pool,
        "oracle": bool(oracle),
    })


#: Suffix of the method name of a row scored against the quantized pool.
QUANTIZED_SUFFIX = " (quant. pool)"


def evaluate_methods(data, split, methods=None, *, n_atoms=10, n_iter=10, batch_size=None, seeds=(0, 1, 2, 3, 4),
                     k=20, mode="partial", backend="auto", normalization="retrieved", n_active=None, ridge=0.0,
                     progress=None, quantized=None, results=None, on_run=None):
    """The methods table of the paper (Table 2) on the query set.

    Every registered method (:data:`slics_core.methods.REGISTRY`) by default.
    Stochastic methods trained in mini-batches (``batch_size`` set) are run once per
    seed and reported as mean ± std; the others once. A method whose needs the data
    does not meet (e.g. no vocabulary for SpLiCE) is reported with the reason instead
    of scores.

    Parameters
    ----------
    quantized : slics_core.retrieval.QuantizedPool, optional
        The candidate pool ``data.X[split.pool]`` quantized token by token (TiTok,
        Table 3). Every method that runs is then also scored against it, with the
        same fitted model; its row follows the method's, named
        ``"<method> (quant. pool)"`` with ``pool="quantized"``. The cosines are those
        of the look-up tables ``G^j`` (sec. 4.4.1), computed as one product with the
        de-quantized pool (:meth:`~slics_core.retrieval.QuantizedPool.float_index`).
    results : ResultStore, optional
        Finished runs are read from it, new ones (and fitted dictionaries) saved as
        they finish; a dictionary of :func:`sweep_d0` with the same ``d0`` and seed
        is reused.
    progress : callable(str), optional
        Called after every run (method, seed) and after every method.
    on_run : callable(), optional
        Called after every run (method, seed) of a method that runs.

    Returns
    -------
    rows : list of dict
        ``method``, ``general_mean``, ``general_std``, ``sub_mean``, ``sub_std`` (mAP@k),
        ``general_lo``, ``general_hi``, ``sub_lo``, ``sub_hi`` (:func:`intervals_of`: the 95 % bootstrap interval
        over queries of the mean over seeds), the same eight for Recall@20 and Recall@100 with
        ``recall20_general_ceiling``... (the best Recall@k on these queries) (``recall20_general_mean``, ...
        :func:`recall_keys`, :data:`RECALL_KS`; rankings are made :func:`ranking_depth` deep), ``n_runs``,
        ``runs`` (per-seed scores), ``skipped`` (reason or None), ``k``,
        ``normalization``, ``pool`` (``"original"`` or ``"quantized"``).
    """
    methods = method_names() if methods is None else list(methods)
    seeds = list(seeds)
    if not seeds:
        raise ValueError("seeds must name at least one seed.")
    specs = [get_method(m) for m in methods]
    inputs = fit_inputs(data, split.train, n_active)
    if quantized is not None and (quantized.n_pool != len(split.pool) or quantized.dim != data.X.shape[1]):
        raise ValueError(f"the quantized pool holds {quantized.n_pool} x {quantized.dim} items but the split's pool "
                         f"is {len(split.pool)} x {data.X.shape[1]}.")
    indexes = {}

    def index_of(pool):
        if pool not in indexes:
            indexes[pool] = (build_index(data.X[split.pool], backend) if pool == "original"
                             else quantized.float_index())
        return indexes[pool]

    pools = ("original",) + (("quantized",) if quantized is not None else ())
    rows = []
    for m in specs:
        if absent(m, inputs):  # an oracle without its inputs: no row
            continue
        run_seeds = [s for name, s in table_runs([m.name], seeds, batch_size)]
        skipped = needs_message(m, inputs)
        runs = {p: [] for p in pools}
        if not skipped:
            for seed in run_seeds:
                key = table_key(m.name, n_atoms, seed, mode, n_active, pools)
                done = None if results is None else results.get(key)
                if done is not None and any(sk not in done[p] for p in pools for sk in _kept_keys()):
                    done = None  # a run kept before Recall@k / intervals: scored again (its model is kept)
                if done is None:
                    clock = (time.perf_counter(), time.process_time())
                    # a U-SLiCS fitted at another S~ is another model: not read from (or kept in) the store
                    model = _fit_model(m, inputs, n_atoms, seed, n_iter, batch_size, ridge,
                                       results if n_active is None else None)
                    fit_cpu = time.process_time() - clock[1]
                    done = {}
                    for p in pools:
                        idx, _ = rank_method(m.name, data, split, n_atoms=n_atoms, seed=seed, k=ranking_depth(k),
                                             mode=mode, n_active=n_active, model=model, index=index_of(p))
                        r = score_split(idx, data, split, "query", k, normalization, RECALL_KS, per_query=True)
                        done[p] = dict({sk: r[sk] for sk in _kept_keys() if sk != "per_query"}, seed=seed,
                                       per_query={sk: [a.tolist() for a in v] for sk, v in r["per_query"].items()})
                    if results is not None:
                        results.put(key, dict(done, wall_s=time.perf_counter() - clock[0],
                                              cpu_s=time.process_time() - clock[1], fit_cpu_s=fit_cpu))
                for p in pools:
                    runs[p].append(done[p])
                if on_run is not None:
                    on_run()
                if progress is not None:
                    progress(f"{m.name} seed {seed}: " + "; ".join(
                        f"{p} pool gen={done[p]['general']:.3f} sub={done[p]['sub']:.3f}" for p in pools))
        for p in pools:
            if p == "quantized" and skipped:
                continue
            name = m.name + (QUANTIZED_SUFFIX if p == "quantized" else "")
            row = _table_row(name, runs[p], skipped, k, normalization, p, m.oracle)
            rows.append(row)
            if progress is not None:
                progress(f"{name}: " + (f"skipped ({skipped})" if skipped
                                        else _fmt(row, "general") + " / " + _fmt(row, "sub")))
    return rows


def _fmt(row, key):
    m, s = row.get(f"{key}_mean", math.nan), row.get(f"{key}_std", math.nan)
    if row.get("skipped"):
        return "n/a"
    if m is None or math.isnan(m):
        return "-"
    text = f"{m:.3f} ± {s:.3f}" if row["n_runs"] > 1 else f"{m:.3f}"
    lo, hi = row.get(f"{key}_lo", math.nan), row.get(f"{key}_hi", math.nan)
    return text if lo is None or math.isnan(lo) else f"{text} [{lo:.3f}, {hi:.3f}]"


def _ceiling_words(rows, key):
    """`` (ceiling 0.035)``: the best Recall@k of ``key`` on the table's queries (the same for every row)."""
    c = next((r[f"{key}_ceiling"] for r in rows if not math.isnan(r.get(f"{key}_ceiling", math.nan))), math.nan)
    return "" if math.isnan(c) else f" (ceiling {c:.3f})"


def methods_table_rows(rows):
    """Flat records (one per method) for CSV/JSON: no nested per-seed lists."""
    out = []
    for r in rows:
        rec = {"method": r["method"]}
        rec.update({f"{key}_{stat}": r.get(f"{key}_{stat}", math.nan) for key in _score_keys()
                    for stat in ("mean", "std", "lo", "hi")})
        rec.update({f"{key}_ceiling": r.get(f"{key}_ceiling", math.nan) for key in _score_keys()
                    if key.startswith("recall")})
        rec.update({key: r[key] for key in ("n_runs", "k", "normalization", "skipped")})
        rec["pool"] = r.get("pool", "original")
        rec["oracle"] = bool(r.get("oracle", False))
        out.append(rec)
    return out


def methods_table_markdown(rows, title=None):
    """Markdown table: one column per method, rows ``Gen.`` and ``Sub.`` mAP@k, then Gen. and Sub.
    Recall@20 and Recall@100 (:data:`RECALL_KS`; when the rows have them, with their ceiling); best in bold.
    Each score carries its bootstrap interval over queries, ``0.660 [0.620, 0.700]`` (:func:`intervals_of`).

    With quantized-pool rows (``pool="quantized"``), the best is marked separately
    among the original-pool and among the quantized-pool columns, as in Table 3.
    Oracle rows (``oracle``, :func:`slics_core.methods.contenders`) are shown, never bold,
    and a note under the table says so.
    """
    k = rows[0]["k"] if rows else 20
    header = "| Type | " + " | ".join(r["method"] for r in rows) + " |"
    sep = "|---|" + "---:|" * len(rows)
    lines = [f"**{title}**", ""] if title else []
    lines += [header, sep]
    ranked = {id(r) for r in contenders(rows)}
    lines_for = [("general", f"Gen. mAP@{k}"), ("sub", f"Sub. mAP@{k}")]
    for rk in RECALL_KS:
        gkey, skey = recall_keys(rk)
        if any(f"{gkey}_mean" in r for r in rows):  # rows scored without Recall@k (older runs) have none
            lines_for += [(gkey, f"Gen. Recall@{rk}{_ceiling_words(rows, gkey)}"),
                          (skey, f"Sub. Recall@{rk}{_ceiling_words(rows, skey)}")]
    for key, label in lines_for:
        vals = [r.get(f"{key}_mean", math.nan) if not r.get("skipped") else math.nan for r in rows]
        best = {}
        for r, v in zip(rows, vals):
            if id(r) in ranked and v is not None and not math.isnan(v):
                p = r.get("pool", "original")
                best[p] = max(best.get(p, v), v)
        cells = []
        for r, v in zip(rows, vals):
            text = _fmt(r, key)
            if id(r) in ranked and v is not None and v == best.get(r.get("pool", "original")):
                text = f"**{text}**"
            cells.append(text)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    oracles = [r["method"] for r in rows if id(r) not in ranked]
    if oracles:
        lines += ["", f"Oracle, shown but not ranked (never bold): {', '.join(oracles)}."]
    if any(not math.isnan(r.get("general_lo", math.nan)) for r in rows):
        lines += ["", f"[lo, hi]: {CONFIDENCE:.0%} bootstrap interval over queries ({N_RESAMPLES} resamples, "
                      "seed 0, percentile). Ceiling: the best Recall@k any ranking reaches on these queries."]
    return "\n".join(lines)

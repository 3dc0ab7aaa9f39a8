"""Retrieval scores of a :class:`~slics_core.explorer.workspace.Workspace`'s fitted models (no refitting).

The app's Evaluate page and scripts use this module to score the models a
workspace already holds. It is an adapter: :func:`eval_view` shows a workspace as
:mod:`slics_core.evaluation`'s data and split, and every ranking and score goes
through the one front-end of the CLI (:func:`slics_core.evaluation.rank_method`,
:func:`slics_core.evaluation.score_split`), with the protocol of sec. 4.4 of the paper:

* the queries of a split (``"query"``, or ``"val"`` for choosing ``d0``) are
  disentangled by a fitted model; for every query and every concept present in
  it, the candidate pool is ranked by the cosine similarity with that
  concept's component and the top ``k`` are scored (mAP@k, general labels
  and sub-labels, :func:`slics_core.metrics.evaluate_rankings`);
* ``mode="partial"`` ranks by ``tilde-v_j`` (eq. 3, the nearest point of the
  concept's cone), ``mode="full"`` by ``v_j`` (eq. 2, the NNLS over the
  atoms of the query's active concepts: its labels for S-SLiCS / S-SVD and its
  zero-shot pseudo-labels for U-SLiCS, as U-SLiCS is fitted without labels);
* every method of the registry (:mod:`slics_core.methods`) fitted in the
  workspace is scored the same way (UF, F-SpLiCE and SpLiCE included; methods
  with one kind of component have no ``mode``).

Rankings do not depend on ``k`` beyond their length: the top ``k`` of a ranking of depth
``K >= k`` are the ranking at ``k`` (ties are broken by pool position, see
:func:`slics_core.retrieval.top_k`). :func:`rank_job` ranks a job once at a depth
(:func:`stored_depth`: 100, deep enough for Recall@100, or ``k`` rounded up to 50) and :func:`run_job`
scores any ``k`` up to that depth from the stored ranking (``rankings=``), so a new ``k`` costs the mAP
computation, not the NNLS projections. Every record also holds Recall@20 and Recall@100
(:data:`slics_core.evaluation.RECALL_KS`, :func:`slics_core.metrics.recall_at_k`).

Work is split into small *jobs* (:class:`Job`, one method / ``d0`` / mode /
split each; :func:`run_job`) so that a front end can cache each one and show
progress between them; :func:`methods_table` and :func:`score_d0_sweep` run lists
of jobs (the latter scores the fitted models of every ``d0``; it never refits).
``d0`` is chosen from its validation records by
:func:`slics_core.evaluation.choose_d0`, the one place that applies the paper's rule.

The pool every label-based score ranks is :func:`eval_pool` (one home): the workspace's pool, or, for a
sharded workspace (shards carry no labels), the labelled cache's own candidate rows; :func:`eval_index`
searches it. :func:`eval_pool_words` and :func:`pool_index_words` are the sentences the Evaluate page and
``slics workspace`` show about what is measured where.

Choices (the paper is silent): the number of zero-shot concepts per query for
U-SLiCS's full mode is the rounded mean number of labels per training item
(the ``S~`` used to fit it); UF ranks by the preprocessed embedding (the space
the models live in), as :func:`slics_core.evaluation.rank_method` does.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from slics_core import search_index
from slics_core._validation import check_k
from slics_core.data import EvalData
from slics_core.errors import DamagedFileError
from slics_core.evaluation import RECALL_KS, SWEEP_METHOD, intervals_of, rank_method, recall_keys, score_split
from slics_core.explorer.safe_text import code
from slics_core.explorer.workspace import pool_index_kind
from slics_core.methods import MODE_SYMBOL, MODES, check_mode, get_method
from slics_core.retrieval import build_index
from slics_core.splits import Split

__all__ = [
    "SPLITS",
    "Job",
    "eval_pool",
    "eval_pool_words",
    "eval_index",
    "pool_index_words",
    "eval_view",
    "rank_split",
    "rank_job",
    "stored_depth",
    "score_rankings",
    "run_job",
    "table_jobs",
    "sweep_jobs",
    "methods_table",
    "score_d0_sweep",
    "summary_rows",
]

#: Splits whose items can be queries (the pool is always the candidate set).
SPLITS = ("query", "val")


@dataclass(frozen=True)
class Job:
    """One scoring unit.

    Attributes
    ----------
    method : str
        A registered method fitted in the workspace.
    d0 : int or None
        Atoms per concept (None for methods without a dictionary).
    mode : {"partial", "full"} or None
        Component (None for methods with one kind of component).
    split : {"query", "val"}
        Split providing the queries.
    """

    method: str
    d0: int | None
    mode: str | None
    split: str

    def label(self) -> str:
        parts = [self.method]
        if self.d0 is not None:
            parts.append(f"d0={self.d0}")
        if self.mode is not None:
            parts.append(MODE_SYMBOL[self.mode])
        parts.append(f"on {self.split}")
        return " · ".join(parts)


# ---------------------------------------------------------------------- the pool of the scores
def eval_pool(ws) -> np.ndarray:
    """Rows of ``ws.X`` that every label-based score ranks (mAP@k, Recall@k, the d0 sweep, stability): the one
    place that chooses them.

    An ordinary workspace: its pool, ``index["pool"]``. A sharded workspace, whose pool is shards without labels:
    the labelled cache's own candidate rows, i.e. the labelled rows of ``X`` in none of train, val and query
    (the rows :func:`slics_core.splits.make_split` made the pool, which the build's d0 sweep ranked); when there
    are none (a split given by hand that uses every row), the training rows, which are never queries.
    """
    if not ws.sharded:
        return np.asarray(ws.index.get("pool", []), dtype=int)
    rest = _cache_candidates(ws)
    return rest if rest.size else np.asarray(ws.index.get("train", []), dtype=int)


def _cache_candidates(ws) -> np.ndarray:
    """The labelled rows of ``ws.X`` in none of train, val and query."""
    used = np.zeros(len(ws), dtype=bool)
    for name in ("train", "val", "query"):
        used[np.asarray(ws.index.get(name, []), dtype=int)] = True
    return np.flatnonzero(~used & np.asarray(ws.Y).any(axis=1))


def eval_pool_words(ws) -> str | None:
    """One line saying which rows :func:`eval_pool` ranks on a sharded workspace (None on an ordinary one)."""
    if not ws.sharded:
        return None
    n = len(eval_pool(ws))
    which = ("labelled rows of the cache outside train, val and query (its own candidate pool)"
             if _cache_candidates(ws).size else "training rows (the cache has no other labelled rows)")
    return (f"Measured on the {n:,} {which} as the pool; the {ws.n_pool:,} shard rows carry no labels, so "
            "Retrieve and Mix search them but nothing here scores them.")


def eval_index(ws):
    """The search index over :func:`eval_pool`: ``ws.pool_index()`` for an ordinary workspace (the one every
    page shares); for a sharded one an index over ``X[eval_pool(ws)]`` (built once, kept on the instance)."""
    if not ws.sharded:
        return ws.pool_index()
    return ws.remember("eval_index", lambda: build_index(ws.X[eval_pool(ws)], "auto"))


def pool_index_words(ws, index) -> str:
    """What is known of the recall of ``index`` (``ws.pool_index()`` of a sharded workspace): exact by construction
    (``index.exact``: the kind rule chose exact search, or the on-disk index is missing), measured at build
    (:func:`slics_core.explorer.build.measure_pool_index`; below :data:`slics_core.search_index.RECALL_FLOOR` with
    how to raise it), or not measured."""
    if index.exact:
        if pool_index_kind(ws) == "exact":
            limit = search_index.EXACT_MAX_ROWS
            return (f"Exact search over the {ws.n_pool:,} shard rows, block by block (a pool under {limit:,} rows "
                    "is searched exactly: fast at that size), so recall is 1.0 by construction.")
        return ("No on-disk index: the shards are searched exactly, block by block, so recall is 1.0 by "
                "construction (no measurement needed).")
    try:
        rec = ws.pool_index_recall()
    except DamagedFileError as exc:
        return f"On-disk index: recall not readable: {code(str(exc).splitlines()[0])}."
    if rec is None:
        return ("On-disk index: recall not measured (rebuild with `slics workspace --pool-shards` to "
                "measure).")
    words = (f"On-disk index: recall@{rec['k']} {rec['recall']:.3f} against exact search on {rec['n_queries']} "
             f"queries, rerank {rec['rerank']}, measured at build.")
    floor = search_index.RECALL_FLOOR
    if rec["recall"] < floor:
        deeper = max(2 * int(rec["rerank"]), 1000)
        words += (f" Below {floor:.2f}: rebuild with a deeper re-ranking (`slics workspace --pool-shards … "
                  f"--pool-rerank {deeper}`), which reads more rows per search and raises recall towards 1.0.")
    return words


# ---------------------------------------------------------------------- checks
def _check_split(ws, split):
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}; got {split!r}.")
    rows = np.asarray(ws.index.get(split, []), dtype=int)
    if rows.size == 0:
        raise ValueError(f"workspace {ws.name!r} has no {split!r} items to use as queries.")
    pool = eval_pool(ws)
    if pool.size == 0:
        raise ValueError(f"workspace {ws.name!r} has an empty candidate pool.")
    return rows, pool


def _check_job(ws, job):
    m = get_method(job.method)
    if m.name not in ws.methods:
        raise ValueError(f"{m.name} is not fitted in workspace {ws.name!r}; fitted: {ws.methods}.")
    if len(m.modes) > 1:  # a method with one kind of component takes any mode (None in its jobs)
        check_mode(job.mode)
    ws.model(m.name, job.d0)  # raises ValueError when not fitted


# ---------------------------------------------------------------------- rankings
def eval_view(ws):
    """``ws`` as :mod:`slics_core.evaluation`'s data and split: its own arrays, not copied.

    Returns
    -------
    data : slics_core.data.EvalData
    split : slics_core.splits.Split
        The workspace's ``index`` (no item was dropped: a workspace holds labelled items only), its pool
        :func:`eval_pool`.
    """
    data = EvalData.of_checked(X=ws.X, labels=ws.labels, X_raw=ws.raw, concept_text=ws.concept_text,
                               vocab_text=ws.vocab_text, vocab_words=ws.vocab_words)
    rows = {name: np.asarray(ws.index.get(name, []), dtype=int) for name in ("train", "val", "query")}
    rows["pool"] = eval_pool(ws)
    return data, Split(rows["train"], rows["val"], rows["query"], rows["pool"], np.zeros(0, dtype=int))


def rank_split(ws, method, d0=None, *, split="query", k=20, mode="partial", backend="auto", index=None):
    """Top-``k`` pool rankings of the queries of ``split`` by a fitted method of ``ws``.

    Parameters
    ----------
    ws : Workspace
    method : str
        A registered method fitted in ``ws``.
    d0 : int, optional
        Atoms per concept (default ``ws.default_d0``; ignored by methods without a dictionary).
    split : {"query", "val"}
    k : int
    mode : {"partial", "full"}
        Component (methods with one kind of component ignore it).
    backend : search back-end of :mod:`slics_core.retrieval`.
    index : a search index over the pool rows, optional (built when absent).

    Returns
    -------
    indices : ndarray of int64, shape (n_queries, S, k)
        Positions in :func:`eval_pool` (``ws.index["pool"]`` of an ordinary workspace), best first.
    """
    k = check_k(k)
    _check_split(ws, split)
    m = get_method(method)
    model = ws.model(m.name, d0)
    data, sp = eval_view(ws)  # rank_method checks the mode
    return rank_method(m.name, data, sp, queries=split, k=k, mode=mode, backend=backend, model=model,
                       index=index)[0]


#: Depth step of stored rankings (:func:`stored_depth`).
RANK_STEP = 50


def stored_depth(k) -> int:
    """Depth at which to rank so that the ranking serves ``k``, every smaller ``k`` and Recall@k for
    :data:`slics_core.evaluation.RECALL_KS`: the larger of ``k`` and 100 rounded up to a multiple of
    :data:`RANK_STEP` (100 for any ``k <= 100``)."""
    k = max(check_k(k), *RECALL_KS)
    return RANK_STEP * -(-k // RANK_STEP)


def rank_job(ws, job, *, depth=RANK_STEP, backend="auto", index=None):
    """Top-``depth`` pool rankings of one :class:`Job` (to score any ``k <= depth`` with :func:`run_job`).

    Returns
    -------
    indices : ndarray of shape (n_queries, S, min(depth, n_pool))
        Positions in :func:`eval_pool`, best first; stored in the smallest unsigned integer
        type that holds the pool size (uint16 for pools below 65 536 items).
    """
    _check_job(ws, job)
    idx = rank_split(ws, job.method, job.d0, split=job.split, k=depth, mode=job.mode or "partial",
                     backend=backend, index=index)
    n_pool = len(eval_pool(ws))
    return idx.astype(np.uint16 if n_pool <= np.iinfo(np.uint16).max else np.uint32 if n_pool <= 2**32 - 1
                      else np.int64)


def score_rankings(ws, indices, *, split="query", k=20, normalization="retrieved", intervals=False):
    """mAP@k (general and sub-label) of rankings of the queries of ``split``, and Recall@k for
    :data:`slics_core.evaluation.RECALL_KS` with its ceiling; with ``intervals``, each score's bootstrap
    interval over queries (:func:`slics_core.evaluation.intervals_of`).

    Returns
    -------
    result : dict
        ``general``, ``sub`` (NaN without sub-labels), ``n_pairs_general``,
        ``n_pairs_sub`` (see :func:`slics_core.metrics.evaluate_rankings`), and ``recall20_general``,
        ``recall20_sub``, ``recall100_general``, ``recall100_sub``
        (:func:`slics_core.evaluation.recall_keys`; NaN where the rankings are not that deep and the pool is
        deeper), each Recall@k key with ``_ceiling`` appended (the best Recall@k on these queries); with
        ``intervals`` also ``<score>_lo`` and ``<score>_hi`` for mAP and Recall@k (NaN without pairs).
    """
    _, pool = _check_split(ws, split)
    data, sp = eval_view(ws)
    depth = np.shape(indices)[-1]
    deep_enough = tuple(rk for rk in RECALL_KS if depth >= min(rk, len(pool)))
    r = score_split(indices, data, sp, split, k=check_k(k), normalization=normalization, recall_k=deep_enough,
                    per_query=intervals)
    out = {"general": float(r["general"]), "sub": float(r["sub"]),
           "n_pairs_general": int(r["n_pairs_general"]), "n_pairs_sub": int(r["n_pairs_sub"])}
    for rk in RECALL_KS:
        for key in recall_keys(rk):
            out[key] = float(r.get(key, math.nan))
            out[f"{key}_ceiling"] = float(r.get(f"{key}_ceiling", math.nan))
    if intervals:
        keys = ("general", "sub", *(key for rk in RECALL_KS for key in recall_keys(rk)))
        bounds = intervals_of({key: [r["per_query"][key]] if key in r["per_query"] else [] for key in keys})
        for key, (lo, hi) in bounds.items():
            out[f"{key}_lo"], out[f"{key}_hi"] = lo, hi
    return out


def run_job(ws, job, *, k=20, normalization="retrieved", backend="auto", index=None, rankings=None,
            intervals=False):
    """Score one :class:`Job`: rank its split's queries and compute mAP@k.

    Parameters
    ----------
    rankings : ndarray, optional
        The job's rankings from :func:`rank_job` at a depth ``>= k`` (or the whole pool); then
        nothing is ranked again and the result equals ranking at ``k``.
    intervals : bool
        Add each score's bootstrap interval over queries (:func:`score_rankings`).

    Returns
    -------
    record : dict
        The job's fields (``method``, ``d0``, ``mode``, ``split``) with ``k``,
        ``normalization``, ``general``, ``sub``, ``n_pairs_general``, ``n_pairs_sub`` and the Recall@k
        keys of :func:`score_rankings` (their ceilings, and with ``intervals`` their ``_lo`` / ``_hi``).
    """
    _check_job(ws, job)
    k = check_k(k)
    if rankings is None:
        idx = rank_split(ws, job.method, job.d0, split=job.split, k=stored_depth(k), mode=job.mode or "partial",
                         backend=backend, index=index)
    else:
        idx = np.asarray(rankings)
        rows, pool = _check_split(ws, job.split)
        if idx.ndim != 3 or idx.shape[0] != len(rows) or idx.shape[1] != ws.n_concepts:
            raise ValueError(f"rankings of shape {idx.shape} do not fit job {job.label()} "
                             f"({len(rows)} queries, {ws.n_concepts} concepts).")
        if idx.shape[2] < min(k, len(pool)):
            raise ValueError(f"rankings have depth {idx.shape[2]} but k={k}; rank again with depth >= k.")
        idx = idx.astype(np.int64)
    rec = asdict(job)
    rec.update(k=int(k), normalization=normalization)
    rec.update(score_rankings(ws, idx, split=job.split, k=k, normalization=normalization, intervals=intervals))
    return rec


# ---------------------------------------------------------------------- job lists
def table_jobs(ws, d0=None, *, split="query", modes=MODES, methods=None):
    """Jobs of the methods table: every fitted method (dictionary methods at ``d0``, in each mode).

    Parameters
    ----------
    ws : Workspace
    d0 : int, optional
        Default ``ws.default_d0``.
    split : {"query", "val"}
    modes : tuple of {"partial", "full"}
    methods : sequence of str, optional
        Methods to include (default: every method fitted in ``ws``, in registry order).
    """
    d0 = ws.default_d0 if d0 is None else int(d0)
    if d0 not in ws.d0_values:
        raise ValueError(f"no models with d0={d0} in workspace {ws.name!r}; fitted d0: {ws.d0_values}.")
    _check_split(ws, split)
    names = ws.methods if methods is None else [m for m in methods if m in ws.methods]
    jobs = []
    for name in names:
        m = get_method(name)
        if m.dictionary:
            if (name, d0) in ws.models:
                jobs += [Job(name, d0, mode, split) for mode in modes if mode in m.modes]
        else:
            jobs.append(Job(name, None, None, split))
    return jobs


def sweep_jobs(ws, method=SWEEP_METHOD, *, splits=("val", "query"), modes=MODES):
    """Jobs of the ``d0`` sweep: ``method`` at every fitted ``d0``, for each split and mode."""
    if not get_method(method).dictionary:
        raise ValueError(f"the d0 sweep needs a method with a dictionary; got {method!r}.")
    for s in splits:
        _check_split(ws, s)
    d0s = [d for d in ws.d0_values if (method, d) in ws.models]
    if not d0s:
        raise ValueError(f"workspace {ws.name!r} has no fitted {method} models.")
    return [Job(method, d, mode, s) for s in splits for d in d0s for mode in modes]


def _run_all(ws, jobs, progress, backend="auto", **kw):
    # one pool index for every job: the workspace's own (eval_index) unless another backend is asked for
    index = None if not jobs else eval_index(ws) if backend == "auto" else build_index(ws.X[eval_pool(ws)], backend)
    out = []
    for i, job in enumerate(jobs):
        if progress is not None:
            progress(job.label(), i, len(jobs))
        out.append(run_job(ws, job, backend=backend, index=index, **kw))
    if progress is not None:
        progress("done", len(jobs), len(jobs))
    return out


def methods_table(ws, d0=None, *, split="query", k=20, modes=MODES, methods=None, normalization="retrieved",
                  backend="auto", progress=None, intervals=True):
    """The methods table (Table 2 of the paper) from the workspace's fitted models.

    Parameters
    ----------
    ws : Workspace
    d0 : int, optional
        Atoms per concept of the dictionary methods (default ``ws.default_d0``, the ``d0``
        chosen on validation).
    split : {"query", "val"}
    k : int
    modes : tuple of {"partial", "full"}
    methods : sequence of str, optional
    normalization : {"retrieved", "min"}
    progress : callable(str, done, total), optional
    intervals : bool
        Each score's bootstrap interval over queries (:func:`score_rankings`).

    Returns
    -------
    records : list of dict
        One per job (see :func:`run_job`).
    """
    jobs = table_jobs(ws, d0, split=split, modes=modes, methods=methods)
    return _run_all(ws, jobs, progress, k=k, normalization=normalization, backend=backend, intervals=intervals)


def score_d0_sweep(ws, method=SWEEP_METHOD, *, splits=("val", "query"), modes=MODES, k=20, normalization="retrieved",
                   backend="auto", progress=None):
    """mAP@k of ``method``'s fitted models for every ``d0`` (Fig. 7; both modes: Fig. 8). Never refits.

    Returns
    -------
    records : list of dict
        One per (split, d0, mode) (see :func:`run_job`); choose ``d0`` from them with
        :func:`slics_core.evaluation.choose_d0`.
    """
    jobs = sweep_jobs(ws, method, splits=splits, modes=modes)
    return _run_all(ws, jobs, progress, k=k, normalization=normalization, backend=backend)


def summary_rows(records):
    """Methods-table records rearranged as one row per method (CSV / display).

    Columns: ``method``, ``d0``, ``general``, ``sub`` (partial components or
    the baseline's ranking) and ``general_full``, ``sub_full`` (full
    components ``v_j``; NaN for baselines or when not computed), the Recall@k keys of
    :func:`score_rankings` (of the partial components or the baseline's ranking) with their ``_ceiling``,
    ``split``, ``k``; and, where the records have intervals, ``<score>_lo`` / ``<score>_hi`` of every score
    (``general_full_lo``... for the full components).
    """
    recall = [key for rk in RECALL_KS for key in recall_keys(rk)]
    recall += [f"{key}_ceiling" for key in list(recall)]
    bounds = [f"{key}_{b}" for key in ("general", "sub", *(key for rk in RECALL_KS for key in recall_keys(rk)))
              for b in ("lo", "hi")]
    rows, order = {}, []
    for r in records:
        m = r["method"]
        if m not in rows:
            order.append(m)
            rows[m] = {"method": m, "d0": r["d0"], "general": math.nan, "sub": math.nan,
                       "general_full": math.nan, "sub_full": math.nan, **dict.fromkeys(recall, math.nan),
                       "split": r["split"], "k": r["k"]}
        if r["mode"] == "full":
            rows[m].update(general_full=r["general"], sub_full=r["sub"])
            rows[m].update({f"{lab}_full_{b}": r[f"{lab}_{b}"] for lab in ("general", "sub") for b in ("lo", "hi")
                            if f"{lab}_{b}" in r})
        else:
            rows[m].update(general=r["general"], sub=r["sub"], **{key: r.get(key, math.nan) for key in recall})
            rows[m].update({key: r[key] for key in bounds if key in r})
    return [rows[m] for m in order]

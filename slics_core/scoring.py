"""Retrieval scores of a :class:`~slics_core.workspace.Workspace`'s fitted models (no refitting).

The app's Evaluate page and scripts use this module to score the models a
workspace already holds, with the protocol of sec. 4.4 of the paper:

* the queries of a split (``"query"``, or ``"val"`` for choosing ``d0``) are
  disentangled by a fitted model; for every query and every concept present in
  it, the candidate pool is ranked by the cosine similarity with that
  concept's component and the top ``k`` are scored (mAP@k, general labels
  and sub-labels, :func:`slics_core.evaluation.evaluate_rankings`);
* ``mode="partial"`` ranks by ``tilde-v_j`` (eq. 3, the nearest point of the
  concept's cone), ``mode="full"`` by ``v_j`` (eq. 2, the NNLS over the
  atoms of the query's active concepts: its labels for S-SLiCS / S-SVD and its
  zero-shot pseudo-labels for U-SLiCS, as U-SLiCS is fitted without labels);
* ``"UF"`` is the unfiltered baseline (the whole query embedding ranks the
  pool, for every concept of the query); ``"F-SpLiCE"`` the filtered SpLiCE
  baseline (optional; needs a word vocabulary, see :func:`fsplice_inputs`).

Work is split into small *jobs* (:class:`Job`, one method / ``d0`` / mode /
split each; :func:`run_job`) so that a front end can cache each one and show
progress between them; :func:`methods_table` and :func:`sweep_d0` run lists of
jobs. :func:`choose_d0` applies the paper's rule: the ``d0`` with the best
validation sub-label mAP of the partial components of S-SLiCS.

Choices (the paper is silent): the number of zero-shot concepts per query for
U-SLiCS's full mode is the rounded mean number of labels per training item
(the ``S~`` used to fit it); UF ranks by the preprocessed embedding (the space
the models live in), as :func:`slics_core.evaluation.rank_method` does.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from slics_core.evaluation import choose_d0 as _choose_d0
from slics_core.evaluation import evaluate_rankings

__all__ = [
    "DICTIONARY_METHODS",
    "BASELINES",
    "MODES",
    "SPLITS",
    "Job",
    "query_labels",
    "rank_split",
    "score_rankings",
    "run_job",
    "table_jobs",
    "sweep_jobs",
    "methods_table",
    "sweep_d0",
    "choose_d0",
    "summary_rows",
    "fsplice_inputs",
]

#: Methods with fitted dictionaries in a workspace.
DICTIONARY_METHODS = ("S-SVD", "S-SLiCS", "U-SLiCS")
#: Methods without a dictionary of the workspace.
BASELINES = ("UF", "F-SpLiCE")
#: Components used for ranking: tilde-v_j (eq. 3) or v_j (eq. 2).
MODES = ("partial", "full")
#: Splits whose items can be queries (the pool is always the candidate set).
SPLITS = ("query", "val")


@dataclass(frozen=True)
class Job:
    """One scoring unit.

    Attributes
    ----------
    method : str
        One of :data:`DICTIONARY_METHODS` or :data:`BASELINES`.
    d0 : int or None
        Atoms per concept (None for baselines).
    mode : {"partial", "full"} or None
        Component (None for baselines).
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
            parts.append("ṽ_j" if self.mode == "partial" else "v_j")
        parts.append(f"on {self.split}")
        return " · ".join(parts)


# ---------------------------------------------------------------------- checks
def _check_split(ws, split):
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}; got {split!r}.")
    rows = np.asarray(ws.index.get(split, []), dtype=int)
    if rows.size == 0:
        raise ValueError(f"workspace {ws.name!r} has no {split!r} items to use as queries.")
    pool = np.asarray(ws.index.get("pool", []), dtype=int)
    if pool.size == 0:
        raise ValueError(f"workspace {ws.name!r} has an empty candidate pool.")
    return rows, pool


def _check_k(k):
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be a positive integer; got {k!r}.")
    return int(k)


def _check_job(ws, job):
    if job.method in DICTIONARY_METHODS:
        if job.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}; got {job.mode!r}.")
        ws.model(job.method, job.d0)  # raises ValueError when not fitted
    elif job.method not in BASELINES:
        raise ValueError(f"unknown method {job.method!r}; choose from {DICTIONARY_METHODS + BASELINES}.")


# ---------------------------------------------------------------------- rankings
def _n_active(ws):
    tr = np.asarray(ws.index["train"], dtype=int)
    Y = np.asarray(ws.Y[tr] if tr.size else ws.Y, dtype=bool)
    return max(1, int(round(Y.sum(axis=1).mean())))


def query_labels(ws, method, rows):
    """Active concepts of query rows used by the full decomposition (``mode="full"``).

    S-SLiCS and S-SVD use the items' labels; U-SLiCS, fitted without labels,
    uses zero-shot pseudo-labels (the ``S~`` concepts whose prompt embedding
    is closest to the item's raw embedding, ``S~`` = rounded mean number of
    labels of the training items).

    Parameters
    ----------
    ws : Workspace
    method : str
    rows : array-like of int
        Workspace rows.

    Returns
    -------
    Y : ndarray of bool, shape (len(rows), S)
    """
    rows = np.asarray(rows, dtype=int)
    if method != "U-SLiCS":
        return np.asarray(ws.Y[rows], dtype=bool)
    if ws.concept_text is None:
        raise ValueError("U-SLiCS with full components needs the concept prompt embeddings (concept_text), "
                         "which this workspace lacks.")
    from slics_core.unsupervised import zero_shot_labels

    return np.asarray(zero_shot_labels(ws.raw[rows], ws.concept_text, n_active=_n_active(ws)), dtype=bool)


def rank_split(ws, method, d0=None, *, split="query", k=20, mode="partial", backend="auto", fsplice=None):
    """Top-``k`` pool rankings of the queries of ``split`` by one method.

    Parameters
    ----------
    ws : Workspace
    method : str
        ``"S-SVD"``, ``"S-SLiCS"``, ``"U-SLiCS"`` (a fitted model of ``ws``),
        ``"UF"`` or ``"F-SpLiCE"``.
    d0 : int, optional
        Atoms per concept of the model (default ``ws.default_d0``; ignored by baselines).
    split : {"query", "val"}
    k : int
    mode : {"partial", "full"}
        Component of dictionary methods.
    backend : search back-end of :mod:`slics_core.retrieval`.
    fsplice : slics_core.baselines.FSpLiCE, optional
        Required for ``"F-SpLiCE"`` (see :func:`fsplice_inputs`).

    Returns
    -------
    indices : ndarray of int64, shape (n_queries, S, k) or (n_queries, k) for UF
        Positions in ``ws.index["pool"]``, best first.
    """
    from slics_core.retrieval import ConceptRetriever, build_index

    k = _check_k(k)
    rows, pool = _check_split(ws, split)
    Xq, Xp = ws.X[rows], ws.X[pool]
    if method == "UF":
        return build_index(Xp, backend).search(Xq, k)[0]
    if method == "F-SpLiCE":
        if fsplice is None:
            raise ValueError("F-SpLiCE needs a fitted FSpLiCE baseline (see slics_core.scoring.fsplice_inputs).")
        V = np.asarray(fsplice.components(Xq))
        n, S, d = V.shape
        return build_index(Xp, backend).search(V.reshape(-1, d), k)[0].reshape(n, S, -1)
    if method not in DICTIONARY_METHODS:
        raise ValueError(f"unknown method {method!r}; choose from {DICTIONARY_METHODS + BASELINES}.")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}; got {mode!r}.")
    model = ws.model(method, d0)
    retriever = ConceptRetriever(model, Xp, mode=mode, backend=backend)
    Yq = query_labels(ws, method, rows) if mode == "full" else None
    return retriever.search(Xq, k, Y_query=Yq).indices


def score_rankings(ws, indices, *, split="query", k=20, normalization="retrieved"):
    """mAP@k (general and sub-label) of rankings of the queries of ``split``.

    Returns
    -------
    result : dict
        ``general``, ``sub`` (NaN without sub-labels), ``n_pairs_general``,
        ``n_pairs_sub`` (see :func:`slics_core.evaluation.evaluate_rankings`).
    """
    rows, pool = _check_split(ws, split)
    has_sub = ws.Z is not None and ws.sub_to_concept is not None
    r = evaluate_rankings(indices, ws.Y[rows], ws.Y[pool],
                          ws.Z[rows] if has_sub else None, ws.Z[pool] if has_sub else None,
                          ws.sub_to_concept if has_sub else None, k=_check_k(k), normalization=normalization)
    return {"general": float(r["general"]), "sub": float(r["sub"]),
            "n_pairs_general": int(r["n_pairs_general"]), "n_pairs_sub": int(r["n_pairs_sub"])}


def run_job(ws, job, *, k=20, normalization="retrieved", backend="auto", fsplice=None):
    """Score one :class:`Job`: rank its split's queries and compute mAP@k.

    Returns
    -------
    record : dict
        The job's fields (``method``, ``d0``, ``mode``, ``split``) with ``k``,
        ``normalization``, ``general``, ``sub``, ``n_pairs_general``, ``n_pairs_sub``.
    """
    _check_job(ws, job)
    idx = rank_split(ws, job.method, job.d0, split=job.split, k=k, mode=job.mode or "partial",
                     backend=backend, fsplice=fsplice)
    rec = asdict(job)
    rec.update(k=int(k), normalization=normalization)
    rec.update(score_rankings(ws, idx, split=job.split, k=k, normalization=normalization))
    return rec


# ---------------------------------------------------------------------- job lists
def table_jobs(ws, d0=None, *, split="query", modes=MODES, methods=None, fsplice=False):
    """Jobs of the methods table: every fitted dictionary method at ``d0`` in each mode, UF, F-SpLiCE.

    Parameters
    ----------
    ws : Workspace
    d0 : int, optional
        Default ``ws.default_d0``.
    split : {"query", "val"}
    modes : tuple of {"partial", "full"}
    methods : sequence of str, optional
        Dictionary methods to include (default: those fitted in ``ws``, in the paper's order).
    fsplice : bool
        Add an F-SpLiCE job.
    """
    d0 = ws.default_d0 if d0 is None else int(d0)
    if d0 not in ws.d0_values:
        raise ValueError(f"no models with d0={d0} in workspace {ws.name!r}; fitted d0: {ws.d0_values}.")
    _check_split(ws, split)
    fitted = [m for m in DICTIONARY_METHODS if (m, d0) in ws.models]
    methods = fitted if methods is None else [m for m in methods if m in fitted]
    jobs = [Job(m, d0, mode, split) for m in methods for mode in modes]
    jobs.append(Job("UF", None, None, split))
    if fsplice:
        jobs.append(Job("F-SpLiCE", None, None, split))
    return jobs


def sweep_jobs(ws, method="S-SLiCS", *, splits=("val", "query"), modes=MODES):
    """Jobs of the ``d0`` sweep: ``method`` at every fitted ``d0``, for each split and mode."""
    if method not in DICTIONARY_METHODS:
        raise ValueError(f"the d0 sweep needs a dictionary method {DICTIONARY_METHODS}; got {method!r}.")
    for s in splits:
        _check_split(ws, s)
    d0s = [d for d in ws.d0_values if (method, d) in ws.models]
    if not d0s:
        raise ValueError(f"workspace {ws.name!r} has no fitted {method} models.")
    return [Job(method, d, mode, s) for s in splits for d in d0s for mode in modes]


def _run_all(ws, jobs, progress, **kw):
    out = []
    for i, job in enumerate(jobs):
        if progress is not None:
            progress(job.label(), i, len(jobs))
        out.append(run_job(ws, job, **kw))
    if progress is not None:
        progress("done", len(jobs), len(jobs))
    return out


def methods_table(ws, d0=None, *, split="query", k=20, modes=MODES, methods=None, fsplice=None,
                  normalization="retrieved", backend="auto", progress=None):
    """The methods table (Table 2 of the paper) from the workspace's fitted models.

    Parameters
    ----------
    ws : Workspace
    d0 : int, optional
        Atoms per concept of the dictionary methods (default ``ws.default_d0``;
        the paper uses the ``d0`` chosen by :func:`choose_d0`).
    split : {"query", "val"}
    k : int
    modes : tuple of {"partial", "full"}
    methods : sequence of str, optional
    fsplice : slics_core.baselines.FSpLiCE, optional
        Adds the F-SpLiCE row when given.
    normalization : {"retrieved", "min"}
    progress : callable(str, done, total), optional

    Returns
    -------
    records : list of dict
        One per job (see :func:`run_job`).
    """
    jobs = table_jobs(ws, d0, split=split, modes=modes, methods=methods, fsplice=fsplice is not None)
    return _run_all(ws, jobs, progress, k=k, normalization=normalization, backend=backend, fsplice=fsplice)


def sweep_d0(ws, method="S-SLiCS", *, splits=("val", "query"), modes=MODES, k=20, normalization="retrieved",
             backend="auto", progress=None):
    """mAP@k of ``method`` for every fitted ``d0`` (Fig. 7; both modes: Fig. 8), without refitting.

    Returns
    -------
    records : list of dict
        One per (split, d0, mode) (see :func:`run_job`).
    """
    jobs = sweep_jobs(ws, method, splits=splits, modes=modes)
    return _run_all(ws, jobs, progress, k=k, normalization=normalization, backend=backend)


def choose_d0(records, mode="partial", by="sub", method="S-SLiCS"):
    """The paper's ``d0``: best validation mAP (sub-label by default) of ``method``'s ``mode`` components.

    Parameters
    ----------
    records : list of dict
        From :func:`sweep_d0` (records of other splits / methods are ignored).
    mode : {"partial", "full"}
    by : {"sub", "general"}
        Sub-label mAP falls back to general when no sub-label score exists; ties go to the smaller ``d0``.

    Returns
    -------
    d0 : int
    """
    val = [r for r in records if r.get("split") == "val" and r.get("method", method) == method]
    if not val:
        raise ValueError(f"no validation records of {method} to choose d0 from.")
    return _choose_d0(val, mode=mode, by=by)


def summary_rows(records):
    """Methods-table records rearranged as one row per method (CSV / display).

    Columns: ``method``, ``d0``, ``general``, ``sub`` (partial components or
    the baseline's ranking) and ``general_full``, ``sub_full`` (full
    components ``v_j``; NaN for baselines or when not computed), ``split``, ``k``.
    """
    rows, order = {}, []
    for r in records:
        m = r["method"]
        if m not in rows:
            order.append(m)
            rows[m] = {"method": m, "d0": r["d0"], "general": math.nan, "sub": math.nan,
                       "general_full": math.nan, "sub_full": math.nan, "split": r["split"], "k": r["k"]}
        if r["mode"] == "full":
            rows[m].update(general_full=r["general"], sub_full=r["sub"])
        else:
            rows[m].update(general=r["general"], sub=r["sub"])
    return [rows[m] for m in order]



# ---------------------------------------------------------------------- F-SpLiCE
def fsplice_inputs(ws, words, W, *, alpha=0.25):
    """An :class:`slics_core.baselines.FSpLiCE` for ``ws`` from a word vocabulary.

    Parameters
    ----------
    ws : Workspace
        Needs ``concept_text`` (the concept prompt embeddings) for grouping.
    words : list of str
    W : ndarray of shape (V, d)
        Raw unit text embeddings of ``words`` (e.g. :func:`slics_core.workspace.workspace_vocabulary`).
    alpha : float
        SpLiCE's l1 penalty.

    Returns
    -------
    FSpLiCE
        Vocabulary and concept prompts prepared with the vocabulary's mean
        (unit, centred, unit; sec. 3.7), as in ``slics eval``.
    """
    from slics_core.explore import build_fsplice

    if ws.concept_text is None:
        raise ValueError("F-SpLiCE groups words by the concept prompt embeddings, which this workspace lacks.")
    W = np.asarray(W, dtype=np.float64)
    if W.ndim != 2 or W.shape[1] != ws.X.shape[1]:
        raise ValueError(f"vocabulary embeddings must have shape (V, {ws.X.shape[1]}); got {W.shape}.")
    if len(words) != W.shape[0]:
        raise ValueError(f"{len(words)} words for {W.shape[0]} embeddings.")
    return build_fsplice(words, W, ws.concept_text, alpha=alpha)

"""Retrieval evaluation as in sec. 4.1 and 4.4 of the paper.

* :func:`make_splits` - drop unlabelled items; seeded disjoint training,
  validation (500), query (1000) sets; the rest is the candidate pool.
* :func:`average_precision_at_k` / :func:`retrieval_map` - AP@k and mAP@k
  over every (query, concept present in the query) pair, for general labels
  and for sub-labels.
* :func:`sweep_d0` - the dictionary-size sweep on the validation set
  (Fig. 7) for the partial (``tilde-v_j``) and full (``v_j``) components
  (Fig. 8); :func:`choose_d0` picks ``d0`` by sub-label mAP.
* :func:`evaluate_methods` - the methods table (every method of the registry
  :mod:`slics_core.methods`: S-SVD, S-SLiCS, U-SLiCS, UF, F-SpLiCE, SpLiCE),
  mean +- std over seeds for mini-batch runs (Table 2); with a quantized pool
  (:class:`slics_core.retrieval.QuantizedPool`, TiTok) every method is also
  scored against the quantized candidates (Table 3, "Quant. pool");
  :func:`methods_table_markdown` formats it.
* :class:`RetrievalScorer` - mAP@k as a scikit-learn scorer (``GridSearchCV(scoring=RetrievalScorer())``):
  every held-out item queries the other held-out items.
* :class:`ResultStore` - finished runs (one JSON file per fit and evaluation,
  written atomically) and fitted dictionaries on disk, so that an interrupted
  sweep or table resumes where it stopped.

AP@k normalisation
------------------
For a ranked list with relevance ``rel_1..rel_k`` and precision
``P@i = (rel_1 + ... + rel_i) / i``::

    AP@k = sum_i P@i * rel_i / Z

``normalization="retrieved"`` (default): ``Z`` is the number of relevant
items among the top ``k`` (AP@k = 0 when there is none). This is the
convention of the image-retrieval / hashing literature on MIRFlickr and COCO.
``normalization="min"``: ``Z = min(k, R)`` with ``R`` the number of relevant
items in the whole pool, which also penalises relevant items missing from the
top ``k`` (then AP@k = 1 only for a perfect list). The normalisation is
recorded in every result.

Sub-label relevance
-------------------
For a query ``q`` and a concept ``j`` present in it, a candidate is relevant
for sub-label retrieval only if it shares at least one sub-label of ``j``
with ``q``. Pairs where the concept has no sub-labels, or where the query has
none of ``j``'s sub-labels (possible for MIRFlickr), are left out of the
sub-label mAP (their number is reported).
"""
from __future__ import annotations

import math
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from slics_core._validation import check_embeddings, check_labels, check_targets
from slics_core.errors import DamagedFileError, reading
from slics_core.methods import FitInputs, active_concepts, fit_method, get_method, method_names, needs_message
from slics_core.retrieval import build_index
from slics_core.formats import atomic_write_json, read_json

__all__ = [
    "Split",
    "EvalData",
    "make_splits",
    "average_precision_at_k",
    "relevance_matrix",
    "retrieval_map",
    "evaluate_rankings",
    "fit_inputs",
    "rank_queries",
    "rank_method",
    "sweep_d0",
    "choose_d0",
    "evaluate_methods",
    "methods_table_markdown",
    "methods_table_rows",
    "ResultStore",
    "RetrievalScorer",
    "table_runs",
    "sweep_key",
    "table_key",
    "QUANTIZED_SUFFIX",
]

_NORMALIZATIONS = ("retrieved", "min")


# --------------------------------------------------------------------------- splits
@dataclass
class Split:
    """Disjoint index sets into the original arrays.

    Attributes
    ----------
    train, val, query, pool : ndarray of int
    dropped : ndarray of int
        Items without any label (removed before splitting).
    seed : int or None
    """

    train: np.ndarray
    val: np.ndarray
    query: np.ndarray
    pool: np.ndarray
    dropped: np.ndarray
    seed: int | None = None

    def sizes(self):
        return {k: int(getattr(self, k).size) for k in ("train", "val", "query", "pool", "dropped")}


def make_splits(Y, n_train, n_val=500, n_query=1000, random_state=0):
    """Split a labelled collection as in the paper (sec. 4.1).

    Items with no positive label are dropped; the others are shuffled with
    ``random_state`` and cut into ``n_train`` training, ``n_val`` validation
    and ``n_query`` query items; every remaining item is a retrieval
    candidate.

    Parameters
    ----------
    Y : array-like of shape (n, S)
        Binary concept labels.
    n_train, n_val, n_query : int
        Set sizes (e.g. 2000 / 500 / 1000 for MIRFlickr25K, 20000 / 500 / 1000
        for COCO).
    random_state : int or None

    Returns
    -------
    Split
    """
    Y = np.asarray(Y)
    if Y.ndim != 2:
        raise ValueError(f"Y must be 2-D (n, S); got shape {Y.shape}.")
    Y = check_labels(Y, Y.shape[0])
    for name, v in (("n_train", n_train), ("n_val", n_val), ("n_query", n_query)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise ValueError(f"{name} must be a non-negative int; got {v!r}.")
    labelled = np.flatnonzero(Y.any(axis=1))
    dropped = np.flatnonzero(~Y.any(axis=1))
    need = n_train + n_val + n_query
    if labelled.size <= need:
        raise ValueError(
            f"{labelled.size} labelled items are not enough for {n_train} training + {n_val} validation + "
            f"{n_query} query items and a non-empty candidate pool; use smaller sets."
        )
    perm = np.random.default_rng(random_state).permutation(labelled)
    a, b, c = n_train, n_train + n_val, need
    return Split(np.sort(perm[:a]), np.sort(perm[a:b]), np.sort(perm[b:c]), np.sort(perm[c:]),
                 dropped, random_state)


# --------------------------------------------------------------------------- metrics
def average_precision_at_k(relevance, k=20, n_relevant=None, normalization="retrieved"):
    """AP@k of ranked lists.

    Parameters
    ----------
    relevance : array-like of bool, shape (n_lists, L)
        ``relevance[i, r]`` tells whether the item at rank ``r`` (0 = best) of
        list ``i`` is relevant. Only the first ``k`` columns are used.
    k : int
    n_relevant : array-like of int, shape (n_lists,), optional
        Relevant items in the whole pool; required for
        ``normalization="min"``.
    normalization : {"retrieved", "min"}
        See the module docstring.

    Returns
    -------
    ap : ndarray of shape (n_lists,)
    """
    rel = np.asarray(relevance, dtype=bool)
    if rel.ndim == 1:
        rel = rel.reshape(1, -1)
    if rel.ndim != 2:
        raise ValueError(f"relevance must be 2-D (n_lists, list_length); got shape {rel.shape}.")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be a positive int; got {k!r}.")
    if normalization not in _NORMALIZATIONS:
        raise ValueError(f"normalization must be one of {_NORMALIZATIONS}; got {normalization!r}.")
    rel = rel[:, :k].astype(np.float64)
    ranks = np.arange(1, rel.shape[1] + 1)
    prec = np.cumsum(rel, axis=1) / ranks
    total = (prec * rel).sum(axis=1)
    if normalization == "retrieved":
        z = rel.sum(axis=1)
    else:
        if n_relevant is None:
            raise ValueError("normalization='min' needs n_relevant (relevant items in the pool).")
        n_relevant = np.asarray(n_relevant, dtype=np.float64).reshape(-1)
        if n_relevant.shape[0] != rel.shape[0]:
            raise ValueError("n_relevant must have one entry per list.")
        z = np.minimum(k, n_relevant)
    return np.divide(total, z, out=np.zeros_like(total), where=z > 0)


def _sub_index(sub_to_concept, n_concepts):
    if sub_to_concept is None:
        return [np.zeros(0, dtype=int) for _ in range(n_concepts)]
    s2c = np.asarray(sub_to_concept, dtype=int).reshape(-1)
    if s2c.size and (s2c.min() < 0 or s2c.max() >= n_concepts):
        raise ValueError(f"sub_to_concept must map sub-labels to concepts in [0, {n_concepts}).")
    return [np.flatnonzero(s2c == j) for j in range(n_concepts)]


def relevance_matrix(ranked, query_labels, pool_labels):
    """Relevance of ranked pool items: candidate shares a label with the query's label set.

    Parameters
    ----------
    ranked : ndarray of int, shape (n_lists, k)
        Pool indices, best first.
    query_labels : ndarray of bool, shape (n_lists, L)
        The labels that make a candidate relevant for each list.
    pool_labels : ndarray of bool, shape (n_pool, L)

    Returns
    -------
    rel : ndarray of bool, shape (n_lists, k)
    """
    ranked = np.asarray(ranked)
    P = np.asarray(pool_labels, dtype=bool)[ranked]  # (n, k, L)
    return (P & np.asarray(query_labels, dtype=bool)[:, None, :]).any(axis=2)


def _as_bool(Z, n, name):
    Z = np.asarray(Z)
    if Z.ndim != 2 or Z.shape[0] != n:
        raise ValueError(f"{name} must be 2-D with {n} rows; got shape {Z.shape}.")
    return check_labels(Z, n, name=name)


def evaluate_rankings(indices, Y_query, Y_pool, Z_query=None, Z_pool=None, sub_to_concept=None,
                      k=20, normalization="retrieved"):
    """mAP@k of concept-filtered (or unfiltered) rankings.

    Parameters
    ----------
    indices : ndarray of int, shape (n_queries, S, >=k) or (n_queries, >=k)
        Ranked pool indices for every (query, concept); a 2-D array (an
        unfiltered ranking) is used for every concept of the query.
    Y_query, Y_pool : array-like of shape (n_queries, S), (n_pool, S)
        General labels.
    Z_query, Z_pool : array-like of shape (n_queries, L), (n_pool, L), optional
        Sub-labels.
    sub_to_concept : array-like of int, shape (L,), optional
        Concept of each sub-label.
    k : int
    normalization : {"retrieved", "min"}

    Returns
    -------
    result : dict
        ``general`` and ``sub`` mAP@k (``nan`` without sub-labels),
        ``n_pairs_general``, ``n_pairs_sub``, ``ap_general`` (per pair),
        ``k`` and ``normalization``.
    """
    Yq = np.asarray(Y_query)
    Yq = _as_bool(Yq, Yq.shape[0] if Yq.ndim == 2 else -1, "Y_query")
    Yp = np.asarray(Y_pool)
    Yp = _as_bool(Yp, Yp.shape[0] if Yp.ndim == 2 else -1, "Y_pool")
    nq, S = Yq.shape
    if Yp.shape[1] != S:
        raise ValueError(f"Y_pool has {Yp.shape[1]} concepts but Y_query has {S}.")
    indices = np.asarray(indices)
    if indices.ndim == 2:
        indices = np.broadcast_to(indices[:, None, :], (indices.shape[0], S, indices.shape[1]))
    if indices.ndim != 3 or indices.shape[:2] != (nq, S):
        raise ValueError(f"indices must have shape ({nq}, {S}, k) or ({nq}, k); got {indices.shape}.")
    if indices.size and (indices.min() < 0 or indices.max() >= Yp.shape[0]):
        raise ValueError("indices point outside the pool.")
    if indices.shape[2] < min(k, Yp.shape[0]):
        raise ValueError(f"rankings have {indices.shape[2]} entries but k={k}.")
    qi, cj = np.nonzero(Yq)
    ranked = indices[qi, cj, :k]
    rel = Yp[ranked, cj[:, None]]
    n_rel = Yp.sum(axis=0)[cj] if normalization == "min" else None
    ap_gen = average_precision_at_k(rel, k, n_rel, normalization)
    out = {
        "general": float(ap_gen.mean()) if ap_gen.size else math.nan,
        "n_pairs_general": int(ap_gen.size),
        "ap_general": ap_gen,
        "sub": math.nan,
        "n_pairs_sub": 0,
        "k": int(k),
        "normalization": normalization,
    }
    if Z_query is None or Z_pool is None or sub_to_concept is None:
        return out
    Zq = _as_bool(Z_query, nq, "Z_query")
    Zp = _as_bool(Z_pool, Yp.shape[0], "Z_pool")
    subs = _sub_index(sub_to_concept, S)
    if Zq.shape[1] != len(np.asarray(sub_to_concept).reshape(-1)) or Zp.shape[1] != Zq.shape[1]:
        raise ValueError("Z_query, Z_pool and sub_to_concept disagree on the number of sub-labels.")
    aps = []
    for j in range(S):
        L = subs[j]
        if L.size == 0:
            continue
        rows = np.flatnonzero(Yq[:, j] & Zq[:, L].any(axis=1))
        if rows.size == 0:
            continue
        qsub = Zq[rows][:, L]
        rel = relevance_matrix(indices[rows, j, :k], qsub, Zp[:, L])
        n_rel = None
        if normalization == "min":
            n_rel = (Zp[:, L].astype(np.int64) @ qsub.T.astype(np.int64) > 0).sum(axis=0)
        aps.append(average_precision_at_k(rel, k, n_rel, normalization))
    if aps:
        ap_sub = np.concatenate(aps)
        out.update(sub=float(ap_sub.mean()), n_pairs_sub=int(ap_sub.size), ap_sub=ap_sub)
    return out


def retrieval_map(scores_or_indices, *args, **kwargs):
    """Alias of :func:`evaluate_rankings` returning only ``(general, sub)`` mAP."""
    r = evaluate_rankings(scores_or_indices, *args, **kwargs)
    return r["general"], r["sub"]


# --------------------------------------------------------------------------- data
@dataclass
class EvalData:
    """Everything the methods table needs, with preprocessed embeddings.

    Attributes
    ----------
    X : ndarray of shape (n, d)
        Preprocessed image embeddings (e.g. unit / centred / unit for CLIP).
    Y : ndarray of bool, shape (n, S)
        General labels.
    concept_names : list of str
    Z : ndarray of bool, shape (n, L), optional
        Sub-labels.
    sub_to_concept : ndarray of int, shape (L,), optional
    sub_names : list of str, optional
    X_raw : ndarray of shape (n, d), optional
        Raw encoder embeddings, used for zero-shot pseudo-labels (U-SLiCS);
        ``X`` is used when absent.
    concept_text : ndarray of shape (S, d), optional
        Raw text embeddings of the concept prompts (zero-shot labels, F-SpLiCE grouping).
    vocab_text : ndarray of shape (V, d), optional
        Raw text embeddings of the vocabulary words (SpLiCE dictionary; the
        methods prepare them, :mod:`slics_core.methods`).
    vocab_words : list of str, optional
    """

    X: np.ndarray
    Y: np.ndarray
    concept_names: list
    Z: np.ndarray | None = None
    sub_to_concept: np.ndarray | None = None
    sub_names: list | None = None
    X_raw: np.ndarray | None = None
    concept_text: np.ndarray | None = None
    vocab_text: np.ndarray | None = None
    vocab_words: list | None = None

    def __post_init__(self):
        self.X = check_embeddings(self.X, name="X", allow_zero_rows=True)
        self.Y = check_labels(self.Y, self.X.shape[0], name="Y")
        if len(self.concept_names) != self.Y.shape[1]:
            raise ValueError(f"{len(self.concept_names)} concept names for {self.Y.shape[1]} label columns.")
        if self.Z is not None:
            self.Z = check_labels(self.Z, self.X.shape[0], name="Z")
            if self.sub_to_concept is None:
                raise ValueError("sub-labels Z need sub_to_concept (the concept of every sub-label).")
            self.sub_to_concept = np.asarray(self.sub_to_concept, dtype=int).reshape(-1)
            if self.sub_to_concept.size != self.Z.shape[1]:
                raise ValueError("sub_to_concept must have one entry per sub-label column of Z.")
            _sub_index(self.sub_to_concept, self.Y.shape[1])
        if self.X_raw is not None:
            self.X_raw = check_embeddings(self.X_raw, name="X_raw", allow_zero_rows=True)
            if self.X_raw.shape[0] != self.X.shape[0]:
                raise ValueError("X_raw must have as many rows as X.")

    @property
    def has_sub_labels(self):
        return self.Z is not None


def fit_inputs(data, rows, n_active=None):
    """:class:`slics_core.methods.FitInputs` of the items ``rows`` of ``data`` (training split)."""

    rows = np.asarray(rows, dtype=int)
    return FitInputs(X=data.X[rows], Y=data.Y[rows], concept_names=list(data.concept_names),
                     X_raw=None if data.X_raw is None else data.X_raw[rows], concept_text=data.concept_text,
                     vocab_words=data.vocab_words, vocab_text=data.vocab_text, n_active=n_active)


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
    X_query = np.asarray(X_query, dtype=np.float64)
    S = int(model.n_concepts_)
    if not m.filtered:  # one vector per query, the same for every concept: rank once
        v = np.asarray(model.project(X_query, 0))
        idx = index.search(v, k)[0]
        return np.repeat(idx[:, None, :], S, axis=1)
    if mode == "full" and "full" in m.modes:
        if Y_active is None:
            raise ValueError("mode='full' needs the active concepts of the queries.")
        V = np.asarray(model.components(X_query, Y_active))
    elif mode in ("partial", "full"):
        V = np.asarray(model.project(X_query, None))
    else:
        raise ValueError(f"mode must be 'partial' or 'full'; got {mode!r}.")
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
    q_idx = getattr(split, queries)
    inputs = fit_inputs(data, split.train, n_active)
    if model is None:
        model = fit_method(m, inputs, n_atoms if m.dictionary else None, n_iter=n_iter, batch_size=batch_size,
                           seed=seed, ridge=ridge)
    if index is None:
        index = build_index(data.X[split.pool], backend)
    Y_active = None
    if mode == "full" and "full" in m.modes:
        Y_active = active_concepts(m, Y=data.Y[q_idx], X_raw=None if data.X_raw is None else data.X_raw[q_idx],
                                   concept_text=data.concept_text, n_active=inputs.active_count())
    return rank_queries(model, m, data.X[q_idx], index, k, mode=mode, Y_active=Y_active), model


class RetrievalScorer:
    """General mAP@k of concept-filtered retrieval, as a scikit-learn scorer ``scorer(estimator, X, y)``.

    For model selection with scikit-learn (``GridSearchCV(SLiCS(), {"n_atoms": [...]},
    scoring=RetrievalScorer())``): on the held-out items ``X`` (labels ``y``), every item queries
    the *other* held-out items with each concept it has, ranked by cosine to its component
    (:meth:`SLiCS.project`, ``tilde-v_j``; ``mode="full"``: :meth:`SLiCS.components` with the
    query's labels, ``v_j``); the score is the mean AP@k over these (query, concept) pairs
    (:func:`evaluate_rankings`). The paper's protocol has separate query and pool sets
    (:func:`rank_method`); here the fold is both, with the query itself left out of its list.

    Parameters
    ----------
    k : int, default=20
        Ranks scored (fewer when the fold has ``k`` items or fewer: all the others).
    mode : {"partial", "full"}, default="partial"

    AP@k is normalised by the relevant items retrieved (``normalization="retrieved"``, see the
    module docstring).

    Notes
    -----
    ``estimator`` is a fitted model of :mod:`slics_core.methods` (e.g. :class:`slics_core.SLiCS`) or a
    :class:`sklearn.pipeline.Pipeline` ending in one (the steps before it transform ``X``). ``y`` is
    a 0/1 matrix, or class labels for a model fitted on class labels. Larger is better.
    """

    def __init__(self, k: int = 20, mode: str = "partial"):
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"k must be a positive int; got {k!r}.")
        if mode not in ("partial", "full"):
            raise ValueError(f"mode must be 'partial' or 'full'; got {mode!r}.")
        self.k, self.mode = int(k), mode

    def __repr__(self):
        return f"RetrievalScorer(k={self.k}, mode={self.mode!r})"

    def __call__(self, estimator, X, y) -> float:
        model = estimator
        if hasattr(estimator, "steps"):  # a Pipeline: the last step is the model
            model = estimator.steps[-1][1]
            if len(estimator.steps) > 1:
                X = estimator[:-1].transform(X)
        X = check_embeddings(X)
        Y = check_targets(y, X.shape[0], classes=getattr(model, "classes_", None))[0]
        S = int(model.n_concepts_)
        if Y.shape[1] != S:
            raise ValueError(f"y has {Y.shape[1]} concepts but the model has {S}.")
        if self.mode == "full" and getattr(model, "filtered", True):
            V = np.asarray(model.components(X, Y))
        else:
            V = np.asarray(model.project(X, None))
        n, d = X.shape
        if n < 2:
            raise ValueError("RetrievalScorer needs at least 2 held-out items (each queries the others).")
        k = min(self.k, n - 1)
        ranked = build_index(X, "exact").search(V.reshape(-1, d), k + 1)[0].reshape(n, S, -1)
        own = ranked == np.arange(n)[:, None, None]
        own[..., -1] |= ~own.any(axis=2)  # the query itself, or else the last of the k + 1
        others = ranked[~own].reshape(n, S, k)
        return float(evaluate_rankings(others, Y, Y, k=k)["general"])


def _score(indices, data, split, queries, k, normalization):
    q_idx = getattr(split, queries)
    Zq = None if data.Z is None else data.Z[q_idx]
    Zp = None if data.Z is None else data.Z[split.pool]
    return evaluate_rankings(indices, data.Y[q_idx], data.Y[split.pool], Zq, Zp, data.sub_to_concept, k,
                             normalization)


class ResultStore:
    """Finished runs of :func:`sweep_d0` / :func:`evaluate_methods` kept on disk.

    One JSON file per run (keyed by method, ``d0``, seed...) and one ``.npz`` per
    fitted dictionary, each written atomically (a reader never sees half a file),
    so that a run interrupted at any point resumes with the finished runs kept.
    The folder must belong to one configuration (data, split, training and
    scoring parameters): callers put a digest of it in the folder name.

    Parameters
    ----------
    folder : path-like
    """

    def __init__(self, folder):
        self.folder = Path(folder)

    @staticmethod
    def _name(key):
        parts = [f"{k}-{key[k]}" for k in sorted(key)]
        return re.sub(r"[^A-Za-z0-9._=-]+", "_", "__".join(parts))

    def get(self, key):
        """The record saved under ``key`` (a dict of str / int), or None.

        A damaged file counts as missing (the run is done again).
        """
        p = self.folder / (self._name(key) + ".json")
        if not p.is_file():
            return None
        try:
            with reading(p, "it is computed again"):
                rec = read_json(p)
        except (DamagedFileError, OSError, ValueError):
            return None
        return rec if isinstance(rec, dict) and rec.get("key") == key else None

    def put(self, key, record):
        """Save ``record`` (JSON-able dict) under ``key``, atomically."""
        atomic_write_json(self.folder / (self._name(key) + ".json"), dict(record, key=key))

    def model(self, method, d0, seed, fit):
        """The fitted model of a dictionary method: loaded from disk, else ``fit()`` and saved."""
        m = get_method(method)
        if not m.dictionary:
            return fit()
        p = self.folder / ("model__" + self._name({"method": m.name, "d0": d0, "seed": seed}) + ".npz")
        if p.is_file():
            try:
                return m.load(p)
            except (OSError, ValueError, KeyError):
                pass  # damaged: fitted again below
        model = fit()
        os.makedirs(self.folder, exist_ok=True)
        model.save(p)
        return model


def sweep_key(method, d0, seed, modes):
    """The :class:`ResultStore` key of one ``d0`` of :func:`sweep_d0`."""
    return {"kind": "sweep", "method": get_method(method).name, "d0": int(d0), "seed": int(seed),
            "modes": "+".join(modes)}


def table_key(method, d0, seed, mode, n_active, pools):
    """The :class:`ResultStore` key of one (method, seed) run of :func:`evaluate_methods`."""
    m = get_method(method)
    return {"kind": "table", "method": m.name, "d0": int(d0) if m.dictionary else None, "seed": int(seed),
            "mode": mode, "n_active": n_active, "pools": "+".join(pools)}


def _fit_model(m, inputs, d0, seed, n_iter, batch_size, ridge, results):
    def fit():
        return fit_method(m, inputs, d0 if m.dictionary else None, n_iter=n_iter, batch_size=batch_size, seed=seed,
                          ridge=ridge)

    return fit() if results is None else results.model(m.name, d0 if m.dictionary else None, seed, fit)


def sweep_d0(data, split, d0_values=range(5, 21), *, method="S-SLiCS", modes=("partial", "full"), n_iter=10,
             batch_size=None, seed=0, k=20, backend="auto", normalization="retrieved", ridge=0.0, models=None,
             progress=None, results=None):
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
                r = _score(idx, data, split, "val", k, normalization)
                new.append({"d0": d0, "mode": mode, "general": r["general"], "sub": r["sub"]})
            records += new
            if results is not None:
                results.put(key, {"records": new, "wall_s": time.perf_counter() - clock[0],
                                  "cpu_s": time.process_time() - clock[1], "fit_cpu_s": fit_cpu})
        if progress is not None:
            progress(f"d0={d0}: " + ", ".join(f"{x['mode']} gen={x['general']:.3f} sub={x['sub']:.3f}"
                                               for x in records if x["d0"] == d0))
    return records


def choose_d0(records, mode="partial", by="sub"):
    """The ``d0`` with the best validation mAP: the one place that chooses ``d0``.

    The paper's rule: sub-label mAP@20 of S-SLiCS's partial components on the validation
    split. Falls back to the general-label mAP when no sub-label score exists. Ties go
    to the smaller ``d0``. ``records`` are :func:`sweep_d0`'s (records with a ``split``
    key other than ``"val"`` are ignored).
    """
    rows = [r for r in records if r.get("mode", mode) == mode and r.get("split", "val") == "val"]
    if not rows:
        raise ValueError(f"no validation sweep records for mode {mode!r}.")
    key = by if not all(math.isnan(r[by]) for r in rows) else "general"
    best = max(rows, key=lambda r: (-math.inf if math.isnan(r[key]) else r[key], -r["d0"]))
    return int(best["d0"])


def table_runs(methods, seeds, batch_size):
    """``[(method, seed), ...]`` that :func:`evaluate_methods` runs (before checking each method's needs)."""
    seeds = list(seeds)
    return [(get_method(m).name, seed) for m in methods
            for seed in (seeds if (get_method(m).stochastic and batch_size is not None) else seeds[:1])]


def _table_row(name, runs, skipped, k, normalization, pool):
    gen = np.array([r["general"] for r in runs], dtype=float)
    sub = np.array([r["sub"] for r in runs], dtype=float)
    return {
        "method": name,
        "general_mean": float(gen.mean()) if gen.size else math.nan,
        "general_std": float(gen.std()) if gen.size else math.nan,
        "sub_mean": float(sub.mean()) if sub.size else math.nan,
        "sub_std": float(sub.std()) if sub.size else math.nan,
        "n_runs": len(runs),
        "runs": runs,
        "skipped": skipped,
        "k": int(k),
        "normalization": normalization,
        "pool": pool,
    }


#: Suffix of the method name of a row scored against the quantized pool.
QUANTIZED_SUFFIX = " (quant. pool)"


def evaluate_methods(data, split, methods=None, *, n_atoms=10, n_iter=10, batch_size=None, seeds=(0, 1, 2, 3, 4),
                     k=20, mode="partial", backend="auto", normalization="retrieved", n_active=None, ridge=0.0,
                     progress=None, quantized=None, results=None):
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

    Returns
    -------
    rows : list of dict
        ``method``, ``general_mean``, ``general_std``, ``sub_mean``, ``sub_std``,
        ``n_runs``, ``runs`` (per-seed scores), ``skipped`` (reason or None), ``k``,
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
        run_seeds = [s for name, s in table_runs([m.name], seeds, batch_size)]
        skipped = needs_message(m, inputs)
        runs = {p: [] for p in pools}
        if not skipped:
            for seed in run_seeds:
                key = table_key(m.name, n_atoms, seed, mode, n_active, pools)
                done = None if results is None else results.get(key)
                if done is None:
                    clock = (time.perf_counter(), time.process_time())
                    model = _fit_model(m, inputs, n_atoms, seed, n_iter, batch_size, ridge, results)
                    fit_cpu = time.process_time() - clock[1]
                    done = {}
                    for p in pools:
                        idx, _ = rank_method(m.name, data, split, n_atoms=n_atoms, seed=seed, k=k, mode=mode,
                                             n_active=n_active, model=model, index=index_of(p))
                        r = _score(idx, data, split, "query", k, normalization)
                        done[p] = {"seed": seed, "general": r["general"], "sub": r["sub"]}
                    if results is not None:
                        results.put(key, dict(done, wall_s=time.perf_counter() - clock[0],
                                              cpu_s=time.process_time() - clock[1], fit_cpu_s=fit_cpu))
                for p in pools:
                    runs[p].append(done[p])
                if progress is not None:
                    progress(f"{m.name} seed {seed}: " + "; ".join(
                        f"{p} pool gen={done[p]['general']:.3f} sub={done[p]['sub']:.3f}" for p in pools))
        for p in pools:
            if p == "quantized" and skipped:
                continue
            name = m.name + (QUANTIZED_SUFFIX if p == "quantized" else "")
            row = _table_row(name, runs[p], skipped, k, normalization, p)
            rows.append(row)
            if progress is not None:
                progress(f"{name}: " + (f"skipped ({skipped})" if skipped
                                        else _fmt(row, "general") + " / " + _fmt(row, "sub")))
    return rows


def _fmt(row, key):
    m, s = row[f"{key}_mean"], row[f"{key}_std"]
    if row.get("skipped"):
        return "n/a"
    if m is None or math.isnan(m):
        return "-"
    return f"{m:.3f} ± {s:.3f}" if row["n_runs"] > 1 else f"{m:.3f}"


def methods_table_rows(rows):
    """Flat records (one per method) for CSV/JSON: no nested per-seed lists."""
    out = []
    for r in rows:
        rec = {key: r[key] for key in ("method", "general_mean", "general_std", "sub_mean", "sub_std",
                                        "n_runs", "k", "normalization", "skipped")}
        rec["pool"] = r.get("pool", "original")
        out.append(rec)
    return out


def methods_table_markdown(rows, title=None):
    """Markdown table: one column per method, rows ``Gen.`` and ``Sub.``; best in bold.

    With quantized-pool rows (``pool="quantized"``), the best is marked separately
    among the original-pool and among the quantized-pool columns, as in Table 3.
    """
    k = rows[0]["k"] if rows else 20
    header = "| Type | " + " | ".join(r["method"] for r in rows) + " |"
    sep = "|---|" + "---:|" * len(rows)
    lines = [f"**{title}**", ""] if title else []
    lines += [header, sep]
    for key, label in (("general", f"Gen. mAP@{k}"), ("sub", f"Sub. mAP@{k}")):
        vals = [r[f"{key}_mean"] if not r.get("skipped") else math.nan for r in rows]
        best = {}
        for r, v in zip(rows, vals):
            if v is not None and not math.isnan(v):
                p = r.get("pool", "original")
                best[p] = max(best.get(p, v), v)
        cells = []
        for r, v in zip(rows, vals):
            text = _fmt(r, key)
            if v is not None and v == best.get(r.get("pool", "original")):
                text = f"**{text}**"
            cells.append(text)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)

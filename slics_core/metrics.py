"""Retrieval metrics of sec. 4.1 and 4.4 of the paper.

* :func:`average_precision_at_k` / :func:`evaluate_rankings` - AP@k and mAP@k
  over every (query, concept present in the query) pair, for general labels and for sub-labels;
* :func:`recall_at_k` - Recall@k over the same pairs (share of the query's relevant pool items in the top ``k``)
  and its ceiling (the best any ranking reaches on those pairs);
* :func:`relevance_matrix` - which ranked candidates share a label with the query;
* :class:`RetrievalScorer` - mAP@k as a scikit-learn scorer (``GridSearchCV(scoring=RetrievalScorer())``):
  every held-out item queries the other held-out items.

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

import numpy as np

from slics_core import labels as _labels
from slics_core._validation import check_embeddings, check_k, check_labels, check_targets
from slics_core.methods import check_mode, components_of
from slics_core.retrieval import build_index

__all__ = ["NORMALIZATIONS", "average_precision_at_k", "relevance_matrix", "evaluate_rankings", "recall_at_k",
           "concept_sub_columns", "RetrievalScorer"]

#: AP@k normalisations (see the module docstring).
NORMALIZATIONS = ("retrieved", "min")


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
    k = check_k(k)
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"normalization must be one of {NORMALIZATIONS}; got {normalization!r}.")
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


def concept_sub_columns(sub_to_concept, n_concepts):
    """The sub-label columns of each concept (a list of ``n_concepts`` index arrays); ValueError when
    ``sub_to_concept`` breaks :func:`slics_core.labels.check_sub_to_concept`."""
    if sub_to_concept is None:
        return [np.zeros(0, dtype=int) for _ in range(n_concepts)]
    s2c = _labels.check_sub_to_concept(sub_to_concept, n_concepts)
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


def _pair_lists(indices, Y_query, Y_pool, Z_query, Z_pool, sub_to_concept, k, sub_n_relevant=False):
    """The (query, concept) pairs of :func:`evaluate_rankings` and :func:`recall_at_k` (one home for their
    checks and relevance): ``{"general": block, "sub": [block per concept] or None}``, each block a dict of
    ``rel`` (bool, (n_pairs, <=k): relevance of the top ``k``), ``n_rel`` (relevant items in the pool per pair),
    ``concept`` (the concept of each pair) and ``query`` (its query's row). Sub-label ``n_rel`` is computed only
    when ``sub_n_relevant``."""
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
    general = {"rel": Yp[ranked, cj[:, None]], "n_rel": Yp.sum(axis=0)[cj], "concept": cj, "query": qi}
    if Z_query is None or Z_pool is None or sub_to_concept is None:
        return {"general": general, "sub": None}
    Zq = _as_bool(Z_query, nq, "Z_query")
    Zp = _as_bool(Z_pool, Yp.shape[0], "Z_pool")
    subs = concept_sub_columns(sub_to_concept, S)
    if Zq.shape[1] != len(np.asarray(sub_to_concept).reshape(-1)) or Zp.shape[1] != Zq.shape[1]:
        raise ValueError("Z_query, Z_pool and sub_to_concept disagree on the number of sub-labels.")
    blocks = []
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
        if sub_n_relevant:
            n_rel = (Zp[:, L].astype(np.int64) @ qsub.T.astype(np.int64) > 0).sum(axis=0)
        blocks.append({"rel": rel, "n_rel": n_rel, "concept": np.full(rows.size, j), "query": rows})
    return {"general": general, "sub": blocks}


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
        ``concept_general`` (its concept) and ``query_general`` (its query's row; ``ap_sub``, ``concept_sub``
        and ``query_sub`` likewise when there are sub-label pairs), ``n_queries``, ``k`` and ``normalization``.
    """
    k = check_k(k)
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"normalization must be one of {NORMALIZATIONS}; got {normalization!r}.")
    pairs = _pair_lists(indices, Y_query, Y_pool, Z_query, Z_pool, sub_to_concept, k,
                        sub_n_relevant=normalization == "min")
    g = pairs["general"]
    ap_gen = average_precision_at_k(g["rel"], k, g["n_rel"], normalization)
    out = {
        "general": float(ap_gen.mean()) if ap_gen.size else math.nan,
        "n_pairs_general": int(ap_gen.size),
        "ap_general": ap_gen,
        "concept_general": g["concept"],
        "query_general": g["query"],
        "n_queries": int(np.shape(Y_query)[0]),
        "sub": math.nan,
        "n_pairs_sub": 0,
        "k": int(k),
        "normalization": normalization,
    }
    if pairs["sub"]:
        ap_sub = np.concatenate([average_precision_at_k(b["rel"], k, b["n_rel"], normalization)
                                 for b in pairs["sub"]])
        out.update(sub=float(ap_sub.mean()), n_pairs_sub=int(ap_sub.size), ap_sub=ap_sub,
                   concept_sub=np.concatenate([b["concept"] for b in pairs["sub"]]),
                   query_sub=np.concatenate([b["query"] for b in pairs["sub"]]))
    return out


def recall_at_k(indices, Y_query, Y_pool, Z_query=None, Z_pool=None, sub_to_concept=None, k=20):
    """Recall@k of concept-filtered (or unfiltered) rankings, over the same (query, concept) pairs as
    :func:`evaluate_rankings`.

    For one pair (query ``q``, concept ``j`` present in ``q``) with relevant set ``R`` in the pool (the
    pool items that have ``j``; for sub-labels, those sharing at least one of ``j``'s sub-labels with
    ``q``)::

        Recall@k = |top-k ∩ R| / |R|

    and the score is the mean over pairs, general labels and sub-labels apart, as mAP@k is. A pool
    smaller than ``k`` gives recall 1. Pairs whose ``R`` is empty have no recall and are left out (they
    are counted in ``n_skipped_general`` / ``n_skipped_sub``; mAP@k keeps them with AP 0); sub-label pairs
    are chosen as for mAP (the concept has sub-labels and the query has one of them).

    Parameters
    ----------
    indices : ndarray of int, shape (n_queries, S, >=k) or (n_queries, >=k)
        As for :func:`evaluate_rankings`.
    Y_query, Y_pool, Z_query, Z_pool, sub_to_concept : as for :func:`evaluate_rankings`.
    k : int

    Returns
    -------
    result : dict
        ``general`` and ``sub`` Recall@k (``nan`` without pairs), ``n_pairs_general``, ``n_pairs_sub``
        (pairs scored), ``n_skipped_general``, ``n_skipped_sub``, ``recall_general`` / ``recall_sub`` (per
        scored pair), ``query_general`` / ``query_sub`` (the query row of each scored pair), ``n_queries``,
        ``ceiling_general`` / ``ceiling_sub`` and ``k``.

    Notes
    -----
    The *ceiling* is the best Recall@k any ranking can reach on these pairs: a pair with ``|R|`` relevant
    items recalls at most ``min(k, |R|) / |R|`` (every one of the top ``k`` relevant), averaged like the
    score. With hundreds of relevant items per query Recall@20 cannot exceed a few per cent, so a score is
    read against its ceiling.
    """
    k = check_k(k)
    pairs = _pair_lists(indices, Y_query, Y_pool, Z_query, Z_pool, sub_to_concept, k, sub_n_relevant=True)

    def recall(blocks):
        if not blocks:
            return np.zeros(0), 0, np.zeros(0, dtype=int), np.zeros(0)
        hits = np.concatenate([b["rel"].sum(axis=1) for b in blocks]).astype(np.float64)
        n_rel = np.concatenate([np.asarray(b["n_rel"]) for b in blocks]).astype(np.float64)
        query = np.concatenate([b["query"] for b in blocks])
        keep = n_rel > 0
        best = np.minimum(min(k, n_pool), n_rel[keep]) / n_rel[keep]  # every top-k slot relevant
        return hits[keep] / n_rel[keep], int((~keep).sum()), query[keep], best

    n_pool = np.shape(Y_pool)[0]
    rg, skip_g, qg, cg = recall([pairs["general"]])
    rs, skip_s, qs, cs = recall(pairs["sub"])

    def mean(v):
        return float(v.mean()) if v.size else math.nan

    return {"general": mean(rg), "sub": mean(rs),
            "n_pairs_general": int(rg.size), "n_pairs_sub": int(rs.size), "n_skipped_general": skip_g,
            "n_skipped_sub": skip_s, "recall_general": rg, "recall_sub": rs, "query_general": qg, "query_sub": qs,
            "ceiling_general": mean(cg), "ceiling_sub": mean(cs), "n_queries": int(np.shape(Y_query)[0]),
            "k": int(k)}


class RetrievalScorer:
    """General mAP@k of concept-filtered retrieval, as a scikit-learn scorer ``scorer(estimator, X, y)``.

    For model selection with scikit-learn (``GridSearchCV(SLiCS(), {"n_atoms": [...]},
    scoring=RetrievalScorer())``): on the held-out items ``X`` (labels ``y``), every item queries
    the *other* held-out items with each concept it has, ranked by cosine to its component
    (:func:`slics_core.methods.components_of`: ``tilde-v_j``; ``mode="full"``: ``v_j`` with the
    query's labels); the score is the mean AP@k over these (query, concept) pairs
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
        self.k, self.mode = check_k(k), check_mode(mode)

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
        V = components_of(model, X, self.mode, active=Y)
        n, d = X.shape
        if n < 2:
            raise ValueError("RetrievalScorer needs at least 2 held-out items (each queries the others).")
        k = min(self.k, n - 1)
        ranked = build_index(X, "exact").search(V.reshape(-1, d), k + 1)[0].reshape(n, S, -1)
        own = ranked == np.arange(n)[:, None, None]
        own[..., -1] |= ~own.any(axis=2)  # the query itself, or else the last of the k + 1
        others = ranked[~own].reshape(n, S, k)
        return float(evaluate_rankings(others, Y, Y, k=k)["general"])

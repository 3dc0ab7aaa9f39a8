"""Retrieval-side helpers of the app's Retrieve and Generate pages.

Everything here is plain numpy on one query at a time:

* :func:`components_of_row` / :func:`concept_scores` -- one query's concept
  components (``tilde v_j`` partial, ``v_j`` full; the one-row form of
  :func:`slics_core.methods.components_of`) for a fitted model of any
  registered method (:mod:`slics_core.methods`: they share one interface), and
  the ranking score ``cos(tilde v_j, x)``;
* :func:`fit_score_thresholds` / :func:`likely_concepts` -- which concepts to
  pre-select for a query whose labels are unknown (an upload);
* :func:`concept_galleries` -- top-``k`` pool items by each picked concept's
  component and by the whole query (unfiltered), with relevance marks and
  precision@k where labels are known; :func:`galleries_table` for CSV export;
* :func:`generation_rows`, :func:`image_strip` -- inputs and output layout of
  the Generate page; :func:`parse_concept_param` -- the ``?c=`` deep link.

Removing or boosting one concept of a query is :mod:`slics_core.explorer.edits`.

Relevance (as in the paper's evaluation, sec. 4.4): a retrieved pool item is
*generally* relevant to concept ``j`` when it has general label ``j``; it is
*sub-label* relevant when it shares one of the query's sub-labels that belong
to concept ``j``. General relevance only needs the pool's labels (so it is
shown for uploads too); sub-label relevance needs the query's sub-labels and is
``None`` when the query has none under concept ``j``.

Pre-selection rule for uploads (the paper is silent): for every concept the
score threshold that maximises F1 between ``cos(tilde v_j, x) >= t`` and the
labels on the workspace's validation split; a concept with no positive
validation item gets the median of the other thresholds. The concepts above
their threshold are pre-selected, or the best-scoring one if none is.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from PIL import Image

from slics_core._validation import check_embeddings
from slics_core.explorer.pool import Hits
from slics_core.methods import check_mode, components_of
from slics_core.rows import TIE_TOL, ZERO_NORM, unit_rows

__all__ = [
    "check_query",
    "model_dim",
    "n_concepts",
    "norms_and_cosine",
    "components_of_row",
    "concept_scores",
    "fit_score_thresholds",
    "likely_concepts",
    "Gallery",
    "hits_relevance",
    "gallery_relevance",
    "concept_galleries",
    "mix_components",
    "galleries_table",
    "upload_thresholds",
    "generation_rows",
    "image_strip",
    "parse_concept_param",
]


def check_query(x, d=None) -> np.ndarray:
    """One finite, non-zero query embedding as float64 ``(d,)``; a ``(1, d)`` row is accepted.

    Raises ``ValueError`` naming the shape or the bad values.
    """
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 2 and x.shape[0] == 1:
        x = x[0]
    if x.ndim != 1:
        raise ValueError(f"the query must be one embedding (d,), got shape {x.shape}")
    if d is not None and x.shape[0] != d:
        raise ValueError(f"the query has {x.shape[0]} dimensions, the model {d}")
    if not np.all(np.isfinite(x)) or not np.linalg.norm(x) > 0:
        raise ValueError("the query embedding is zero or contains NaN/inf")
    return x


def model_dim(model) -> int | None:
    """The embedding dimension a fitted model expects (``None`` when it does not say)."""
    return getattr(model, "n_features_in_", None)


def n_concepts(model) -> int:
    """The number of concepts of a fitted model."""
    return int(model.n_concepts_)


def components_of_row(model, x, mode="partial", *, active=None) -> np.ndarray:
    """Concept components of one query, shape (S, d): :func:`slics_core.methods.components_of` of one row.

    Parameters
    ----------
    model : fitted model of a registered method (:mod:`slics_core.methods`)
    x : array-like of shape (d,)
        The query, preprocessed like the model's training data (not zero).
    mode : {"partial", "full"}
        ``"partial"``: ``tilde v_j``, the nearest point of concept ``j``'s
        cone; ``"full"``: ``v_j`` from the joint NNLS over the ``active``
        concepts (the others are zero). Methods with one kind of component
        (UF, F-SpLiCE, SpLiCE) give it for both modes.
    active : sequence of int or bool mask of shape (S,), optional
        Active concepts for ``mode="full"`` (required there by models with full components; at least one).
    """
    x = check_query(x, model_dim(model))
    check_mode(mode)
    mask = None
    if mode == "full" and active is not None:
        S = n_concepts(model)
        mask = np.zeros(S, bool)
        a = np.asarray(active)
        if a.dtype == bool:
            if a.shape != (S,):
                raise ValueError(f"active mask must have shape ({S},), got {a.shape}")
            mask = a.copy()
        else:
            a = a.astype(int).ravel()
            if a.size and (a.min() < 0 or a.max() >= S):
                raise ValueError(f"active concepts must be in [0, {S}), got {a.tolist()}")
            mask[a] = True
        if not mask.any():
            raise ValueError("pick at least one concept for the full disentanglement")
        mask = mask[None]
    return components_of(model, x[None], mode, active=mask)[0]


def _cosines(V, x):
    V = np.atleast_2d(np.asarray(V, dtype=np.float64))
    return unit_rows(V, zero="keep") @ unit_rows(x, name="query")


def concept_scores(model, X) -> np.ndarray:
    """``cos(tilde v_j, x)`` for every concept; 0 where the component is zero.

    Parameters
    ----------
    model : fitted model of a registered method
    X : array-like of shape (d,) or (n, d)

    Returns
    -------
    scores : ndarray of shape (S,) or (n, S)
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim == 1:
        x = check_query(X, model_dim(model))
        return _cosines(components_of_row(model, x, "partial"), x)
    if X.ndim != 2:
        raise ValueError(f"X must be (d,) or (n, d), got shape {X.shape}")
    X = check_embeddings(X, n_features=model_dim(model), name="queries")
    V = unit_rows(components_of(model, X, "partial"), zero="keep")
    return np.einsum("nsd,nd->ns", V, unit_rows(X, name="queries"))


def fit_score_thresholds(scores, Y) -> np.ndarray:
    """Per-concept threshold on scores that maximises F1 against labels.

    ``scores >= t_j`` predicts concept ``j``. Among thresholds with the best
    F1 the highest is returned. Concepts without a positive item get the
    median of the other thresholds (0.5 if no concept has positives).

    Parameters
    ----------
    scores : array-like of shape (n, S)
    Y : array-like of bool, shape (n, S)

    Returns
    -------
    thresholds : ndarray of shape (S,)
    """
    s = np.asarray(scores, dtype=np.float64)
    Y = np.asarray(Y, dtype=bool)
    if s.ndim != 2 or s.shape != Y.shape:
        raise ValueError(f"scores and Y must be 2-D with the same shape, got {s.shape} and {Y.shape}")
    if not np.all(np.isfinite(s)):
        raise ValueError("scores contain NaN or inf")
    n, S = s.shape
    out = np.full(S, np.nan)
    for j in range(S):
        P = int(Y[:, j].sum())
        if P == 0 or n == 0:
            continue
        order = np.argsort(-s[:, j], kind="stable")
        sv, yv = s[order, j], Y[order, j]
        tp = np.cumsum(yv)
        n_pred = np.arange(1, n + 1)
        # a threshold equal to sv[i] predicts every item with score >= sv[i]: the end of its tie group
        last = np.r_[sv[1:] != sv[:-1], True]
        f1 = np.where(last, 2 * tp / (P + n_pred), -1.0)
        best = np.flatnonzero(f1 >= f1.max() - TIE_TOL)[0]  # first in descending order: highest threshold
        out[j] = sv[best]
    finite = np.isfinite(out)
    fill = float(np.median(out[finite])) if finite.any() else 0.5
    out[~finite] = fill
    return out


def likely_concepts(scores, thresholds) -> list:
    """Concepts with ``scores[j] >= thresholds[j]``, best first; the best one if none passes."""
    s = np.asarray(scores, dtype=np.float64).ravel()
    t = np.asarray(thresholds, dtype=np.float64).ravel()
    if s.shape != t.shape:
        raise ValueError(f"{s.size} scores for {t.size} thresholds")
    order = np.argsort(-s, kind="stable")
    picked = [int(j) for j in order if s[j] >= t[j]]
    return picked or [int(order[0])]


# ---------------------------------------------------------------------- galleries
@dataclass
class Gallery:
    """One ranked list of pool items.

    Attributes
    ----------
    kind : {"concept", "unfiltered", "edited"}
    concept : int
        The concept this gallery (and its relevance marks) is about.
    rows : ndarray of int, shape (k,)
        Workspace rows, best first (empty when the component is zero); a pool without rows of ``X`` (shards):
        its positions (:attr:`slics_core.explorer.pool.Hits.rows` is None).
    scores : ndarray of shape (k,)
        Cosine of each item with the ranking vector.
    relevant_general, relevant_sub : ndarray of bool, shape (k,), or None
        Relevance marks (None where unknown; see the module docstring).
    note : str
        Why the gallery is empty, if it is.
    hits : slics_core.explorer.pool.Hits or None
        The search's hits (ids, thumbnails, labels) when the gallery comes from a pool search.
    """

    kind: str
    concept: int
    rows: np.ndarray
    scores: np.ndarray
    relevant_general: np.ndarray | None = None
    relevant_sub: np.ndarray | None = None
    note: str = ""
    hits: Hits | None = field(default=None, repr=False)

    @classmethod
    def of_hits(cls, kind, concept, hits, relevant_general=None, relevant_sub=None, note="") -> Gallery:
        """A gallery of a pool search's :class:`~slics_core.explorer.pool.Hits` (``rows``: their workspace rows,
        else their pool positions)."""
        rows = hits.positions if hits.rows is None else hits.rows
        return cls(kind, int(concept), rows, hits.scores, relevant_general, relevant_sub, note, hits)

    @property
    def precision_general(self) -> float:
        """Fraction of generally relevant items (nan when unknown or empty)."""
        return _precision(self.relevant_general)

    @property
    def precision_sub(self) -> float:
        """Fraction of sub-label relevant items (nan when unknown or empty)."""
        return _precision(self.relevant_sub)


def _precision(rel):
    if rel is None or len(rel) == 0:
        return float("nan")
    return float(np.mean(rel))


def gallery_relevance(rows, concept, Y=None, Z=None, sub_to_concept=None, query_sub=None):
    """General and sub-label relevance of retrieved rows for ``concept``.

    Returns
    -------
    relevant_general : ndarray of bool (k,) or None
        ``Y[row, concept]``; None without ``Y``.
    relevant_sub : ndarray of bool (k,) or None
        The row has one of the query's sub-labels of ``concept``; None when
        ``Z``/``sub_to_concept``/``query_sub`` are missing or the query has no
        sub-label of ``concept``.
    """
    rows = np.asarray(rows, dtype=int).ravel()
    gen = None if Y is None else np.asarray(Y, bool)[rows, int(concept)]
    sub = None
    if Z is not None and sub_to_concept is not None and query_sub is not None:
        L = np.flatnonzero(np.asarray(sub_to_concept) == int(concept))
        q = np.asarray(query_sub, bool).ravel()[L]
        if q.any():
            sub = (np.asarray(Z, bool)[rows][:, L] & q[None, :]).any(axis=1)
    return gen, sub


def hits_relevance(hits, concept, sub_to_concept=None, query_sub=None):
    """:func:`gallery_relevance` of a pool search's :class:`~slics_core.explorer.pool.Hits` (its label rows):
    ``(None, None)`` for a pool without labels."""
    k = len(hits)
    return gallery_relevance(np.arange(k), concept, hits.labels, hits.sub_labels, sub_to_concept, query_sub)


def concept_galleries(V, x, pool, concepts, k, *, sub_to_concept=None, query_sub=None):
    """Concept-filtered and unfiltered galleries of one query.

    Parameters
    ----------
    V : array-like of shape (S, d)
        The query's concept components (:func:`components_of_row`).
    x : array-like of shape (d,)
        The query itself (unfiltered ranking).
    pool : slics_core.explorer.pool.Pool
        The candidates (``ws.pool``, ``ws.quantized_pool``, or :func:`~slics_core.explorer.pool.memory_pool`);
        relevance is marked from its labels (none for a pool without labels).
    concepts : sequence of int
        Picked concepts, in display order.
    k : int
    sub_to_concept, query_sub :
        For sub-label relevance (see :func:`gallery_relevance`); optional.

    Returns
    -------
    pairs : list of (Gallery, Gallery)
        ``(concept gallery, unfiltered gallery)`` for every picked concept;
        the unfiltered list is the same for all, its marks are per concept.
        Each gallery carries its :class:`~slics_core.explorer.pool.Hits`.
    """
    V = np.asarray(V, dtype=np.float64)
    x = check_query(x, V.shape[1] if V.ndim == 2 else None)
    if V.ndim != 2:
        raise ValueError(f"V must be (S, d), got shape {V.shape}")
    concepts = [int(j) for j in concepts]
    for j in concepts:
        if not 0 <= j < V.shape[0]:
            raise ValueError(f"concept {j} out of range (0..{V.shape[0] - 1})")
    nonzero = [j for j in concepts if np.linalg.norm(V[j]) > ZERO_NORM]
    vecs = [x] + [V[j] for j in nonzero]
    found = pool.search(np.stack(vecs), k)
    uf_hits = found[0]
    by_concept = {j: found[i + 1] for i, j in enumerate(nonzero)}
    out = []
    for j in concepts:
        uf = Gallery.of_hits("unfiltered", j, uf_hits, *hits_relevance(uf_hits, j, sub_to_concept, query_sub))
        if j in by_concept:
            h = by_concept[j]
            cg = Gallery.of_hits("concept", j, h, *hits_relevance(h, j, sub_to_concept, query_sub))
        else:
            h = pool.empty()
            cg = Gallery.of_hits("concept", j, h, None if h.labels is None else np.zeros(0, bool), None,
                                 note="this query has no component along the concept (it is zero)")
        out.append((cg, uf))
    return out


def norms_and_cosine(a, b) -> tuple:
    """``(|a|, |b|, cos(a, b))`` of two vectors; the cosine is 0 when either is zero (Mix's caption)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    cos = float(unit_rows(a, zero="keep") @ unit_rows(b, zero="keep"))
    return float(np.linalg.norm(a)), float(np.linalg.norm(b)), cos


def mix_components(model, parts, *, mode="partial"):
    """Concept mixing: the sum of one concept's component from each of several queries.

    "This query's animal with that query's background": ``parts`` is a sequence of
    ``(x, concept, active)``: a preprocessed query ``x`` (d,), the concept whose component
    is taken from it, and, for ``mode="full"``, the concepts active in its joint
    decomposition (``None`` = just ``concept``). Components of different concepts lie in
    different cones, so their sum is what a scene with both parts would decompose into.

    Returns
    -------
    mixed : ndarray of shape (d,)
        The sum of the components.
    components : ndarray of shape (len(parts), d)
        Each query's component.

    Raises
    ------
    ValueError
        Fewer than two parts, or a query whose component along its concept is zero (the message
        names the part and the concept number).
    """
    parts = list(parts)
    if len(parts) < 2:
        raise ValueError("concept mixing needs two (query, concept) parts")
    comps = []
    for i, (x, concept, active) in enumerate(parts):
        concept = int(concept)
        act = None
        if mode == "full":
            act = sorted({concept, *(int(a) for a in (active if active is not None else ()))})
        V = components_of_row(model, x, mode, active=act)
        if not 0 <= concept < V.shape[0]:
            raise ValueError(f"concept {concept} out of range (0..{V.shape[0] - 1})")
        v = V[concept]
        if not np.linalg.norm(v) > ZERO_NORM:
            raise ValueError(f"part {i + 1}: the query has no component along concept {concept} (it is zero); "
                             "pick a concept the query shows")
        comps.append(v)
    comps = np.stack(comps)
    return comps.sum(axis=0), comps


def galleries_table(pairs, ids=None, concept_names=None, edited=()):
    """One row per shown item: concept, gallery, edit, rank, item_id, row, score, relevant_general, relevant_sub,
    and its gallery's P@k (``precision_general``, ``precision_sub``: the share of the gallery's items marked).

    Parameters
    ----------
    pairs : output of :func:`concept_galleries`
    ids : sequence of str, optional
        Item ids by workspace row (default: the row number), for galleries without hits; a gallery of a pool
        search takes its ids from its :class:`~slics_core.explorer.pool.Hits`.
    concept_names : sequence of str, optional
    edited : sequence of (str, :class:`slics_core.explorer.edits.EditedQuery`), optional
        Retrieve's "without j" / "more of j" galleries with their titles
        (:func:`slics_core.explorer.edits.edit_title`): each adds its edited gallery and the unfiltered one
        judged the same way, with ``edit`` the title (``"without animal"``, ``"more of animal (λ=1.5)"``;
        empty for the concept galleries) and ``relevant_general`` marking the items that meet its criterion
        (lack the concept for a removal, have it for a boost), as the page's borders and P@k do.

    Returns
    -------
    pandas.DataFrame
    """
    def name_of(j):
        return concept_names[j] if concept_names is not None else j

    recs = []

    def add(g, edit=""):
        p_gen, p_sub = g.precision_general, g.precision_sub
        for r in range(len(g.rows)):
            row = int(g.rows[r])
            recs.append({
                "concept": name_of(g.concept), "gallery": g.kind, "edit": edit, "rank": r + 1,
                "item_id": g.hits.ids[r] if g.hits is not None else ids[row] if ids else str(row),
                "row": row, "score": float(g.scores[r]),
                "relevant_general": None if g.relevant_general is None else bool(g.relevant_general[r]),
                "relevant_sub": None if g.relevant_sub is None else bool(g.relevant_sub[r]),
                "precision_general": p_gen, "precision_sub": p_sub,
            })

    for pair in pairs:
        for g in pair:
            add(g)
    for title, eq in edited:
        add(eq.gallery, title)
        add(eq.unfiltered, title)
    cols = ["concept", "gallery", "edit", "rank", "item_id", "row", "score", "relevant_general", "relevant_sub",
            "precision_general", "precision_sub"]
    return pd.DataFrame.from_records(recs, columns=cols)


def upload_thresholds(model, X_val, Y_val) -> np.ndarray:
    """Pre-selection thresholds of ``model``: :func:`fit_score_thresholds` of its
    :func:`concept_scores` on validation embeddings ``X_val`` with labels ``Y_val``
    (0.5 for every concept when there is no validation item)."""
    X_val = np.asarray(X_val)
    Y_val = np.asarray(Y_val, dtype=bool)
    if X_val.shape[0] == 0:
        return np.full(Y_val.shape[1] if Y_val.ndim == 2 else n_concepts(model), 0.5)
    return fit_score_thresholds(concept_scores(model, X_val), Y_val)


# ---------------------------------------------------------------------- generation
def generation_rows(x, V, concepts, concept_names=None):
    """What to draw for a query: the query itself, then each picked concept's non-zero component.

    Returns
    -------
    rows : ndarray of shape (m, d)
    titles : list of str
        ``"query"`` then the concept names.
    skipped : list of str
        Picked concepts whose component is zero (nothing to draw).
    """
    x = check_query(x)
    V = np.asarray(V, dtype=np.float64)
    rows, titles, skipped = [x], ["query"], []
    for j in concepts:
        name = concept_names[j] if concept_names is not None else str(j)
        if np.linalg.norm(V[int(j)]) > ZERO_NORM:
            rows.append(V[int(j)])
            titles.append(name)
        else:
            skipped.append(name)
    return np.stack(rows), titles, skipped


def image_strip(images, gap: int = 4, background=(255, 255, 255)):
    """The images side by side (top-aligned, ``gap`` pixels apart) as one RGB image."""
    images = [im.convert("RGB") for im in images]
    if not images:
        raise ValueError("no images to put in a strip")
    w = sum(im.width for im in images) + gap * (len(images) - 1)
    h = max(im.height for im in images)
    out = Image.new("RGB", (w, h), background)
    x = 0
    for im in images:
        out.paste(im, (x, 0))
        x += im.width + gap
    return out


def parse_concept_param(value, concept_names) -> list:
    """Concept names from a ``?c=a,b`` value; unknown names are dropped.

    A part names the concept spelled exactly so; otherwise the one concept that matches it ignoring case.
    Where several concepts differ only in case (``cat`` and ``Cat``), only the exact spelling names one.
    """
    if not value:
        return []
    names = [str(n) for n in concept_names]
    exact = set(names)
    folded: dict = {}
    for n in names:
        folded.setdefault(n.casefold(), []).append(n)
    out = []
    for part in str(value).split(","):
        part = part.strip()
        if part in exact:
            n = part
        else:
            matches = folded.get(part.casefold(), [])
            n = matches[0] if len(matches) == 1 else None
        if n is not None and n not in out:
            out.append(n)
    return out

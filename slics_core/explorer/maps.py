"""Maps of the learned subspaces for the app: t-SNE layouts of embeddings, components and atoms, and reading them.

Computations behind the Subspaces page (paper Fig. 2b/5): which points a map
shows, their t-SNE layout, their hover text, colour groups and search. Everything
returns plain arrays or tidy :class:`pandas.DataFrame` tables; drawing is left to
the page. The Atoms and Captions pages' tables are in
:mod:`slics_core.explorer.atom_tables`.

Choices (the paper is silent on them)
-------------------------------------
* **t-SNE geometry.** Embeddings, components and atoms are unit-normalised
  before t-SNE, so distances are cosine distances (retrieval ranks by cosine
  and components have smaller norms than the embeddings they come from).
  Zero components (a concept that gets no coefficient in the full
  disentanglement) have no direction and are left out. The layout is
  seeded, PCA-initialised, perplexity ``min(30, (N - 1) / 3)``, 500
  iterations, and runs single-threaded (``n_jobs=1`` and one BLAS thread): on
  a busy two-core machine that was about 5x faster than letting
  scikit-learn's OpenMP and BLAS threads compete.
* **t-SNE engine.** One rule (:func:`tsne_engine`): scikit-learn's Barnes-Hut up to
  :data:`OPENTSNE_MIN_POINTS` points, openTSNE's FFT-accelerated t-SNE above it (same settings: cosine,
  PCA init, 250 early-exaggeration iterations then the rest), chosen by measurement (the constant's
  comment). Without openTSNE, scikit-learn at every size and maps stay at :data:`SKLEARN_MAX_ITEMS` items
  (:func:`engine_note`). An openTSNE map places a new point without being recomputed (:func:`place_points`).
* **Which components.** An item contributes one component per concept it
  is labelled with (``Y``); partial components ``tilde-v_j`` are the
  projections on concept ``j``'s cone (eq. 3), full components ``v_j`` come
  from the NNLS over the item's labelled concepts (eq. 2).
* **Colour groups.** A component's concept is its own concept and its
  sub-label is the item's sub-label of that concept; an embedding with
  several concepts (or sub-labels) is put in the group ``"several"``; an item
  without one is ``"none"``; atoms have the sub-label ``"(atom)"``. The modes
  are named once, in :data:`COLOUR_MODES`; :func:`map_colours` gives groups
  and colours for every one of them. "first label" is FiftyOne's rule for a
  list field (its first value): an embedding takes its item's first concept
  in the workspace's concept order (an item with one shown concept keeps it: a
  map of some concepts colours by them). "has / lacks" splits the points on one
  concept: an item's points (embedding and components) have it when the item
  is labelled with it, an atom when it is one of that concept's atoms.
* **Pictures.** At most :data:`MAX_PICTURES` item embeddings are drawn as
  their thumbnails (:func:`picture_points`): all of them when they are that
  few, else the layout's box is cut into a 20 x 20 grid and each cell shows the embedding nearest its centre. A grid
  spreads the pictures over the whole map and keeps them from piling on one
  another (a random sample puts most of them in the dense clusters, on top of
  each other); components and atoms stay dots (a component's picture would be
  its item's, drawn again once per concept).
"""
from __future__ import annotations

import importlib.util

import numpy as np
import pandas as pd
from sklearn.manifold import TSNE
from threadpoolctl import threadpool_limits

from slics_core._validation import check_embeddings
from slics_core.explorer.safe_text import figure_text
from slics_core.extras import require
from slics_core.methods import check_mode, components_of
from slics_core.rows import ZERO_NORM, unit_rows

__all__ = [
    "KINDS",
    "sample_rows",
    "map_sample",
    "map_points",
    "tsne_layout",
    "tsne_fit",
    "tsne_embedding",
    "place_points",
    "tsne_engine",
    "max_map_items",
    "engine_note",
    "OPENTSNE_MIN_POINTS",
    "BACKGROUND_MIN_POINTS",
    "MAX_MAP_ITEMS",
    "subspace_map",
    "selected_point_ids",
    "point_text",
    "colour_groups",
    "match_points",
    "COLOUR_MODES",
    "map_colours",
    "colour_param",
    "parse_colour_param",
    "picture_points",
    "selection_summary",
]

#: Kinds of points in a subspace map.
KINDS = ("embedding", "component", "atom")
SEVERAL = "several"
NONE = "none"
ATOM_SUB = "(atom)"

# ---------------------------------------------------------------------- t-SNE maps
def sample_rows(rows, n_points, random_state=0):
    """At most ``n_points`` of ``rows``, drawn without replacement by a seeded generator, sorted.

    Parameters
    ----------
    rows : array-like of int
    n_points : int
        Cap (>= 1).
    random_state : int

    Returns
    -------
    rows : ndarray of int
    """
    rows = np.asarray(rows, dtype=np.int64).reshape(-1)
    if isinstance(n_points, bool) or not isinstance(n_points, (int, np.integer)) or n_points < 1:
        raise ValueError(f"n_points must be a positive int; got {n_points!r}.")
    if rows.size <= n_points:
        return np.sort(rows)
    rng = np.random.default_rng(random_state)
    return np.sort(rng.choice(rows, size=int(n_points), replace=False))

def map_sample(Y, rows, n_points, random_state=0, concepts=None, concept_names=None, include=None):
    """The items of a map: ``rows`` labelled with one of ``concepts`` (all if None), then :func:`sample_rows`.

    Parameters
    ----------
    Y : array-like of bool, shape (n, S)
    rows : array-like of int
    n_points : int
    random_state : int
    concepts : sequence of int or str, optional
    concept_names : list of str, optional
        Needed to give ``concepts`` by name.
    include : array-like of int, optional
        Rows always in the result (e.g. the current query; they may come
        from outside ``rows``) when they pass the concept filter; they count
        towards ``n_points`` and the rest is sampled.

    Returns
    -------
    rows : ndarray of int (sorted)
    """
    Yb = np.asarray(Y, dtype=bool)
    if Yb.ndim != 2:
        raise ValueError(f"Y must be 2-D (n, S); got shape {Yb.shape}.")
    sample_rows([], n_points)  # validates n_points
    rows = np.asarray(rows, dtype=np.int64).reshape(-1)
    if rows.size and (rows.min() < 0 or rows.max() >= Yb.shape[0]):
        raise ValueError(f"rows out of range (0..{Yb.shape[0] - 1}).")
    inc = np.unique(np.asarray([] if include is None else include, dtype=np.int64).reshape(-1))
    if inc.size and (inc.min() < 0 or inc.max() >= Yb.shape[0]):
        raise ValueError(f"include rows out of range (0..{Yb.shape[0] - 1}).")
    if concepts is not None:
        names = list(concept_names) if concept_names is not None else [f"concept {j}" for j in range(Yb.shape[1])]
        keep = _concept_indices(concepts, Yb.shape[1], names)
        rows = rows[Yb[rows][:, keep].any(axis=1)]
        inc = inc[Yb[inc][:, keep].any(axis=1)]
    if not inc.size:
        return sample_rows(rows, n_points, random_state)
    rest = np.setdiff1d(rows, inc)
    if n_points <= inc.size or not rest.size:
        return inc
    return np.union1d(inc, sample_rows(rest, n_points - inc.size, random_state))

def _group_name(names):
    if len(names) == 1:
        return names[0]
    return SEVERAL if names else NONE

def _concept_indices(concepts, n_concepts, concept_names):
    if concepts is None:
        return np.arange(n_concepts)
    out = []
    for c in concepts:
        if isinstance(c, str):
            if c not in concept_names:
                raise ValueError(f"unknown concept {c!r}; known: {list(concept_names)}")
            out.append(concept_names.index(c))
        else:
            c = int(c)
            if not 0 <= c < n_concepts:
                raise ValueError(f"concept index {c} out of range (0..{n_concepts - 1})")
            out.append(c)
    if not out:
        raise ValueError("concepts is empty: pick at least one concept (or None for all).")
    return np.unique(out)

def map_points(model, X, Y, rows, *, kinds=KINDS, component="partial", concepts=None, Z=None,
               sub_to_concept=None, concept_names=None, sub_names=None):
    """The points of a subspace map: vectors and a tidy description of each.

    Parameters
    ----------
    model : fitted SLiCS
    X : array-like of shape (n, d)
        Preprocessed embeddings of the workspace.
    Y : array-like of bool, shape (n, S)
        Concept labels (which components an item has).
    rows : array-like of int
        Items to show (rows of ``X``).
    kinds : iterable of {"embedding", "component", "atom"}
    component : {"partial", "full"}
        ``tilde-v_j`` (projection on the cone) or ``v_j`` (joint NNLS over
        the item's labelled concepts).
    concepts : sequence of int or str, optional
        Restrict to these concepts: items labelled with at least one of
        them, their components of these concepts, and these concepts' atoms.
    Z : array-like of bool, shape (n, L), optional
        Sub-labels.
    sub_to_concept : array-like of int, shape (L,), optional
        Concept of each sub-label (needed with ``Z``).
    concept_names, sub_names : list of str, optional

    Returns
    -------
    P : ndarray of shape (N, d)
        The vectors (not normalised).
    table : DataFrame
        One row per point: ``point`` (0..N-1), ``kind``, ``row`` (item row,
        -1 for atoms), ``atom`` (atom index, -1 otherwise), ``concept``,
        ``sub_label``, ``labels`` (all of the item's concepts, or the atom's),
        ``sub_labels`` (the item's sub-labels: all of them for an embedding,
        those of the component's concept for a component, ``""`` for atoms).
    """
    kinds = [kinds] if isinstance(kinds, str) else list(kinds)
    unknown = set(kinds) - set(KINDS)
    if unknown or not kinds:
        raise ValueError(f"kinds must be a non-empty subset of {KINDS}; got {kinds!r}.")
    check_mode(component)
    X = check_embeddings(X, n_features=model.n_features_in_, allow_zero_rows=True)
    Y = np.asarray(Y, dtype=bool)
    if Y.shape != (X.shape[0], model.n_concepts_):
        raise ValueError(f"Y must have shape {(X.shape[0], model.n_concepts_)}; got {Y.shape}.")
    S = model.n_concepts_
    names = list(concept_names) if concept_names is not None else [f"concept {j}" for j in range(S)]
    if len(names) != S:
        raise ValueError(f"{len(names)} concept names for {S} concepts.")
    if Z is not None:
        Z = np.asarray(Z, dtype=bool)
        sub_to_concept = np.asarray(sub_to_concept, dtype=int)
        if Z.shape[0] != X.shape[0] or sub_to_concept.shape != (Z.shape[1],):
            raise ValueError("Z must be (n, L) with sub_to_concept of length L.")
        sub_names = list(sub_names) if sub_names is not None else [f"sub {k}" for k in range(Z.shape[1])]
    keep = _concept_indices(concepts, S, names)
    keep_mask = np.zeros(S, dtype=bool)
    keep_mask[keep] = True
    rows = np.asarray(rows, dtype=np.int64).reshape(-1)
    if rows.size and (rows.min() < 0 or rows.max() >= X.shape[0]):
        raise ValueError(f"rows out of range (0..{X.shape[0] - 1}).")
    rows = rows[(Y[rows] & keep_mask).any(axis=1)]

    def subs_of(i, concept_set):
        if Z is None:
            return []
        return [sub_names[k] for k in np.flatnonzero(Z[i]) if sub_to_concept[k] in concept_set]

    vecs, recs = [], []
    all_labels = {int(i): ", ".join(names[j] for j in np.flatnonzero(Y[i])) for i in rows}
    every = set(range(S))
    if "embedding" in kinds and rows.size:
        kept = set(keep.tolist())
        for i in rows:
            cs = [names[j] for j in np.flatnonzero(Y[i] & keep_mask)]
            recs.append(("embedding", int(i), -1, _group_name(cs), _group_name(subs_of(i, kept)), all_labels[int(i)],
                         ", ".join(subs_of(i, every))))
        vecs.append(X[rows])
    if "component" in kinds and rows.size:
        V = components_of(model, X[rows], component, active=Y[rows])
        for a, i in enumerate(rows):
            for j in np.flatnonzero(Y[i] & keep_mask):
                v = V[a, j]
                if np.linalg.norm(v) <= ZERO_NORM:
                    continue
                subs = subs_of(i, {int(j)})
                recs.append(("component", int(i), -1, names[j], _group_name(subs), all_labels[int(i)],
                             ", ".join(subs)))
                vecs.append(v[None, :])
    if "atom" in kinds:
        groups = np.asarray(model.groups_)
        for k in np.flatnonzero(keep_mask[groups]):
            recs.append(("atom", -1, int(k), names[groups[k]], ATOM_SUB, names[groups[k]], ""))
            vecs.append(np.asarray(model.atoms_[k])[None, :])
    P = np.vstack(vecs) if vecs else np.zeros((0, X.shape[1]))
    table = pd.DataFrame(recs, columns=["kind", "row", "atom", "concept", "sub_label", "labels", "sub_labels"])
    table.insert(0, "point", np.arange(len(table)))
    return P, table

#: Layouts of more points than this use openTSNE's FFT-accelerated t-SNE when it is installed; up to it,
#: scikit-learn's Barnes-Hut. Measured (docs/performance.md, "t-SNE for large maps", one thread): at 2 000
#: points scikit-learn is as fast or faster (20.9 s vs 24.9 s; openTSNE's FFT grid has a fixed cost), at 5 000
#: openTSNE is 2.6x faster and at 20 000 12x (133.6 s vs 1 631.6 s).
OPENTSNE_MIN_POINTS = 2_000
#: The negative-gradient method of openTSNE layouts ("fft"; tests may use "bh", the same rule at small sizes).
OPENTSNE_GRADIENT = "fft"
#: Items a map may sample with openTSNE installed (the COCO training split), and without it.
MAX_MAP_ITEMS = 20_000
SKLEARN_MAX_ITEMS = 3_000
#: Layouts of more points than this are computed in the background (the page shows their progress): about 2 s
#: with scikit-learn at the measured ~1 s per 500 points (the 200-item default map, ~650 points: 0.95 s).
BACKGROUND_MIN_POINTS = 1_000
#: The two t-SNE engines.
ENGINES = ("scikit-learn", "openTSNE")


def open_tsne_installed() -> bool:
    """Whether openTSNE (the ``tsne`` extra) can be imported."""
    return importlib.util.find_spec("openTSNE") is not None


def tsne_engine(n_points) -> str:
    """The engine of a layout of ``n_points``: ``"openTSNE"`` above :data:`OPENTSNE_MIN_POINTS` when it is
    installed, else ``"scikit-learn"``."""
    return "openTSNE" if int(n_points) > OPENTSNE_MIN_POINTS and open_tsne_installed() else "scikit-learn"


def max_map_items() -> int:
    """The most items a map may sample: :data:`MAX_MAP_ITEMS` with openTSNE, :data:`SKLEARN_MAX_ITEMS` without."""
    return MAX_MAP_ITEMS if open_tsne_installed() else SKLEARN_MAX_ITEMS


def engine_note() -> str | None:
    """One line when openTSNE is missing (maps stay at :data:`SKLEARN_MAX_ITEMS` items), else None."""
    if open_tsne_installed():
        return None
    return (f"Maps are limited to {SKLEARN_MAX_ITEMS:,} items: openTSNE is not installed "
            '(pip install "slics-explorer[tsne]" for maps of up to 20,000 items).')


def _perplexity(n, perplexity):
    return float(min(perplexity, max(1.0, (n - 1) / 3.0)))


def tsne_fit(P, *, perplexity=30.0, max_iter=500, random_state=0, n_jobs=1, engine=None, progress=None):
    """2-D t-SNE of the rows of ``P`` in cosine geometry (rows unit-normalised; PCA init), and openTSNE's
    embedding object when openTSNE made it (it places new points: :func:`place_points`).

    Parameters
    ----------
    P : array-like of shape (N, d), N >= 3
        Non-zero vectors.
    perplexity : float
        Upper bound; lowered to ``(N - 1) / 3`` for small ``N``.
    max_iter : int
        Iterations (>= 250, scikit-learn's minimum), the first 250 with early exaggeration (both engines).
    random_state : int
    n_jobs : int
        Threads for the neighbour search, the gradient and BLAS.
    engine : one of :data:`ENGINES`, optional
        Default :func:`tsne_engine` of ``N``.
    progress : callable, optional
        ``progress(line, done, total)`` every 25 iterations (openTSNE only).

    Returns
    -------
    Y2 : ndarray of shape (N, 2)
    embedding : openTSNE.TSNEEmbedding or None
    """
    P = check_embeddings(P, name="points")
    if P.shape[0] < 3:
        raise ValueError(f"t-SNE needs at least 3 points; got {P.shape[0]} (show more items or kinds).")
    engine = tsne_engine(P.shape[0]) if engine is None else engine
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}; got {engine!r}.")
    U = unit_rows(P, name="points")
    perp = _perplexity(P.shape[0], perplexity)
    if engine == "scikit-learn":
        tsne = TSNE(n_components=2, perplexity=perp, init="pca", random_state=random_state,
                    max_iter=int(max_iter), n_jobs=n_jobs)
        with threadpool_limits(n_jobs):
            return tsne.fit_transform(U), None
    open_tsne = require("openTSNE", "maps of more than 2,000 points")
    every, calls = 25, [0]
    total = int(max_iter) // every

    def callback(iteration, error, embedding):
        calls[0] += 1
        if progress is not None and calls[0] <= total:  # the embedding keeps it: placing points calls it too
            progress(f"t-SNE of {P.shape[0]:,} points (openTSNE), iteration {calls[0] * every}/{int(max_iter)}",
                     min(calls[0], total), total)

    tsne = open_tsne.TSNE(n_components=2, perplexity=perp, initialization="pca", random_state=random_state,
                          early_exaggeration_iter=250, n_iter=max(0, int(max_iter) - 250), metric="cosine",
                          negative_gradient_method=OPENTSNE_GRADIENT, n_jobs=n_jobs, callbacks=callback,
                          callbacks_every_iters=every)
    with threadpool_limits(n_jobs):
        embedding = tsne.fit(U)
    xy = np.array(embedding, dtype=np.float64)  # a copy: placing points moves the embedding (below)
    return xy, _centred(embedding)


def _centred(embedding):
    """openTSNE's ``transform`` first moves the map's box centre to the origin (in place); it is done here once,
    and :func:`place_points` adds the offset back, so placed points are in the stored layout's coordinates."""
    centre = (np.max(embedding, axis=0) + np.min(embedding, axis=0)) / 2
    embedding -= centre
    embedding.slics_offset = np.asarray(centre, dtype=np.float64).reshape(2)
    return embedding


def tsne_layout(P, *, perplexity=30.0, max_iter=500, random_state=0, n_jobs=1, engine=None, progress=None):
    """The coordinates of :func:`tsne_fit` (same parameters): ``Y2``, shape (N, 2)."""
    return tsne_fit(P, perplexity=perplexity, max_iter=max_iter, random_state=random_state, n_jobs=n_jobs,
                    engine=engine, progress=progress)[0]


def tsne_embedding(P, xy, *, perplexity=30.0, random_state=0, n_jobs=1):
    """openTSNE's embedding object of a computed layout ``xy`` of the points ``P`` (e.g. read from a store),
    without optimising it again: the points' affinities (their nearest neighbours in cosine geometry, the
    cost of this call) and the stored coordinates. It places new points (:func:`place_points`)."""
    open_tsne = require("openTSNE", "placing a point on a stored map")
    P = check_embeddings(P, name="points")
    xy = np.asarray(xy, dtype=np.float64)
    if xy.shape != (P.shape[0], 2):
        raise ValueError(f"xy must have shape {(P.shape[0], 2)} for {P.shape[0]} points; got {xy.shape}.")
    U = unit_rows(P, name="points")
    with threadpool_limits(n_jobs):
        aff = open_tsne.affinity.PerplexityBasedNN(U, perplexity=_perplexity(P.shape[0], perplexity), metric="cosine",
                                                   n_jobs=n_jobs, random_state=random_state)
    return _centred(open_tsne.TSNEEmbedding(xy.copy(), aff, negative_gradient_method=OPENTSNE_GRADIENT,
                                            n_jobs=n_jobs, random_state=random_state))


def place_points(embedding, Q, n_jobs=1):
    """Places new vectors ``Q`` (rows, unit-normalised as the map's) into a computed openTSNE map without
    moving its points (``TSNEEmbedding.transform``: a new point starts at the median of its nearest map
    points and is optimised against the fixed map). Returns their coordinates in the layout's frame, shape
    (len(Q), 2). ``embedding``: from :func:`tsne_fit` or :func:`tsne_embedding`."""
    Q = check_embeddings(np.atleast_2d(Q), name="query")
    with threadpool_limits(n_jobs):
        placed = np.array(embedding.transform(unit_rows(Q, name="query")), dtype=np.float64)
    return placed + getattr(embedding, "slics_offset", 0.0)


def subspace_map(model, X, Y, rows, *, n_points=300, random_state=0, kinds=KINDS, component="partial",
                 concepts=None, Z=None, sub_to_concept=None, concept_names=None, sub_names=None,
                 max_iter=500, progress=None):
    """A t-SNE map of sampled items, their components and the atoms (paper Fig. 2b / Fig. 5).

    Parameters
    ----------
    model, X, Y, rows, kinds, component, concepts, Z, sub_to_concept, concept_names, sub_names
        As in :func:`map_points`.
    n_points : int
        Cap on the number of items (sampled from ``rows`` after the concept
        filter, see :func:`sample_rows`).
    random_state : int
        Seed of the sample and of t-SNE.
    max_iter : int
    progress : callable, optional
        ``progress(stage, done, total)``.

    Returns
    -------
    table : DataFrame
        :func:`map_points`'s table with the t-SNE coordinates ``x``, ``y``.
    """
    def report(stage, done):
        if progress is not None:
            progress(stage, done, 3)

    Yb = np.asarray(Y, dtype=bool)
    rows = map_sample(Yb, rows, n_points, random_state=random_state, concepts=concepts,
                      concept_names=concept_names)
    report("components", 0)
    P, table = map_points(model, X, Yb, rows, kinds=kinds, component=component, concepts=concepts, Z=Z,
                          sub_to_concept=sub_to_concept, concept_names=concept_names, sub_names=sub_names)
    report(f"t-SNE of {len(table)} points", 1)
    xy = tsne_layout(P, random_state=random_state, max_iter=max_iter)
    table = table.assign(x=xy[:, 0], y=xy[:, 1])
    report("done", 3)
    return table

def selected_point_ids(selection, n_points=None):
    """Point ids (``customdata[0]``) of a plotly selection as returned by ``st.plotly_chart``.

    A point's ``customdata`` is a list, a scalar, or (for customdata sent as
    a numpy typed array) a mapping ``{"0": v0, "1": v1, ...}``.

    Parameters
    ----------
    selection : mapping or None
        The chart's state (``{"selection": {"points": [...]}}``) or its
        ``selection`` part.
    n_points : int, optional
        Ids outside ``0..n_points-1`` are dropped (a stale selection).

    Returns
    -------
    ids : list of int
        Unique, in selection order.
    """
    if not selection:
        return []
    sel = selection.get("selection", selection) if hasattr(selection, "get") else None
    points = (sel or {}).get("points", []) if hasattr(sel or {}, "get") else []
    out = []
    for p in points or []:
        cd = p.get("customdata") if hasattr(p, "get") else None
        if cd is None:
            continue
        if isinstance(cd, (list, tuple, np.ndarray)):
            v = cd[0] if len(cd) else None
        elif hasattr(cd, "get"):  # a typed-array row arrives as {"0": v0, "1": v1, ...}
            v = cd.get("0", cd.get(0))
        else:
            v = cd
        try:
            v = int(v)
        except (TypeError, ValueError):
            continue
        if (n_points is None or 0 <= v < n_points) and v not in out:
            out.append(v)
    return out

# ---------------------------------------------------------------------- reading a map
#: Greek letter of each component mode in the page's texts (``tilde-v_j`` / ``v_j``).
COMPONENT_SYMBOL = {"partial": "ṽ", "full": "v"}
OTHER = "other"
OTHER_CONCEPTS = "other concepts"
MAX_COLOURS = 15


def point_text(table, component="partial", *, ids=None, html=True):
    """A human-readable description of every point of a map (hover texts, captions).

    ``"component ṽ of animal · item #123 · horse"``, ``"item #123 · animal, food · horse, pizza"``,
    ``"atom animal #2 (atom 17)"``: the kind, the item and its labels in words. An atom's
    ``#r`` is its rank among its concept's atoms (:func:`atom_labels`, the Atoms page's
    names); it is counted in ``table``, which holds every atom of a shown concept in
    index order (:func:`map_points`).

    Parameters
    ----------
    table : DataFrame
        :func:`map_points`'s table.
    component : {"partial", "full"}
        Which components the table holds (ṽ or v).
    ids : sequence of str, optional
        Item names (file names) by workspace row, shown after the row number.
    html : bool
        Concept names in ``<i>…</i>`` (plotly hover labels understand it), and every name, id and
        label HTML-escaped (plotly would draw a ``<a href>`` in one as a live link).

    Returns
    -------
    texts : list of str
        One per row of ``table``.
    """
    sym = COMPONENT_SYMBOL[check_mode(component)]

    def esc(value):
        return figure_text(value) if html else value

    def em(name):
        return f"<i>{esc(name)}</i>" if html else name

    atom_rank = table.assign(_a=table.kind == "atom").groupby(["concept", "_a"]).cumcount()
    out = []
    for k, r, a, c, labels, subs, rank in zip(table.kind, table.row, table.atom, table.concept, table["labels"],
                                             table["sub_labels"], atom_rank):
        if k == "atom":
            out.append(f"atom {em(c)} #{rank} (atom {a})")
            continue
        item = f"item #{r}" + (f" ({esc(ids[r])})" if ids is not None and str(ids[r]) != "" else "")
        if k == "component":
            parts = [f"component {sym} of {em(c)}", item] + ([esc(subs)] if subs else [])
        else:
            concepts = ", ".join(em(n) for n in labels.split(", ")) if labels else "no concept"
            parts = [item, concepts] + ([esc(subs)] if subs else [])
        out.append(" · ".join(parts))
    return out


def colour_groups(table, by="concept", *, concept=None, concept_names=None, Z=None, sub_to_concept=None,
                  sub_names=None, max_groups=MAX_COLOURS):
    """The colour group of every point of a map, and the groups in legend order.

    ``by="concept"``: a point's concept (an embedding with several shown concepts is
    ``"several"``, without one ``"none"``). ``by="sub-label"``: sub-labels of **one**
    ``concept`` only: its components take their item's sub-label in it, the embeddings of
    items with a sub-label in it take that sub-label (``"several"`` if more than one), its
    atoms are ``"(atom)"``, every other point is ``"other concepts"``. More than
    ``max_groups`` groups: the smallest are merged into ``"other"`` so that exactly
    ``max_groups`` remain (a palette has a few distinguishable colours, not 71).

    Parameters
    ----------
    table : DataFrame
        :func:`map_points`'s table.
    by : one of :data:`COLOUR_MODES`
    concept : str, optional
        The concept whose sub-labels colour the map (required with ``by="sub-label"``), or whose
        presence does (required with ``by="has concept"``: groups ``"has <c>"`` and ``"lacks <c>"``).
    concept_names : list of str, optional
        Legend order of the concepts (and their check); default: order of appearance.
    Z, sub_to_concept, sub_names
        Sub-labels as in :func:`map_points` (required with ``by="sub-label"``).
    max_groups : int
        At least 2.

    Returns
    -------
    groups : ndarray of str
        One per row of ``table``.
    order : list of str
        The groups present, named ones first (concept or sub-label order), then
        ``"several"``, ``"(atom)"``, ``"none"``, ``"other"``, ``"other concepts"``.
    """
    if isinstance(max_groups, bool) or not isinstance(max_groups, (int, np.integer)) or max_groups < 2:
        raise ValueError(f"max_groups must be an int >= 2; got {max_groups!r}.")
    if by == "concept":
        groups = table.concept.astype(str).to_numpy()
        named = list(concept_names) if concept_names is not None else list(dict.fromkeys(groups))
    elif by == "first label":
        groups = table.concept.astype(str).to_numpy().astype(object)
        for p, (k, c, labels) in enumerate(zip(table.kind, table.concept, table["labels"])):
            if k == "embedding" and c == SEVERAL:
                groups[p] = labels.split(", ")[0]
        groups = groups.astype(str)
        named = list(concept_names) if concept_names is not None else list(dict.fromkeys(groups))
    elif by == "has concept":
        if concept_names is None or concept not in list(concept_names):
            raise ValueError(f"pick one concept to colour by its presence; got {concept!r} "
                             f"(known: {None if concept_names is None else list(concept_names)}).")
        has = has_concept(table, concept)
        named = [f"has {concept}", f"lacks {concept}"]
        groups = np.where(has, named[0], named[1]).astype(str)
    elif by == "sub-label":
        if Z is None or sub_to_concept is None or sub_names is None:
            raise ValueError("colouring by sub-label needs the sub-labels (Z, sub_to_concept, sub_names).")
        if concept_names is None:
            raise ValueError("colouring by sub-label needs concept_names.")
        names = list(concept_names)
        if concept not in names:
            raise ValueError(f"pick one concept to colour by its sub-labels; got {concept!r} (known: {names}).")
        Z = np.asarray(Z, dtype=bool)
        sub_to_concept = np.asarray(sub_to_concept, dtype=int)
        j = names.index(concept)
        own = np.flatnonzero(sub_to_concept == j)
        named = [sub_names[k] for k in own]
        groups = np.full(len(table), OTHER_CONCEPTS, dtype=object)
        for p, (k, r, c, sub) in enumerate(zip(table.kind, table.row, table.concept, table.sub_label)):
            if k == "atom":
                groups[p] = ATOM_SUB if c == concept else OTHER_CONCEPTS
            elif k == "component":
                groups[p] = sub if c == concept else OTHER_CONCEPTS
            else:
                subs = [sub_names[q] for q in own[Z[r, own]]]
                groups[p] = _group_name(subs) if subs else OTHER_CONCEPTS
        groups = groups.astype(str)
    else:
        raise ValueError(f"by must be one of {list(COLOUR_MODES)}; got {by!r}.")
    special = [SEVERAL, ATOM_SUB, NONE, OTHER, OTHER_CONCEPTS]
    present = set(groups.tolist())
    order = [g for g in named if g in present and g not in special]
    order += [g for g in dict.fromkeys(groups.tolist()) if g not in order and g not in special]
    order += [g for g in special if g in present]
    if len(order) > max_groups:
        counts = pd.Series(groups).value_counts()
        ranked = sorted(order, key=lambda g: (-counts[g], order.index(g)))
        keep = set(ranked[: max_groups - 1])
        groups = np.where(np.isin(groups, list(keep)), groups, OTHER)
        order = [g for g in order if g in keep and g != OTHER] + [OTHER]
    return groups, order


def match_points(table, text):
    """Points whose labels contain ``text`` (case-insensitive), or the item ``#<row>``.

    Searched: the point's concept, its item's concepts (``labels``), its sub-labels.
    ``"#12"`` matches item 12's embedding and components. An empty ``text`` matches nothing.

    Returns
    -------
    mask : ndarray of bool, one per row of ``table``
    """
    text = str(text or "").strip().lower()
    if not text:
        return np.zeros(len(table), dtype=bool)
    if text.startswith("#") and text[1:].strip().isdigit():
        return (table.row == int(text[1:])).to_numpy()
    fields = (table.concept.astype(str) + "\n" + table["labels"].astype(str) + "\n"
              + table["sub_labels"].astype(str)).str.lower()
    return fields.str.contains(text, regex=False).to_numpy()



#: The map's colour modes (the page's "Colour by" radio lists them in this order), each with its rule in words.
COLOUR_MODES = {
    "concept": "the point's concept; an item with several shown concepts is “several”",
    "first label": "an item takes its first concept (FiftyOne's rule for a list field); components and atoms "
                   "their own concept",
    "has concept": "two colours: the points whose item has one chosen concept (and that concept's atoms), "
                   "and the rest",
    "sub-label": "the sub-labels of one chosen concept; the other concepts are grey",
}
#: 15 well-separated colours for the named groups (by position in the concept / sub-label order, so a
#: concept keeps its colour when others are filtered out); grey shades for the catch-all groups.
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf",
           "#bcbd22", "#393b79", "#e7ba52", "#637939", "#7b4173", "#3182bd", "#ad494a"]
GREYS = {SEVERAL: "#555555", ATOM_SUB: "#222222", NONE: "#aaaaaa", OTHER: "#888888", OTHER_CONCEPTS: "#cccccc"}
LACKS_GREY = "#cccccc"
#: At most this many points of a map are drawn as pictures (:func:`picture_points`).
MAX_PICTURES = 400


def colour_param(mode, concept=None):
    """The URL's ``colour`` value of a colour mode: ``"first label"``, ``"has concept:animal"``,
    ``"sub-label:food"`` (the modes that need a concept carry it after a colon)."""
    if mode not in COLOUR_MODES:
        raise ValueError(f"unknown colour mode {mode!r}; known: {list(COLOUR_MODES)}")
    return f"{mode}:{concept}" if mode in ("has concept", "sub-label") else mode


def parse_colour_param(text, concept_names):
    """``(mode, concept)`` of a ``colour`` value (:func:`colour_param`); one line naming the culprit otherwise."""
    mode, _, concept = str(text).partition(":")
    mode, concept = mode.strip(), concept.strip() or None
    if mode not in COLOUR_MODES:
        raise ValueError(f"colour={text!r} is not a colour mode ({', '.join(COLOUR_MODES)})")
    if mode in ("has concept", "sub-label"):
        if concept not in list(concept_names):
            raise ValueError(f"colour={text!r} needs a concept of this workspace after the colon, "
                             f"e.g. {mode}:{list(concept_names)[0]}")
        return mode, concept
    return mode, None


def has_concept(table, concept):
    """Whether each point's item is labelled with ``concept`` (atoms: whether the atom is one of its atoms)."""
    out = np.zeros(len(table), dtype=bool)
    for p, (k, c, labels) in enumerate(zip(table.kind, table.concept, table["labels"])):
        out[p] = (c == concept) if k == "atom" else concept in labels.split(", ")
    return out


def map_colours(table, by="concept", *, concept=None, concept_names=None, Z=None, sub_to_concept=None,
                sub_names=None, max_groups=MAX_COLOURS):
    """Colour group and colour of every point, for any mode of :data:`COLOUR_MODES`.

    Groups as :func:`colour_groups`; a named group (a concept or one of ``concept``'s sub-labels) keeps
    the palette colour of its position in the workspace's order, catch-all groups are grey, and
    ``"lacks <c>"`` is light grey beside ``"has <c>"`` in ``c``'s colour.

    Returns
    -------
    groups : ndarray of str
    order : list of str
    colours : dict
        Group -> ``"#rrggbb"``, one per group of ``order``.
    """
    groups, order = colour_groups(table, by, concept=concept, concept_names=concept_names, Z=Z,
                                  sub_to_concept=sub_to_concept, sub_names=sub_names, max_groups=max_groups)
    if by == "sub-label":
        j = list(concept_names).index(concept)
        reference = [s for s, c in zip(sub_names, np.asarray(sub_to_concept, dtype=int)) if c == j]
    else:
        reference = list(concept_names) if concept_names is not None else list(order)
    colours = {}
    for i, g in enumerate(order):
        if g in GREYS:
            colours[g] = GREYS[g]
        elif by == "has concept":
            colours[g] = PALETTE[reference.index(concept) % len(PALETTE)] if g.startswith("has ") else LACKS_GREY
        else:
            colours[g] = PALETTE[(reference.index(g) if g in reference else i) % len(PALETTE)]
    return groups, order, colours


def picture_points(table, max_pictures=MAX_PICTURES):
    """The item embeddings drawn as pictures: all of them when at most ``max_pictures``, else the one nearest
    the centre of each cell of a grid over the layout.

    Parameters
    ----------
    table : DataFrame
        A map's table with its coordinates ``x``, ``y``.
    max_pictures : int
        At most this many (the grid has ``floor(sqrt(max_pictures))`` cells a side).

    Returns
    -------
    points : ndarray of int
        Point ids, sorted.
    """
    if isinstance(max_pictures, bool) or not isinstance(max_pictures, (int, np.integer)) or max_pictures < 1:
        raise ValueError(f"max_pictures must be a positive int; got {max_pictures!r}.")
    emb = table[table.kind == "embedding"]
    if emb.empty:
        return np.zeros(0, dtype=np.int64)
    if len(emb) <= max_pictures:
        return np.sort(emb.point.to_numpy()).astype(np.int64)
    xy = emb[["x", "y"]].to_numpy(dtype=float)
    side = int(np.floor(np.sqrt(max_pictures)))
    lo, hi = xy.min(axis=0), xy.max(axis=0)
    span = np.where(hi > lo, hi - lo, 1.0)
    cell = np.minimum((xy - lo) / span * side, side - 1).astype(np.int64)
    centre = lo + (cell + 0.5) * span / side
    dist = ((xy - centre) ** 2).sum(axis=1)
    key = cell[:, 0] * side + cell[:, 1]
    order = np.lexsort((emb.point.to_numpy(), dist, key))
    first = order[np.r_[True, key[order][1:] != key[order][:-1]]]
    return np.sort(emb.point.to_numpy()[first]).astype(np.int64)


def selection_summary(table, point_ids, Y, concept_names):
    """How many of the picked items have each concept: ``"47 / 412 have animal"``, most frequent first.

    The picked items are the distinct items (``row``) of the picked points (an item picked through its
    embedding and its components counts once; atoms have no item).

    Parameters
    ----------
    table : DataFrame
        A map's table.
    point_ids : iterable of int
        Picked point ids (rows of ``table``).
    Y : array-like of bool, shape (n, S)
        The workspace's concept labels.
    concept_names : list of str

    Returns
    -------
    summary : DataFrame
        One row per concept: ``concept``, ``have``, ``items``, ``text``; sorted by ``have``
        (descending), then by concept order.
    """
    Y = np.asarray(Y, dtype=bool)
    names = list(concept_names)
    if Y.ndim != 2 or Y.shape[1] != len(names):
        raise ValueError(f"Y must be (n, {len(names)}) for {len(names)} concept names; got shape {Y.shape}.")
    ids = np.asarray(list(point_ids), dtype=np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= len(table)):
        raise ValueError(f"point ids out of range (0..{len(table) - 1}).")
    rows = table.row.to_numpy()[ids] if ids.size else np.zeros(0, dtype=np.int64)
    rows = np.unique(rows[rows >= 0])
    have = Y[rows].sum(axis=0).astype(int) if rows.size else np.zeros(len(names), dtype=int)
    out = pd.DataFrame({"concept": names, "have": have, "items": int(rows.size)})
    out["text"] = [f"{h} / {rows.size} have {c}" for h, c in zip(out.have, out.concept)]
    return out.iloc[np.lexsort((np.arange(len(names)), -have))].reset_index(drop=True)

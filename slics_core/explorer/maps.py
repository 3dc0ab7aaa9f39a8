"""Maps of the learned subspaces for the app: t-SNE layouts of embeddings, components and atoms, and reading them.

Computations behind the Subspaces page (paper Fig. 2b/5): which points a map
shows, their hover text and search (their colours: :mod:`slics_core.explorer.map_colours`). Everything
returns plain arrays or tidy :class:`pandas.DataFrame` tables; drawing is left to
the page; the t-SNE layouts are :mod:`slics_core.explorer.layouts`. The Atoms and Captions pages' tables are in
:mod:`slics_core.explorer.atom_tables`.

Choices (the paper is silent on them)
-------------------------------------
* **Which components.** An item contributes one component per concept it
  is labelled with (``Y``); partial components ``tilde-v_j`` are the
  projections on concept ``j``'s cone (eq. 3), full components ``v_j`` come
  from the NNLS over the item's labelled concepts (eq. 2).
* **Pictures.** At most :data:`MAX_PICTURES` item embeddings are drawn as
  their thumbnails (:func:`picture_points`): all of them when they are that
  few, else the layout's box is cut into a 20 x 20 grid and each cell shows the embedding nearest its centre. A grid
  spreads the pictures over the whole map and keeps them from piling on one
  another (a random sample puts most of them in the dense clusters, on top of
  each other); components and atoms stay dots (a component's picture would be
  its item's, drawn again once per concept).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from slics_core._validation import check_embeddings
from slics_core.explorer.layouts import tsne_layout
from slics_core.explorer.map_colours import ATOM_SUB, group_name
from slics_core.explorer.safe_text import figure_text
from slics_core.methods import check_mode, components_of
from slics_core.rows import ZERO_NORM

__all__ = [
    "KINDS",
    "sample_rows",
    "map_sample",
    "sample_words",
    "map_points",
    "subspace_map",
    "selected_point_ids",
    "point_text",
    "match_points",
    "picture_points",
    "selection_summary",
    "shown_components",
]

#: Kinds of points in a subspace map.
KINDS = ("embedding", "component", "atom")

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

def sample_words(asked, got, split, concepts=()) -> str | None:
    """One line when a map has fewer items than asked for (``got < asked``): the split (with the chosen
    concepts) has no more, so every one of them is on the map; None when the map has what was asked."""
    asked, got = int(asked), int(got)
    if got >= asked:
        return None
    which = f" with {', '.join(str(c) for c in concepts)}" if len(concepts) else ""
    return (f"{got:,} items on the map, not the {asked:,} asked for: the {split} split has no more items{which} "
            "(every one of them is shown).")


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

def shown_components(model, X, A, component="partial", *, concepts=None, concept_names=None):
    """The components a map shows for the rows of ``X`` with active concepts ``A`` (bool, (n, S)): ``(a, j, v)``
    for each row ``a`` and each of its active concepts ``j`` among ``concepts`` (all if None), ``v`` non-zero
    (:func:`map_points`' rule; :func:`slics_core.explorer.current_query.query_points` places a query's)."""
    S = model.n_concepts_
    names = list(concept_names) if concept_names is not None else [f"concept {j}" for j in range(S)]
    keep_mask = np.zeros(S, dtype=bool)
    keep_mask[_concept_indices(concepts, S, names)] = True
    A = np.asarray(A, dtype=bool)
    V = components_of(model, X, component, active=A)
    return [(a, int(j), V[a, j]) for a in range(X.shape[0]) for j in np.flatnonzero(A[a] & keep_mask)
            if np.linalg.norm(V[a, j]) > ZERO_NORM]


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
            recs.append(("embedding", int(i), -1, group_name(cs), group_name(subs_of(i, kept)), all_labels[int(i)],
                         ", ".join(subs_of(i, every))))
        vecs.append(X[rows])
    if "component" in kinds and rows.size:
        for a, j, v in shown_components(model, X[rows], Y[rows], component, concepts=concepts,
                                        concept_names=names):
            i = rows[a]
            subs = subs_of(i, {int(j)})
            recs.append(("component", int(i), -1, names[j], group_name(subs), all_labels[int(i)],
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


#: At most this many points of a map are drawn as pictures (:func:`picture_points`).
MAX_PICTURES = 400


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

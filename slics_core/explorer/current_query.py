"""The current query as embeddings: the one home of "which vector is the visitor's query, and what is it called".

A query is a workspace row, an uploaded image or a typed phrase (the shared state ``query``: a row, ``"upload"``
or ``"text:<phrase>"``, :data:`TEXT_PREFIX`), possibly edited on Retrieve ("without concept j", x − vⱼ; "more of
j", x + λṽⱼ: :mod:`slics_core.explorer.edits`). What the app keeps of it, and what :func:`current_query` reads:

* a row's embedding is the workspace's ``X[row]``;
* the last upload: a dict with its file ``name``, content hash ``sha`` and embedding ``x``;
* the *kept* query: a dict ``{"key": query_key, "x": embedding, "edits": {edit_key: edited embedding}}``, the
  query the picker last resolved (a phrase's embedding is only there: it needs the text encoder) and the edited
  embeddings Retrieve ranked by (:func:`edit_key`), valid while its key is the current query's.

:func:`query_points`: the vectors that stand for a query on a map (placed on it, not laid out with it).

Labels: ``"item 123"``, ``"upload: cat.png"``, ``"phrase: a red car"``, an edit adds
:func:`~slics_core.explorer.edits.edit_title` (``"item 123 without animal"``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from slics_core._validation import check_embeddings
from slics_core.explorer.edits import edit_title
from slics_core.explorer.maps import KINDS, shown_components
from slics_core.methods import check_mode

__all__ = ["TEXT_PREFIX", "UPLOAD", "QueryVector", "query_key", "query_label", "edit_key", "current_query",
           "query_points"]

#: The shared ``query`` value of a typed phrase is this prefix and the phrase.
TEXT_PREFIX = "text:"
#: The shared ``query`` value of the last upload.
UPLOAD = "upload"


@dataclass(frozen=True, eq=False)
class QueryVector:
    """One query vector: ``key`` identifies it in caches (the query's :func:`query_key`, then ``|`` and the
    :func:`edit_key` of an edit), ``label`` names it, ``x`` is the embedding (preprocessed like the workspace's
    ``X``), ``row`` the workspace row of an unedited row query (else None)."""

    key: str
    label: str
    x: np.ndarray
    row: int | None = None


def _row(query):
    if isinstance(query, (bool, np.bool_)) or not isinstance(query, (int, np.integer)):
        return None
    return int(query)


def _kind(query, upload=None):
    """``("row", r)``, ``("upload", upload dict)``, ``("text", phrase)`` or None (an upload without its dict,
    anything else): the one reading of a shared ``query`` value that :func:`query_key` and :func:`query_label`
    name."""
    r = _row(query)
    if r is not None:
        return "row", r
    if query == UPLOAD:
        return None if upload is None else ("upload", upload)
    if isinstance(query, str) and query.startswith(TEXT_PREFIX):
        return "text", query[len(TEXT_PREFIX):]
    return None


#: How :func:`query_key` and :func:`query_label` name each kind of :func:`_kind`.
_KEYS = {"row": lambda r: f"row:{r}", "upload": lambda u: f"upload:{u['sha']}", "text": lambda p: TEXT_PREFIX + p}
_LABELS = {"row": lambda r: f"item {r}", "upload": lambda u: f"upload: {u['name']}", "text": lambda p: f"phrase: {p}"}


def query_key(query, upload=None) -> str | None:
    """The cache key of a query state: ``"row:<r>"``, ``"upload:<sha>"`` (None without ``upload``) or the
    ``"text:<phrase>"`` itself; None for anything else."""
    kind = _kind(query, upload)
    return None if kind is None else _KEYS[kind[0]](kind[1])


def query_label(query, upload=None) -> str | None:
    """What a query is called on a map: ``"item 123"``, ``"upload: cat.png"``, ``"phrase: a red car"``."""
    kind = _kind(query, upload)
    return None if kind is None else _LABELS[kind[0]](kind[1])


def edit_key(edit: str, concept_name: str, strength: float = 1.0) -> str:
    """The key of an edited query in the kept query's ``edits``: ``"remove:animal:1"``, ``"boost:animal:1.5"``."""
    return f"{edit}:{concept_name}:{float(strength):g}"


def current_query(query, X, *, upload=None, kept=None, edits=(), edit_fn=None) -> list:
    """The current query's vectors: the query itself, then each asked edit the kept query holds (or, for a row
    query, that ``edit_fn`` computes: a link with ``rm=`` / ``boost=`` opened on a page other than Retrieve).

    Parameters
    ----------
    query :
        The shared query state: a row of ``X`` (int), ``"upload"`` or ``"text:<phrase>"``.
    X : array-like of shape (n, d)
        The workspace's embeddings.
    upload : dict, optional
        The last upload (``name``, ``sha``, ``x``).
    kept : dict, optional
        The kept query (``key``, ``x``, ``edits``; see the module docstring).
    edits : sequence of (edit, concept name, strength)
        The edits asked for (the shared ``rm`` / ``boost``).
    edit_fn : callable, optional
        ``edit_fn(edit, concept name, strength, x, row) -> edited x``: an asked edit of a row query that the kept
        query does not hold (Retrieve has not run on it this session) is computed with it
        (:func:`slics_core.explorer.edits.edit_query` with the page's model and the row's labels).

    Returns
    -------
    list of QueryVector
        Empty when there is no query or its vector is not known here (a row out of range, no upload, a phrase
        the picker has not embedded); an edit Retrieve has not computed for this query is left out, unless
        ``edit_fn`` computes it.
    """
    key, label = query_key(query, upload), query_label(query, upload)
    if key is None:
        return []
    r = _row(query)
    kept = kept if kept is not None and kept.get("key") == key else None
    if r is not None:
        if not 0 <= r < len(X):
            return []
        x = np.asarray(X[r], dtype=np.float64)
    elif query == UPLOAD:
        x = np.asarray(upload["x"], dtype=np.float64)
    elif kept is not None:
        x = np.asarray(kept["x"], dtype=np.float64)
    else:
        return []
    out = [QueryVector(key, label, x.reshape(-1), r)]
    for edit, name, strength in edits:
        ek = edit_key(edit, name, strength)
        if kept is not None and ek in kept.get("edits", {}):
            xe = kept["edits"][ek]
        elif edit_fn is not None and r is not None:
            xe = edit_fn(edit, name, strength, x, r)
        else:
            continue
        out.append(QueryVector(f"{key}|{ek}", f"{label} {edit_title(edit, name, strength)}",
                               np.asarray(xe, dtype=np.float64).reshape(-1)))
    return out


def query_points(model, x, active, *, kinds=KINDS, component="partial", concepts=None, concept_names=None):
    """The vectors that stand for a query ``x`` (not one of the map's items) on a map of ``kinds``, to be placed
    on its layout (:func:`slics_core.explorer.layouts.place_points` / ``place_near``): its embedding when the map
    shows item embeddings; else its components of its ``active`` concepts among the map's ``concepts``, taken as
    :func:`~slics_core.explorer.maps.map_points` takes an item's (same mode, same rule:
    :func:`~slics_core.explorer.maps.shown_components`); none on a map of atoms only.

    Parameters
    ----------
    model, kinds, component, concepts, concept_names :
        The map's (as in :func:`~slics_core.explorer.maps.map_points`).
    x : array-like of shape (d,)
        The query, preprocessed like the workspace's embeddings.
    active : array-like of bool, shape (S,)
        The query's concepts (its labels, or the concepts picked for it).

    Returns
    -------
    Q : ndarray of shape (m, d)
    what : list of str
        ``"embedding"`` or the concept name of each component.
    """
    kinds = [kinds] if isinstance(kinds, str) else list(kinds)
    check_mode(component)
    x = check_embeddings(np.atleast_2d(x), n_features=model.n_features_in_, name="query", allow_zero_rows=True)
    if "embedding" in kinds:
        return x[:1], ["embedding"]
    S = model.n_concepts_
    names = list(concept_names) if concept_names is not None else [f"concept {j}" for j in range(S)]
    A = np.asarray(active, dtype=bool).reshape(1, -1)
    if A.shape[1] != S:
        raise ValueError(f"active must have {S} entries (one per concept); got {A.shape[1]}.")
    if "component" not in kinds or not A.any():
        return np.zeros((0, x.shape[1])), []
    shown = shown_components(model, x[:1], A, component, concepts=concepts, concept_names=names)
    if not shown:
        return np.zeros((0, x.shape[1])), []
    return np.vstack([v for _, _, v in shown]), [names[j] for _, j, _ in shown]

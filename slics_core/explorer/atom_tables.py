"""Tables of the Atoms and Captions pages: atom usage, the Fig. 6 heatmaps and the word captions of Table 1.

Everything returns plain arrays or tidy :class:`pandas.DataFrame` tables;
drawing is left to the pages.

Choices (the paper is silent on them)
-------------------------------------
* **Top words of an atom.** For unit-norm prepared word embeddings ``w`` and
  a unit atom ``b`` the one-atom NNLS error is ``1 - max(0, cos(w, b))^2``,
  so ranking by that error (the paper's caption rule applied to one atom)
  and ranking by the cosine are the same for every word with a positive
  cosine; the table reports both.
* **Images that use an atom.** Coefficients from ``model.transform`` (NNLS
  restricted to each item's labelled concepts when labels are given).
* **Dictionary health** (:func:`atom_health`, :func:`health_summary`; rules in
  :mod:`slics_core.analysis`). Frequencies and mean coefficients come from the NNLS codes
  on each item's labelled concepts (``model.transform(X, Y)``) of the training split, the
  codes the dictionary was fitted with; the Evaluate page's active atoms per item and
  ``cos(x, x̂)`` come from the same kind of codes on the validation split.
* **Label profile** (:func:`concept_energy`, then :func:`profile_table`). The items carrying one label (a
  concept or a sub-label) are decomposed *without* their labels: ``v_j`` from the joint NNLS of each item
  over every concept's atoms (:func:`slics_core.methods.components_of`, ``mode="full"`` with every concept active, i.e.
  ``transform(X, None)``), so a concept the label never names still shows when its atoms carry part of
  the items (a spurious concept). Each concept's bar is the mean over the items of
  ``‖v_j‖² / ‖x̂‖²`` (``x̂ = Σ_j v_j``; an item with ``x̂ = 0`` counts 0; the shares need not sum to 1, the
  components are not orthogonal); beside it ``P(concept j | label)`` from the labels, and the concept's
  words by the caption rule (:func:`slics_core.captions.word_captions`, as the Captions page).
  Without labels the components of one item can cancel (their ratios can sum to far more than 1), and
  concepts whose atoms carry much energy on *every* item top every label's profile. So a profile also gives
  each concept's ``share`` ``‖v_j‖² / Σ_k ‖v_k‖²`` (sums to 1 per item, so how much an item cancels does
  not matter) and its ``lift``: the label's mean share over the mean share of every item given (the
  workspace's labelled pool), 1 where the label changes nothing; the page's bars show the lift (measured on
  the emoji world: docs/app.md, "Label profile"). A lift is read against a null: the 2.5-97.5 % band of
  the lift of 200 random item subsets of the label's size (seeded; :func:`profile_table`'s ``lift_lo`` /
  ``lift_hi``); a lift inside it is what any subset that size gives (small labels have wide bands).
* **Co-occurrence coefficients.** As in the paper, non-negative OMP
  (:func:`slics_core.sparse_coding.nn_omp`) without labels on the
  validation split; its sparsity (atoms per item) defaults to ``d0``. On the
  emoji world the within-group / between-group co-occurrence ratio falls as
  the sparsity grows (2.3 at 2 atoms, 1.4 at ``d0`` = 10, 1.15 at 20); the
  Atoms page lets the user change it.
"""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from slics_core._validation import check_embeddings
from slics_core.analysis import (
    HEALTH_FLAGS,
    MISPLACED_LEVEL,
    atom_cooccurrence,
    atom_cosine,
    dictionary_health,
    firing,
    reconstruction_cosine,
)
from slics_core.captions import atom_word_ranking, prepare_text_embeddings, word_captions
from slics_core.labels import check_sub_to_concept
from slics_core.methods import components_of
from slics_core.retrieval import top_k
from slics_core.search_index import merge_top
from slics_core.sparse_coding import nn_omp
from slics_core.uncertainty import N_SUBSETS, subset_mean_band

__all__ = [
    "item_codes",
    "stream_atom_top_items",
    "codes_top_items",
    "top_items_table",
    "MAX_TOP_ITEMS",
    "atom_top_words",
    "atom_heatmaps",
    "atom_health",
    "health_counts",
    "misplaced_threshold_words",
    "health_summary",
    "health_histogram",
    "atom_labels",
    "group_layout",
    "matrix_table",
    "caption_table",
    "concept_energy",
    "label_options",
    "profile_table",
    "concept_words",
]


def default_sparsity(model) -> int:
    """The default OMP atoms per item of the Atoms page: the most atoms any concept has (``max_j M_j``)."""
    return int(np.bincount(np.asarray(model.groups_)).max())


def item_codes(model, X, Y=None):
    """Coefficients ``(n, M)`` of items on the dictionary (``model.transform``; ``Y`` restricts concepts)."""
    return np.asarray(model.transform(X, Y))

#: Most items kept per atom by :func:`stream_atom_top_items`.
MAX_TOP_ITEMS = 60


def stream_atom_top_items(model, blocks, k=MAX_TOP_ITEMS):
    """Per atom, the ``k`` items with the largest coefficient, over blocks of items (bounded memory).

    The streaming form of :func:`codes_top_items` for a pool that is never in memory at once (a sharded
    workspace): each block is coded with :func:`item_codes` (no labels: every concept) and only the
    best ``k`` per atom are kept between blocks.

    Parameters
    ----------
    model : fitted dictionary model
    blocks : iterable of (start, X)
        ``X`` (b, d) preprocessed items at positions ``start .. start + b - 1``.
    k : int
        At most :data:`MAX_TOP_ITEMS`.

    Returns
    -------
    positions : ndarray of int64, shape (M, k)
        Best first; ties by the smaller position; ``-1`` past the items with a positive coefficient.
    coefficients : ndarray of float64, shape (M, k)
        ``0`` where ``positions`` is ``-1``.
    """
    k = int(k)
    if not 1 <= k <= MAX_TOP_ITEMS:
        raise ValueError(f"k must be between 1 and {MAX_TOP_ITEMS}; got {k}.")
    M = int(np.shape(model.atoms_)[0])
    best_i = np.zeros((M, 0), dtype=np.int64)
    best_c = np.zeros((M, 0), dtype=np.float64)
    for start, X in blocks:
        C = np.asarray(item_codes(model, X), dtype=np.float64).T  # (M, b)
        i, c = top_k(C, min(k, C.shape[1]))
        best_i, best_c = merge_top(best_i, best_c, i + int(start), c, k)
    return _kept_top(best_i, best_c, k)


def codes_top_items(codes, k=MAX_TOP_ITEMS):
    """:func:`stream_atom_top_items`'s arrays (per atom the ``k`` items with the largest coefficient, ties by the
    smaller position) of codes already computed (:func:`item_codes` of a pool in memory)."""
    k = int(k)
    if not 1 <= k <= MAX_TOP_ITEMS:
        raise ValueError(f"k must be between 1 and {MAX_TOP_ITEMS}; got {k}.")
    C = np.asarray(codes, dtype=np.float64).T  # (M, n)
    i, c = top_k(C, min(k, C.shape[1])) if C.shape[1] else (np.zeros((C.shape[0], 0), np.int64), C)
    return _kept_top(np.asarray(i, np.int64), np.asarray(c, np.float64), k)


def _kept_top(best_i, best_c, k):
    """Top arrays padded to ``k`` columns, ``-1`` / ``0`` where the coefficient is not positive."""
    pad = k - best_i.shape[1]
    if pad > 0:
        best_i = np.pad(best_i, ((0, 0), (0, pad)), constant_values=-1)
        best_c = np.pad(best_c, ((0, 0), (0, pad)))
    keep = best_c > 0
    return np.where(keep, best_i, -1), np.where(keep, best_c, 0.0)


def top_items_table(positions, coefficients, atom, k=12):
    """The table of one atom's top items (``rank``, ``row``, ``coefficient``; only positive coefficients, ties by
    position) from :func:`stream_atom_top_items`'s or :func:`codes_top_items`' arrays; ``row`` is the pool
    position."""
    atom = int(atom)
    if not 0 <= atom < positions.shape[0]:
        raise ValueError(f"atom {atom} out of range (0..{positions.shape[0] - 1}).")
    p, c = positions[atom], coefficients[atom]
    keep = np.flatnonzero(p >= 0)[: int(k)]
    return pd.DataFrame({"rank": np.arange(1, keep.size + 1), "row": p[keep].astype(np.int64),
                         "coefficient": c[keep]})


def atom_top_words(atom, word_embeddings, words, k=10):
    """Words closest to one atom (see the module notes: cosine == one-atom NNLS ranking).

    Parameters
    ----------
    atom : array-like of shape (d,)
    word_embeddings : array-like of shape (V, d)
        Prepared word embeddings (:func:`slics_core.captions.prepare_text_embeddings`).
    words : sequence of str
    k : int

    Returns
    -------
    table : DataFrame
        ``rank``, ``word``, ``cosine``, ``nnls_error`` (of the word, unit
        normalised, by the atom alone), best first; ties by vocabulary order.
    """
    b = np.asarray(atom, dtype=np.float64).reshape(-1)
    W = check_embeddings(word_embeddings, n_features=b.size, name="word_embeddings", allow_zero_rows=True)
    words = list(words)
    if len(words) != W.shape[0]:
        raise ValueError(f"{len(words)} words for {W.shape[0]} word embeddings.")
    index, cos = atom_word_ranking(b, W, k)
    order, cos = index[0], cos[0]
    err = 1.0 - np.maximum(cos, 0.0) ** 2
    return pd.DataFrame({"rank": np.arange(1, order.size + 1), "word": [words[i] for i in order],
                         "cosine": cos, "nnls_error": err})

# ---------------------------------------------------------------------- heatmaps
def atom_heatmaps(model, X, n_nonzero=None):
    """Fig. 6 matrices: co-occurrence of active atoms (non-negative OMP codes, no labels) and atom cosines.

    Parameters
    ----------
    model : fitted SLiCS
    X : array-like of shape (n, d)
        Items to code (the paper uses the validation split).
    n_nonzero : int, optional
        OMP atoms per item; default ``d0`` (the largest number of atoms of a concept).

    Returns
    -------
    result : dict
        ``cooccurrence`` (M, M) (:func:`slics_core.analysis.atom_cooccurrence`),
        ``cosine`` (M, M) and ``summary`` (:func:`slics_core.analysis.atom_cosine`),
        ``codes`` (n, M), ``n_nonzero``, ``usage`` (M,) fraction of items using each atom. ``summary``
        also holds ``cooc_within_mean`` / ``cooc_between_mean``: mean co-occurrence over pairs of
        distinct atoms of the same concept / of different concepts (NaN entries, unused atoms, ignored).
    """

    if n_nonzero is None:
        n_nonzero = default_sparsity(model)
    n_nonzero = int(n_nonzero)
    if n_nonzero < 1:
        raise ValueError(f"n_nonzero must be >= 1; got {n_nonzero}.")
    codes = nn_omp(X, model.atoms_, n_nonzero_coefs=n_nonzero)
    C = atom_cooccurrence(codes)
    cos, summary = atom_cosine(model.atoms_, model.groups_)
    g = np.asarray(model.groups_)
    same = g[:, None] == g[None, :]
    off = ~np.eye(g.size, dtype=bool)
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN: no atom pair used
        summary = dict(summary, cooc_within_mean=float(np.nanmean(C[same & off])),
                       cooc_between_mean=float(np.nanmean(C[~same])))
    return {"cooccurrence": C, "cosine": cos, "summary": summary, "codes": codes, "n_nonzero": n_nonzero,
            "usage": (codes > 0).mean(axis=0)}

# ---------------------------------------------------------------------- health
def atom_health(model, X, Y, concept_names=None):
    """:func:`slics_core.analysis.dictionary_health` with a leading ``label`` column (``"<concept> #<k>"``,
    :func:`atom_labels`) and ``nearest_other_label`` (the atom behind ``nearest_other``; empty when none).

    ``concept_names`` default to the model's own ``concept_names_``.
    """
    table = dictionary_health(model, X, Y)
    names = list(concept_names if concept_names is not None else model.concept_names_)
    labels = atom_labels(model.groups_, names)
    table.insert(0, "label", labels)
    table["nearest_other_label"] = [labels[b] if b >= 0 else "" for b in table["nearest_other_atom"]]
    table["flags"] = [list(f) for f in table["flags"]]
    return table


def health_counts(table) -> dict:
    """``{flag: number of atoms carrying it}`` for every flag of :data:`slics_core.analysis.HEALTH_FLAGS`."""
    return {f: int(sum(f in flags for flags in table["flags"])) for f in HEALTH_FLAGS}


def health_note(counts, n_atoms) -> str | None:
    """A sentence for a flag that says more about the whole dictionary than about an atom, else None: *misplaced*
    on most atoms (more than half), or any flag on every atom.

    *misplaced*'s null is shaped like the dictionary (:func:`slics_core.analysis.nearest_other_null`), so most atoms
    carry it only when the concepts' atoms mix more than the dictionary's own spread explains.
    """
    misplaced = counts.get("misplaced", 0)
    everywhere = [f for f in HEALTH_FLAGS if n_atoms and counts.get(f, 0) == n_atoms and f != "misplaced"]
    notes = []
    if n_atoms and 2 * misplaced > n_atoms:
        notes.append("Most atoms are *misplaced* (an atom of another concept is nearer, by signed cos, than any "
                     "of their own, and nearer than in random dictionaries shaped like this one): the concepts' "
                     "atoms mix, so the flag describes the dictionary more than a faulty atom.")
    if everywhere:
        notes.append(f"Every atom carries {', '.join(f'*{f}*' for f in everywhere)}: the flag describes the whole "
                     "dictionary.")
    return " ".join(notes) or None


def misplaced_threshold_words(groups, cuts) -> str:
    """What *misplaced*'s null means for this dictionary, in one sentence: the cos that the nearest of as many
    atoms as the other concepts hold passes with chance :data:`MISPLACED_LEVEL` in random dictionaries drawn
    like this one; ``cuts`` is the health table's ``nearest_other_cut`` (one per atom,
    :func:`slics_core.analysis.nearest_other_cut`); a range when the concepts' sizes differ."""
    g = np.asarray(groups).reshape(-1)
    cuts = np.asarray(cuts, dtype=np.float64).reshape(-1)
    if cuts.shape != g.shape:
        raise ValueError(f"cuts must have one entry per atom ({g.size}); got shape {cuts.shape}.")
    others = g.size - np.bincount(g)[g] if g.size else g
    have = (others > 0) & np.isfinite(cuts)
    if not have.any():
        return ""
    m, t = others[have], cuts[have]
    many = f"{m.min()}" if m.min() == m.max() else f"{m.min()}–{m.max()}"
    cut = f"{t.min():.2f}" if f"{t.min():.2f}" == f"{t.max():.2f}" else f"{t.min():.2f}–{t.max():.2f}"
    return (f"Here ({g.size} atoms) the nearest of {many} atoms of a random dictionary drawn from a Gaussian fitted "
            f"to this one passes cos {cut} in {MISPLACED_LEVEL:.0%} of draws.")


def health_histogram(frequency, n_bins=20):
    """Bins of ``log10(frequency)`` over the atoms that fire (a dead atom has no logarithm).

    Returns
    -------
    result : dict
        ``edges`` (n_bins + 1,) in log10 units, ``counts`` (n_bins,), ``n_dead`` (atoms left out).
    """
    f = np.asarray(frequency, dtype=np.float64)
    alive = f[f > 0]
    if alive.size == 0:
        return {"edges": np.zeros(0), "counts": np.zeros(0, dtype=int), "n_dead": int(f.size)}
    lo, hi = float(np.log10(alive.min())), float(np.log10(alive.max()))
    if hi - lo < 1e-9:
        lo, hi = lo - 0.5, hi + 0.5
    counts, edges = np.histogram(np.log10(alive), bins=int(n_bins), range=(lo, hi))
    return {"edges": edges, "counts": counts, "n_dead": int(f.size - alive.size)}


def health_summary(table, model, X_eval, Y_eval):
    """Evaluate's one line per dictionary: the flag counts of its health table (``table``: :func:`atom_health` of
    the training split, the Atoms page's table) and, on ``X_eval`` (the validation split), the mean number of
    active atoms per item and the mean ``cos(x, x̂)``, both from the NNLS codes on the items' labelled concepts.

    Returns
    -------
    summary : dict
        ``counts`` (:func:`health_counts`), ``n_atoms``, ``active_per_item``, ``mean_cos``, ``n_eval``.
    """
    counts = health_counts(table)
    codes = item_codes(model, X_eval, Y_eval)
    cos = reconstruction_cosine(X_eval, codes, model.atoms_)
    return {"counts": counts, "n_atoms": int(model.atoms_.shape[0]),
            "active_per_item": float(firing(codes).sum(axis=1).mean()) if len(codes) else float("nan"),
            "mean_cos": float(cos.mean()) if cos.size else float("nan"), "n_eval": int(len(codes))}


def atom_labels(groups, concept_names):
    """``"<concept> #<k>"`` for every atom: its concept and its rank among that concept's atoms."""
    g = np.asarray(groups).reshape(-1)
    rank = np.zeros(g.size, dtype=int)
    for c in np.unique(g):
        idx = np.flatnonzero(g == c)
        rank[idx] = np.arange(idx.size)
    return [f"{concept_names[c]} #{r}" for c, r in zip(g, rank)]

def group_layout(groups):
    """Ordering and drawing positions of atoms grouped by concept.

    Parameters
    ----------
    groups : array-like of int, shape (M,)

    Returns
    -------
    layout : dict
        ``order`` (M,) stable permutation putting atoms in concept order
        (identity when already grouped); ``boundaries`` positions ``k - 0.5``
        on the ordered axis between consecutive groups; ``centres`` mid
        position of each group; ``concepts`` the concept of each group.
    """
    g = np.asarray(groups).reshape(-1)
    if g.size == 0:
        raise ValueError("groups is empty.")
    order = np.argsort(g, kind="stable")
    gs = g[order]
    change = np.flatnonzero(gs[1:] != gs[:-1]) + 1
    starts = np.concatenate([[0], change])
    ends = np.concatenate([change, [gs.size]])
    return {"order": order, "boundaries": change - 0.5, "centres": (starts + ends - 1) / 2.0,
            "concepts": gs[starts]}

def matrix_table(M, labels):
    """A square matrix as a CSV-ready table: an ``atom`` column then one column per atom label."""
    M = np.asarray(M)
    labels = [str(s) for s in labels]
    if M.shape != (len(labels), len(labels)):
        raise ValueError(f"matrix of shape {M.shape} for {len(labels)} labels.")
    df = pd.DataFrame(M, columns=labels)
    df.insert(0, "atom", labels)
    return df

# ---------------------------------------------------------------------- captions
def caption_table(models, concept_names, words, word_embeddings, n_words=5, *, ridge=0.0, prepared=False):
    """Word captions of every concept subspace, methods side by side (paper Table 1).

    Parameters
    ----------
    models : dict
        ``{method name: fitted SLiCS}`` (e.g. S-SLiCS and U-SLiCS with one ``d0``).
    concept_names : list of str
    words : sequence of str
    word_embeddings : array-like of shape (V, d)
        Raw (unit) text embeddings of ``words``; prepared here with
        :func:`slics_core.captions.prepare_text_embeddings` unless ``prepared``.
    n_words : int
    ridge : float

    Returns
    -------
    table : DataFrame
        ``concept`` then one column per method with its words, best first,
        joined by ", ".
    """

    if not models:
        raise ValueError("no models to caption.")
    W = np.asarray(word_embeddings, dtype=np.float64)
    if not prepared:
        W, _ = prepare_text_embeddings(W)
    names = list(concept_names)
    out = {"concept": names}
    for method, model in models.items():
        if model.n_concepts_ != len(names):
            raise ValueError(f"{method} has {model.n_concepts_} concepts, expected {len(names)}.")
        caps = word_captions(model.atoms_, model.groups_, W, words, top_k=n_words,
                             concepts=range(len(names)), ridge=ridge)
        out[method] = [", ".join(c) for c in caps]
    return pd.DataFrame(out)


# ---------------------------------------------------------------------- label profile
#: Rows decomposed at once by :func:`concept_energy` (bounds the ``(rows, S, d)`` components in memory).
ENERGY_CHUNK = 1024


def concept_energy(model, X):
    """``‖v_j‖² / ‖x̂‖²`` of every item and concept ``(n, S)``: ``v_j`` from the NNLS of each item over every
    concept's atoms (no labels; module notes), ``x̂ = Σ_j v_j``; a row of zeros where ``x̂ = 0``."""
    X = check_embeddings(X, name="X", allow_zero_rows=True)
    S = int(model.n_concepts_)
    out = np.zeros((X.shape[0], S))
    for start in range(0, X.shape[0], ENERGY_CHUNK):
        part = X[start:start + ENERGY_CHUNK]
        V = components_of(model, part, "full", active=np.ones((part.shape[0], S), dtype=bool))
        R = V.sum(axis=1)
        total = np.einsum("nd,nd->n", R, R)[:, None]
        energy = np.einsum("nsd,nsd->ns", V, V)
        out[start:start + part.shape[0]] = np.where(total > 0, energy / np.where(total > 0, total, 1.0), 0.0)
    return out


def label_options(concept_names, sub_names=None, sub_to_concept=None):
    """The labels a profile can be asked for: ``[("concept", j, name), ..., ("sub", k, "name (concept)"), ...]``."""
    out = [("concept", j, str(n)) for j, n in enumerate(concept_names)]
    if sub_names is not None and len(sub_names):
        parent = check_sub_to_concept(sub_to_concept, len(concept_names), len(sub_names))
        out += [("sub", k, f"{n} ({concept_names[parent[k]]})") for k, n in enumerate(sub_names)]
    return out


def profile_table(energy, L, label, Y, concept_names, words=None, *, n_null=N_SUBSETS, seed=0):
    """The profile of column ``label`` of the label matrix ``L`` (``Y`` or ``Z``) from items' energies.

    Parameters
    ----------
    energy : array-like of shape (n, S)
        :func:`concept_energy` of the items.
    L : array-like of shape (n, K)
        Labels whose column ``label`` picks the items (the concepts ``Y``, or the sub-labels ``Z``).
    label : int
    Y : array-like of shape (n, S)
        The items' concept labels (``P(concept j | label)``).
    concept_names : sequence of str, length S
    words : list of list of str, optional
        Words of each concept (joined by ", " into a ``words`` column).
    n_null : int
        Random item subsets of the label's size for the lift's null band (0: no band, NaN columns).
    seed : int
        Seed of those subsets.

    Returns
    -------
    table : DataFrame
        One row per concept, in the model's order: ``concept``, ``energy`` (mean ``‖v_j‖²/‖x̂‖²`` over the
        items; NaN when no item carries the label), ``share`` (mean ``‖v_j‖²/Σ_k‖v_k‖²``), ``lift``
        (``share`` over the mean share of every row of ``energy``; NaN where that is 0), ``lift_lo`` and
        ``lift_hi`` (the band of the lift of ``n_null`` random subsets of the rows with the label's size:
        :func:`slics_core.uncertainty.subset_mean_band`, 2.5-97.5 %), ``in_band`` (the lift lies inside it:
        what a random subset of that size gives), ``p_concept`` (``P(concept j | label)``), ``n_items``
        (items carrying the label), then ``words`` when given.
    """
    E = np.asarray(energy, dtype=np.float64)
    L = np.asarray(L)
    Y = np.asarray(Y)
    if E.ndim != 2 or L.ndim != 2 or Y.ndim != 2 or not E.shape[0] == L.shape[0] == Y.shape[0]:
        raise ValueError(f"energy {E.shape}, labels {L.shape} and Y {Y.shape} must be 2-D with one row per item.")
    S = len(concept_names)
    if E.shape[1] != S or Y.shape[1] != S:
        raise ValueError(f"energy has {E.shape[1]} and Y {Y.shape[1]} concept columns for {S} concept names.")
    label = int(label)
    if not 0 <= label < L.shape[1]:
        raise ValueError(f"label {label} out of range (0..{L.shape[1] - 1}).")
    rows = L[:, label] > 0
    n = int(rows.sum())
    total = E.sum(axis=1, keepdims=True)
    share = np.divide(E, total, out=np.zeros_like(E), where=total > 0)
    baseline = share.mean(axis=0) if len(E) else np.zeros(S)
    with np.errstate(invalid="ignore"):
        mean_energy = E[rows].mean(axis=0) if n else np.full(S, np.nan)
        mean_share = share[rows].mean(axis=0) if n else np.full(S, np.nan)
        p = (Y[rows] > 0).mean(axis=0) if n else np.full(S, np.nan)
    lift = np.divide(mean_share, baseline, out=np.full(S, np.nan), where=baseline > 0)
    lo = hi = np.full(S, np.nan)
    if n and int(n_null) > 0:
        lo, hi = subset_mean_band(share, n, n_subsets=int(n_null), seed=seed)
        lo = np.divide(lo, baseline, out=np.full(S, np.nan), where=baseline > 0)
        hi = np.divide(hi, baseline, out=np.full(S, np.nan), where=baseline > 0)
    table = pd.DataFrame({"concept": [str(c) for c in concept_names], "energy": mean_energy,
                          "share": mean_share, "lift": lift, "lift_lo": lo, "lift_hi": hi,
                          "in_band": (lift >= lo) & (lift <= hi), "p_concept": p, "n_items": n})
    if words is not None:
        if len(words) != S:
            raise ValueError(f"{len(words)} word lists for {S} concepts.")
        table["words"] = [", ".join(w) for w in words]
    return table


def concept_words(model, words, word_embeddings, k=5, *, prepared=True):
    """Top-``k`` words of every concept by the caption rule (:func:`slics_core.captions.word_captions`), as
    the Captions page picks them; ``word_embeddings`` prepared unless ``prepared=False``."""
    W = np.asarray(word_embeddings, dtype=np.float64)
    if not prepared:
        W, _ = prepare_text_embeddings(W)
    return word_captions(model.atoms_, model.groups_, W, words, top_k=int(k), concepts=range(model.n_concepts_))

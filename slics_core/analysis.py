"""Dictionary analysis for the app: atom co-occurrence and cosines (paper Fig. 6), dictionary health, and
:func:`match_atoms`, which pairs the atoms of two dictionaries (planted and learned, or two seeds' fits) one to one.

Dictionary health (:func:`dictionary_health`)
---------------------------------------------
One row per atom, from the NNLS codes of the items on their *labelled* concepts
(``model.transform(X, Y)``; the app passes the training split), and from the atoms' absolute cosines:

* **fires**: an atom fires on an item when its coefficient exceeds :data:`FIRE_RTOL` (``1e-6``) times the
  item's largest coefficient (a relative tolerance: it ignores numerical dust, never a real coefficient;
  an item whose coefficients are all zero fires nothing). :func:`firing` is the rule.
* ``frequency``: fraction of the items on which the atom fires; ``mean_coefficient``: its mean coefficient
  over those items (NaN when it fires on none).
* ``nearest_own`` / ``nearest_other``: the largest |cos| with another atom of its concept / with an atom
  of any other concept (NaN when there is none).

Flags (an atom may carry several):

* ``dead``: fires on no item.
* ``rare``: fires on at least one item and fewer than :data:`RARE_ITEMS` (5); a dead atom is not also rare.
* ``duplicate``: ``nearest_own`` >= :data:`DUPLICATE_COS` (0.95); both atoms of such a pair carry it.
* ``misplaced``: ``nearest_other`` > ``nearest_own``, strictly: nearer an atom of another concept than any
  atom of its own (an atom alone in its concept is never misplaced).
* ``dense``: fires on >= :data:`DENSE_SHARE` (90 %) of the items labelled with its concept while its concept
  has at least :data:`DENSE_MIN_ATOMS` (3) atoms (``d0`` >= 3): the concept leans on one atom.
"""
from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment

from slics_core._validation import check_embeddings, check_labels
from slics_core.extras import require
from slics_core.rows import unit_rows

#: An atom fires on an item when its coefficient exceeds this fraction of the item's largest coefficient.
FIRE_RTOL = 1e-6
#: ``rare``: fires on fewer items than this (and on at least one).
RARE_ITEMS = 5
#: ``duplicate``: |cos| with another atom of the same concept at least this.
DUPLICATE_COS = 0.95
#: ``dense``: fires on at least this share of its concept's items ...
DENSE_SHARE = 0.9
#: ... while its concept has at least this many atoms.
DENSE_MIN_ATOMS = 3
#: The flags of :func:`dictionary_health`, in the order they are listed.
HEALTH_FLAGS = ("dead", "rare", "duplicate", "misplaced", "dense")
#: Each flag's rule in words (for pages and reports).
HEALTH_RULES = {
    "dead": "fires on no item",
    "rare": f"fires on fewer than {RARE_ITEMS} items",
    "duplicate": f"|cos| ≥ {DUPLICATE_COS:g} with another atom of its concept (both are flagged)",
    "misplaced": "nearer (|cos|) an atom of another concept than any atom of its own",
    "dense": f"fires on ≥ {DENSE_SHARE:.0%} of its concept's items while the concept has ≥ {DENSE_MIN_ATOMS} atoms",
}
#: How "fires" is decided, in words.
FIRE_RULE = f"an atom fires on an item when its coefficient exceeds {FIRE_RTOL:g} × the item's largest coefficient"


def atom_cooccurrence(codes, threshold=0.0):
    """Row-normalised co-occurrence of active atoms.

    Parameters
    ----------
    codes : array-like of shape (n, M)
        Coefficients, e.g. from :func:`slics_core.sparse_coding.nn_omp` on a
        validation set.
    threshold : float, default=0.0
        A coefficient counts as active when it is greater than this.

    Returns
    -------
    C : ndarray of shape (M, M)
        ``C[a, b]`` = fraction of the samples using atom ``a`` that also use
        atom ``b``; the diagonal is 1. Rows of atoms that no sample uses are
        NaN.
    """
    codes = np.asarray(codes, dtype=np.float64)
    if codes.ndim != 2:
        raise ValueError(f"codes must be 2-D (n_samples, n_atoms); got shape {codes.shape}.")
    active = (codes > threshold).astype(np.float64)
    counts = active.T @ active
    used = np.diag(counts).copy()
    with np.errstate(invalid="ignore", divide="ignore"):
        C = counts / used[:, None]
    C[used == 0] = np.nan
    return C


def atom_cosine(atoms, groups):
    """Cosine similarity between atoms, with within- and between-group summaries.

    Parameters
    ----------
    atoms : array-like of shape (M, d)
    groups : array-like of int, shape (M,)

    Returns
    -------
    cos : ndarray of shape (M, M)
    summary : dict
        ``within_mean``, ``within_std`` over pairs of distinct atoms of the
        same concept, and ``between_mean``, ``between_std`` over pairs from
        different concepts (each unordered pair counted once; NaN if none).
    """
    B = check_embeddings(atoms, name="atoms")
    groups = np.asarray(groups)
    if groups.shape != (B.shape[0],):
        raise ValueError(f"groups must have one entry per atom ({B.shape[0]}); got shape {groups.shape}.")
    U = unit_rows(B)
    cos = U @ U.T
    iu = np.triu_indices(B.shape[0], k=1)
    same = groups[iu[0]] == groups[iu[1]]
    values = cos[iu]

    def stats(v):
        return (float(v.mean()), float(v.std())) if v.size else (float("nan"), float("nan"))

    wm, ws = stats(values[same])
    bm, bs = stats(values[~same])
    return cos, {"within_mean": wm, "within_std": ws, "between_mean": bm, "between_std": bs}


def firing(codes):
    """Where atoms fire: ``codes[i, a] > FIRE_RTOL * max_b codes[i, b]`` (the module's rule), as bools ``(n, M)``."""
    codes = np.asarray(codes, dtype=np.float64)
    if codes.ndim != 2:
        raise ValueError(f"codes must be 2-D (n_items, n_atoms); got shape {codes.shape}.")
    top = codes.max(axis=1, initial=0.0)
    return codes > FIRE_RTOL * top[:, None]


def health_columns(codes, atoms, groups, Y):
    """The columns of :func:`dictionary_health` as plain arrays (no pandas), from given codes.

    Parameters
    ----------
    codes : array-like of shape (n, M)
        NNLS codes of the items on their labelled concepts.
    atoms : array-like of shape (M, d)
    groups : array-like of int, shape (M,)
    Y : array-like of shape (n, S)
        The items' concept labels (``dense`` counts the items of each concept).

    Returns
    -------
    columns : dict
        ``concept`` (int), ``atom``, ``frequency``, ``mean_coefficient``, ``nearest_own``, ``nearest_other``,
        ``nearest_other_atom`` (-1 when none), ``fires`` (items), ``concept_share`` (fraction of its
        concept's items; NaN when the concept has none), ``flags`` (a list of words per atom).
    """
    codes = np.asarray(codes, dtype=np.float64)
    B = check_embeddings(atoms, name="atoms")
    g = np.asarray(groups).reshape(-1)
    M = B.shape[0]
    if g.shape != (M,):
        raise ValueError(f"groups must have one entry per atom ({M}); got shape {g.shape}.")
    fire = firing(codes)
    n = codes.shape[0]
    if codes.shape[1] != M:
        raise ValueError(f"codes have {codes.shape[1]} columns for {M} atoms.")
    Y = check_labels(Y, n)
    if g.max(initial=-1) >= Y.shape[1]:
        raise ValueError(f"atoms belong to concept {int(g.max())} but Y has {Y.shape[1]} concepts.")
    fires = fire.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        frequency = fires / n if n else np.full(M, np.nan)
        mean_coef = np.where(fires > 0, np.where(fire, codes, 0.0).sum(axis=0) / np.maximum(fires, 1), np.nan)
        per_concept = Y.sum(axis=0)[g]
        share = np.where(per_concept > 0, (fire & Y[:, g]).sum(axis=0) / np.maximum(per_concept, 1), np.nan)

    U = unit_rows(B)
    cos = np.abs(U @ U.T)
    same = g[:, None] == g[None, :]
    own = np.where(same & ~np.eye(M, dtype=bool), cos, -np.inf).max(axis=1, initial=-np.inf)
    other_cos = np.where(~same, cos, -np.inf)
    other_atom = np.argmax(other_cos, axis=1) if M else np.zeros(0, dtype=int)
    other = other_cos.max(axis=1, initial=-np.inf)
    other_atom = np.where(np.isfinite(other), other_atom, -1)
    own = np.where(np.isfinite(own), own, np.nan)
    other = np.where(np.isfinite(other), other, np.nan)
    n_atoms_of = np.bincount(g)[g]

    rules = {
        "dead": fires == 0,
        "rare": (fires > 0) & (fires < RARE_ITEMS),
        "duplicate": own >= DUPLICATE_COS,
        "misplaced": other > own,  # False where either is NaN
        "dense": (n_atoms_of >= DENSE_MIN_ATOMS) & (share >= DENSE_SHARE),
    }
    flags = [[f for f in HEALTH_FLAGS if rules[f][a]] for a in range(M)]
    return {"concept": g.astype(int), "atom": np.arange(M), "frequency": frequency, "mean_coefficient": mean_coef,
            "nearest_own": own, "nearest_other": other, "flags": flags, "fires": fires.astype(int),
            "concept_share": share, "nearest_other_atom": other_atom.astype(int)}


def dictionary_health(model, X, Y):
    """Health of a fitted dictionary: one row per atom, in the model's atom order (rules: module docstring).

    Parameters
    ----------
    model : fitted SLiCS (or any model with ``atoms_``, ``groups_``, ``transform(X, Y)``)
    X : array-like of shape (n, d)
        Items (the app uses the training split).
    Y : array-like of shape (n, S)
        Their concept labels: codes are NNLS on the labelled concepts (``model.transform(X, Y)``).

    Returns
    -------
    table : pandas.DataFrame
        ``concept`` (name, from ``concept_names_`` when the model has them), ``atom``, ``frequency``,
        ``mean_coefficient``, ``nearest_own``, ``nearest_other``, ``flags`` (list of words), then
        ``fires`` (items it fires on), ``concept_share`` (share of its concept's items) and
        ``nearest_other_atom`` (the atom behind ``nearest_other``, -1 when none).
    """
    pd = require("pandas", "the dictionary health table")
    cols = health_columns(model.transform(X, Y), model.atoms_, model.groups_, Y)
    names = getattr(model, "concept_names_", None)
    if names is not None:
        cols["concept"] = [str(names[c]) for c in cols["concept"]]
    return pd.DataFrame(cols)


def reconstruction_cosine(X, codes, atoms):
    """``cos(x, x̂)`` of every item with its reconstruction ``x̂ = codes @ atoms`` (0 where ``x̂`` is zero).

    Parameters
    ----------
    X : array-like of shape (n, d)
    codes : array-like of shape (n, M)
    atoms : array-like of shape (M, d)

    Returns
    -------
    cos : ndarray of shape (n,)
    """
    X = check_embeddings(X, name="X")
    R = np.asarray(codes, dtype=np.float64) @ np.asarray(atoms, dtype=np.float64)
    if R.shape != X.shape:
        raise ValueError(f"codes @ atoms has shape {R.shape}, X has shape {X.shape}.")
    nr = np.linalg.norm(R, axis=1)
    dots = np.einsum("ij,ij->i", X, R)
    return np.where(nr > 0, dots / np.maximum(nr, 1e-300) / np.linalg.norm(X, axis=1), 0.0)


# --------------------------------------------------------------------------- matching two dictionaries
def match_atoms(planted_atoms, atoms, planted_groups=None, groups=None):
    """Pair every planted (or reference) atom with its own learned atom: the one-to-one matching that maximises the
    total \\|cosine\\| (Hungarian algorithm, :func:`scipy.optimize.linear_sum_assignment`).

    Learned atoms come in any order and, with an SVD initialisation, with either sign, so a planted-vs-
    learned cosine matrix shows recovery only once its columns are put in matched order.

    Parameters
    ----------
    planted_atoms : ndarray of shape (P, d)
    atoms : ndarray of shape (M, d), M >= P
    planted_groups, groups : ndarray of int, optional
        Concepts of the atoms; when given, an atom is matched within its own concept wherever the numbers
        allow (a pair across concepts costs more than any pair within one).

    Returns
    -------
    order : ndarray of int, shape (M,)
        Learned atoms in matched order: ``atoms[order[i]]`` is planted atom ``i``'s match for ``i < P``;
        unmatched learned atoms follow.
    cosine : ndarray of shape (P,)
        Signed cosine of each matched pair.
    """
    P = np.asarray(planted_atoms, dtype=np.float64)
    B = np.asarray(atoms, dtype=np.float64)
    if P.ndim != 2 or B.ndim != 2 or P.shape[1] != B.shape[1]:
        raise ValueError(f"planted atoms {P.shape} and atoms {B.shape} must be 2-D with the same dimension")
    if B.shape[0] < P.shape[0]:
        raise ValueError(f"{B.shape[0]} learned atoms cannot match {P.shape[0]} planted ones one to one")
    cos = unit_rows(P, name="planted_atoms") @ unit_rows(B, name="atoms").T
    cost = -np.abs(cos)
    if planted_groups is not None and groups is not None:
        cost = cost + 2.0 * (np.asarray(planted_groups)[:, None] != np.asarray(groups)[None, :])
    rows, cols = linear_sum_assignment(cost)
    matched = cols[np.argsort(rows)]
    rest = np.setdiff1d(np.arange(B.shape[0]), matched)
    return np.concatenate([matched, rest]).astype(int), cos[np.arange(P.shape[0]), matched]

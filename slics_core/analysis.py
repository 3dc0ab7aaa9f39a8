"""Dictionary analysis for the app: atom co-occurrence and cosines (paper Fig. 6), dictionary health with the
nulls its flags are defined against (:func:`nearest_atoms`, :func:`nearest_other_null`, :func:`nearest_other_p`,
:func:`nearest_other_cut`, :func:`share_lower_bound`), and :func:`match_atoms`, which pairs the atoms of
two dictionaries (planted and learned, or two seeds' fits) one to one.

Dictionary health (:func:`dictionary_health`)
---------------------------------------------
One row per atom, from the NNLS codes of the items on their *labelled* concepts
(``model.transform(X, Y)``; the app passes the training split), and from the atoms' *signed* cosines (atoms
are used with non-negative coefficients, so an atom and its negative point opposite ways: never copies):

* **fires**: an atom fires on an item when its coefficient exceeds :data:`FIRE_RTOL` (``1e-6``) times the
  item's largest coefficient (a relative tolerance: it ignores numerical dust, never a real coefficient;
  an item whose coefficients are all zero fires nothing). :func:`firing` is the rule.
* ``frequency``: fraction of the items on which the atom fires; ``mean_coefficient``: its mean coefficient
  over those items (NaN when it fires on none).
* ``nearest_own`` / ``nearest_other``: the largest signed cos with another atom of its concept / with an atom
  of any other concept (NaN when there is none).
* ``nearest_other_p``: the chance that, in a random dictionary of the same size drawn from a Gaussian fitted to
  this dictionary's atoms, an atom's nearest of as many other atoms as the other concepts hold reaches
  ``nearest_other`` (:func:`nearest_other_null`, :func:`nearest_other_p`); ``nearest_other_cut``: the cos that
  null passes with chance :data:`MISPLACED_LEVEL` (:func:`nearest_other_cut`).
* ``concept_share``: share of its concept's items the atom fires on; ``concept_share_low``: its one-sided
  95 % lower confidence bound (Clopper-Pearson, :func:`share_lower_bound`).

Flags (an atom may carry several), each with its null, the input that must not trip it:

* ``dead``: fires on no item.
* ``rare``: fires on at least one item and fewer than :data:`RARE_ITEMS` (5); a dead atom is not also rare.
* ``duplicate``: ``nearest_own`` >= :data:`DUPLICATE_COS` (0.95, signed); both atoms of such a pair carry it.
  Null: two random directions reach 0.95 with chance 4e-5 in d = 8 dimensions, below 1e-16 from d = 32 on.
* ``misplaced``: an atom of another concept is nearer (signed cos) than every atom of its own, *and* nearer than
  this dictionary's geometry explains: ``nearest_other_p`` < :data:`MISPLACED_LEVEL` (0.01). The null is shaped
  like the dictionary (a parametric bootstrap, seeded, :func:`nearest_other_null`): atoms drawn independently
  from a Gaussian with the mean and covariance of its unit atoms (both shrunk: James-Stein, Ledoit-Wolf). Null:
  a dictionary of uniform random directions with the same groups flags each atom with chance about 1 %, and so
  does one whose atoms all crowd into a narrow cone (random groups); an atom alone in its concept has no own atom
  to compare: the null part decides. Why not "nearer another concept's atom than any of its own" alone: the
  maximum over the many atoms of the other concepts beats the maximum over a few siblings by chance. Why not
  uniform random directions as the null: learned atoms of embeddings share a few directions, so nearly every
  atom is nearer another concept's atom than uniform directions come, and a flag on nearly every atom tells
  none apart (docs/app.md).
* ``dense``: ``concept_share_low`` > :data:`DENSE_SHARE` (90 %) while its concept has at least
  :data:`DENSE_MIN_ATOMS` (3) atoms (``d0`` >= 3): the concept leans on one atom. Null: an atom firing on
  each of its concept's items with chance 0.9 is flagged with chance at most 5 % (the exact binomial bound),
  so shares of 0.90 and 0.898 of 1000 items are both unflagged; the bound is shown beside the share.
"""
from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment
from scipy.stats import beta
from sklearn.covariance import ledoit_wolf_shrinkage
from threadpoolctl import threadpool_limits

from slics_core._validation import check_embeddings, check_k, check_labels, check_mode
from slics_core.captions import atom_word_ranking
from slics_core.extras import require
from slics_core.nnls import nnls_shared
from slics_core.rows import unit_rows

#: An atom fires on an item when its coefficient exceeds this fraction of the item's largest coefficient.
FIRE_RTOL = 1e-6
#: ``rare``: fires on fewer items than this (and on at least one).
RARE_ITEMS = 5
#: ``duplicate``: signed cos with another atom of the same concept at least this.
DUPLICATE_COS = 0.95
#: ``misplaced``: the null chance (``nearest_other_p``) below which another concept's nearest atom is nearer
#: than the dictionary's own geometry explains (:func:`nearest_other_null`) ...
MISPLACED_LEVEL = 0.01
#: ... from this many null samples per number of other-concept atoms ...
MISPLACED_NULL_SAMPLES = 5000
#: ... drawn with this seed (the same dictionary always gets the same flags).
MISPLACED_NULL_SEED = 0
#: ``dense``: the lower confidence bound of the share of its concept's items the atom fires on exceeds this ...
DENSE_SHARE = 0.9
#: ... at this level (one-sided: an atom firing with chance exactly DENSE_SHARE is flagged at most this often) ...
DENSE_LEVEL = 0.05
#: ... while its concept has at least this many atoms.
DENSE_MIN_ATOMS = 3
#: The flags of :func:`dictionary_health`, in the order they are listed.
HEALTH_FLAGS = ("dead", "rare", "duplicate", "misplaced", "dense")
#: Each flag's rule in words (for pages and reports): what is compared, and with what.
HEALTH_RULES = {
    "dead": "fires on no item",
    "rare": f"fires on fewer than {RARE_ITEMS} items",
    "duplicate": f"signed cos ≥ {DUPLICATE_COS:g} with another atom of its concept (both are flagged; an atom and "
                 "its negative point opposite ways and are not)",
    "misplaced": "an atom of another concept has a higher signed cos with it than any atom of its own concept, and "
                 f"a higher one than {1 - MISPLACED_LEVEL:.0%} of {MISPLACED_NULL_SAMPLES} nearest-other cosines in "
                 "random dictionaries of the same size and groups drawn from a Gaussian fitted to this dictionary's "
                 "atoms (same mean "
                 f"direction and spread; p < {MISPLACED_LEVEL:g}): it sits with another concept's atoms more than "
                 f"the dictionary's geometry explains (about {MISPLACED_LEVEL:.0%} of the atoms of a random "
                 "dictionary, or of one crowded into a narrow cone, are flagged)",
    "dense": f"fires on more than {DENSE_SHARE:.0%} of its concept's items with {1 - DENSE_LEVEL:.0%} confidence "
             f"(the one-sided lower bound of the share, shown beside it, is above {DENSE_SHARE:.0%}) while the "
             f"concept has ≥ {DENSE_MIN_ATOMS} atoms",
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


def _atom_cosines(atoms, groups):
    """``(cos (M, M), groups (M,))``: the atoms' signed cosines, with their groups checked (one per atom)."""
    B = check_embeddings(atoms, name="atoms")
    g = np.asarray(groups).reshape(-1) if np.ndim(groups) else np.asarray(groups)
    if g.shape != (B.shape[0],):
        raise ValueError(f"groups must have one entry per atom ({B.shape[0]}); got shape {np.shape(groups)}.")
    U = unit_rows(B)
    return U @ U.T, g


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
    cos, groups = _atom_cosines(atoms, groups)
    iu = np.triu_indices(cos.shape[0], k=1)
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
        ``concept`` (int), ``atom``, ``frequency``, ``mean_coefficient``, ``nearest_own``, ``nearest_other``
        (signed cos), ``nearest_other_atom`` (-1 when none), ``nearest_other_p`` (null chance of
        ``nearest_other``; NaN when there is no other concept), ``fires`` (items), ``concept_share`` (fraction of
        its concept's items; NaN when the concept has none), ``concept_share_low`` (its one-sided 95 % lower
        bound), ``flags`` (a list of words per atom), ``nearest_other_cut`` (the cos the null's nearest other passes
        with chance :data:`MISPLACED_LEVEL`; NaN when there is no other concept). Rules: module docstring.
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
        in_concept = (fire & Y[:, g]).sum(axis=0)
        share = np.where(per_concept > 0, in_concept / np.maximum(per_concept, 1), np.nan)

    own, other, other_atom = nearest_atoms(B, g)
    n_atoms_of = np.bincount(g)[g]
    null = nearest_other_null(B, g)
    other_p = nearest_other_p(other, M - n_atoms_of, null)
    cuts = nearest_other_cut(null)
    other_cut = np.array([cuts.get(int(k), np.nan) for k in M - n_atoms_of], dtype=np.float64)
    share_low = np.full(M, np.nan)
    counted = per_concept > 0
    share_low[counted] = share_lower_bound(in_concept[counted], per_concept[counted])

    with np.errstate(invalid="ignore"):  # NaN compares False: no own atom -> the null part decides
        rules = {
            "dead": fires == 0,
            "rare": (fires > 0) & (fires < RARE_ITEMS),
            "duplicate": own >= DUPLICATE_COS,
            "misplaced": (other_p < MISPLACED_LEVEL) & ~(own >= other),
            "dense": (n_atoms_of >= DENSE_MIN_ATOMS) & (share_low > DENSE_SHARE),
        }
    flags = [[f for f in HEALTH_FLAGS if rules[f][a]] for a in range(M)]
    return {"concept": g.astype(int), "atom": np.arange(M), "frequency": frequency, "mean_coefficient": mean_coef,
            "nearest_own": own, "nearest_other": other, "flags": flags, "fires": fires.astype(int),
            "concept_share": share, "nearest_other_atom": other_atom.astype(int), "nearest_other_p": other_p,
            "concept_share_low": share_low, "nearest_other_cut": other_cut}


def nearest_atoms(atoms, groups):
    """Every atom's nearest atoms by *signed* cosine: within its concept and among the other concepts.

    Parameters
    ----------
    atoms : array-like of shape (M, d)
    groups : array-like of int, shape (M,)

    Returns
    -------
    own : ndarray of shape (M,)
        The largest cos with another atom of its concept (NaN for an atom alone in its concept).
    other : ndarray of shape (M,)
        The largest cos with an atom of another concept (NaN when there is no other concept).
    other_atom : ndarray of int, shape (M,)
        The atom behind ``other`` (-1 when none).
    """
    cos, g = _atom_cosines(atoms, groups)
    M = cos.shape[0]
    same = g[:, None] == g[None, :]
    own = np.where(same & ~np.eye(M, dtype=bool), cos, -np.inf).max(axis=1, initial=-np.inf)
    other_cos = np.where(~same, cos, -np.inf)
    other_atom = np.argmax(other_cos, axis=1) if M else np.zeros(0, dtype=int)
    other = other_cos.max(axis=1, initial=-np.inf)
    other_atom = np.where(np.isfinite(other), other_atom, -1)
    own = np.where(np.isfinite(own), own, np.nan)
    other = np.where(np.isfinite(other), other, np.nan)
    return own, other, other_atom.astype(int)


def nearest_other_null(atoms, groups, n_samples=MISPLACED_NULL_SAMPLES, random_state=MISPLACED_NULL_SEED):
    """The null of ``nearest_other`` shaped like the dictionary: the largest signed cos of an atom with ``m`` others
    when every atom is drawn independently from a Gaussian fitted to this dictionary's unit atoms.

    The Gaussian: the mean of the unit atoms, shrunk towards 0 (positive-part James-Stein: the part of its
    squared norm that the atoms' spread explains is taken off, so a dictionary of uniform random directions has a
    mean near 0), and their covariance shrunk towards a multiple of the identity (Ledoit-Wolf,
    :func:`sklearn.covariance.ledoit_wolf_shrinkage`: full rank when there are fewer atoms than dimensions).
    ``ceil(n_samples / M)`` dictionaries of ``M`` atoms are drawn from it (rows normalised after drawing) with
    ``random_state``; every drawn atom gives one sample for each ``m``: its largest cos with ``m`` other atoms of
    its draw. The drawn atoms are independent, so which atoms form the other concepts does not matter, only how
    many. Cost: ``2 * n_samples * M * d`` multiply-adds, on one BLAS thread. Atoms drawn uniformly on the sphere
    fit a Gaussian near isotropic, and the null is then near the closed form ``1 - (1 - sf(c))^m`` of uniform
    directions (``(cos + 1) / 2 ~ Beta((d-1)/2, (d-1)/2)``, tested); embeddings' atoms that fill a narrow cone or a
    few directions fit a Gaussian that does too, so their null cosines are as high as theirs.

    Parameters
    ----------
    atoms : array-like of shape (M, d)
    groups : array-like of int, shape (M,)
    n_samples : int, default=MISPLACED_NULL_SAMPLES
        Null samples for each number of other-concept atoms (the smallest p-value is ``1 / (n_samples + 1)``).
    random_state : int, default=MISPLACED_NULL_SEED
        The seed: the same dictionary always gets the same null.

    Returns
    -------
    null : dict
        ``{m: sorted samples}`` for every number ``m >= 1`` of other-concept atoms an atom of ``groups`` has.
    """

    B = check_embeddings(atoms, name="atoms")
    g = np.asarray(groups).reshape(-1)
    M, d = B.shape
    if g.shape != (M,):
        raise ValueError(f"groups must have one entry per atom ({M}); got shape {g.shape}.")
    if int(n_samples) < 1:
        raise ValueError(f"n_samples must be at least 1; got {n_samples}.")
    _, g_index = np.unique(g, return_inverse=True)
    others = M - np.bincount(g_index)[g_index]
    ms = np.unique(others[others > 0])
    if not ms.size:
        return {}
    U = unit_rows(B)
    mean = U.mean(axis=0)
    centred = U - mean
    spread = float((centred ** 2).sum()) / M  # trace of the covariance
    mean_sq = float(mean @ mean)
    mean = mean * max(0.0, 1.0 - spread / (M - 1) / mean_sq) if mean_sq > 0 else mean  # James-Stein
    shrink = float(ledoit_wolf_shrinkage(centred, assume_centered=True)) if spread > 0 else 1.0
    shrink = min(max(shrink, 0.0), 1.0) if np.isfinite(shrink) else 1.0
    scale_low_rank, scale_iso = np.sqrt((1.0 - shrink) / M), np.sqrt(shrink * spread / d)
    rng = np.random.default_rng(random_state)
    n_samples = int(n_samples)
    rows = min(M, n_samples)  # the drawn atoms whose nearest others are sampled, per draw
    block = max(1, 4_000_000 // max(M, 1))  # rows of the cos matrix held at once
    with threadpool_limits(limits=1, user_api="blas"):  # many small products: BLAS threads cost more than they give
        return _draw_nearest_other(mean, centred, scale_low_rank, scale_iso, ms, rng, n_samples, rows, block)


def _draw_nearest_other(mean, centred, scale_low_rank, scale_iso, ms, rng, n_samples, rows, block):
    """The sampling loop of :func:`nearest_other_null` (sorted samples per ``m``)."""
    M, d = centred.shape
    samples = {int(m): [] for m in ms}
    taken = 0
    while taken < n_samples:
        Z = (mean + scale_low_rank * (rng.standard_normal((M, M)) @ centred)
             + scale_iso * rng.standard_normal((M, d)))
        Z = unit_rows(Z)
        n_rows = min(rows, n_samples - taken)
        for lo in range(0, n_rows, block):
            r = np.arange(lo, min(lo + block, n_rows))
            cos = Z[r] @ Z.T
            cos[np.arange(r.size), r] = -np.inf  # not its own neighbour
            prefix = np.maximum.accumulate(cos, axis=1)
            for m in ms:  # its first m others: columns 0..m-1, or 0..m when the atom itself is among them
                samples[int(m)].append(prefix[np.arange(r.size), m - 1 + (r < m)])
        taken += n_rows
    return {m: np.sort(np.concatenate(v)) for m, v in samples.items()}


def nearest_other_p(other, m, null):
    """Null chance of each ``nearest_other``: ``(1 + #{null samples >= c}) / (1 + #samples)`` among the samples of
    :func:`nearest_other_null` for the atom's number ``m`` of other-concept atoms (NaN where ``c`` is NaN or the
    null has no such ``m``).

    Parameters
    ----------
    other : array-like of float, shape (M,)
    m : array-like of int, shape (M,)
    null : dict from :func:`nearest_other_null`

    Returns
    -------
    p : ndarray of shape (M,)
    """
    other = np.asarray(other, dtype=np.float64).reshape(-1)
    m = np.asarray(m).reshape(-1)
    p = np.full(other.shape, np.nan)
    for k, v in null.items():
        at = (m == k) & np.isfinite(other)
        p[at] = (1.0 + v.size - np.searchsorted(v, other[at], side="left")) / (1.0 + v.size)
    return p


def nearest_other_cut(null, level=MISPLACED_LEVEL):
    """``{m: cos}``: the cos that the null's nearest of ``m`` other atoms passes with chance ``level`` (its
    ``1 - level`` quantile; :func:`nearest_other_null`)."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1); got {level}.")
    return {k: float(np.quantile(v, 1.0 - level)) for k, v in null.items()}


def share_lower_bound(k, n, level=DENSE_LEVEL):
    """One-sided ``1 - level`` lower confidence bound of a share from ``k`` successes in ``n`` trials
    (Clopper-Pearson: the ``level`` quantile of ``Beta(k, n - k + 1)``; 0 when ``k`` is 0). Exact: when the true
    share is ``p``, the bound exceeds ``p`` with chance at most ``level``.

    Parameters
    ----------
    k, n : int or array-like of int, ``0 <= k <= n``, ``n >= 1``
    level : float in (0, 1)

    Returns
    -------
    low : ndarray
    """
    k = np.asarray(k, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    if (n < 1).any() or (k < 0).any() or (k > n).any():
        raise ValueError("a share needs 0 <= k <= n and n >= 1.")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1); got {level}.")
    with np.errstate(invalid="ignore"):
        low = beta.ppf(level, np.maximum(k, 1.0), n - k + 1.0)
    return np.where(k > 0, low, 0.0)


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
        ``fires`` (items it fires on), ``concept_share`` (share of its concept's items),
        ``nearest_other_atom`` (the atom behind ``nearest_other``, -1 when none), ``nearest_other_p`` (the null
        chance of ``nearest_other``), ``concept_share_low`` (the lower bound of ``concept_share``) and
        ``nearest_other_cut`` (the cos the null's nearest other passes with chance :data:`MISPLACED_LEVEL`).
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
def match_atoms(planted_atoms, atoms, planted_groups=None, groups=None, *, signed=False):
    """Pair every planted (or reference) atom with its own learned atom: the one-to-one matching that maximises the
    total \\|cosine\\| (Hungarian algorithm, :func:`scipy.optimize.linear_sum_assignment`), or the total signed
    cosine with ``signed=True``.

    Learned atoms come in any order and, with an SVD initialisation, with either sign, so a planted-vs-
    learned cosine matrix shows recovery only once its columns are put in matched order (\\|cos\\|). Two fits
    of SLiCS (seeds, methods) use their atoms with non-negative coefficients, so an atom and its negative are
    opposite, not the same: they are matched on the signed cosine.

    Parameters
    ----------
    planted_atoms : ndarray of shape (P, d)
    atoms : ndarray of shape (M, d), M >= P
    planted_groups, groups : ndarray of int, optional
        Concepts of the atoms; when given, an atom is matched within its own concept wherever the numbers
        allow: the matching has the fewest pairs across concepts, and the best total cosine among those.
    signed : bool, default=False
        Maximise the total signed cosine instead of the total \\|cosine\\|.

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
    cost = -cos if signed else -np.abs(cos)
    if planted_groups is not None and groups is not None:
        # a pair across concepts costs more than the whole range of the cosines' total (2 P): fewest such pairs
        # first, then the best cosine
        cost = cost + (2.0 * P.shape[0] + 1.0) * (np.asarray(planted_groups)[:, None] != np.asarray(groups)[None, :])
    rows, cols = linear_sum_assignment(cost)
    matched = cols[np.argsort(rows)]
    rest = np.setdiff1d(np.arange(B.shape[0]), matched)
    return np.concatenate([matched, rest]).astype(int), cos[np.arange(P.shape[0]), matched]


# --------------------------------------------------------------------------- one item's atoms, one atom's activations
def atom_codes(model, X, Y=None, mode: str = "full") -> np.ndarray:
    """NNLS coefficients ``(n, M)`` of items on a dictionary's atoms, in one of the component modes of
    :data:`slics_core.methods.MODES` (the codes behind :func:`slics_core.methods.components_of`).

    Parameters
    ----------
    model : fitted dictionary model (``atoms_``, ``groups_``, ``transform(X, Y)``; SLiCS)
    X : array-like of shape (n, d)
    Y : array-like of shape (n, S), optional
        ``mode="full"`` only: the concepts each item is decomposed over (its labels, or a query's active
        concepts); None: every concept (no labels used).
    mode : {"full", "partial"}
        One of :data:`slics_core.methods.MODES`. ``"full"``: the joint NNLS of each item over the atoms of its
        concepts, ``model.transform(X, Y)`` (``v_j = B_j a_j``, eq. 2). ``"partial"``: the NNLS of each item
        over one concept's atoms at a time (the nearest point of each concept's cone, ``ṽ_j``, eq. 3), the
        concepts' codes side by side.
    """
    check_mode(mode)
    if mode == "full":
        return np.asarray(model.transform(X, Y), dtype=np.float64)
    if Y is not None:
        raise ValueError("mode='partial' decomposes every concept on its own: it takes no Y (pass Y=None).")
    X = check_embeddings(X, n_features=int(model.atoms_.shape[1]), name="X", allow_zero_rows=True)
    B, g = np.asarray(model.atoms_, dtype=np.float64), np.asarray(model.groups_)
    codes = np.zeros((X.shape[0], B.shape[0]))
    for j in np.unique(g):
        sel = g == j
        codes[:, sel] = nnls_shared(B[sel], X, ridge=float(getattr(model, "ridge", 0.0) or 0.0))
    return codes


def energy_shares(codes, atoms) -> np.ndarray:
    """Each atom's share of an item's energy: ``c_a² ‖b_a‖² / Σ_b c_b² ‖b_b‖²`` ``(n, M)``.

    The squared length of the atom's term ``c_a b_a`` over the sum of every term's squared length: it sums to
    1 over the atoms of an item (0 everywhere for an item whose coefficients are all zero) and equals the
    share of ``‖x̂‖²`` when the atoms used are orthogonal (the cross terms ``2 c_a c_b b_a·b_b`` are left out,
    so a share is never negative).
    """
    C = np.asarray(codes, dtype=np.float64)
    B = np.asarray(atoms, dtype=np.float64)
    if C.ndim != 2 or B.ndim != 2 or C.shape[1] != B.shape[0]:
        raise ValueError(f"codes {C.shape} and atoms {B.shape} must be 2-D with one code column per atom.")
    E = C ** 2 * np.einsum("md,md->m", B, B)[None, :]
    total = E.sum(axis=1, keepdims=True)
    return np.divide(E, total, out=np.zeros_like(E), where=total > 0)


def item_atoms(model, x, y=None, mode: str = "full", *, words=None, word_embeddings=None, n_words: int = 3):
    """The atoms that fire on one item: what the dictionary says the item is made of.

    Parameters
    ----------
    model : fitted dictionary model (SLiCS)
    x : array-like of shape (d,) or (1, d)
        The item (or query), preprocessed like the model's training data.
    y : array-like of shape (S,), optional
        ``mode="full"``: the concepts to decompose it over (its labels); None: every concept.
    mode : {"full", "partial"}
        The codes of :func:`atom_codes`: the joint NNLS (``"full"``) or each concept's own cone (``"partial"``).
    words, word_embeddings : optional
        A vocabulary and its prepared text embeddings: adds each atom's ``n_words`` closest words
        (:func:`slics_core.captions.atom_word_ranking`, the Atoms page's rule).
    n_words : int

    Returns
    -------
    table : pandas.DataFrame
        One row per atom that fires (:func:`firing`), the largest ``share`` first (ties: the larger
        coefficient, then the atom's index): ``atom``, ``concept`` (name), ``coefficient``, ``share``
        (:func:`energy_shares`: ``c_a² ‖b_a‖² / Σ_b c_b² ‖b_b‖²``), then ``words`` (joined by ", ") when a
        vocabulary is given. Empty when no atom fires (a zero item).
    """
    pd = require("pandas", "an item's atoms table")
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 1:
        x = x[None, :]
    if x.ndim != 2 or x.shape[0] != 1:
        raise ValueError(f"x must be one item, of shape (d,) or (1, d); got shape {x.shape}.")
    Y = None if y is None else np.asarray(y).reshape(1, -1)
    codes = atom_codes(model, x, Y, mode)
    share = energy_shares(codes, model.atoms_)[0]
    c = codes[0]
    fired = np.flatnonzero(firing(codes)[0])
    fired = fired[np.lexsort((fired, -c[fired], -share[fired]))]
    names = getattr(model, "concept_names_", None)
    g = np.asarray(model.groups_)
    table = pd.DataFrame({"atom": fired.astype(int),
                          "concept": [str(names[g[a]]) if names is not None else str(int(g[a])) for a in fired],
                          "coefficient": c[fired], "share": share[fired]})
    if words is not None or word_embeddings is not None:
        if words is None or word_embeddings is None:
            raise ValueError("give both words and word_embeddings (the vocabulary and its prepared embeddings).")
        words = list(words)
        if len(words) != len(word_embeddings):
            raise ValueError(f"{len(words)} words for {len(word_embeddings)} word embeddings.")
        if fired.size:
            index, _ = atom_word_ranking(np.asarray(model.atoms_)[fired], word_embeddings, n_words)
            table["words"] = [", ".join(words[i] for i in row) for row in index]
        else:
            table["words"] = pd.Series([], dtype=object)
    return table


#: The activation levels of :func:`atom_activations`: the quantile of an atom's non-zero coefficients whose
#: nearest items are shown (1.0: the largest coefficients).
ACTIVATION_LEVELS = {"top": 1.0, "median": 0.5, "low": 0.1}


def codes_and_atom(codes, atom):
    """``(codes as float64 (n, M), atom as int)``, checked: 2-D codes and an atom among their columns."""
    C = np.asarray(codes, dtype=np.float64)
    if C.ndim != 2:
        raise ValueError(f"codes must be 2-D (n_items, n_atoms); got shape {C.shape}.")
    atom = int(atom)
    if not 0 <= atom < C.shape[1]:
        raise ValueError(f"atom {atom} out of range (0..{C.shape[1] - 1}).")
    return C, atom


def atom_activations(codes, atom, has_concept=None, *, k: int = 6, levels=None) -> dict:
    """How strongly and how often one atom fires over a set of items (an SAE dashboard's per-feature view).

    Parameters
    ----------
    codes : array-like of shape (n, M)
        Coefficients of the items (:func:`atom_codes`; without labels, so that the atom may fire on items
        that lack its concept).
    atom : int
    has_concept : array-like of bool, shape (n,), optional
        Whether each item carries the atom's concept: adds the firing frequency with and without it.
    k : int
        Items per activation level.
    levels : dict, optional
        ``{name: quantile}`` (default :data:`ACTIVATION_LEVELS`).

    Returns
    -------
    stats : dict
        ``values``: its coefficients on the items where it fires (:func:`firing`), in item order;
        ``n_items``, ``fires`` (items), ``frequency`` (``fires / n_items``; NaN without items);
        ``with_concept`` / ``without_concept``: ``(fires, items)`` among the items with / without the concept,
        and ``mean_with`` / ``mean_without``: its mean coefficient over those items, zeros included (NaN where
        there are none; all four absent without ``has_concept``); ``examples``: ``{level: (items,
        coefficients)}``, the ``k`` firing items whose coefficients are nearest the level's quantile of
        ``values`` (``np.quantile``, linear; nearest first, ties by item order; the top level's are the ``k``
        largest), item positions in ``codes``; ``quantiles``: ``{level: value}`` (NaN when it never fires).
    """
    C, atom = codes_and_atom(codes, atom)
    k = check_k(k)
    levels = dict(ACTIVATION_LEVELS if levels is None else levels)
    fires = firing(C)[:, atom]
    items = np.flatnonzero(fires)
    values = C[items, atom]
    n = C.shape[0]
    out = {"values": values, "n_items": int(n), "fires": int(items.size),
           "frequency": items.size / n if n else float("nan"), "examples": {}, "quantiles": {}}
    if has_concept is not None:
        has = np.asarray(has_concept).reshape(-1)
        if has.shape != (n,):
            raise ValueError(f"has_concept must have one entry per item ({n}); got shape {has.shape}.")
        has = has.astype(bool)
        out["with_concept"] = (int((fires & has).sum()), int(has.sum()))
        out["without_concept"] = (int((fires & ~has).sum()), int((~has).sum()))
        # mean coefficient over every item with / without the concept (zeros included): on a dictionary whose
        # label-free codes are dense, where an atom fires nearly everywhere, it is what tells the two apart
        out["mean_with"] = float(C[has, atom].mean()) if has.any() else float("nan")
        out["mean_without"] = float(C[~has, atom].mean()) if (~has).any() else float("nan")
    for name, q in levels.items():
        if not 0.0 <= float(q) <= 1.0:
            raise ValueError(f"activation level {name!r} must be a quantile between 0 and 1; got {q!r}.")
        if not items.size:
            out["quantiles"][name] = float("nan")
            out["examples"][name] = (np.zeros(0, dtype=int), np.zeros(0))
            continue
        v = float(np.quantile(values, float(q)))
        near = np.lexsort((items, np.abs(values - v)))[:k]
        out["quantiles"][name] = v
        out["examples"][name] = (items[near].astype(int), values[near])
    return out

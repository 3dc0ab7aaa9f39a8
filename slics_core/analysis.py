"""Dictionary analysis for the app (paper Fig. 6): atom co-occurrence and cosines; :func:`match_atoms` pairs the
atoms of two dictionaries (planted and learned, or two seeds' fits) one to one."""
from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment

from slics_core._validation import check_embeddings
from slics_core.rows import unit_rows


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

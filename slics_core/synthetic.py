"""Synthetic data with planted concept cones (ground truth for tests and demos).

Each concept ``j`` owns ``d0`` random unit atoms; a sample has one or more
concepts, and for each of them a *dominant* atom (its sub-label) with a large
coefficient plus, sometimes, small coefficients on the concept's other atoms.
The embedding is the sum of these non-negative combinations (paper eq. 1),
optionally with Gaussian noise. Knowing the atoms and sub-labels, tests can
check that SLiCS recovers the cones and that concept-filtered retrieval finds
samples with the same sub-label.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.utils import check_random_state

from slics_core.rows import unit_rows


@dataclass
class ConceptCones:
    """Planted data returned by :func:`make_concept_cones`.

    Attributes
    ----------
    X : ndarray of shape (n_samples, n_features)
        Embeddings ``coef @ atoms + noise``.
    Y : ndarray of bool, shape (n_samples, n_concepts)
        Concept labels.
    sublabels : ndarray of int, shape (n_samples, n_concepts)
        Index (within its concept, ``0..n_atoms-1``) of the dominant atom of
        each active concept, ``-1`` where the concept is absent.
    atoms : ndarray of shape (n_concepts * n_atoms, n_features)
        The planted unit atoms, grouped by concept.
    groups : ndarray of int, shape (n_concepts * n_atoms,)
        Concept of each atom.
    coef : ndarray of shape (n_samples, n_concepts * n_atoms)
        The planted non-negative coefficients.
    """

    X: np.ndarray
    Y: np.ndarray
    sublabels: np.ndarray
    atoms: np.ndarray
    groups: np.ndarray
    coef: np.ndarray


def make_concept_cones(n_samples=1000, n_features=64, n_concepts=6, n_atoms=3, mean_active=2.3,
                       secondary=0.3, noise=0.0, random_state=None):
    """Generate embeddings from known concept cones.

    Parameters
    ----------
    n_samples, n_features, n_concepts, n_atoms : int
        Sizes: ``N``, ``d``, ``S`` and ``d0`` (atoms per concept).
    mean_active : float, default=2.3
        Mean number of concepts per sample (``1 + Poisson(mean_active - 1)``,
        capped at ``n_concepts``); COCO has about 2.3.
    secondary : float, default=0.3
        Probability that a non-dominant atom of an active concept gets a
        small coefficient (uniform in ``[0, 0.3)``).
    noise : float, default=0.0
        Standard deviation of the isotropic Gaussian noise per sample
        (divided by ``sqrt(n_features)``, so it is the expected noise norm).
    random_state : int, RandomState or None
        Seed.

    Returns
    -------
    data : ConceptCones
    """
    if min(n_samples, n_features, n_concepts, n_atoms) < 1:
        raise ValueError("n_samples, n_features, n_concepts and n_atoms must all be >= 1.")
    if mean_active < 1:
        raise ValueError(f"mean_active must be >= 1; got {mean_active}.")
    rng = check_random_state(random_state)
    M = n_concepts * n_atoms
    atoms = rng.standard_normal((M, n_features))
    atoms = unit_rows(atoms)
    groups = np.repeat(np.arange(n_concepts), n_atoms)

    n_active = np.minimum(1 + rng.poisson(mean_active - 1, size=n_samples), n_concepts)
    Y = np.zeros((n_samples, n_concepts), dtype=bool)
    sublabels = np.full((n_samples, n_concepts), -1, dtype=np.int64)
    coef = np.zeros((n_samples, M))
    for i in range(n_samples):
        for j in rng.choice(n_concepts, size=n_active[i], replace=False):
            Y[i, j] = True
            dominant = rng.randint(n_atoms)
            sublabels[i, j] = dominant
            block = np.where(rng.random(n_atoms) < secondary, rng.uniform(0, 0.3, n_atoms), 0.0)
            block[dominant] = rng.uniform(0.7, 1.0)
            coef[i, j * n_atoms:(j + 1) * n_atoms] = block
    X = coef @ atoms
    if noise:
        X = X + noise / np.sqrt(n_features) * rng.standard_normal(X.shape)
    return ConceptCones(X=X, Y=Y, sublabels=sublabels, atoms=atoms, groups=groups, coef=coef)


def atom_recovery(planted_atoms, planted_groups, atoms, groups):
    """How well learned atoms recover planted ones, concept by concept.

    Parameters
    ----------
    planted_atoms : ndarray of shape (P, d)
    planted_groups : ndarray of int, shape (P,)
    atoms : ndarray of shape (M, d)
        Learned atoms (e.g. ``SLiCS.atoms_``).
    groups : ndarray of int, shape (M,)
        Concept of each learned atom.

    Returns
    -------
    best : ndarray of shape (P,)
        For each planted atom, the largest cosine similarity with a learned
        atom of the same concept (1 = recovered exactly; NaN if that concept
        has no learned atom).
    """
    P = np.asarray(planted_atoms, dtype=np.float64)
    B = np.asarray(atoms, dtype=np.float64)
    cos = unit_rows(P, name="planted_atoms") @ unit_rows(B, name="atoms").T
    same = np.asarray(planted_groups)[:, None] == np.asarray(groups)[None, :]
    best = np.where(same, cos, -np.inf).max(axis=1)
    return np.where(np.isfinite(best), best, np.nan)

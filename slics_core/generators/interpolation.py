"""Rows to draw from a fitted model: a concept's atoms and the atom interpolation of Fig. 3."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["interpolate_atoms", "concept_atoms"]


def interpolate_atoms(b1, b2, alphas: Sequence[float] = (0.25, 0.5, 0.75, 1.0)) -> np.ndarray:
    """Rows ``a*b1 + (1-a)*b2`` for each ``a`` in ``alphas`` (Fig. 3 of the paper).

    Returns
    -------
    ndarray of shape (len(alphas), d)
    """
    b1 = np.asarray(b1, dtype=np.float64)
    b2 = np.asarray(b2, dtype=np.float64)
    if b1.ndim != 1 or b1.shape != b2.shape:
        raise ValueError(f"b1 and b2 must be 1-D vectors of the same length, got {b1.shape} and {b2.shape}")
    if not (np.all(np.isfinite(b1)) and np.all(np.isfinite(b2))):
        raise ValueError("atoms contain NaN or infinite values")
    a = np.asarray(alphas, dtype=np.float64).ravel()
    if a.size == 0 or not np.all(np.isfinite(a)):
        raise ValueError("alphas must be a non-empty list of finite numbers")
    return a[:, None] * b1[None, :] + (1.0 - a[:, None]) * b2[None, :]


def concept_atoms(model, concept: int) -> np.ndarray:
    """Atoms ``(k, d)`` of concept ``concept`` of a fitted SLiCS model."""
    if not hasattr(model, "atoms_") or not hasattr(model, "groups_"):
        raise ValueError("model must be a fitted SLiCS model (with atoms_ and groups_)")
    groups = np.asarray(model.groups_)
    if isinstance(concept, bool) or not isinstance(concept, (int, np.integer)) or not 0 <= concept <= groups.max():
        raise ValueError(f"concept must be an integer in [0, {int(groups.max())}], got {concept!r}")
    return np.asarray(model.atoms_)[groups == concept]

"""A test helper: one label's profile computed from the model in one call (the pages read stored energies).

:func:`label_profile` chains :func:`slics_core.explorer.atom_tables.concept_energy` on ``X`` and
:func:`slics_core.explorer.atom_tables.profile_table`, the two steps the Atoms page takes apart (the
energies are computed at build time and stored).
"""
import numpy as np

from slics_core.explorer.atom_tables import concept_energy, profile_table


def label_profile(model, X, Y_or_Z, label, *, Y=None, concept_names=None, words=None):
    """:func:`profile_table` of column ``label`` of ``Y_or_Z`` (``Y`` for ``P(concept | label)``: default
    ``Y_or_Z``) over the energies of ``X``; concept names default to the model's."""
    L = np.asarray(Y_or_Z)
    Y = L if Y is None else np.asarray(Y)
    names = list(concept_names if concept_names is not None else model.concept_names_)
    return profile_table(concept_energy(model, X), L, label, Y, names, words)

"""Dictionary health (slics_core.analysis.dictionary_health) on planted dictionaries.

The items and their coefficients come from :func:`slics_core.synthetic.make_concept_cones`; the dictionary
they are made from is planted here with a structure (each concept's atoms scattered around a concept
centre, |cos| about 0.75 within a concept and below 0.3 between concepts), so that a healthy dictionary
carries no flag and each planted defect carries exactly its own.
"""
import numpy as np
import pandas as pd
import pytest
from scipy.optimize import nnls

from slics_core.analysis import (
    DENSE_SHARE,
    FIRE_RTOL,
    HEALTH_FLAGS,
    dictionary_health,
    firing,
)
from slics_core.rows import unit_rows
from slics_core.slics import SLiCS
from slics_core.synthetic import make_concept_cones

S, K, D = 4, 3, 96  # concepts, atoms per concept, dimension


@pytest.fixture(scope="module")
def planted():
    data = make_concept_cones(n_samples=600, n_features=D, n_concepts=S, n_atoms=K, random_state=0)
    rng = np.random.RandomState(1)
    centres = unit_rows(rng.standard_normal((S, D)))
    atoms = unit_rows(np.repeat(centres, K, axis=0) + 0.6 * rng.standard_normal((S * K, D)) / np.sqrt(D))
    return data, centres, atoms, np.repeat(np.arange(S), K), rng


def _model(atoms, groups, X, Y):
    """A SLiCS whose dictionary is the planted one (fitted for its bookkeeping, then given the atoms)."""
    m = SLiCS(n_atoms=K, n_iter=0).fit(X, Y)
    m.atoms_, m.groups_ = np.asarray(atoms, dtype=np.float64), np.asarray(groups)
    return m


def _flags(atoms, groups, X, Y):
    h = dictionary_health(_model(atoms, groups, X, Y), X, Y)
    return {int(a): set(f) for a, f in zip(h.atom, h["flags"]) if f}


def test_the_table_has_the_pinned_columns_one_row_per_atom(planted):
    data, _, atoms, groups, _ = planted
    X = data.coef @ atoms
    h = dictionary_health(_model(atoms, groups, X, data.Y), X, data.Y)
    assert isinstance(h, pd.DataFrame)
    assert list(h.columns[:7]) == ["concept", "atom", "frequency", "mean_coefficient", "nearest_own",
                                   "nearest_other", "flags"]
    assert h.atom.tolist() == list(range(S * K))
    assert h.concept.tolist() == [f"concept {g}" for g in groups]
    assert all(isinstance(f, list) and set(f) <= set(HEALTH_FLAGS) for f in h["flags"])


def test_a_healthy_planted_dictionary_has_no_flag(planted):
    data, _, atoms, groups, _ = planted
    X = data.coef @ atoms
    assert _flags(atoms, groups, X, data.Y) == {}


def test_a_dead_atom_is_flagged_dead_and_nothing_else(planted):
    data, _, atoms, groups, rng = planted
    X = data.coef @ atoms
    # an extra atom of concept 0, near -atom 0 but leaning out of the data's span: NNLS never uses it
    Q, _ = np.linalg.qr(atoms.T, mode="complete")
    e = Q[:, S * K]  # orthogonal to every atom, so to every item
    dead = unit_rows((-atoms[0] + 0.5 * e)[None])[0]
    new = np.insert(atoms, K, dead, axis=0)
    new_groups = np.insert(groups, K, 0)
    assert _flags(new, new_groups, X, data.Y) == {K: {"dead"}}


def test_a_duplicated_atom_flags_both_of_the_pair_and_nothing_else(planted):
    data, _, atoms, groups, rng = planted
    dup = atoms.copy()
    dup[4] = unit_rows((atoms[3] + 0.15 * rng.standard_normal(D) / np.sqrt(D))[None])[0]
    assert abs(dup[3] @ dup[4]) >= 0.95
    X = data.coef @ dup  # the items use both atoms of the pair
    assert _flags(dup, groups, X, data.Y) == {3: {"duplicate"}, 4: {"duplicate"}}


def test_an_atom_moved_into_another_concepts_cluster_is_misplaced_and_nothing_else(planted):
    data, centres, atoms, groups, rng = planted
    moved = atoms.copy()
    # atom 6 belongs to concept 2 but lies towards concept 3's atoms (nearer them than its own group's)
    moved[6] = unit_rows((0.6 * centres[3] + 0.8 * unit_rows(rng.standard_normal((1, D)))[0])[None])[0]
    X = data.coef @ moved
    assert _flags(moved, groups, X, data.Y) == {6: {"misplaced"}}


def test_rare_and_dense(planted):
    data, _, atoms, groups, _ = planted
    coef = data.coef.copy()
    users = np.flatnonzero(coef[:, 0] > 0)
    coef[users[3:], 1] += coef[users[3:], 0]  # atom 0 used by 3 items only (its weight moved to atom 1)
    coef[users[3:], 0] = 0.0
    c1 = np.flatnonzero(data.Y[:, 1])
    coef[c1, 4] = 0.5  # atom 4 used by every item of concept 1
    X = coef @ atoms
    assert _flags(atoms, groups, X, data.Y) == {0: {"rare"}, 4: {"dense"}}
    # two atoms per concept: no atom is dense, however often it fires
    data2 = make_concept_cones(n_samples=600, n_features=D, n_concepts=S, n_atoms=2, random_state=0)
    keep = np.flatnonzero(np.arange(S * K) % K != 2)
    coef2 = data2.coef.copy()
    c1 = np.flatnonzero(data2.Y[:, 1])
    coef2[c1, 2] = 0.5  # atom 0 of concept 1 used by every item of concept 1
    X2 = coef2 @ atoms[keep]
    h = dictionary_health(_model(atoms[keep], groups[keep], X2, data2.Y), X2, data2.Y)
    assert h.concept_share[2] == 1.0
    assert not any("dense" in f for f in h["flags"])
    assert DENSE_SHARE == 0.9


def test_frequency_and_mean_coefficient_match_a_direct_computation(planted):
    data, _, atoms, groups, _ = planted
    X = data.coef @ atoms + 0.02 * np.random.RandomState(5).standard_normal((data.coef.shape[0], D))
    Y = data.Y
    h = dictionary_health(_model(atoms, groups, X, Y), X, Y)
    # NNLS one item at a time with scipy, on the atoms of its labelled concepts
    codes = np.zeros((X.shape[0], atoms.shape[0]))
    for i in range(X.shape[0]):
        allowed = np.flatnonzero(Y[i][groups])
        codes[i, allowed] = nnls(atoms[allowed].T, X[i])[0]
    fires = codes > FIRE_RTOL * codes.max(axis=1, keepdims=True)
    np.testing.assert_allclose(h.frequency, fires.mean(axis=0))
    expected_mean = [codes[fires[:, a], a].mean() for a in range(atoms.shape[0])]
    np.testing.assert_allclose(h.mean_coefficient, expected_mean, rtol=1e-6)
    np.testing.assert_array_equal(firing(codes), fires)
    # nearest atoms: |cos| straight from the atoms
    U = atoms / np.linalg.norm(atoms, axis=1, keepdims=True)
    C = np.abs(U @ U.T)
    for a in range(atoms.shape[0]):
        own = [C[a, b] for b in range(atoms.shape[0]) if b != a and groups[b] == groups[a]]
        other = [C[a, b] for b in range(atoms.shape[0]) if groups[b] != groups[a]]
        assert h.nearest_own[a] == pytest.approx(max(own))
        assert h.nearest_other[a] == pytest.approx(max(other))


def test_an_item_without_coefficients_fires_nothing():
    codes = np.array([[0.0, 0.0], [1.0, 1e-9], [2.0, 1e-3]])
    np.testing.assert_array_equal(firing(codes), [[False, False], [True, False], [True, True]])


def test_health_note_speaks_only_when_every_atom_carries_a_flag():
    from slics_core.analysis import HEALTH_FLAGS
    from slics_core.explorer.atom_tables import health_note

    none = dict.fromkeys(HEALTH_FLAGS, 0)
    assert health_note(none, 10) is None
    assert health_note({**none, "misplaced": 9}, 10) is None  # one atom is not: the flag tells atoms apart
    assert "Fig. 6" in health_note({**none, "misplaced": 10}, 10)
    assert "*dense*" in health_note({**none, "dense": 4}, 4) and health_note(none, 0) is None

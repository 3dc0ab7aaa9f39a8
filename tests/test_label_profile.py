"""Per-label concept profiles (slics_core.explorer.atom_tables.concept_energy + profile_table): against a direct numpy
computation on a fitted dictionary, and on planted cones where a concept the labels never name shows up."""
import numpy as np
import pytest

from slics_core.explorer.atom_tables import (
    concept_energy,
    concept_words,
    label_options,
    profile_table,
)
from slics_core.slics import SLiCS
from slics_core.synthetic import make_concept_cones
from tests.label_profiles import label_profile

S, K, D = 4, 3, 96


def _direct(model, X, rows):
    """``‖v_j‖²/‖x̂‖²`` from ``transform(X, None)`` by hand: v_j = codes of concept j's atoms @ those atoms."""
    codes = model.transform(X[rows], None)
    g = np.asarray(model.groups_)
    V = np.stack([codes[:, g == j] @ model.atoms_[g == j] for j in range(model.n_concepts_)], axis=1)
    xhat = V.sum(axis=1)
    return (V ** 2).sum(axis=2) / (xhat ** 2).sum(axis=1, keepdims=True)


@pytest.fixture(scope="module")
def fitted():
    data = make_concept_cones(n_samples=400, n_features=D, n_concepts=S, n_atoms=K, noise=0.05, random_state=0)
    model = SLiCS(n_atoms=K, n_iter=3, random_state=0).fit(data.X, data.Y)
    Z = np.zeros((len(data.X), S * K), dtype=bool)  # sub-label k of concept j: its dominant atom
    for j in range(S):
        for k in range(K):
            Z[:, j * K + k] = data.sublabels[:, j] == k
    return data, model, Z


def test_profile_of_a_concept_matches_a_direct_computation(fitted):
    data, model, _ = fitted
    for label in range(S):
        rows = np.flatnonzero(data.Y[:, label])
        table = label_profile(model, data.X, data.Y, label)
        assert table.concept.tolist() == list(model.concept_names_)
        np.testing.assert_allclose(table.energy, _direct(model, data.X, rows).mean(axis=0), rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(table.p_concept, data.Y[rows].mean(axis=0))
        every = _direct(model, data.X, np.arange(len(data.X)))
        share = every / every.sum(axis=1, keepdims=True)
        np.testing.assert_allclose(table.share, share[rows].mean(axis=0), rtol=1e-6)
        np.testing.assert_allclose(table.lift, share[rows].mean(axis=0) / share.mean(axis=0), rtol=1e-6)
        assert table.p_concept[label] == 1.0
        assert (table.n_items == rows.size).all()


def test_profile_of_a_sub_label_uses_its_items_and_the_concept_labels(fitted):
    data, model, Z = fitted
    label = 2 * K + 1  # concept 2's second sub-label
    rows = np.flatnonzero(Z[:, label])
    table = label_profile(model, data.X, Z, label, Y=data.Y)
    np.testing.assert_allclose(table.energy, _direct(model, data.X, rows).mean(axis=0), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(table.p_concept, data.Y[rows].mean(axis=0))
    # the page's path (energies of every item, then a mean over the label's rows) gives the same table
    fast = profile_table(concept_energy(model, data.X), Z, label, data.Y, model.concept_names_)
    np.testing.assert_allclose(fast.energy, table.energy, rtol=1e-9)


def test_a_spurious_concept_shows_in_the_profile_but_not_in_the_labels():
    """Every item of concept 0 also carries concept 2's first atom, which its labels never name: the profile of
    concept 0 shows concept 2's planted energy on the items not labelled 2, while P(2 | label) there is 0."""
    data = make_concept_cones(n_samples=500, n_features=D, n_concepts=S, n_atoms=K, random_state=1)
    coef = data.coef.copy()
    carrier = data.Y[:, 0] & ~data.Y[:, 2]
    coef[carrier, 2 * K] = 0.8
    X = coef @ data.atoms
    model = SLiCS(n_atoms=K, n_iter=0).fit(X, data.Y)
    model.atoms_, model.groups_ = data.atoms.copy(), data.groups.copy()  # the planted dictionary
    table = label_profile(model, X[carrier], data.Y[carrier], 0)
    planted = np.stack([(coef[carrier][:, data.groups == j] @ data.atoms[data.groups == j]) for j in range(S)], 1)
    expected = (planted ** 2).sum(axis=2) / (X[carrier] ** 2).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(table.energy, expected.mean(axis=0), atol=1e-6)
    assert table.p_concept[2] == 0.0
    assert table.energy[2] > 0.2  # shows, though no item here is labelled 2
    # without the planted atom the same items carry no concept-2 energy
    clean = label_profile(model, data.X[carrier], data.Y[carrier], 0)
    assert clean.energy[2] < 1e-8


def test_words_and_options_and_bad_labels(fitted):
    data, model, Z = fitted
    words = [f"w{i}" for i in range(20)]
    W = np.random.RandomState(0).standard_normal((20, D))
    per_concept = concept_words(model, words, W, k=3, prepared=False)
    table = label_profile(model, data.X, data.Y, 0, words=per_concept)
    assert table.words.tolist() == [", ".join(w) for w in per_concept]
    assert all(len(w) == 3 for w in per_concept)
    opts = label_options(["a", "b"], ["a1", "b1", "b2"], [0, 1, 1])
    assert opts == [("concept", 0, "a"), ("concept", 1, "b"), ("sub", 0, "a1 (a)"), ("sub", 1, "b1 (b)"),
                    ("sub", 2, "b2 (b)")]
    assert label_options(["a"]) == [("concept", 0, "a")]
    with pytest.raises(ValueError, match="label 9 out of range"):
        label_profile(model, data.X, data.Y, 9)
    empty = label_profile(model, data.X, np.zeros_like(data.Y), 0, Y=data.Y)
    assert empty.n_items.eq(0).all() and empty.energy.isna().all()


def test_lift_puts_a_concept_on_top_of_its_own_label_where_a_loud_concept_tops_the_raw_ratio():
    """Planted: concept 3's atoms are scaled up on every item (a loud concept, as electronic and appliance on
    the emoji world), so its raw ratio tops every label's profile; the lift (share over every item's mean share)
    puts each label's own concept on top again."""
    data = make_concept_cones(n_samples=600, n_features=D, n_concepts=S, n_atoms=K, noise=0.02, random_state=3)
    coef = data.coef.copy()
    coef[:, data.groups == 3] *= 4.0
    coef[:, data.groups == 3] += 0.5  # every item carries concept 3 loudly
    X = coef @ data.atoms
    model = SLiCS(n_atoms=K, n_iter=0).fit(X, data.Y)
    model.atoms_, model.groups_ = data.atoms.copy(), data.groups.copy()
    for label in range(3):
        t = label_profile(model, X, data.Y, label)
        assert int(np.argmax(t.energy)) == 3, t  # the loud concept tops the raw ratio
        assert int(np.argmax(t.lift)) == label, t
        np.testing.assert_allclose(t.share.sum(), 1.0, atol=1e-9)


def test_lift_band_holds_random_labels_about_95_percent_and_flags_a_planted_one():
    """The lift's null band: labels given to random items of the same size lie inside it ~95 % of the time
    (each concept's 2.5-97.5 % band), a label given to the items richest in one concept lies above it."""
    rng = np.random.default_rng(8)
    E = rng.gamma(2.0, 1.0, (1500, 5)) * np.array([1.0, 2.0, 0.5, 1.0, 3.0])
    Y = rng.random((1500, 5)) < 0.3
    names = list("abcde")
    inside = []
    for t in range(150):
        L = np.zeros((1500, 1), dtype=bool)
        L[rng.choice(1500, 60, replace=False), 0] = True
        table = profile_table(E, L, 0, Y, names, seed=t)
        assert (table.lift_lo <= table.lift_hi).all()
        inside.append(table.in_band.to_numpy())
    assert 0.91 <= np.mean(inside) <= 0.98
    share = E / E.sum(axis=1, keepdims=True)
    L = np.zeros((1500, 1), dtype=bool)
    L[np.argsort(share[:, 2])[-60:], 0] = True  # planted: the items where concept c is loudest
    table = profile_table(E, L, 0, Y, names)
    assert not table.in_band[2] and table.lift[2] > table.lift_hi[2]
    # the same seed gives the same band; no band when asked for none
    again = profile_table(E, L, 0, Y, names)
    np.testing.assert_array_equal(again.lift_lo, table.lift_lo)
    assert profile_table(E, L, 0, Y, names, n_null=0).lift_lo.isna().all()

"""One item's atoms and one atom's activations (slics_core.analysis.item_atoms, atom_codes, energy_shares,
atom_activations; slics_core.captions.atom_word_ranking), each against an independent computation on a planted
dictionary: scipy's NNLS, plain loops, np.quantile."""
import numpy as np
import pytest
from scipy.optimize import nnls

from slics_core.analysis import (
    ACTIVATION_LEVELS,
    FIRE_RTOL,
    atom_activations,
    atom_codes,
    energy_shares,
    item_atoms,
)
from slics_core.captions import atom_word_ranking
from slics_core.rows import unit_rows
from slics_core.slics import SLiCS
from slics_core.synthetic import make_concept_cones

S, K, D = 3, 2, 24  # concepts, atoms per concept, dimension


@pytest.fixture(scope="module")
def planted():
    """A SLiCS whose dictionary is planted (unit atoms of unequal norms after scaling one), and its items."""
    data = make_concept_cones(n_samples=80, n_features=D, n_concepts=S, n_atoms=K, random_state=0)
    rng = np.random.RandomState(3)
    atoms = unit_rows(rng.standard_normal((S * K, D)))
    atoms[1] *= 2.0  # one atom of another length: shares weigh coefficients by ‖b‖²
    model = SLiCS(n_atoms=K, n_iter=0).fit(data.X, data.Y, concept_names=["red", "green", "blue"])
    model.atoms_, model.groups_ = atoms, np.repeat(np.arange(S), K)
    return model, data, rng


def _scipy_codes(atoms, x, allowed):
    c = np.zeros(atoms.shape[0])
    idx = np.flatnonzero(allowed)
    c[idx] = nnls(atoms[idx].T, x)[0]
    return c


def test_atom_codes_match_scipy_nnls_in_both_modes(planted):
    model, data, _ = planted
    B, g = model.atoms_, model.groups_
    X, Y = data.X[:15], data.Y[:15].astype(bool)
    full_labelled = atom_codes(model, X, Y, "full")
    full_all = atom_codes(model, X, None, "full")
    partial = atom_codes(model, X, None, "partial")
    for i, x in enumerate(X):
        np.testing.assert_allclose(full_labelled[i], _scipy_codes(B, x, Y[i][g]), atol=1e-6)
        np.testing.assert_allclose(full_all[i], _scipy_codes(B, x, np.ones(g.size, bool)), atol=1e-6)
        expect = sum((_scipy_codes(B, x, g == j) for j in range(S)), np.zeros(g.size))
        np.testing.assert_allclose(partial[i], expect, atol=1e-6)
    with pytest.raises(ValueError, match="partial"):
        atom_codes(model, X, Y, "partial")
    with pytest.raises(ValueError, match="component mode"):
        atom_codes(model, X, None, "joint")


def test_energy_shares_are_squared_term_lengths_over_their_sum(planted):
    model, data, _ = planted
    codes = atom_codes(model, data.X[:10])
    shares = energy_shares(codes, model.atoms_)
    for i in range(10):
        terms = [np.sum((codes[i, a] * model.atoms_[a]) ** 2) for a in range(codes.shape[1])]
        np.testing.assert_allclose(shares[i], np.array(terms) / sum(terms), atol=1e-12)
    np.testing.assert_allclose(shares.sum(axis=1), 1.0)
    assert not energy_shares(np.zeros((1, codes.shape[1])), model.atoms_).any()  # nothing fires: all 0
    with pytest.raises(ValueError, match="one code column per atom"):
        energy_shares(codes[:, :-1], model.atoms_)


def test_item_atoms_on_a_planted_item(planted):
    """x = 3 b0 + 1 b3 (b3 of concept 1): those two atoms fire, with those coefficients and shares."""
    model, _, rng = planted
    B = model.atoms_
    x = 3.0 * B[0] + 1.0 * B[3]
    table = item_atoms(model, x)  # every concept
    assert table.atom.tolist() == [0, 3]
    np.testing.assert_allclose(table.coefficient, [3.0, 1.0], atol=1e-6)
    e0, e3 = 9.0 * B[0] @ B[0], 1.0 * B[3] @ B[3]
    np.testing.assert_allclose(table.share, [e0 / (e0 + e3), e3 / (e0 + e3)], atol=1e-6)
    assert table.concept.tolist() == ["red", "green"]
    # decomposed over concept 0 only: only concept 0's atoms may fire
    only_red = item_atoms(model, x, y=[1, 0, 0])
    assert set(only_red.atom) <= {0, 1}
    np.testing.assert_allclose(only_red.share.sum(), 1.0)


def test_item_atoms_agree_with_scipy_and_the_firing_rule_on_random_items(planted):
    model, data, _ = planted
    B, g = model.atoms_, model.groups_
    for i in range(12):
        x, y = data.X[i], data.Y[i].astype(bool)
        for y_given in (None, y):
            allowed = np.ones(g.size, bool) if y_given is None else y[g]
            c = _scipy_codes(B, x, allowed)
            fires = np.flatnonzero(c > FIRE_RTOL * c.max())
            e = c ** 2 * (B ** 2).sum(axis=1)
            order = sorted(fires, key=lambda a: (-e[a], -c[a], a))
            table = item_atoms(model, x, y_given)
            assert table.atom.tolist() == order
            np.testing.assert_allclose(table.coefficient, c[order], atol=1e-6)
            np.testing.assert_allclose(table.share, e[order] / e.sum(), atol=1e-6)
        partial = item_atoms(model, x, mode="partial")
        c = sum((_scipy_codes(B, x, g == j) for j in range(S)), np.zeros(g.size))
        assert set(partial.atom) == set(np.flatnonzero(c > FIRE_RTOL * c.max()))


def test_item_atoms_words_are_each_atoms_closest_words(planted):
    model, _, rng = planted
    B = model.atoms_
    W = unit_rows(np.vstack([B[a] + 0.3 * rng.standard_normal(D) / np.sqrt(D) for a in range(B.shape[0])]
                            + [rng.standard_normal((20, D))]))
    words = [f"w{i}" for i in range(W.shape[0])]
    table = item_atoms(model, 2.0 * B[2] + 0.5 * B[5], words=words, word_embeddings=W, n_words=2)
    for a, text in zip(table.atom, table.words):
        cos = W @ B[a] / np.linalg.norm(B[a])
        best = sorted(range(len(words)), key=lambda i: (-cos[i], i))[:2]
        assert text == ", ".join(words[i] for i in best)
    assert table.words.iloc[0].split(", ")[0] == "w2"  # the word planted next to atom 2
    with pytest.raises(ValueError, match="both words and word_embeddings"):
        item_atoms(model, B[0], words=words)
    empty = item_atoms(model, np.zeros(D), mode="partial", words=words, word_embeddings=W)  # nothing fires
    assert len(empty) == 0 and "words" in empty.columns
    with pytest.raises(ValueError, match="one item"):
        item_atoms(model, np.ones((2, D)))


def test_atom_word_ranking_is_the_cosine_order():
    rng = np.random.RandomState(0)
    B, W = rng.standard_normal((3, 8)), rng.standard_normal((30, 8))
    W[4] = 0.0  # a zero word has cosine 0
    W[7] = W[5]  # a tie in cosine: vocabulary order
    index, cos = atom_word_ranking(B, W, k=30)
    for a in range(3):
        c = [0.0 if not W[i].any() else W[i] @ B[a] / np.linalg.norm(W[i]) / np.linalg.norm(B[a]) for i in range(30)]
        np.testing.assert_allclose(cos[a], sorted(c, reverse=True), atol=1e-12)
        assert list(index[a]).index(5) < list(index[a]).index(7)
    with pytest.raises(ValueError, match="zero or not finite"):
        atom_word_ranking(np.zeros(8), W)


def test_atom_activations_against_loops():
    rng = np.random.RandomState(5)
    n, M, atom = 200, 6, 2
    codes = np.where(rng.rand(n, M) < 0.4, rng.exponential(size=(n, M)), 0.0)
    codes[3] = 0.0  # an item with nothing: fires nothing
    codes[7, atom] = 1e-9 * codes[7].max()  # numerical dust: below the firing rule
    has = rng.rand(n) < 0.3
    stats = atom_activations(codes, atom, has, k=4)
    fired = [i for i in range(n) if codes[i, atom] > FIRE_RTOL * codes[i].max()]
    assert 7 not in fired
    np.testing.assert_array_equal(stats["values"], codes[fired, atom])
    assert stats["fires"] == len(fired) and stats["n_items"] == n
    assert stats["frequency"] == pytest.approx(len(fired) / n)
    assert stats["with_concept"] == (sum(has[i] for i in fired), int(has.sum()))
    assert stats["without_concept"] == (sum(not has[i] for i in fired), int((~has).sum()))
    with_values = [codes[i, atom] for i in range(n) if has[i]]  # every item with the concept, zeros included
    without_values = [codes[i, atom] for i in range(n) if not has[i]]
    assert stats["mean_with"] == pytest.approx(sum(with_values) / len(with_values))
    assert stats["mean_without"] == pytest.approx(sum(without_values) / len(without_values))
    values = codes[fired, atom]
    for level, q in ACTIVATION_LEVELS.items():
        v = np.quantile(values, q)
        expect = sorted(fired, key=lambda i: (abs(codes[i, atom] - v), i))[:4]
        rows, coefs = stats["examples"][level]
        assert rows.tolist() == expect
        np.testing.assert_array_equal(coefs, codes[expect, atom])
        assert stats["quantiles"][level] == pytest.approx(v)
    top_rows, _ = stats["examples"]["top"]
    assert sorted(codes[top_rows, atom]) == sorted(values)[-4:]  # the top level: the largest coefficients
    never = atom_activations(np.zeros((5, 3)), 1)
    assert never["fires"] == 0 and np.isnan(never["quantiles"]["median"]) and not len(never["examples"]["top"][0])
    with pytest.raises(ValueError, match="out of range"):
        atom_activations(codes, M)
    with pytest.raises(ValueError, match="one entry per item"):
        atom_activations(codes, 0, has[:-1])

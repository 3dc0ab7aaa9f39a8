"""Preprocessing, unsupervised pseudo-labels, NN-OMP, analysis and synthetic data."""
import numpy as np
import pytest
from scipy.optimize import nnls

from slics_core import SLiCS
from slics_core.analysis import atom_cooccurrence, atom_cosine
from slics_core.preprocessing import EmbeddingNormalizer, TokenNormalizer, normalize_tokens
from slics_core.sparse_coding import nn_omp
from slics_core.synthetic import atom_recovery, make_concept_cones
from slics_core.unsupervised import estimate_n_active, zero_shot_labels


def test_embedding_normalizer_follows_the_papers_recipe():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 8)) * rng.random((50, 1)) * 5
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    fitted = EmbeddingNormalizer().fit(X)
    np.testing.assert_allclose(fitted.mean_, U.mean(axis=0))
    C = U - U.mean(axis=0)
    np.testing.assert_allclose(fitted.transform(X), C / np.linalg.norm(C, axis=1, keepdims=True))
    mean = rng.normal(size=8) * 0.1
    given = EmbeddingNormalizer(mean=mean).fit(X).transform(X)
    expected = (U - mean) / np.linalg.norm(U - mean, axis=1, keepdims=True)
    np.testing.assert_allclose(given, expected)
    np.testing.assert_allclose(EmbeddingNormalizer(center=False).fit_transform(X), U)
    with pytest.raises(ValueError, match="features"):
        fitted.transform(X[:, :5])


def test_token_normalizer_normalises_each_token():
    rng = np.random.default_rng(1)
    T = rng.normal(size=(4, 32, 12))
    out = TokenNormalizer(32).fit_transform(T.reshape(4, -1))
    assert out.shape == (4, 384)
    tokens = out.reshape(4, 32, 12)
    np.testing.assert_allclose(np.linalg.norm(tokens, axis=-1), 1)
    np.testing.assert_allclose(tokens[2, 5], T[2, 5] / np.linalg.norm(T[2, 5]))
    np.testing.assert_allclose(normalize_tokens(T), tokens)
    with pytest.raises(ValueError):
        TokenNormalizer(32).fit(np.ones((2, 100)))
    T[0, 0] = 0
    with pytest.raises(ValueError, match="all zero"):
        normalize_tokens(T)


def test_zero_shot_labels_pick_the_most_similar_concepts():
    W = np.eye(4, 6)
    X = np.array([[0.9, 0.5, 0.1, 0.0, 0.3, 0.0], [0.0, 0.1, 0.2, 0.8, 0.0, 0.0]])
    Y = zero_shot_labels(X, W, n_active=2, min_positives=0)
    assert Y.tolist() == [[True, True, False, False], [False, False, True, True]]
    ref = np.array([[1, 1, 0, 0], [1, 1, 1, 0], [0, 0, 1, 1]])  # mean 2.33 -> 2
    assert estimate_n_active(ref) == 2
    np.testing.assert_array_equal(zero_shot_labels(X, W, Y_ref=ref, min_positives=0), Y)
    with pytest.raises(ValueError, match="n_active"):
        zero_shot_labels(X, W)
    with pytest.raises(ValueError, match="features"):
        zero_shot_labels(X, np.eye(4, 5), n_active=1)


def test_nn_omp_recovers_sparse_non_negative_codes():
    data = make_concept_cones(n_samples=60, n_features=64, n_concepts=4, n_atoms=3, secondary=0.0,
                              random_state=3)
    codes = nn_omp(data.X, data.atoms, n_nonzero_coefs=4)
    assert (codes >= 0).all() and ((codes > 0).sum(axis=1) <= 4).all()
    # each sample has at most 4 planted atoms (1 per concept); nearly orthogonal atoms -> exact support
    planted = data.coef > 0
    ok = np.array([((codes[i] > 1e-8) == planted[i]).all() for i in range(60) if planted[i].sum() <= 4])
    assert ok.mean() > 0.9
    # the coefficients on the chosen support are the NNLS optimum there
    i = 0
    P = np.flatnonzero(codes[i])
    ref, _ = nnls(data.atoms[P].T, data.X[i])
    np.testing.assert_allclose(codes[i, P], ref, atol=1e-8)


def test_cooccurrence_and_cosine_summaries():
    codes = np.array([[1, 0, 2, 0], [1, 1, 0, 0], [0, 1, 1, 0]], dtype=float)
    C = atom_cooccurrence(codes)
    np.testing.assert_allclose(C[0], [1, 0.5, 0.5, 0])
    np.testing.assert_allclose(C[1], [0.5, 1, 0.5, 0])
    assert np.isnan(C[3]).all()
    atoms = np.array([[1, 0, 0], [0, 1, 0], [1, 1, 0], [0, 0, 1]], dtype=float)
    cos, summary = atom_cosine(atoms, [0, 0, 1, 1])
    s = 1 / np.sqrt(2)
    np.testing.assert_allclose(cos[0, 2], s)
    assert summary["within_mean"] == pytest.approx(0.0)
    between = [s, 0, s, 0]
    assert summary["between_mean"] == pytest.approx(np.mean(between))
    assert summary["between_std"] == pytest.approx(np.std(between))


def test_cooccurrence_of_a_fitted_dictionary_shows_group_structure():
    data = make_concept_cones(n_samples=600, n_features=48, n_concepts=4, n_atoms=3, noise=0.05,
                              random_state=5)
    model = SLiCS(n_atoms=3, n_iter=8).fit(data.X, data.Y)
    C = atom_cooccurrence(nn_omp(data.X, model.atoms_, n_nonzero_coefs=6))
    same = model.groups_[:, None] == model.groups_[None, :]
    off = ~np.eye(len(same), dtype=bool)
    assert np.nanmean(C[same & off]) > np.nanmean(C[~same])


def test_synthetic_cones_are_what_they_claim():
    data = make_concept_cones(n_samples=500, n_features=20, n_concepts=6, n_atoms=3, random_state=0)
    np.testing.assert_allclose(data.X, data.coef @ data.atoms)
    np.testing.assert_allclose(np.linalg.norm(data.atoms, axis=1), 1)
    active = np.stack([(data.coef[:, data.groups == j] > 0).any(axis=1) for j in range(6)], axis=1)
    np.testing.assert_array_equal(active, data.Y)
    assert ((data.sublabels >= 0) == data.Y).all()
    assert 1.9 < data.Y.sum(axis=1).mean() < 2.7
    again = make_concept_cones(n_samples=500, n_features=20, n_concepts=6, n_atoms=3, random_state=0)
    np.testing.assert_array_equal(again.X, data.X)


def test_atom_recovery_against_a_hand_computed_case():
    planted = np.array([[1.0, 0, 0], [0, 1.0, 0], [0, 0, 2.0]])
    learned = np.array([[0.6, 0.8, 0], [0, 0, -1.0], [1.0, 0, 0]])
    best = atom_recovery(planted, [0, 0, 1], learned, [0, 1, 1])
    np.testing.assert_allclose(best[:2], [0.6, 0.8])
    assert best[2] == pytest.approx(0.0)  # concept 1 atoms only: cosines -1 and 0
    assert np.isnan(atom_recovery(planted, [0, 0, 2], learned, [0, 1, 1])[2])


def test_zero_shot_labels_keep_min_positives_per_concept():
    """A concept that is never among an image's top-S~ keeps its best-scoring images (named in a warning)."""
    rng = np.random.default_rng(0)
    W = np.eye(3, 8)
    X = np.abs(rng.standard_normal((40, 8))) * np.array([1, 1, 0.05, 0, 0, 0, 0, 0]) + 0.01
    plain = zero_shot_labels(X, W, n_active=1, min_positives=0)
    assert plain[:, 2].sum() == 0  # the top-1 rule alone leaves concept 2 empty
    with pytest.warns(RuntimeWarning, match="night"):
        Y = zero_shot_labels(X, W, n_active=1, min_positives=5, concept_names=["a", "b", "night"])
    assert Y[:, 2].sum() == 5
    top5 = np.argsort(-(X / np.linalg.norm(X, axis=1, keepdims=True))[:, 2], kind="stable")[:5]
    assert set(np.flatnonzero(Y[:, 2])) == set(top5)
    np.testing.assert_array_equal(Y[:, :2] | plain[:, :2], Y[:, :2])  # nothing removed
    with pytest.raises(ValueError, match="min_positives"):
        zero_shot_labels(X, W, n_active=1, min_positives=-1)

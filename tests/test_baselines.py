"""SpLiCE / F-SpLiCE baselines and S-SVD."""
import numpy as np
import pytest

from slics_core.baselines import FSpLiCE, SpLiCE, group_vocabulary, supervised_svd


def _unit(A):
    return A / np.linalg.norm(A, axis=-1, keepdims=True)


def test_splice_satisfies_nonnegative_lasso_kkt_and_recovers_planted_words():
    rng = np.random.default_rng(0)
    C = _unit(rng.standard_normal((200, 64)))
    X = 0.8 * C[3] + 0.6 * C[10] + 0.3 * C[50]
    X = np.vstack([X, 0.9 * C[7] + 0.5 * C[120]])
    alpha = 0.02
    sp = SpLiCE(C, alpha=alpha, max_iter=5000)
    W = sp.decompose(X).toarray()
    assert (W >= 0).all()
    R = X - W @ C
    corr = R @ C.T  # KKT: = alpha on the support, <= alpha elsewhere
    support = W > 1e-8
    np.testing.assert_allclose(corr[support], alpha, atol=2e-3)
    assert (corr[~support] <= alpha + 2e-3).all()
    top = np.argsort(-W, axis=1)[:, :2]
    assert set(top[0]) == {3, 10} and set(top[1]) == {7, 120}
    np.testing.assert_allclose(sp.reconstruct(X), W @ C, atol=1e-10)


def test_splice_top_words_and_bad_input():
    rng = np.random.default_rng(1)
    C = _unit(rng.standard_normal((20, 16)))
    words = [f"w{i}" for i in range(20)]
    sp = SpLiCE(C, words=words, alpha=0.01)
    tw = sp.top_words(C[[4]] * 0.9, n=1)
    assert tw[0][0][0] == "w4"
    with pytest.raises(ValueError):
        SpLiCE(C, words=words[:3])
    with pytest.raises(ValueError):
        SpLiCE(C, alpha=0)
    with pytest.raises(ValueError):
        sp.decompose(np.ones((1, 15)))


def test_fsplice_groups_and_components_sum_to_reconstruction():
    rng = np.random.default_rng(2)
    concepts = _unit(rng.standard_normal((3, 32)))
    vocab = _unit(concepts[rng.integers(0, 3, 60)] + 0.3 * rng.standard_normal((60, 32)))
    g = group_vocabulary(vocab, concepts)
    np.testing.assert_array_equal(g, np.argmax(vocab @ concepts.T, axis=1))
    f = FSpLiCE(vocab, concepts, alpha=0.01)
    X = _unit(vocab[:5] + vocab[10:15])
    V = f.components(X)
    assert V.shape == (5, 3, 32)
    np.testing.assert_allclose(V.sum(axis=1), f.reconstruct(X), atol=1e-10)
    W = f.decompose(X).toarray()
    j = 1
    np.testing.assert_allclose(V[:, j], W[:, g == j] @ f.dictionary[g == j], atol=1e-10)


def test_supervised_svd_is_slics_initialisation():
    from slics_core.slics import SLiCS
    from slics_core.synthetic import make_concept_cones

    d = make_concept_cones(n_samples=200, n_features=16, n_concepts=3, n_atoms=2, random_state=0)
    m = supervised_svd(2, n_iter=7).fit(d.X, d.Y)
    assert m.n_iter == 0 and m.n_iter_ == 0
    ref = SLiCS(n_atoms=2, n_iter=0).fit(d.X, d.Y)
    np.testing.assert_allclose(m.atoms_, ref.atoms_)

"""SpLiCE / F-SpLiCE baselines and S-SVD."""
import numpy as np
import pytest
from scipy.optimize import minimize

from slics_core.baselines import FSpLiCE, SpLiCE, group_vocabulary, supervised_svd
from slics_core.slics import SLiCS
from slics_core.synthetic import make_concept_cones


def _unit(A):
    return A / np.linalg.norm(A, axis=-1, keepdims=True)


def test_splice_satisfies_nonnegative_lasso_kkt_and_recovers_planted_words():
    rng = np.random.default_rng(0)
    C = _unit(rng.standard_normal((200, 64)))
    X = 0.8 * C[3] + 0.6 * C[10] + 0.3 * C[50]
    X = np.vstack([X, 0.9 * C[7] + 0.5 * C[120]])
    alpha = 0.04
    sp = SpLiCE(C, alpha=alpha, max_iter=5000)
    W = sp.decompose(X).toarray()
    assert (W >= 0).all()
    R = X - W @ C
    # KKT of ||x - w C||^2 + alpha ||w||_1, w >= 0: 2 C r = alpha on the support, <= alpha elsewhere
    corr = 2 * R @ C.T
    support = W > 1e-8
    np.testing.assert_allclose(corr[support], alpha, atol=1e-4)
    assert (corr[~support] <= alpha + 1e-4).all()
    top = np.argsort(-W, axis=1)[:, :2]
    assert set(top[0]) == {3, 10} and set(top[1]) == {7, 120}
    np.testing.assert_allclose(sp.reconstruct(X), W @ C, atol=1e-10)


def test_splice_alpha_is_splices_lambda_closed_form_on_orthonormal_words():
    # With orthonormal words, min (c - w)^2 + lam w over w >= 0 gives w = max(0, c - lam / 2).
    Q, _ = np.linalg.qr(np.random.default_rng(5).standard_normal((32, 32)))
    C = Q[:12]
    coef = np.array([0.8, 0.3, 0.1, 0.0, 0.55])
    X = (coef @ C[:5])[None]
    for lam in (0.25, 0.5):
        W = SpLiCE(C, alpha=lam).decompose(X).toarray()[0]
        np.testing.assert_allclose(W[:5], np.maximum(coef - lam / 2, 0), atol=1e-6)
        assert not W[5:].any()


def _splice_objective(w, x, C, lam):
    r = x - w @ C
    return r @ r + lam * w.sum()


def _splice_gradient(w, x, C, lam):
    return -2 * C @ (x - w @ C) + lam


@pytest.mark.parametrize("seed", range(3))
def test_splice_matches_an_independent_bounded_solve_of_the_same_objective(seed):
    """Objective and support agree with L-BFGS-B on ||x - wC||^2 + lam sum(w), w >= 0."""
    rng = np.random.default_rng(seed)
    C = _unit(rng.standard_normal((40, 16)))
    planted = np.zeros((4, 40))
    for row in planted:
        row[rng.choice(40, 3, replace=False)] = rng.uniform(0.4, 1.0, 3)
    X = _unit(planted @ C + 0.05 * rng.standard_normal((4, 16)))
    lam = 0.25
    W = SpLiCE(C, alpha=lam).decompose(X).toarray()
    for x, w in zip(X, W):
        ref = minimize(_splice_objective, np.full(40, 0.01), args=(x, C, lam), method="L-BFGS-B",
                       jac=_splice_gradient, bounds=[(0, None)] * 40,
                       options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 10000})
        ours_obj, ref_obj = _splice_objective(w, x, C, lam), ref.fun
        assert ours_obj <= ref_obj * (1 + 1e-6) + 1e-9
        assert ref_obj <= ours_obj * (1 + 1e-6) + 1e-9
        np.testing.assert_array_equal(w > 1e-5, ref.x > 1e-5)
        assert (w > 1e-5).sum() >= 1


def test_splice_recompose_follows_the_official_recompose_image():
    rng = np.random.default_rng(4)
    C = _unit(rng.standard_normal((30, 16)))
    mean = 0.3 * _unit(rng.standard_normal(16))
    X = _unit(C[:3] + C[5:8])
    sp = SpLiCE(C, alpha=0.1, image_mean=mean)
    W = sp.decompose(X).toarray()
    centred = sp.reconstruct(X)
    np.testing.assert_allclose(centred, W @ C, atol=1e-12)
    rec = sp.reconstruct(X, recompose=True)
    expected = W @ C
    expected = expected / np.linalg.norm(expected, axis=1, keepdims=True) + mean
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(rec, expected, atol=1e-12)
    with pytest.raises(ValueError, match="image_mean"):
        SpLiCE(C).reconstruct(X, recompose=True)
    with pytest.raises(ValueError, match="image_mean"):
        SpLiCE(C, image_mean=np.ones(5))


def test_splice_top_words_and_bad_input():
    rng = np.random.default_rng(1)
    C = _unit(rng.standard_normal((20, 16)))
    words = [f"w{i}" for i in range(20)]
    sp = SpLiCE(C, words=words, alpha=0.01)
    tw = sp.top_words(C[[4]] * 0.9, n=1)
    assert tw[0][0][0] == "w4"
    with pytest.raises(ValueError):
        SpLiCE(C, words=words[:3])
    with pytest.raises(ValueError, match="alpha"):
        SpLiCE(C, alpha=0)
    with pytest.raises(ValueError, match="tol"):
        SpLiCE(C, tol=0)
    with pytest.raises(ValueError, match="max_iter"):
        SpLiCE(C, max_iter=0)
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
    d = make_concept_cones(n_samples=200, n_features=16, n_concepts=3, n_atoms=2, random_state=0)
    m = supervised_svd(2, n_iter=7).fit(d.X, d.Y)
    assert m.n_iter == 0 and m.n_iter_ == 0
    ref = SLiCS(n_atoms=2, n_iter=0).fit(d.X, d.Y)
    np.testing.assert_allclose(m.atoms_, ref.atoms_)

"""Concept-filtered retrieval: exact vs FAISS, partial/full components, quantized pools."""
import numpy as np
import pytest
from scipy.optimize import nnls

from slics_core.retrieval import (
    ConceptRetriever,
    ExactIndex,
    FaissIndex,
    QuantizedPool,
    build_index,
    quantize_tokens,
    top_k,
)


def _unit(A):
    return A / np.linalg.norm(A, axis=-1, keepdims=True)


def test_top_k_matches_full_sort_and_breaks_ties_by_index():
    rng = np.random.default_rng(0)
    S = rng.standard_normal((4, 50))
    idx, val = top_k(S, 7)
    ref = np.argsort(-S, axis=1, kind="stable")[:, :7]
    np.testing.assert_array_equal(idx, ref)
    np.testing.assert_allclose(val, np.take_along_axis(S, ref, 1))
    T = np.zeros((2, 10))
    T[1, 7] = 1.0
    idx, _ = top_k(T, 3)
    np.testing.assert_array_equal(idx, [[0, 1, 2], [7, 0, 1]])
    with pytest.raises(ValueError):
        top_k(S, 0)


def test_exact_and_faiss_agree_with_brute_force():
    rng = np.random.default_rng(1)
    pool = rng.standard_normal((3000, 64))
    q = rng.standard_normal((25, 64))
    ref = np.argsort(-(_unit(q) @ _unit(pool).T), axis=1)[:, :20]
    ie, se = ExactIndex(pool).search(q, 20)
    i_f, sf = FaissIndex(pool).search(q, 20)
    np.testing.assert_array_equal(ie, ref)
    np.testing.assert_array_equal(i_f, ref)
    np.testing.assert_allclose(se, sf, atol=1e-5)
    np.testing.assert_allclose(se, np.take_along_axis(_unit(q) @ _unit(pool).T, ref, 1), atol=1e-5)


def test_auto_backend_switches_on_pool_size():
    pool = np.random.default_rng(2).standard_normal((100, 8))
    assert build_index(pool, "auto", faiss_min_pool=50).backend == "faiss"
    assert build_index(pool, "auto", faiss_min_pool=500).backend == "exact"
    with pytest.raises(ValueError):
        build_index(pool, "annoy")
    with pytest.raises(ValueError, match="NaN"):
        ExactIndex(pool).search(np.full((1, 8), np.nan), 3)
    with pytest.raises(ValueError, match="shape"):
        ExactIndex(pool).search(np.ones((1, 9)), 3)


class _ConeModel:
    """Minimal stand-in with a known dictionary (SLiCS API: project / components)."""

    def __init__(self, atoms, groups):
        self.atoms_, self.groups_ = atoms, groups
        self.n_concepts_ = int(groups.max()) + 1
        self.n_features_in_ = atoms.shape[1]

    def project(self, X, concept):
        out = np.zeros((X.shape[0], self.n_concepts_, X.shape[1]))
        for j in range(self.n_concepts_):
            B = self.atoms_[self.groups_ == j]
            for i, x in enumerate(X):
                out[i, j] = nnls(B.T, x)[0] @ B
        return out

    def components(self, X, Y):
        out = np.zeros((X.shape[0], self.n_concepts_, X.shape[1]))
        for i, x in enumerate(X):
            sel = np.flatnonzero(Y[i][self.groups_] > 0)
            a = nnls(self.atoms_[sel].T, x)[0]
            for j in range(self.n_concepts_):
                m = self.groups_[sel] == j
                out[i, j] = a[m] @ self.atoms_[sel][m]
        return out


def test_concept_retriever_partial_and_full_rank_by_component_cosine():
    rng = np.random.default_rng(3)
    atoms = _unit(rng.standard_normal((6, 16)))
    groups = np.repeat([0, 1, 2], 2)
    model = _ConeModel(atoms, groups)
    pool = rng.standard_normal((400, 16))
    Xq = np.abs(rng.standard_normal((3, 6))) @ atoms
    Yq = np.array([[1, 1, 0], [0, 1, 1], [1, 1, 1]])
    r = ConceptRetriever(model, pool, backend="exact")
    res = r.search(Xq, k=10)
    assert res.indices.shape == (3, 3, 10)
    for i in range(3):
        for j in range(3):
            B = atoms[groups == j]
            v = nnls(B.T, Xq[i])[0] @ B
            ref = np.argsort(-(_unit(pool) @ _unit(v)))[:10]
            np.testing.assert_array_equal(res.indices[i, j], ref)
    full = ConceptRetriever(model, pool, mode="full").search(Xq, k=10, Y_query=Yq)
    V = model.components(Xq, Yq)
    ref = np.argsort(-(_unit(pool) @ _unit(V[0, 1])))[:10]
    np.testing.assert_array_equal(full.indices[0, 1], ref)
    with pytest.raises(ValueError, match="active concepts"):
        ConceptRetriever(model, pool, mode="full").search(Xq, k=10)
    only = r.search(Xq, k=5, concepts=[2])
    np.testing.assert_array_equal(only.indices[:, 0], res.indices[:, 2, :5])
    uf, _ = r.search_unfiltered(Xq, 10)
    np.testing.assert_array_equal(uf, build_index(pool, "faiss").search(Xq, 10)[0])


def test_quantized_lut_scores_equal_dequantized_cosines():
    rng = np.random.default_rng(4)
    T, dT, K = 8, 4, 64
    codebook = _unit(rng.standard_normal((K, dT)))
    X = _unit(rng.standard_normal((300, T, dT))).reshape(300, -1)
    codes = quantize_tokens(X, codebook, T)
    # nearest codeword by brute force
    d2 = ((X.reshape(300, T, 1, dT) - codebook[None, None]) ** 2).sum(-1)
    np.testing.assert_array_equal(codes, d2.argmin(-1))
    qp = QuantizedPool(codes, codebook)
    np.testing.assert_array_equal(QuantizedPool.from_embeddings(X, codebook, T).codes, codes)
    Xt = qp.dequantize()
    V = rng.standard_normal((5, T * dT))
    ref = _unit(V) @ _unit(Xt).T
    np.testing.assert_allclose(qp.scores(V), ref, atol=1e-5)
    G = qp.lookup_tables(V)
    assert G.shape == (5, T, K)
    np.testing.assert_allclose(G[0, 2, codes[7, 2]], V[0, 2 * dT:3 * dT] @ codebook[codes[7, 2]], atol=1e-5)
    idx, _ = qp.search(V, 15)
    np.testing.assert_array_equal(idx, np.argsort(-ref, axis=1, kind="stable")[:, :15])
    # non-unit codebook: still the cosine of the de-quantized vectors
    qp2 = QuantizedPool(codes, codebook * rng.uniform(0.5, 2, (K, 1)))
    np.testing.assert_allclose(qp2.scores(V), _unit(V) @ _unit(qp2.dequantize()).T, atol=1e-5)
    with pytest.raises(ValueError, match="codebook"):
        QuantizedPool(codes + K, codebook)
    with pytest.raises(ValueError, match="multiple"):
        quantize_tokens(X[:, :-1], codebook, T)


def test_zero_component_scores_zero_and_pool_order():
    pool = np.random.default_rng(5).standard_normal((30, 4))
    idx, s = ExactIndex(pool).search(np.zeros((1, 4)), 5)
    np.testing.assert_array_equal(idx[0], np.arange(5))
    assert np.all(s == 0)

"""The search-index family's common ground (slics_core.search_index): the shared helpers against independent
computations, the kind rule at its thresholds, and every index following the ``Index`` protocol."""
import numpy as np
import pytest

from slics_core import ondisk_index, retrieval, search_index
from slics_core.search_index import (
    EXACT_MAX_ROWS,
    FAISS_MIN_POOL,
    Index,
    best_first,
    check_queries,
    index_kind,
    merge_top,
    prepared_rows,
    unit_f32,
)

#: Why a FAISS test is skipped: FAISS is the optional [faiss] extra (in [all], which CI installs); exact search is
#: tested without it.
NO_FAISS = "FAISS is not installed (pip install 'slics-explorer[faiss]')"


def _sorted_reference(idx, val, k):
    """Per row: the (index, value) pairs sorted by value descending then index ascending, in plain Python."""
    out_i, out_v = [], []
    for row_i, row_v in zip(idx.tolist(), val.tolist()):
        pairs = sorted(zip(row_i, row_v), key=lambda p: (-p[1], p[0]))[:k]
        out_i.append([p[0] for p in pairs])
        out_v.append([p[1] for p in pairs])
    return np.array(out_i), np.array(out_v)


def test_merge_top_is_the_top_k_of_a_full_sort_of_both_lists_with_ties_to_the_smaller_index():
    rng = np.random.default_rng(0)
    for k in (1, 5, 13, 40):
        # values on a coarse grid: many ties, so the tie rule is exercised
        ia, ib = rng.permutation(100)[:20], 100 + rng.permutation(100)[:20]
        idx_a, idx_b = np.tile(ia, (6, 1)), np.tile(ib, (6, 1))
        val_a = np.round(rng.uniform(size=(6, 20)), 1).astype(np.float32)
        val_b = np.round(rng.uniform(size=(6, 20)), 1).astype(np.float32)
        got_i, got_v = merge_top(idx_a, val_a, idx_b, val_b, k)
        all_i, all_v = np.hstack([idx_a, idx_b]), np.hstack([val_a, val_b])
        # independent: a full stable argsort by (value descending, index ascending)
        order = np.array([np.lexsort((row_i, -row_v)) for row_i, row_v in zip(all_i, all_v)])[:, :k]
        np.testing.assert_array_equal(got_i, np.take_along_axis(all_i, order, 1))
        want_i, want_v = _sorted_reference(all_i, all_v, k)
        np.testing.assert_array_equal(got_i, want_i)
        np.testing.assert_array_equal(got_v, want_v.astype(np.float32))
        assert got_i.dtype == np.int64


def test_merge_top_of_running_blocks_equals_one_top_k_of_everything():
    """What StreamingIndex does block by block gives retrieval.top_k of the whole score matrix."""
    rng = np.random.default_rng(1)
    S = np.round(rng.standard_normal((4, 1000)), 2).astype(np.float32)
    best_i, best_v = np.empty((4, 0), np.int64), np.empty((4, 0), np.float32)
    for start in range(0, 1000, 128):
        i, v = retrieval.top_k(S[:, start:start + 128], 10)
        best_i, best_v = merge_top(best_i, best_v, i + start, v, 10)
    want = np.argsort(-S, axis=1, kind="stable")[:, :10]
    np.testing.assert_array_equal(best_i, want)


def test_best_first_keeps_all_without_k():
    idx = np.array([[4, 2, 9, 1]])
    val = np.array([[0.5, 0.5, 0.9, -1.0]])
    i, v = best_first(idx, val)
    np.testing.assert_array_equal(i, [[9, 2, 4, 1]])
    np.testing.assert_array_equal(v, [[0.9, 0.5, 0.5, -1.0]])


def test_check_queries_shapes_and_refusals():
    np.testing.assert_array_equal(check_queries([1, 2, 3], 3), np.array([[1, 2, 3]], np.float32))
    assert check_queries(np.ones((2, 3)), 3).dtype == np.float32
    with pytest.raises(ValueError, match=r"shape \(n_queries, 3\); got \(2, 4\)"):
        check_queries(np.ones((2, 4)), 3)
    with pytest.raises(ValueError, match="NaN or infinite"):
        check_queries([[1.0, np.nan, 0.0]], 3)


def test_unit_rows_and_prepared_rows_against_a_float64_normalisation():
    rng = np.random.default_rng(2)
    X = rng.standard_normal((7, 5)) * 3
    X[3] = 0.0
    want = X / np.where(np.linalg.norm(X, axis=1, keepdims=True) == 0, 1, np.linalg.norm(X, axis=1, keepdims=True))
    U = unit_f32(X)
    assert U.dtype == np.float32
    np.testing.assert_allclose(U, want, atol=1e-6)
    assert not U[3].any()  # a zero row has no direction: it stays zero
    mean = rng.standard_normal(5)
    P = prepared_rows(X.astype(np.float16), lambda R: R - mean)  # the transform comes before the unit rows
    Xh = X.astype(np.float16).astype(np.float64) - mean
    np.testing.assert_allclose(P, Xh / np.linalg.norm(Xh, axis=1, keepdims=True), atol=1e-5)


def test_index_kind_at_its_thresholds():
    assert index_kind(0) == index_kind(FAISS_MIN_POOL - 1) == "exact"
    assert index_kind(FAISS_MIN_POOL) == "faiss"
    assert index_kind(EXACT_MAX_ROWS - 1, sharded=True) == "exact"
    assert index_kind(EXACT_MAX_ROWS, sharded=True) == "ondisk"
    assert index_kind(6_000, sharded=True) == "exact"  # issue 40's finding: such a pool is searched exactly
    assert index_kind(10, faiss_min_pool=10) == "faiss" and index_kind(10, sharded=True, exact_max_rows=11) == "exact"
    with pytest.raises(ValueError, match="n_rows must be >= 0"):
        index_kind(-1)


def test_build_index_auto_follows_the_rule(monkeypatch):
    X = np.random.default_rng(3).standard_normal((50, 4))
    assert retrieval.build_index(X).backend == "exact"
    pytest.importorskip("faiss", reason=NO_FAISS)
    assert retrieval.build_index(X, faiss_min_pool=50).backend == "faiss"
    monkeypatch.setattr(search_index, "FAISS_MIN_POOL", 50)  # the rule's default is read when it is applied
    assert retrieval.build_index(X).backend == "faiss"


def test_every_index_follows_the_protocol_and_says_whether_it_is_exact(tmp_path):
    pytest.importorskip("faiss", reason=NO_FAISS)
    rng = np.random.default_rng(4)
    X = rng.standard_normal((3000, 16)).astype(np.float32)
    Q = rng.standard_normal((5, 16)).astype(np.float32)

    class Shards:  # what StreamingIndex reads: len, dim, blocks
        dim = 16

        def __len__(self):
            return len(X)

        def blocks(self, n):
            for a in range(0, len(X), n):
                yield a, X[a:a + n]

    Xu = X / np.linalg.norm(X, axis=1, keepdims=True)
    truth = np.argsort(-(unit_f32(Q) @ Xu.T), axis=1, kind="stable")[:, :10]
    indices = [retrieval.ExactIndex(X), retrieval.FaissIndex(X), retrieval.StreamingIndex(Shards(), block_rows=700),
               retrieval.FaissIVFIndex(X, nlist=16, nprobe=1),
               ondisk_index.build_ondisk_index(X, tmp_path / "ix", n_list=16, pq_m=4, rerank=0)]
    for index in indices:
        assert isinstance(index, Index), type(index).__name__
        assert index.n_pool == 3000 and index.dim == 16
        i, s = index.search(Q, 10)
        assert i.shape == s.shape == (5, 10) and i.dtype == np.int64 and s.dtype == np.float32
        if index.exact:  # an index that says it is exact returns exact search's top 10
            np.testing.assert_array_equal(i, truth, err_msg=index.backend)
    assert [ix.exact for ix in indices] == [True, True, True, False, False]


def test_the_helpers_have_one_home():
    """retrieval and ondisk_index use search_index's helpers; their old private copies are gone."""
    assert retrieval.merge_top is search_index.merge_top and retrieval.FAISS_MIN_POOL == search_index.FAISS_MIN_POOL
    for module in (retrieval, ondisk_index):
        for name in ("_check_queries", "_unit", "_prepared"):
            assert not hasattr(module, name), f"{module.__name__}.{name}"

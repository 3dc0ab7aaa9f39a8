"""The approximate FAISS IVF back-end: exact when every cell is scanned, full result lists, clear errors."""
import numpy as np
import pytest

from slics_core.retrieval import ExactIndex, FaissIVFIndex, build_index


def _clustered(n, d=32, centres=20, seed=0):
    rng = np.random.default_rng(seed)
    C = rng.standard_normal((centres, d))
    return (C[rng.integers(centres, size=n)] + 0.3 * rng.standard_normal((n, d))).astype(np.float32)


def test_ivf_scanning_every_cell_is_the_exact_search():
    pool = _clustered(3000)
    Q = _clustered(25, seed=1)
    ivf = FaissIVFIndex(pool, nlist=40, nprobe=40)
    i_ivf, s_ivf = ivf.search(Q, 15)
    i_ex, s_ex = ExactIndex(pool).search(Q, 15)
    np.testing.assert_array_equal(i_ivf, i_ex)
    np.testing.assert_allclose(s_ivf, s_ex, atol=1e-5)


def test_ivf_default_recall_on_clustered_data_and_full_lists():
    pool = _clustered(5000, seed=2)
    Q = _clustered(40, seed=3)
    ivf = build_index(pool, "ivf")
    assert ivf.backend == "ivf" and ivf.nlist == 71 and ivf.nprobe == 8
    i_ivf, _ = ivf.search(Q, 10)
    i_ex, _ = ExactIndex(pool).search(Q, 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(i_ivf, i_ex)])
    assert recall > 0.8, recall  # clustered data: the nearest cells hold the nearest items
    # cells smaller than k: the rows that need it are searched over every cell, no -1 padding
    small = FaissIVFIndex(pool[:200], nlist=50, nprobe=1)
    idx, _ = small.search(Q, 60)
    assert (idx >= 0).all() and all(len(set(r)) == 60 for r in idx)
    with pytest.raises(ValueError, match="nprobe"):
        FaissIVFIndex(pool, nlist=10, nprobe=11)
    with pytest.raises(ValueError, match="nlist"):
        FaissIVFIndex(pool[:5], nlist=6)

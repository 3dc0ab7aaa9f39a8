"""Orthogonal Procrustes alignment: recovers planted maps, persists, validates input."""
import numpy as np
import pytest
from scipy.stats import ortho_group

from slics_core.alignment import ProcrustesAlignment, fit_alignment, mean_cosine


def _semi_orthogonal(dx, dy, seed):
    """Random (dx, dy) matrix with orthonormal rows (dx <= dy) or columns (dx >= dy)."""
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(max(dx, dy), min(dx, dy)))
    Q, _ = np.linalg.qr(A)  # orthonormal columns, (max, min)
    return Q.T if dx <= dy else Q


def test_recovers_planted_orthogonal_map_equal_dims():
    rng = np.random.default_rng(0)
    Q = ortho_group.rvs(16, random_state=1)
    X = rng.normal(size=(200, 16))
    Y = X @ Q
    a = ProcrustesAlignment().fit(X, Y)
    np.testing.assert_allclose(a.W_, Q, atol=1e-10)
    np.testing.assert_allclose(a.transform(X), Y, atol=1e-9)
    assert a.train_cosine_ == pytest.approx(1.0, abs=1e-12)


def test_recovers_planted_semi_orthogonal_map_512_to_768_shape():
    # 12 -> 20 stands in for 512 -> 768: W = U V^T from the SVD of X^T Y.
    rng = np.random.default_rng(2)
    Q = _semi_orthogonal(12, 20, seed=3)
    X = rng.normal(size=(300, 12))
    Y = X @ Q + 1e-3 * rng.normal(size=(300, 20))
    a = ProcrustesAlignment(normalize=False).fit(X, Y)
    assert a.W_.shape == (12, 20)
    np.testing.assert_allclose(a.W_ @ a.W_.T, np.eye(12), atol=1e-10)
    np.testing.assert_allclose(a.W_, Q, atol=1e-3)
    # optimality against other semi-orthogonal maps, including the planted one
    best = np.linalg.norm(X @ a.W_ - Y)
    for seed in range(20):
        assert best <= np.linalg.norm(X @ _semi_orthogonal(12, 20, 100 + seed) - Y)
    assert best <= np.linalg.norm(X @ Q - Y) + 1e-12


def test_larger_source_gives_orthonormal_columns_and_matches_svd():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(100, 20))
    Y = rng.normal(size=(100, 8))
    a = ProcrustesAlignment(normalize=False).fit(X, Y)
    np.testing.assert_allclose(a.W_.T @ a.W_, np.eye(8), atol=1e-10)
    # independent closed form: W = M (M^T M)^{-1/2} with M = X^T Y (polar factor)
    M = X.T @ Y
    w, V = np.linalg.eigh(M.T @ M)
    np.testing.assert_allclose(a.W_, M @ V @ np.diag(w ** -0.5) @ V.T, atol=1e-8)


def test_normalize_fits_directions_not_norms():
    rng = np.random.default_rng(5)
    Q = ortho_group.rvs(8, random_state=6)
    X = rng.normal(size=(50, 8))
    Y = (X @ Q) * rng.uniform(0.5, 30, size=(50, 1))  # different norms per row
    a = ProcrustesAlignment(normalize=True).fit(X, Y)
    np.testing.assert_allclose(a.W_, Q, atol=1e-10)


def test_fit_alignment_reports_held_out_cosine():
    rng = np.random.default_rng(7)
    Q = _semi_orthogonal(10, 14, seed=8)
    X = rng.normal(size=(400, 10))
    Y = X @ Q + 0.3 * rng.normal(size=(400, 14))
    a = fit_alignment(X, Y, test_size=0.25, random_state=0)
    assert 0.8 < a.held_out_cosine_ < 0.99
    # unrelated spaces: training pairs can be fitted a little, held-out ones not at all
    Z = rng.normal(size=(60, 14))
    b = fit_alignment(X[:60], Z, test_size=0.5, random_state=0)
    assert abs(b.held_out_cosine_) < 0.2 < b.train_cosine_


def test_mean_cosine_matches_sklearn():
    from sklearn.metrics.pairwise import cosine_similarity

    rng = np.random.default_rng(9)
    A, B = rng.normal(size=(30, 5)), rng.normal(size=(30, 5))
    assert mean_cosine(A, B) == pytest.approx(np.mean(np.diag(cosine_similarity(A, B))))


def test_save_load_roundtrip(tmp_path):
    rng = np.random.default_rng(10)
    X, Y = rng.normal(size=(40, 6)), rng.normal(size=(40, 9))
    a = fit_alignment(X, Y, test_size=0.25, source_id="open_clip:ViT-B-32/openai",
                      target_id="open_clip:ViT-L-14/openai")
    path = a.save(tmp_path / "align.npz")
    b = ProcrustesAlignment.load(path)
    np.testing.assert_array_equal(a.W_, b.W_)
    np.testing.assert_array_equal(a.transform(X), b.transform(X))
    assert (b.source_id, b.target_id) == (a.source_id, a.target_id)
    assert b.held_out_cosine_ == pytest.approx(a.held_out_cosine_)
    v = b.transform(X[0])
    assert v.shape == (9,)
    np.testing.assert_allclose(np.linalg.norm(v), np.linalg.norm(X[0]), atol=1e-10)  # W W^T = I for 6 -> 9


def test_load_rejects_other_files(tmp_path):
    with pytest.raises(FileNotFoundError):
        ProcrustesAlignment.load(tmp_path / "nope.npz")
    bad = tmp_path / "bad.npz"
    np.savez(bad, something=np.ones(3))
    with pytest.raises(ValueError, match=r"bad.npz' is damaged or not the expected file \(it holds \['something'\]"):
        ProcrustesAlignment.load(bad)
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip at all")
    with pytest.raises(ValueError, match="junk.npz' is damaged or not the expected file .*; fit it again with `slics"):
        ProcrustesAlignment.load(junk)
    np.savez(bad, W=np.eye(2), meta=np.array('{"format": "other"}'))
    with pytest.raises(ValueError, match="not a SLiCS alignment file .*fit it again") as info:
        ProcrustesAlignment.load(bad)
    assert str(info.value).count("bad.npz") == 1  # one sentence, not one inside another


def test_bad_input_messages():
    rng = np.random.default_rng(11)
    X, Y = rng.normal(size=(10, 4)), rng.normal(size=(9, 4))
    with pytest.raises(ValueError, match="paired"):
        ProcrustesAlignment().fit(X, Y)
    Xn = X.copy()
    Xn[2, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        ProcrustesAlignment().fit(Xn, X)
    with pytest.raises(ValueError, match="zero rows"):
        ProcrustesAlignment().fit(np.vstack([X, np.zeros(4)]), np.vstack([X, np.ones(4)]))
    with pytest.raises(ValueError, match="not fitted"):
        ProcrustesAlignment().transform(X)
    a = ProcrustesAlignment().fit(X, X)
    with pytest.raises(ValueError, match="4"):
        a.transform(rng.normal(size=(3, 5)))
    with pytest.raises(ValueError, match="test_size"):
        fit_alignment(X, X, test_size=1.5)


def test_cli_align(tmp_path, capsys):
    from slics_core.cli import main

    rng = np.random.default_rng(12)
    X = rng.normal(size=(80, 6))
    Q = _semi_orthogonal(6, 10, seed=13)
    np.save(tmp_path / "src.npy", X)
    np.save(tmp_path / "dst.npy", X @ Q)
    out = tmp_path / "a.npz"
    assert main(["align", str(tmp_path / "src.npy"), str(tmp_path / "dst.npy"), "-o", str(out)]) == 0
    assert "1.0000 on held-out pairs" in capsys.readouterr().out
    np.testing.assert_allclose(ProcrustesAlignment.load(out).W_, Q, atol=1e-10)
    assert main(["align", str(tmp_path / "src.npy"), str(tmp_path / "nope.npy"), "-o", str(out)]) == 2
    np.save(tmp_path / "short.npy", X[:50] @ Q)
    assert main(["align", str(tmp_path / "src.npy"), str(tmp_path / "short.npy"), "-o", str(out)]) == 2
    assert "paired" in capsys.readouterr().err


def test_cli_object_array_is_one_line_saying_what_to_give(tmp_path, capsys):
    """An object array is not damaged: one line saying it holds objects, not numbers, and never to delete it."""
    from slics_core.cli import main

    np.save(tmp_path / "obj.npy", np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    np.save(tmp_path / "ok.npy", np.ones((5, 3)))
    assert main(["align", str(tmp_path / "obj.npy"), str(tmp_path / "ok.npy"), "-o", str(tmp_path / "a.npz")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.count("obj.npy") == 1, err
    assert "holds Python objects (dtype object), not numbers); give a .npy file of numeric source embeddings" in err
    assert "delete" not in err and "expected kind" not in err and "fiu" not in err
    assert (tmp_path / "obj.npy").is_file()

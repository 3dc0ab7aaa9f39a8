"""The one unit-row helper: unit norms, its two zero-row policies, dtype and shapes."""
import numpy as np
import pytest

from slics_core.rows import unit_rows


def test_rows_get_unit_norm_and_keep_their_direction():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(6, 5)) * rng.uniform(0.1, 10, size=(6, 1))
    U = unit_rows(X)
    np.testing.assert_allclose(np.sqrt((U ** 2).sum(axis=1)), 1.0)
    for x, u in zip(X, U):  # independent: the same direction as x / sqrt(sum x^2)
        np.testing.assert_allclose(u, x / np.sqrt(np.dot(x, x)))
    assert U.dtype == np.float64 and not np.shares_memory(U, X)


def test_zero_rows_raise_by_default_naming_the_rows():
    X = np.ones((4, 3))
    X[[1, 3]] = 0
    with pytest.raises(ValueError, match=r"atoms: 2 row\(s\) are all zero .*zero rows: 1, 3"):
        unit_rows(X, name="atoms")
    with pytest.raises(ValueError, match="vector: it is all zero"):
        unit_rows(np.zeros(3), name="vector")


def test_keep_returns_zero_rows_as_zeros():
    X = np.array([[3.0, 4.0], [0.0, 0.0], [1e-13, 0.0]])
    np.testing.assert_allclose(unit_rows(X, zero="keep"), [[0.6, 0.8], [0, 0], [1, 0]])
    np.testing.assert_allclose(unit_rows(X, zero="keep", tol=1e-12), [[0.6, 0.8], [0, 0], [0, 0]])
    with pytest.raises(ValueError, match=r"norm <= 1e-12"):
        unit_rows(X, tol=1e-12)
    with pytest.raises(ValueError, match="zero must be"):
        unit_rows(X, zero="drop")


def test_dtype_and_last_axis():
    X = np.arange(1, 25, dtype=np.int64).reshape(2, 3, 4)
    U = unit_rows(X, dtype=np.float32)
    assert U.dtype == np.float32 and U.shape == X.shape
    np.testing.assert_allclose(np.linalg.norm(U, axis=-1), 1.0, rtol=1e-6)
    assert unit_rows(X).dtype == np.float64  # integers compute in double precision
    assert unit_rows(X.astype(np.float32)).dtype == np.float32  # a float input keeps its precision

"""The one unit-row helper: unit norms, its two zero-row policies, dtype and shapes; the named thresholds."""
import re
from pathlib import Path

import numpy as np
import pytest

from slics_core.rows import ZERO_NORM, unit_rows

ROOT = Path(__file__).resolve().parent.parent


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
    np.testing.assert_allclose(unit_rows(X, zero="keep", tol=0.0), [[0.6, 0.8], [0, 0], [1, 0]])
    np.testing.assert_allclose(unit_rows(X, zero="keep", tol=ZERO_NORM), [[0.6, 0.8], [0, 0], [0, 0]])
    with pytest.raises(ValueError, match=r"norm <= 1e-12"):
        unit_rows(X, tol=ZERO_NORM)
    with pytest.raises(ValueError, match="zero must be"):
        unit_rows(X, zero="drop")


def test_dtype_and_last_axis():
    X = np.arange(1, 25, dtype=np.int64).reshape(2, 3, 4)
    U = unit_rows(X, dtype=np.float32)
    assert U.dtype == np.float32 and U.shape == X.shape
    np.testing.assert_allclose(np.linalg.norm(U, axis=-1), 1.0, rtol=1e-6)
    assert unit_rows(X).dtype == np.float64  # integers compute in double precision
    assert unit_rows(X.astype(np.float32)).dtype == np.float32  # a float input keeps its precision


def _code_files():
    for folder in ("slics_core", "app_pages"):
        yield from sorted((ROOT / folder).rglob("*.py"))


def test_the_thresholds_are_named_once_in_rows():
    """1e-12 is written only where it is named (rows.py), and in the solvers below rows (nnls), which keep
    their own documented tolerance; every other zero-norm test reads rows.ZERO_NORM (or TIE_TOL, RANK_RTOL)."""
    literal = re.compile(r"(?<![\w.])1e-12\b")
    found = [f"{p.relative_to(ROOT)}:{n}" for p in _code_files() if p.name not in ("rows.py", "nnls.py")
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if literal.search(line)]
    assert not found, "write rows.ZERO_NORM (or another named threshold of rows.py) instead of 1e-12: " + \
        ", ".join(found)


def test_unit_rows_is_the_only_row_normaliser():
    """One home for unit rows: no second normalize_rows with its own zero policy."""
    found = [str(p.relative_to(ROOT)) for p in _code_files()
             if re.search(r"^\s*def normalize_rows\b", p.read_text(encoding="utf-8"), re.M)]
    assert not found, found


def test_zero_norm_separates_rounding_from_directions():
    x = np.array([1.0, 2.0, 3.0])
    tiny = x / np.linalg.norm(x) * ZERO_NORM / 2  # rounding-sized: no direction
    assert np.all(unit_rows(np.stack([x, tiny]), zero="keep", tol=ZERO_NORM)[1] == 0)
    small = x / np.linalg.norm(x) * 1e-9  # small but a direction
    np.testing.assert_allclose(unit_rows(small, tol=ZERO_NORM), x / np.linalg.norm(x))


def test_the_default_tolerance_is_zero_norm():
    """The callers' rule is the default: a rounding-sized row is a zero row without naming ZERO_NORM, and a
    row just above it keeps its direction; ``tol=0.0`` still asks for exactly zero rows only."""
    x = np.array([1.0, 2.0, 3.0]) / np.sqrt(14.0)
    at, above = x * ZERO_NORM, x * ZERO_NORM * 10
    kept = unit_rows(np.stack([at, above]), zero="keep")
    assert np.all(kept[0] == 0)
    np.testing.assert_allclose(kept[1], x)
    with pytest.raises(ValueError, match=r"tiny: it is all zero \(norm <= 1e-12\)"):
        unit_rows(at * 0.5, name="tiny")
    np.testing.assert_allclose(unit_rows(at * 0.5, tol=0.0), x)


def test_callers_do_not_repeat_the_default_tolerance():
    """One home for the zero-row rule: no caller passes ``tol=ZERO_NORM`` to unit_rows (it is the default)."""
    found = [f"{p.relative_to(ROOT)}:{n}" for p in _code_files()
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if "tol=ZERO_NORM" in line]
    assert not found, "drop tol=ZERO_NORM (unit_rows' default): " + ", ".join(found)

"""Saved baseline models (UF, SpLiCE, F-SpLiCE) are loaded strictly, like SLiCS.load (issue 15.6).

Members, dtypes and sizes are checked from the zip directory and the ``.npy``
headers before any array is read: a file declaring arrays far larger than it
holds is refused without allocating them.
"""
import io
import tracemalloc
import zipfile

import numpy as np
import pytest

from slics_core.baselines import FSpLiCE, SpLiCE
from slics_core.errors import DamagedFileError
from slics_core.formats import check_npz
from slics_core.method_models import FSpLiCEModel, SpLiCEModel, UnfilteredModel


def _unit(A):
    return A / np.linalg.norm(A, axis=-1, keepdims=True)


@pytest.fixture
def models():
    rng = np.random.default_rng(0)
    V = _unit(rng.standard_normal((12, 8)))
    words = [f"w{i}" for i in range(12)]
    concepts = _unit(rng.standard_normal((2, 8)))
    return {
        UnfilteredModel: UnfilteredModel().fit(np.ones((3, 8)), concept_names=["a", "b"], n_concepts=2),
        SpLiCEModel: SpLiCEModel(SpLiCE(V, words=words, alpha=0.2), ["a", "b"]),
        FSpLiCEModel: FSpLiCEModel(FSpLiCE(V, concepts, words=words, alpha=0.2), concepts, ["a", "b"]),
    }


def _members(path):
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def _write_npz(path, arrays, declared=None, compress=False):
    """An .npz like np.savez; ``declared`` {name: (shape, n_rows_written)} writes a header claiming ``shape``."""
    declared = declared or {}
    mode = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", compression=mode) as zf:
        for name, arr in arrays.items():
            with zf.open(name + ".npy", "w", force_zip64=True) as fh:
                if name not in declared:
                    np.lib.format.write_array(fh, np.asarray(arr))
                    continue
                shape, rows = declared[name]
                np.lib.format.write_array_header_1_0(fh, {"descr": "<f8", "fortran_order": False, "shape": shape})
                row = bytes(8 * shape[1])
                for _ in range(rows):
                    fh.write(row)
    return path


def test_round_trip(models, tmp_path):
    X = np.random.default_rng(1).standard_normal((4, 8))
    for cls, model in models.items():
        path = tmp_path / f"{cls.__name__}.npz"
        model.save(path)
        back = cls.load(path)
        assert back.concept_names_ == ["a", "b"] and back.n_features_in_ == 8
        np.testing.assert_allclose(back.project(X), model.project(X))


def test_wrong_kind_and_members_are_named(models, tmp_path):
    path = tmp_path / "splice.npz"
    models[SpLiCEModel].save(path)
    with pytest.raises(ValueError, match="not the expected file .*expected \\['alpha', 'concept_names', 'concepts'"):
        FSpLiCEModel.load(path)  # F-SpLiCE needs 'concepts'
    arrays = _members(path)
    _write_npz(tmp_path / "relabelled.npz", {**arrays, "kind": np.array("F-SpLiCE")})
    with pytest.raises(ValueError, match="holds a 'F-SpLiCE' model, not SpLiCE"):
        SpLiCEModel.load(tmp_path / "relabelled.npz")
    _write_npz(tmp_path / "extra.npz", {**arrays, "bias": np.zeros(3)})
    with pytest.raises(DamagedFileError, match="'bias'"):
        SpLiCEModel.load(tmp_path / "extra.npz")
    _write_npz(tmp_path / "dtype.npz", {**arrays, "alpha": np.array("0.2")})
    with pytest.raises(DamagedFileError, match=r"array 'alpha' holds text \(dtype <U3\), not floating-point numbers"):
        SpLiCEModel.load(tmp_path / "dtype.npz")
    with pytest.raises(OSError, match="does not exist"):
        SpLiCEModel.load(tmp_path / "missing.npz")
    (tmp_path / "text.npz").write_text("not a zip")
    with pytest.raises(DamagedFileError, match="text.npz.*fit it again"):
        UnfilteredModel.load(tmp_path / "text.npz")


def test_declared_sizes_checked_before_reading(models, tmp_path):
    path = tmp_path / "splice.npz"
    models[SpLiCEModel].save(path)
    arrays = _members(path)
    # declares a 10M x 16 vocabulary (1.28 GB) but stores 1000 rows
    short = _write_npz(tmp_path / "short.npz", {**arrays, "vocabulary": None},
                       declared={"vocabulary": ((10_000_000, 16), 1000)})
    # consistent sizes, but 400k x 16 zeros (51 MB) deflated to ~50 kB: not dense embeddings
    bomb = _write_npz(tmp_path / "bomb.npz", {**arrays, "vocabulary": None},
                      declared={"vocabulary": ((400_000, 16), 400_000)}, compress=True)
    for p, fragment in ((short, "declares 1280000000 bytes"), (bomb, "more than 50:1")):
        tracemalloc.start()
        try:
            with pytest.raises(DamagedFileError, match=fragment) as info:
                SpLiCEModel.load(p)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert str(p) in str(info.value) and "\n" not in str(info.value)
        assert peak < 5_000_000  # the declared arrays were never allocated


def test_check_npz_reports_shapes(tmp_path):
    buf = io.BytesIO()
    np.savez(buf, a=np.zeros((3, 2)), b=np.arange(4))
    (tmp_path / "x.npz").write_bytes(buf.getvalue())
    shapes = check_npz(tmp_path / "x.npz", {"a": "f", "b": "iu"})
    assert shapes["a"][0] == (3, 2) and shapes["b"][0] == (4,) and shapes["b"][1].kind == "i"
    with pytest.raises(DamagedFileError, match="array 'b' holds integers .*, not floating-point numbers"):
        check_npz(tmp_path / "x.npz", {"a": "f", "b": "f"})

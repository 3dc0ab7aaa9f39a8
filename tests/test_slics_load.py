"""Strict loading of saved SLiCS models: every damaged part gets one clear ValueError."""
import json
import tracemalloc
import zipfile

import numpy as np
import pytest

from slics_core import SLiCS
from slics_core.synthetic import make_concept_cones


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    data = make_concept_cones(n_samples=200, n_features=16, n_concepts=3, n_atoms=2, random_state=0)
    model = SLiCS(n_atoms=[2, 1, 2], n_iter=2, tol=1e-3).fit(data.X, data.Y, concept_names=["a", "b", "c"])
    path = tmp_path_factory.mktemp("models") / "good.slics"
    model.save(path)
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    header = json.loads(str(arrays.pop("header")))
    return model, path, header, arrays


def _write(path, header, arrays):
    with open(path, "wb") as fh:
        np.savez_compressed(fh, header=np.array(json.dumps(header)), **arrays)
    return path


def _fails(path, *fragments):
    with pytest.raises(ValueError) as info:
        SLiCS.load(path)
    message = str(info.value)
    assert str(path) in message and "SLiCS.save" in message  # the file and what to do
    for fragment in fragments:
        assert fragment in message
    return message


def test_round_trip_of_the_fixture(saved):
    model, path, _, _ = saved
    loaded = SLiCS.load(path)
    np.testing.assert_array_equal(loaded.atoms_, model.atoms_)
    assert loaded.get_params() == model.get_params() and loaded.concept_names_ == ["a", "b", "c"]


@pytest.mark.parametrize("key", ["params", "n_iter_", "n_concepts_", "n_features_in_", "concept_names_"])
def test_missing_header_key_is_named(tmp_path, saved, key):
    _, _, header, arrays = saved
    bad = {k: v for k, v in header.items() if k != key}
    _fails(_write(tmp_path / "m.npz", bad, arrays), f"'{key}' is missing")


def test_format_version_and_unknown_keys(tmp_path, saved):
    _, _, header, arrays = saved
    _fails(_write(tmp_path / "a.npz", {**header, "format": "other"}, arrays), "not a SLiCS model file")
    _fails(_write(tmp_path / "b.npz", {**header, "version": 99}, arrays), "version 99")
    _fails(_write(tmp_path / "c.npz", {**header, "extra": 1}, arrays), "'extra' is unknown")
    params = {**header["params"], "learning_rate": 0.1}
    _fails(_write(tmp_path / "d.npz", {**header, "params": params}, arrays), "'learning_rate' is unknown")
    params = {k: v for k, v in header["params"].items() if k != "ridge"}
    _fails(_write(tmp_path / "e.npz", {**header, "params": params}, arrays), "'ridge' is missing")


@pytest.mark.parametrize("key, value", [
    ("n_atoms", "five"), ("n_atoms", [2, 0, 2]), ("n_iter", -1), ("n_iter", 2.5), ("batch_size", 0),
    ("update", "svd"), ("monotone", "yes"), ("tol", "small"), ("ridge", -0.1), ("n_power_steps", None),
    ("random_state", "seed"),
])
def test_ill_typed_param_is_named(tmp_path, saved, key, value):
    _, _, header, arrays = saved
    params = {**header["params"], key: value}
    _fails(_write(tmp_path / "m.npz", {**header, "params": params}, arrays), f"'{key}' must be")


@pytest.mark.parametrize("key, value", [("n_iter_", "2"), ("n_concepts_", 0), ("n_features_in_", 1.5),
                                        ("concept_names_", "abc"), ("concept_names_", ["a", 2, "c"])])
def test_ill_typed_header_key_is_named(tmp_path, saved, key, value):
    _, _, header, arrays = saved
    _fails(_write(tmp_path / "m.npz", {**header, key: value}, arrays), f"'{key}' must be")


def test_concept_names_must_match_the_number_of_concepts(tmp_path, saved):
    _, _, header, arrays = saved
    _fails(_write(tmp_path / "m.npz", {**header, "concept_names_": ["a", "b"]}, arrays), "2 names for n_concepts_=3")


def test_arrays_must_match_the_header(tmp_path, saved):
    _, _, header, arrays = saved
    _fails(_write(tmp_path / "a.npz", header, {**arrays, "atoms": arrays["atoms"][:, :-1]}), "'atoms' has shape")
    _fails(_write(tmp_path / "b.npz", header, {**arrays, "groups": arrays["groups"][:-1]}), "'groups' has shape")
    _fails(_write(tmp_path / "c.npz", header, {**arrays, "history": arrays["history"][:1]}), "'history' has shape")
    _fails(_write(tmp_path / "d.npz", header, {**arrays, "atoms": 2 * arrays["atoms"]}), "not unit vectors")
    _fails(_write(tmp_path / "e.npz", header, {**arrays, "groups": arrays["groups"][::-1].copy()}), "'groups'")
    _fails(_write(tmp_path / "f.npz", header, {**arrays, "atoms": arrays["atoms"].astype(np.int64)}), "dtype")
    nan = arrays["atoms"].copy()
    nan[0, 0] = np.nan
    _fails(_write(tmp_path / "g.npz", header, {**arrays, "atoms": nan}), "NaN")
    _fails(_write(tmp_path / "h.npz", {**header, "n_features_in_": 17}, arrays), "'atoms' has shape")
    extra = _write(tmp_path / "i.npz", header, {**arrays, "bias": np.zeros(3)})
    _fails(extra, "unexpected member")


def _hostile(path, header, n_rows, d, n_written_rows):
    """A model file whose atoms member declares (n_rows, d) but holds n_written_rows rows of zeros."""
    header = {**header, "n_concepts_": 1, "n_features_in_": d, "concept_names_": ["x"],
              "params": {**header["params"], "n_atoms": [n_rows]}}
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, arr in (("header", np.array(json.dumps(header))), ("groups", np.zeros(n_rows, np.int64)),
                          ("history", np.zeros(header["n_iter_"]))):
            with zf.open(name + ".npy", "w", force_zip64=True) as fh:
                np.lib.format.write_array(fh, arr)
        with zf.open("atoms.npy", "w", force_zip64=True) as fh:
            np.lib.format.write_array_header_1_0(fh, {"descr": "<f8", "fortran_order": False, "shape": (n_rows, d)})
            block = 100_000
            chunk = bytes(block * d * 8)
            for start in range(0, n_written_rows, block):
                fh.write(chunk[: min(block, n_written_rows - start) * d * 8])
    return path


def test_sizes_are_checked_before_any_array_is_read(tmp_path, saved):
    _, _, header, _ = saved
    # declares 10M x 16 atoms (1.28 GB) but stores 1000 rows: rejected from the zip directory
    short = _hostile(tmp_path / "short.npz", header, 10_000_000, 16, 1000)
    # consistent sizes, but 400k x 16 zeros squeezed far beyond what dense unit atoms allow
    bomb = _hostile(tmp_path / "bomb.npz", header, 400_000, 16, 400_000)
    for path, fragment in ((short, "declares"), (bomb, "compressed bytes")):
        tracemalloc.start()
        try:
            _fails(path, fragment)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 5_000_000  # the declared arrays (1.28 GB, 51 MB) were never allocated

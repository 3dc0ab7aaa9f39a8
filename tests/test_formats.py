"""The one file-format module: atomic writers and checked readers."""
import os

import numpy as np
import pytest

from slics_core.errors import DamagedFileError, FileSystemError
from slics_core.formats import (
    atomic_save_npy,
    atomic_save_npz,
    atomic_write_json,
    check_npy,
    check_npz,
    load_npy,
    load_npz,
    read_json,
)


def test_json_round_trip_and_size_limit(tmp_path):
    p = tmp_path / "sub" / "a.json"
    atomic_write_json(p, {"a": [1, 2], "b": "é"})
    assert read_json(p) == {"a": [1, 2], "b": "é"}
    assert [f for f in os.listdir(p.parent) if f != "a.json"] == []  # no temporary file left
    with pytest.raises(DamagedFileError, match="more than the 10 a JSON file"):
        read_json(p, max_bytes=10)
    (tmp_path / "bad.json").write_text('{"a": ')
    with pytest.raises(DamagedFileError, match="bad.json.*damaged.*check it"):
        read_json(tmp_path / "bad.json", fix="check it")
    with pytest.raises(FileSystemError, match="does not exist"):
        read_json(tmp_path / "missing.json")


def test_npz_round_trip_with_optional_members(tmp_path):
    p = tmp_path / "x.npz"
    atomic_save_npz(p, compressed=True, a=np.arange(5.0), n=np.array(["x", "y"]))
    got = load_npz(p, {"a": "f"}, optional={"n": "U", "z": "i"})
    np.testing.assert_array_equal(got["a"], np.arange(5.0))
    assert list(got["n"]) == ["x", "y"] and "z" not in got
    with pytest.raises(DamagedFileError, match=r"unexpected member\(s\) \['n'\]"):
        check_npz(p, {"a": "f"})
    with pytest.raises(DamagedFileError, match=r"missing \['b'\]"):
        check_npz(p, {"a": "f", "b": "f"}, optional={"n": "U"})


def test_npy_is_checked_before_it_is_read(tmp_path):
    p = tmp_path / "e.npy"
    atomic_save_npy(p, np.ones((3, 2), np.float32))
    assert load_npy(p, "f").shape == (3, 2)
    with pytest.raises(DamagedFileError, match=r"holds floating-point numbers \(dtype float32\), not integers"):
        load_npy(p, "i")
    raw = p.read_bytes()
    p.write_bytes(raw[:-4])  # truncated: declares more than it stores
    with pytest.raises(DamagedFileError, match="declares 24 bytes"):
        load_npy(p, "f")


def test_a_forged_huge_npy_header_is_reported_with_its_true_size(tmp_path):
    """A shape whose byte count overflows int64 is named with its exact size (not a wrapped negative number)."""
    p = tmp_path / "forged.npy"
    shape = (2**40, 2**30, 16)
    with open(p, "wb") as fh:
        np.lib.format.write_array_header_2_0(fh, {"descr": "<f4", "fortran_order": False, "shape": shape})
        fh.write(b"\0" * 16)
    declared = 2**40 * 2**30 * 16 * 4  # 2**76, past int64's 2**63
    assert np.prod(shape, dtype=np.int64) * 4 <= 0  # what the old check computed
    with pytest.raises(DamagedFileError, match=f"declares {declared} bytes"):
        load_npy(p, "f")
    with pytest.raises(DamagedFileError, match=f"declares {declared} bytes"):
        check_npy(p, "f")


def test_pickles_are_never_loaded(tmp_path):
    p = tmp_path / "o.npz"
    np.savez(p, a=np.array([{"x": 1}], dtype=object))
    with pytest.raises(DamagedFileError, match="dtype object"):
        load_npz(p, {"a": "fO"})


def test_load_user_array_picks_the_named_or_only_array(tmp_path):
    """The one reader of one array of a user's .npy / .npz (TiTok files, mean files, align inputs)."""
    from slics_core.formats import load_user_array
    from slics_core.preprocessing import load_mean

    np.savez(tmp_path / "m.npz", other=np.zeros(3), mean=np.arange(3.0))  # 'mean' is not the first array
    np.testing.assert_array_equal(load_user_array(tmp_path / "m.npz", "fiu", what="mean", preferred="mean"),
                                  np.arange(3.0))
    np.testing.assert_array_equal(load_mean(tmp_path / "m.npz"), np.arange(3.0))
    np.testing.assert_array_equal(load_user_array(tmp_path / "m.npz", "fiu", what="x", key="other"), np.zeros(3))
    with pytest.raises(ValueError, match=r"holds arrays \['other', 'mean'\]; say which one holds the x"):
        load_user_array(tmp_path / "m.npz", "fiu", what="x")
    np.save(tmp_path / "t.npy", np.array(["a", "b"]))
    with pytest.raises(DamagedFileError, match=r"it holds text \(dtype <U1\), not numbers\); give a \.npy or"):
        load_user_array(tmp_path / "t.npy", "fiu", what="x")
    with pytest.raises(FileNotFoundError, match="x file .* does not exist"):
        load_user_array(tmp_path / "none.npy", "fiu", what="x")


def _rss_file_kib():
    for line in open("/proc/self/status"):
        if line.startswith("RssFile:"):
            return int(line.split()[1])
    return None


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads RssFile from Linux's /proc")
def test_release_pages_drops_a_memory_map_from_the_resident_set(tmp_path):
    """A memory-mapped array read whole holds its pages in RSS until release_pages; the data stay readable."""
    from slics_core.formats import load_npy, release_pages

    A = np.arange(16 * 2**20 // 4, dtype=np.float32).reshape(-1, 256)  # 16 MiB
    np.save(tmp_path / "a.npy", A)
    m = load_npy(tmp_path / "a.npy", "f", mmap_mode="r")
    base = _rss_file_kib()
    assert float(np.asarray(m, dtype=np.float64).sum()) == float(A.astype(np.float64).sum())  # touch every page
    held = _rss_file_kib()
    assert held - base > 12 * 1024  # most of the 16 MiB are resident now
    assert release_pages(m)
    assert _rss_file_kib() - base < 2 * 1024
    np.testing.assert_array_equal(m[-3:], A[-3:])  # read again from the page cache
    assert not release_pages(A)  # not a memory map: nothing to release
    view = m[len(m) // 2:, ::2]  # a view of the map (a shard's rows): its base chain ends at the same map
    assert float(np.asarray(view, dtype=np.float64).sum()) > 0
    assert _rss_file_kib() - base > 6 * 1024
    assert release_pages(view)
    assert _rss_file_kib() - base < 2 * 1024
    assert not release_pages(np.frombuffer(A.tobytes(), dtype=np.float32))  # a buffer that is not a map

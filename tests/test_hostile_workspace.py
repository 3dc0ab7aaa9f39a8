"""Hostile-input catalogue, classes 2 and 4: workspaces keep users' files; damaged workspaces give one line.

Workspaces are built the way a user builds them: ``slics embed --dataset precomputed`` (a ``.npy``
plus a metadata CSV with label lists), then ``slics workspace``.
"""
import errno
import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest

from slics_core.cli import main
from slics_core.explorer import workspace_files as wsmod
from slics_core.explorer.arrival import STORE as ARRIVAL_STORE
from slics_core.explorer.workspace_files import load_workspace

ROOT = Path(__file__).resolve().parents[1]


def _cache(tmp, name, seed=0, n=60, d=8):
    rng = np.random.default_rng(seed)
    src = tmp / f"src{seed}"
    src.mkdir(parents=True)
    centres = rng.standard_normal((3, d))
    y = np.arange(n) % 3
    np.save(src / "e.npy", (centres[y] + 0.3 * rng.standard_normal((n, d))).astype(np.float32))
    (src / "meta.csv").write_text("id,labels\n" + "".join(f"x{i},{'abc'[k]}\n" for i, k in enumerate(y)))
    cache = tmp / f"run{seed}" / name
    assert main(["embed", "--dataset", "precomputed", "--embeddings", str(src / "e.npy"), "--metadata",
                 str(src / "meta.csv"), "--cache", str(cache)]) == 0
    return cache


def _build(cache, *extra):
    return main(["workspace", "--cache", str(cache), "--vocab", "none", "--methods", "S-SLiCS", "--d0", "1",
                 "--n-iter", "1", "--quiet", *extra])


@pytest.fixture
def root(tmp_path, monkeypatch):
    r = tmp_path / "workspaces"
    monkeypatch.setenv("SLICS_WORKSPACES", str(r))
    return r


# ----------------------------------------------------------------------------- class 2: rebuilds keep user files
def test_rebuild_keeps_the_users_files_and_leaves_nothing_hidden(tmp_path, root, capsys):
    cache = _cache(tmp_path, "cache")
    assert _build(cache, "--name", "demo") == 0
    folder = root / "demo"
    (folder / "notes.txt").write_text("lesson plan")
    (folder / "handouts").mkdir()
    (folder / "handouts" / "sheet.md").write_text("exercise")
    (folder / "models" / "my-notes.txt").write_text("mine")
    assert _build(cache, "--name", "demo", "--d0", "2") == 0, capsys.readouterr().err
    assert (folder / "notes.txt").read_text() == "lesson plan"
    assert (folder / "handouts" / "sheet.md").read_text() == "exercise"
    assert (folder / "models" / "my-notes.txt").read_text() == "mine"
    assert load_workspace(folder).d0_values == [2]
    # what the pages stored is made anew from this build (its entries are not keyed by the data)
    entries = list((folder / ARRIVAL_STORE).glob("*.npz"))
    assert entries and all(p.stat().st_mtime_ns >= (folder / "workspace.json").stat().st_mtime_ns for p in entries)
    assert not (folder / "models" / "S-SLiCS_d01.npz").exists()  # its own stale file is gone
    hidden = [p.name for p in [*root.iterdir(), *folder.iterdir()] if p.name.startswith(".")]
    assert hidden == [".slics-workspace"], hidden


def test_two_caches_with_one_folder_name_do_not_replace_each_other(tmp_path, root, capsys):
    a, b = _cache(tmp_path, "cache", seed=1), _cache(tmp_path, "cache", seed=2)
    assert _build(a) == 0
    before = (root / "cache" / "arrays.npz").read_bytes()
    capsys.readouterr()
    assert _build(b) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--overwrite" in err and str(a.resolve()) in err and str(b.resolve()) in err
    assert (root / "cache" / "arrays.npz").read_bytes() == before
    (root / "cache" / "notes.txt").write_text("keep")
    assert _build(b, "--overwrite") == 0
    warned = [ln for ln in capsys.readouterr().err.splitlines() if "warning" in ln]
    assert len(warned) == 1 and warned[0].startswith("slics workspace: warning: workspace folder") \
        and "was built from" in warned[0], warned
    assert (root / "cache" / "notes.txt").read_text() == "keep"
    assert (root / "cache" / "arrays.npz").read_bytes() != before


def test_empty_name_is_refused(tmp_path, root, capsys):
    cache = _cache(tmp_path, "cache")
    assert _build(cache, "--name", "") == 2
    assert "workspace name '' is not allowed" in capsys.readouterr().err
    assert not root.exists() or not any(root.iterdir())


def test_info_of_a_missing_path_says_so(tmp_path, root, capsys):
    missing = tmp_path / "no" / "such" / "ws"
    assert main(["workspace", "--info", str(missing)]) == 2
    err = capsys.readouterr().err
    assert "not allowed" not in err and str(missing) in err and "no workspace" in err


def test_write_failure_names_the_users_folder_not_a_temp_file(tmp_path, root, capsys, monkeypatch):
    cache = _cache(tmp_path, "cache")
    assert _build(cache, "--name", "demo") == 0
    (root / "demo" / "notes.txt").write_text("keep")

    def full(path, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(wsmod.np, "savez", full)
    capsys.readouterr()
    assert _build(cache, "--name", "demo", "--d0", "2") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no space left" in err and repr(str(root / "demo")) in err
    assert ".tmp" not in err and ".new" not in err and ".slics-" not in err
    monkeypatch.undo()
    assert load_workspace(root / "demo").d0_values == [1]  # the previous build is intact
    assert (root / "demo" / "notes.txt").read_text() == "keep"
    assert [p.name for p in (root / "demo").iterdir() if p.name.startswith(".")] == [".slics-workspace"]


# ----------------------------------------------------------------------------- class 4: damaged workspaces
@pytest.fixture
def good(tmp_path, root):
    cache = _cache(tmp_path, "cache")
    assert _build(cache, "--name", "good") == 0
    return root / "good"


def _head(folder):
    return json.loads((folder / "workspace.json").read_text())


def _changed(d, changes):
    """``d`` with ``changes`` applied (a value ``KeyError`` removes the key)."""
    d = dict(d)
    for k, v in changes.items():
        if v is KeyError:
            d.pop(k)
        else:
            d[k] = v
    return d


def _set_head(folder, **changes):
    (folder / "workspace.json").write_text(json.dumps(_changed(_head(folder), changes)))


def _arrays(folder):
    with np.load(folder / "arrays.npz") as z:
        return {k: z[k] for k in z.files}


def _damage_arrays(folder, **changes):
    np.savez(folder / "arrays.npz", **_changed(_arrays(folder), changes))


def _one_line_damaged(folder):
    with pytest.raises(ValueError) as info:
        load_workspace(folder)
    msg = str(info.value)
    assert msg.startswith(f"workspace {str(folder)!r} is damaged or not the expected file (") and "\n" not in msg, msg
    assert msg.endswith("; rebuild it with `slics workspace` (or delete the folder)."), msg
    assert msg.count("is damaged") == 1, msg  # one sentence, not one inside another
    return msg


@pytest.mark.parametrize("field, value", [
    ("mean", KeyError), ("X", KeyError), ("index_train", KeyError),
    ("Y", np.zeros((60, 3, 2), bool)), ("Y", np.zeros((59, 3), bool)), ("X", np.zeros((60, 5), np.float32)),
    ("raw", np.zeros((60,), np.float32)), ("mean", np.zeros(3)),
    ("index_pool", np.array([0, 60])), ("index_query", np.array([-61])), ("index_val", np.array([0.5])),
    ("concept_text", np.zeros((3, 5), np.float32)),
])
def test_damaged_arrays_give_one_line(good, field, value):
    _damage_arrays(good, **{field: value})
    _one_line_damaged(good)


@pytest.mark.parametrize("changes", [
    {"name": KeyError}, {"n": KeyError}, {"models": KeyError}, {"concept_names": KeyError},
    {"models": []}, {"models": {"S-SLiCS|x": "S-SLiCS_d01.npz"}}, {"models": {"S-SLiCS|1": 5}},
    {"models": {"S-SLiCS|1": "../../x.npz"}}, {"n": "sixty"}, {"n": 61}, {"concept_names": "abc"},
    {"concept_names": ["a", "b"]}, {"ids": [1, 2]}, {"paths": {"a": 1}}, {"captions": 3},
    {"extras": "cond"}, {"n_tokens": "x"}, {"skipped": []}, {"chosen_d0": "x"}, {"d0_scores": 5},
    {"vocab_words": 7}, {"sub_names": 1}, {"name": ["x"]}, {"preprocessing": "rm -rf"},
])
def test_mistyped_or_missing_header_fields_give_one_line(good, changes):
    _set_head(good, **changes)
    _one_line_damaged(good)


@pytest.mark.parametrize("changes, words", [
    ({"n": "sixty"}, "field 'n' must be a whole number"), ({"name": ["x"]}, "field 'name' must be a string"),
    ({"models": []}, "field 'models' must be an object"), ({"ids": [1, 2]}, "field 'ids' must be a list of strings"),
    ({"paths": {"a": 1}}, "field 'paths' must be a list of strings or nulls"),
])
def test_header_field_types_are_named_in_words(good, changes, words):
    """Types in plain words with the right article (never "must be a int" / "a dict")."""
    _set_head(good, **changes)
    msg = _one_line_damaged(good)
    assert words in msg and "a int" not in msg and "a dict" not in msg, msg


def test_header_that_is_not_an_object(good):
    (good / "workspace.json").write_text("[1, 2, 3]")
    _one_line_damaged(good)


def test_forged_npy_header_asking_for_terabytes_is_refused_before_allocating(good):
    # arrays.npz whose X declares 2**40 floats in a few bytes
    arr = _arrays(good)
    with zipfile.ZipFile(good / "arrays.npz", "w") as z:
        for k, v in arr.items():
            if k == "X":
                header = {"descr": "<f4", "fortran_order": False, "shape": (2 ** 20, 2 ** 20)}
                import io
                buf = io.BytesIO()
                np.lib.format.write_array_header_1_0(buf, header)
                z.writestr("X.npy", buf.getvalue() + b"\0" * 64)
            else:
                buf = io.BytesIO()
                np.save(buf, v)
                z.writestr(f"{k}.npy", buf.getvalue())
    assert "X" in _one_line_damaged(good)


def test_inflating_archive_is_refused(good):
    """A 1 MB file inflating to 1 GB of zeros (a zip bomb in an embedding array)."""
    arr = _arrays(good)
    with zipfile.ZipFile(good / "arrays.npz", "w", compression=zipfile.ZIP_DEFLATED) as z:
        for k, v in arr.items():
            with z.open(f"{k}.npy", "w", force_zip64=True) as fh:
                if k == "raw":
                    np.lib.format.write_array_header_1_0(fh, {"descr": "<f4", "fortran_order": False,
                                                              "shape": (2 ** 18, 1024)})
                    zeros = bytes(2 ** 24)
                    for _ in range(64):
                        fh.write(zeros)
                else:
                    np.lib.format.write_array(fh, v)
    assert os.path.getsize(good / "arrays.npz") < 2 ** 21
    assert "raw" in _one_line_damaged(good)


def test_forged_images_and_extras(good):
    np.save(good / "images.npy", np.zeros((3, 4, 4, 3), np.uint8))
    _one_line_damaged(good)
    (good / "images.npy").unlink()
    np.save(good / "extra-cond.npy", np.zeros(2))
    _set_head(good, extras=["cond"])
    _one_line_damaged(good)


def test_model_of_another_width_is_refused(good, tmp_path):
    from slics_core.slics import SLiCS

    m = SLiCS(n_atoms=1, n_iter=1, random_state=0).fit(np.random.default_rng(0).standard_normal((30, 5)),
                                                           np.eye(3, dtype=bool)[np.arange(30) % 3])
    name = _head(good)["models"]["S-SLiCS|1"]
    from slics_core.methods import get_method
    get_method("S-SLiCS")  # registered
    m.save(good / "models" / name)
    msg = _one_line_damaged(good)
    assert "S-SLiCS" in msg


def test_the_app_drops_a_damaged_ws_link(good, monkeypatch):
    """Every damaged workspace: one message, and ``?ws=`` is gone so a reload is clean."""
    from streamlit.testing.v1 import AppTest

    _set_head(good, concept_names="abc")
    at = AppTest.from_file(str(ROOT / "app_pages" / "home.py"), default_timeout=60)
    at.query_params["ws"] = "good"
    at.run()
    assert not at.exception
    assert any("is damaged" in e.value for e in at.error), [e.value for e in at.error]
    assert "ws" not in at.query_params

"""One-line messages for file-system errors and damaged files (errors.py, store, `slics` CLI)."""
import errno
import json
import os
import re
import zipfile

import numpy as np
import pytest
from PIL import Image

from slics_core import store as store_mod
from slics_core.cli import main
from slics_core.errors import (
    DamagedFileError,
    FileSystemError,
    UserError,
    damaged_file_error,
    file_system_error,
    reading,
    user_message,
    writing,
)


# ------------------------------------------------------------------ user_message
@pytest.mark.parametrize("code, words", [
    (errno.ENOSPC, "no space left"),
    (errno.EDQUOT, "no space left"),
    (errno.EROFS, "read-only file system"),
    (errno.EACCES, "permission denied"),
    (errno.EPERM, "permission denied"),
    (errno.ENOTDIR, "not a folder"),
    (errno.EEXIST, "not a folder"),
    (errno.EISDIR, "is a folder"),
    (errno.ENOENT, "does not exist"),
    (errno.EIO, os.strerror(errno.EIO)),
])
def test_os_errors_become_one_line_naming_the_file(code, words):
    exc = OSError(code, os.strerror(code), "/tmp/.tmp-abc.part")
    msg = user_message(exc, path="/data/cache/b00003.npz")
    assert words in msg and "'/data/cache/b00003.npz'" in msg and ".tmp-abc" not in msg and "\n" not in msg
    # without a path, the exception's own file name is used
    assert "'/tmp/.tmp-abc.part'" in user_message(exc)


def test_messages_of_other_errors():
    assert user_message(UserError("fix this", path="x")) == "fix this"
    assert user_message(FileNotFoundError("no image folder at 'x'")) == "no image folder at 'x'"  # no errno
    assert user_message(ValueError("bad value\nsecond line")) == "bad value"
    assert user_message(RuntimeError()) == "RuntimeError"
    msg = user_message(zipfile.BadZipFile("File is not a zip file"), path="/c/b00001.npz")
    assert "'/c/b00001.npz' is damaged" in msg and "BadZipFile" in msg and "delete it" in msg
    try:
        json.loads("{broken")
    except json.JSONDecodeError as exc:
        assert "'meta.json' is damaged" in user_message(exc, path="meta.json")


def test_error_classes_keep_their_families():
    err = file_system_error(OSError(errno.ENOSPC, "No space left on device"), "/c/embeddings.npy")
    assert isinstance(err, OSError) and isinstance(err, UserError) and err.errno == errno.ENOSPC
    assert err.path == "/c/embeddings.npy" and str(err) == user_message(err) and "no space left" in str(err)
    assert file_system_error(err) is err
    bad = damaged_file_error("/c/x.npz", EOFError("No data left in file"), fix="run it again")
    assert isinstance(bad, ValueError) and isinstance(bad, UserError)
    assert str(bad) == "'/c/x.npz' is damaged or not the expected file (EOFError: No data left in file); run it again."


def test_reading_and_writing_convert_errors(tmp_path):
    with pytest.raises(FileSystemError, match="read-only") as info:
        with writing(tmp_path / "f.json"):
            raise OSError(errno.EROFS, "Read-only file system", str(tmp_path / ".tmp-1.part"))
    assert info.value.errno == errno.EROFS and str(tmp_path / "f.json") in str(info.value)
    assert isinstance(info.value.__cause__, OSError)
    with pytest.raises(ValueError, match="boom"):  # not a file-system error: left alone
        with writing(tmp_path / "f.json"):
            raise ValueError("boom")

    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"PK\x03\x04 not really")
    with pytest.raises(DamagedFileError, match="junk.npz' is damaged"):
        with reading(junk):
            np.load(junk, allow_pickle=False)
    text = tmp_path / "text.npy"
    text.write_text("hello")
    with pytest.raises(DamagedFileError, match="text.npy"):  # numpy: ValueError / OSError without errno
        with reading(text):
            np.load(text, allow_pickle=False)
    with pytest.raises(FileSystemError, match="does not exist"):
        with reading(tmp_path / "missing.npy"):
            np.load(tmp_path / "missing.npy")
    with pytest.raises(DamagedFileError, match="KeyError"):
        np.savez(tmp_path / "ok.npz", a=np.ones(2))
        with reading(tmp_path / "ok.npz"), np.load(tmp_path / "ok.npz") as z:
            z["b"]


# ------------------------------------------------------------------ the slics command line
ENCODER_MODULE = '''
import numpy as np

class Enc:
    id = "toy:errors"
    dim = 3
    has_text = False

    def encode_images(self, images, batch_size=32):
        return np.array([np.asarray(im, np.float64).mean((0, 1)) / 255 + 0.1 for im in images], np.float32)

def make():
    return Enc()
'''


@pytest.fixture
def photos(tmp_path, monkeypatch):
    (tmp_path / "errenc.py").write_text(ENCODER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    d = tmp_path / "photos"
    d.mkdir()
    rng = np.random.default_rng(0)
    for i in range(10):
        Image.fromarray(rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)).save(d / f"p{i}.png")
    return tmp_path


def _embed(tmp, cache):
    return main(["embed", "--dataset", "folder", "--images", str(tmp / "photos"), "--encoder", "errenc:make",
                 "--cache", str(cache), "--batch-size", "4", "--no-progress"])


def _one_error_line(capsys):
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.startswith("slics embed: error:")]
    assert len(lines) == 1, err
    return lines[0]


def _fail_on(monkeypatch, code, after):
    """Make the atomic writer's fsync fail with ``code`` after ``after`` successful writes."""
    calls = []
    real = os.fsync

    def fsync(fd):
        calls.append(fd)
        if len(calls) > after:
            raise OSError(code, os.strerror(code))
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)  # the one os module every writer uses


def test_cli_disk_full_is_one_line_and_the_rerun_completes(photos, capsys, monkeypatch):
    cache = photos / "cache"
    _fail_on(monkeypatch, errno.ENOSPC, after=4)  # items.json, meta.json, b00000, b00001; then full
    assert _embed(photos, cache) == 2
    line = _one_error_line(capsys)
    assert "no space left" in line and "b00002.npz" in line
    assert not list((cache / "batches").glob(".tmp-*"))  # no half-written file left behind
    monkeypatch.undo()
    assert _embed(photos, cache) == 0
    assert "1 batches computed, 2 reused" in capsys.readouterr().out  # the 2 written before are kept
    E, ids, _ = store_mod.EmbeddingStore(cache).load()
    assert E.shape == (10, 3)


@pytest.mark.parametrize("code, words", [(errno.EROFS, "read-only"), (errno.EACCES, "permission denied")])
def test_cli_read_only_and_permissions(photos, capsys, monkeypatch, code, words):
    _fail_on(monkeypatch, code, after=0)
    assert _embed(photos, photos / "cache") == 2
    line = _one_error_line(capsys)
    assert words in line and "items.json" in line


def test_cli_cache_that_is_a_file(photos, capsys):
    (photos / "afile").write_text("x")
    assert _embed(photos, photos / "afile") == 2
    assert "is a file, not a folder" in _one_error_line(capsys)
    assert _embed(photos, photos / "afile" / "sub") == 2  # a file in the middle of the path
    assert "afile" in _one_error_line(capsys)


def test_cli_damaged_cache_files(photos, capsys):
    cache = photos / "cache"
    assert _embed(photos, cache) == 0
    capsys.readouterr()
    (cache / "meta.json").write_text('{"format": "slics-embed')
    assert _embed(photos, cache) == 2
    line = _one_error_line(capsys)
    assert "meta.json' is damaged" in line and "--overwrite" in line


def test_cli_repairs_a_truncated_batch(photos, capsys):
    cache = photos / "cache"
    assert _embed(photos, cache) == 0
    E0 = np.load(cache / "embeddings.npy")
    data = (cache / "batches" / "b00001.npz").read_bytes()
    (cache / "batches" / "b00001.npz").write_bytes(data[: len(data) // 2])
    capsys.readouterr()
    assert _embed(photos, cache) == 0
    out = capsys.readouterr()
    warned = [ln for ln in out.err.splitlines() if ": warning: " in ln]  # one line each (issue 23)
    assert len(warned) == 1
    assert re.search(r"^slics embed: warning: .*b00001\.npz' is damaged.*computed again", warned[0])
    assert "1 batches computed, 2 reused" in out.out
    np.testing.assert_array_equal(np.load(cache / "embeddings.npy"), E0)


# ------------------------------------------------------------------ one damaged-file sentence for every reader
def _small_workspace(folder):
    from slics_core.data import LabelledEmbeddings
    from slics_core.explorer.build import build_workspace
    from slics_core.labels import Labels

    rng = np.random.default_rng(0)
    data = LabelledEmbeddings(raw=rng.standard_normal((40, 6)).astype(np.float32), ids=[str(i) for i in range(40)],
                              labels=Labels(np.eye(2, dtype=bool)[np.arange(40) % 2], ["a", "b"]))
    return build_workspace(data, folder, methods=["UF"], d0_values=(1,), n_iter=1)


def _reader(name, tmp_path):
    """``(read, path, fix, what)``: a reader of the library given a damaged file at ``path``."""
    from slics_core import SLiCS, formats
    from slics_core.alignment import ProcrustesAlignment
    from slics_core.encoders.titok import load_titok_tokens
    from slics_core.errors import DEFAULT_DAMAGED_FIX
    from slics_core.explorer.generation import read_pairs
    from slics_core.explorer.workspace_files import load_workspace
    from slics_core.method_models import UnfilteredModel
    from slics_core.preprocessing import load_mean

    npz, npy = tmp_path / "f.npz", tmp_path / "f.npy"
    npz.write_bytes(b"PK\x03\x04 not a zip")
    npy.write_bytes(b"\x93NUMPY garbage")
    if name == "json":
        (tmp_path / "f.json").write_text('{"cut": ')
        return lambda: formats.read_json(tmp_path / "f.json"), tmp_path / "f.json", DEFAULT_DAMAGED_FIX, None
    if name == "npy":
        return lambda: formats.load_npy(npy, "f"), npy, DEFAULT_DAMAGED_FIX, None
    if name == "npz":
        return lambda: formats.load_npz(npz, {"a": "f"}), npz, DEFAULT_DAMAGED_FIX, None
    if name == "cache extra array":
        (tmp_path / "codebook.npz").write_bytes(npz.read_bytes())
        return (lambda: store_mod.EmbeddingStore(tmp_path).load_array("codebook"), tmp_path / "codebook.npz",
                "delete it; it is computed again when needed", None)
    if name == "baseline model file":
        return lambda: UnfilteredModel.load(npz), npz, "fit it again", None
    if name == "SLiCS model file":
        return (lambda: SLiCS.load(npz), npz,
                "load a file written by SLiCS.save, or re-fit and save the model again", None)
    if name == "alignment":
        return lambda: ProcrustesAlignment.load(npz), npz, "fit it again with `slics align`", None
    if name == "workspace":
        folder = tmp_path / "ws"
        _small_workspace(folder)
        (folder / "arrays.npz").write_bytes(npz.read_bytes())
        return (lambda: load_workspace(folder), folder, "rebuild it with `slics workspace` (or delete the folder)",
                "workspace")
    if name == "pairs (a user's file)":
        ws = _small_workspace(tmp_path / "ws")
        return lambda: read_pairs(npz, ws), npz, "write it with np.savez(FILE, source=..., target=...)", None
    if name == "TiTok tokens (a user's file)":
        return (lambda: load_titok_tokens(npy), npy, "give a .npy or .npz file holding the TiTok tokens as numbers",
                None)
    if name == "mean (a user's file)":
        return (lambda: load_mean(npy), npy, "give a .npy or .npz file holding the mean embedding as numbers", None)
    raise AssertionError(name)


@pytest.mark.parametrize("name", ["json", "npy", "npz", "cache extra array", "baseline model file",
                                  "SLiCS model file", "alignment", "workspace", "pairs (a user's file)",
                                  "TiTok tokens (a user's file)", "mean (a user's file)"])
def test_every_reader_gives_the_one_damaged_file_sentence(tmp_path, name):
    from slics_core.errors import damaged_file_message

    read, path, fix, what = _reader(name, tmp_path)
    with pytest.raises(DamagedFileError) as info:
        read()
    msg = str(info.value)
    # the builder's sentence, whatever the problem: the file, what is wrong, what to do; nothing nested
    head, tail = damaged_file_message(path, "@", fix, what=what).split("@")
    assert msg.startswith(head) and msg.endswith(tail) and "\n" not in msg, msg
    assert msg.count(" is damaged") == 1 and str(path) in msg, msg
    if "user's file" in name:
        assert "delete" not in msg  # a user's input is never to be deleted


def test_damaged_file_message_parts():
    from slics_core.errors import DEFAULT_DAMAGED_FIX, damaged_file_message

    assert damaged_file_message("/c/x.npz", "it is empty") == (
        f"'/c/x.npz' is damaged or not the expected file (it is empty); {DEFAULT_DAMAGED_FIX}.")
    assert damaged_file_message("/w", EOFError("cut\nmore"), "rebuild it", what="workspace") == (
        "workspace '/w' is damaged or not the expected file (EOFError: cut); rebuild it.")
    inner = damaged_file_error("/w/a.npz", "array 'X' is short")
    assert inner.problem == "array 'X' is short" and inner.fix == DEFAULT_DAMAGED_FIX
    assert damaged_file_message("/w", inner, "rebuild it") == (
        "'/w' is damaged or not the expected file (array 'X' is short); rebuild it.")

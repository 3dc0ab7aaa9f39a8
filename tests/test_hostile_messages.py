"""Hostile-input catalogue, class 6: each bad input gives one line naming the culprit.

(``SLiCS(n_atoms="12")`` and complex ``X`` belong to the estimator's own checks, tests/test_slics.py.)
"""
import errno
import re
import warnings

import numpy as np
import pandas as pd
import pytest

from slics_core.cli import main
from slics_core.errors import FileSystemError
from slics_core.precomputed import load_precomputed


def _one_line(err, prefix="slics"):
    lines = [ln for ln in err.splitlines() if ln.startswith(prefix)]
    assert len(lines) == 1, err
    return lines[0]


# ----------------------------------------------------------------------------- parquet embedding rows
@pytest.mark.parametrize("rows, culprit", [
    ([[0.1, 0.2, 0.3], None, [0.3, 0.2, 0.1]], "row 1"),
    ([[0.1, 0.2, 0.3], [0.1, 0.2], [0.3, 0.2, 0.1]], "row 1"),
    ([["0.1", "0.2"], ["0.1", "x"], ["0.3", "0.2"]], "row 1"),
    (["0.1,0.2,0.3", "0.1,0.2,0.3", "0.3,0.2,0.1"], "row 0"),
])
def test_bad_parquet_embedding_rows_name_file_row_and_column(tmp_path, rows, culprit):
    f = tmp_path / "emb.parquet"
    pd.DataFrame({"id": ["a", "b", "c"], "embedding": pd.Series(rows, dtype=object)}).to_parquet(f)
    with pytest.raises(ValueError) as info:
        load_precomputed(f)
    msg = str(info.value)
    assert "\n" not in msg and len(msg) < 300, msg
    assert str(f) in msg and culprit in msg and "'embedding'" in msg, msg


def test_bad_parquet_rows_through_the_cli_give_one_line(tmp_path, capsys):
    f = tmp_path / "emb.parquet"
    pd.DataFrame({"id": ["a", "b"], "embedding": pd.Series([[0.1, 0.2], None], dtype=object)}).to_parquet(f)
    assert main(["embed", "--dataset", "precomputed", "--embeddings", str(f), "--cache", str(tmp_path / "c")]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "row 1" in line and str(f) in line


# ----------------------------------------------------------------------------- clip-retrieval shards
def test_forged_npy_shard_header_is_refused_before_allocating(tmp_path):
    (tmp_path / "emb" / "img_emb").mkdir(parents=True)
    (tmp_path / "emb" / "metadata").mkdir()
    with open(tmp_path / "emb" / "img_emb" / "img_emb_0.npy", "wb") as fh:
        np.lib.format.write_array_header_1_0(fh, {"descr": "<f2", "fortran_order": False, "shape": (2 ** 30, 1024)})
        fh.write(b"\0" * 64)
    pd.DataFrame({"image_path": ["a.jpg"]}).to_parquet(tmp_path / "emb" / "metadata" / "metadata_0.parquet")
    with pytest.raises(ValueError, match=r"img_emb_0\.npy' is damaged .*declares"):
        load_precomputed(tmp_path / "emb")


# ----------------------------------------------------------------------------- CLI warnings and --out
def test_cli_warnings_are_one_line_without_source(tmp_path, capsys):
    """A warning raised inside a command prints as one line, not with its Python source line."""
    from slics_core import cli

    def noisy(args):
        warnings.warn("something odd about 'x.csv'", RuntimeWarning, stacklevel=1)
        return 0

    import argparse

    args = argparse.Namespace(command="embed", func=noisy)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        code = cli._run(args)
    err = capsys.readouterr().err
    assert code == 0
    assert _one_line(err) == "slics embed: warning: something odd about 'x.csv'"


def test_fit_out_on_a_full_disk_names_the_users_file(tmp_path, capsys, monkeypatch):
    from slics_core import formats as formats_module

    rng = np.random.default_rng(0)
    np.save(tmp_path / "e.npy", rng.standard_normal((40, 6)).astype(np.float32))
    (tmp_path / "m.csv").write_text("id,labels\n" + "".join(f"x{i},{'ab'[i % 2]}\n" for i in range(40)))
    assert main(["embed", "--dataset", "precomputed", "--embeddings", str(tmp_path / "e.npy"), "--metadata",
                 str(tmp_path / "m.csv"), "--cache", str(tmp_path / "c")]) == 0
    real = formats_module.tempfile.mkstemp

    def full(*a, **k):
        fd, tmp = real(*a, **k)
        raise OSError(errno.ENOSPC, "No space left on device", tmp)

    monkeypatch.setattr(formats_module.tempfile, "mkstemp", full)
    out = tmp_path / "model.npz"
    capsys.readouterr()
    assert main(["fit", "--cache", str(tmp_path / "c"), "--out", str(out), "--n-atoms", "1", "--n-iter", "1"]) == 2
    line = _one_line(capsys.readouterr().err, "slics fit:")
    assert repr(str(out)) in line and "no space left" in line and ".tmp" not in line, line


def test_workspace_rebuild_failure_inside_a_model_file_names_the_folder(tmp_path, monkeypatch):
    """A model's own atomic writer names its temporary path; the workspace error names the folder."""
    from slics_core import formats
    from slics_core.data import LabelledEmbeddings
    from slics_core.explorer.build import build_workspace
    from slics_core.labels import Labels

    def full(path, **arrays):
        raise FileSystemError(f"no space left on the disk holding {str(path)!r}", path=path, errno=errno.ENOSPC)

    monkeypatch.setattr(formats, "atomic_save_npz", full)  # the baseline model file's writer
    rng = np.random.default_rng(0)
    data = LabelledEmbeddings(raw=rng.standard_normal((40, 6)).astype(np.float32), ids=[str(i) for i in range(40)],
                              labels=Labels(np.eye(2, dtype=bool)[np.arange(40) % 2], ["a", "b"]))
    with pytest.raises(FileSystemError) as info:
        build_workspace(data, tmp_path / "ws", methods=["UF"], d0_values=(1,), n_iter=1)
    msg = str(info.value)
    assert repr(str(tmp_path / "ws")) in msg and ".slics-new" not in msg, msg


# ----------------------------------------------------------------------------- the app's visitors
def _app_errors(page, ws_name, root, monkeypatch):
    """The error boxes of ``page`` opened with ``?ws=ws_name`` (workspaces under ``root``; AppTest)."""
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("SLICS_WORKSPACES", str(root))
    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app_pages" / page), default_timeout=120)
    at.query_params["ws"] = ws_name
    at.run()
    assert not at.exception
    return [e.value for e in at.error]


def _no_server_detail(msg, root):
    assert str(root) not in msg and not re.search(r"(^|[\s'\"(])[/~][\w.-]*/", msg), msg  # no absolute path
    shown = re.sub(r"\\(.)", r"\1", msg)  # Markdown escapes resolved
    assert not re.search(r"\bslics [a-z]|--[a-z]", shown), msg  # no shell command or option


@pytest.fixture
def damaged_root(tmp_path):
    """A workspace folder whose model file is cut in half (``visitor-damaged`` under the returned root)."""
    from slics_core.data import LabelledEmbeddings
    from slics_core.explorer.build import build_workspace
    from slics_core.labels import Labels

    rng = np.random.default_rng(0)
    data = LabelledEmbeddings(raw=rng.standard_normal((40, 6)).astype(np.float32), ids=[str(i) for i in range(40)],
                              labels=Labels(np.eye(2, dtype=bool)[np.arange(40) % 2], ["a", "b"]))
    folder = tmp_path / "visitor-damaged"
    build_workspace(data, folder, methods=["S-SLiCS", "UF"], d0_values=(1,), n_iter=1)
    model = next((folder / "models").glob("*.npz")) if (folder / "models").is_dir() else folder / "arrays.npz"
    model.write_bytes(model.read_bytes()[: model.stat().st_size // 2])
    return tmp_path


@pytest.fixture
def details():
    """Set Streamlit's ``client.showErrorDetails`` for one test: ``details("none")`` is the classroom recipe."""
    from streamlit import config

    before = config.get_option("client.showErrorDetails")
    yield lambda value: config.set_option("client.showErrorDetails", value)
    config.set_option("client.showErrorDetails", before)


def _unescaped(msg):
    return re.sub(r"\\(.)", r"\1", msg)


@pytest.mark.parametrize("page", ["retrieve.py", "home.py"])
def test_the_app_names_no_server_folder_or_command_for_an_unknown_workspace(tmp_path, monkeypatch, page, details):
    """``/retrieve?ws=nosuch``: the workspace by its name, what a visitor can do; no server folder."""
    details("none")
    errors = _app_errors(page, "nosuch", tmp_path, monkeypatch)
    assert len(errors) == 1, errors
    shown = _unescaped(errors[0])
    assert "`nosuch`" in errors[0] and "no workspace named 'nosuch'" in shown and "Pick another" in errors[0], shown
    assert "?ws= takes the name of a workspace" in shown, shown
    _no_server_detail(errors[0], tmp_path)


def test_the_operator_reads_on_the_page_where_workspaces_are_listed_when_details_are_on(tmp_path, monkeypatch,
                                                                                      details):
    """A presenter on their own laptop (``client.showErrorDetails`` "full", the default) is the operator."""
    details("full")
    errors = _app_errors("home.py", "nosuch", tmp_path, monkeypatch)
    assert len(errors) == 1 and "For whoever runs the app" in errors[0], errors
    assert str(tmp_path) in _unescaped(errors[0]) and "`slics workspace --name NAME`" in errors[0], errors[0]


def test_a_link_naming_a_workspace_by_its_folder_path_is_told_what_ws_takes(damaged_root, monkeypatch, details):
    """``?ws=/srv/…/toys`` (a valid name's folder): not "is not allowed", and no masked '/' ("(no '…')")."""
    details("none")
    errors = _app_errors("home.py", str(damaged_root / "visitor-damaged"), damaged_root, monkeypatch)
    assert len(errors) == 1, errors
    shown = _unescaped(errors[0])
    assert "is a folder path, not a workspace name" in shown and "?ws= takes the name of a workspace" in shown, shown
    assert "not allowed" not in shown and "'…'" not in shown, shown


@pytest.fixture(scope="module")
def plain_root(tmp_path_factory):
    """A small valid workspace without a generator (``no-generator`` under the returned root)."""
    from slics_core.data import LabelledEmbeddings
    from slics_core.explorer.build import build_workspace
    from slics_core.labels import Labels

    root = tmp_path_factory.mktemp("plain")
    rng = np.random.default_rng(0)
    data = LabelledEmbeddings(raw=rng.standard_normal((40, 6)).astype(np.float32), ids=[str(i) for i in range(40)],
                              labels=Labels(np.eye(2, dtype=bool)[np.arange(40) % 2], ["a", "b"]))
    build_workspace(data, root / "no-generator", methods=["S-SLiCS"], d0_values=(1,), n_iter=1)
    return root


def _page_warnings(page, ws_name, root, monkeypatch):
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("SLICS_WORKSPACES", str(root))
    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app_pages" / page), default_timeout=120)
    at.query_params["ws"] = ws_name
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    return [_unescaped(w.value) for w in at.warning] + [_unescaped(c.value) for c in at.caption]


@pytest.mark.parametrize("setting, operator", [("full", True), ("none", False)])
def test_the_command_that_adds_a_generator_is_on_the_page_only_for_the_operator(plain_root, monkeypatch, details,
                                                                               caplog, setting, operator):
    """A presenter on their own laptop reads `slics align --workspace …` on Generate; a classroom visitor reads
    that there is no generator and that the other pages work; the server's log has the command either way."""
    import logging

    details(setting)
    with caplog.at_level(logging.WARNING, logger="slics.app"):
        shown = _page_warnings("generate.py", "no-generator", plain_root, monkeypatch)
    told = [w for w in shown if "No generator for this workspace" in w]
    assert len(told) == 1 and "has no generator" in told[0] and "other pages work" in told[0], shown
    assert ("slics align --workspace no-generator --generator sd-1.5" in told[0]) is operator, told[0]
    assert ("For whoever runs the app" in told[0]) is operator, told[0]
    assert str(plain_root) not in told[0]
    logged = " ".join(r.getMessage() for r in caplog.records if r.name == "slics.app")
    assert "slics align --workspace no-generator --generator sd-1.5" in logged, logged


def test_the_app_names_no_server_folder_or_command_for_a_damaged_workspace(damaged_root, monkeypatch, caplog,
                                                                            details):
    """A damaged workspace: the visitor reads that it is damaged; the server's log keeps the folder and the fix."""
    import logging

    details("none")
    with caplog.at_level(logging.WARNING, logger="slics.app"):
        errors = _app_errors("home.py", "visitor-damaged", damaged_root, monkeypatch)
    assert len(errors) == 1 and "is damaged" in errors[0] and "Pick another" in errors[0], errors
    _no_server_detail(errors[0], damaged_root)
    logged = " ".join(r.getMessage() for r in caplog.records if r.name == "slics.app")
    assert str(damaged_root / "visitor-damaged") in logged and "slics workspace" in logged, logged


@pytest.mark.parametrize("message, shown", [
    ("no workspace named 'x' under /srv/slics/workspaces", "no workspace named 'x' under workspaces"),
    ("workspace '/srv/my data/toys' is damaged: '/srv/my data/toys/models/a.npz' is damaged or incomplete "
     "(BadZipFile: File is not a zip file); delete it (or restore it) and run again; rebuild it with `slics "
     "workspace` (or delete the folder)",
     "workspace 'toys' is damaged: 'a.npz' is damaged or incomplete (BadZipFile: File is not a zip file)"),
    ("unknown format 'x' (rebuild it with `slics workspace`)", "unknown format 'x'"),
    ("workspace 'toys' has no generator: give it one with `slics align --workspace toys --generator sd-1.5` "
     "(Stable Diffusion 1.5)", "workspace 'toys' has no generator (Stable Diffusion 1.5)"),
    ("'/x/y.json' exists and is a file, not a workspace folder; choose another --out",
     "'y.json' exists and is a file, not a workspace folder"),
    ("see https://example.org/a/b, ratio 3/4; pick two different concepts",
     "see https://example.org/a/b, ratio 3/4; pick two different concepts"),
    ("use letters or digits (no '/', no '..')", "use letters or digits (no '/', no '..')"),  # a separator named
    ("bad name '/srv/x/' here", "bad name '…' here"),
])
def test_visitor_messages_cut_server_folders_and_shell_advice(message, shown):
    from app_pages._errors import for_visitor

    assert for_visitor(message) == shown
    assert for_visitor(ValueError(message)) == shown


class _FailedBuild:
    """A build handle whose preview is open and whose whole build failed (app_pages._workspace's registry)."""

    error = ("cannot create the emoji cache folder '/srv/slics/cache' (read-only file system); set "
             "$SLICS_EMOJI_CACHE to a writable folder or run `slics emoji-build --scale 0.2`")

    def __init__(self, ws):
        self.workspace, self.finished, self.generation = ws, True, 1

    def snapshot(self):
        return {"generation": 1, "error": self.error, "stage": "", "total": 1, "done": 1, "percent": 100.0,
                "stage_elapsed": 0.0, "elapsed": 0.0}


def test_a_failed_background_build_is_told_without_server_folders_and_logged_once(ws, monkeypatch, caplog, details):
    import logging
    from pathlib import Path

    import streamlit as st
    from streamlit.testing.v1 import AppTest

    from app_pages import _workspace

    details("none")
    st.cache_resource.clear()
    handle = _FailedBuild(ws)
    monkeypatch.setattr(_workspace, "_open_workspace", lambda choice: handle)
    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app_pages" / "home.py"), default_timeout=120)
    with caplog.at_level(logging.WARNING, logger="slics.app"):
        at.run()
        at.run()  # the banner is drawn again (it polls): the failure is logged once
    assert not at.exception
    banner = [w.value for w in at.warning if "Building the whole workspace failed" in w.value]
    shown = re.sub(r"\\(.)", r"\1", banner[0]) if banner else ""
    assert len(banner) == 1 and "read-only file system" in shown, [w.value for w in at.warning]
    _no_server_detail(banner[0], "/srv/slics")
    assert "SLICS_EMOJI_CACHE" not in shown
    logged = [r.getMessage() for r in caplog.records if r.name == "slics.app"]
    assert len(logged) == 1 and "'/srv/slics/cache'" in logged[0] and "slics emoji-build" in logged[0], logged

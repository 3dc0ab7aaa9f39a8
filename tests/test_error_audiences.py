"""Errors carry their audiences as data (slics_core.errors.Audiences): what failed, what a visitor can do,
what the operator runs; the app shows the operator's part only when its error details are on."""
import errno
import os

import numpy as np
import pytest

from slics_core.errors import (
    Audiences,
    DamagedFileError,
    audiences,
    damaged_file_error,
    explain,
    file_system_error,
    shown_value,
    user_message,
)


def test_explain_attaches_the_three_parts_and_keeps_the_command_line_message():
    exc = explain(FileNotFoundError("x under /srv/a: run `slics y`"), "x is missing", visitor_fix="wait",
                  operator_fix="run `slics y`")
    assert isinstance(exc, FileNotFoundError) and str(exc) == "x under /srv/a: run `slics y`"
    assert audiences(exc) == Audiences("x is missing", "wait", "run `slics y`")
    assert audiences(ValueError("plain")) is None  # a message for the command line only


def test_damaged_and_file_system_errors_derive_their_audiences_from_their_file():
    dmg = damaged_file_error("/srv/slics/workspaces/toys", "arrays.npz: truncated", "rebuild it", what="workspace")
    told = audiences(dmg)
    assert told.failed == "workspace 'toys' is damaged or not the expected file"
    assert told.operator_fix == str(dmg) and "/srv/slics/workspaces/toys" in told.operator_fix
    assert "/srv" not in told.failed and told.visitor_fix == ""
    for code, words in ((errno.ENOSPC, "no space left on the disk holding 'a.npz'"),
                        (errno.EROFS, "'a.npz' is on a read-only file system"),
                        (errno.EACCES, "permission denied for 'a.npz'")):
        fs = file_system_error(OSError(code, os.strerror(code)), "/srv/cache/a.npz")
        assert audiences(fs).failed.startswith(words) and "/srv" not in audiences(fs).failed
        assert audiences(fs).operator_fix == user_message(fs) and "/srv/cache/a.npz" in user_message(fs)
    assert isinstance(DamagedFileError("m"), ValueError) and audiences(DamagedFileError("m")) is None  # no file known


def test_shown_value_cuts_a_long_value_and_says_how_long():
    assert shown_value("toys") == "'toys'"
    long = "a" * 100_000
    s = shown_value(long)
    assert len(s) < 120 and s.endswith("(100000 characters)") and s.startswith("'aaa")


def test_the_library_sets_the_audiences_where_it_raises(tmp_path, monkeypatch):
    from slics_core.data import LabelledEmbeddings
    from slics_core.explorer.build import build_workspace
    from slics_core.explorer.encoding import workspace_vocabulary
    from slics_core.explorer.generation import load_workspace_alignment, load_workspace_generator
    from slics_core.explorer.workspace import check_workspace_name
    from slics_core.explorer.workspace_files import load_workspace, workspace_path
    from slics_core.labels import Labels
    from slics_core.weights import MissingWeightsError, resolve

    # a workspace name: a path is told as a path, not as a name that "is not allowed"
    with pytest.raises(ValueError) as err:
        check_workspace_name("/srv/slics/workspaces/toys")
    told = audiences(err.value)
    assert "is a folder path, not a workspace name" in told.failed and "not allowed" in str(err.value)
    with pytest.raises(ValueError) as err:
        check_workspace_name("b" * 100_000)
    assert len(str(err.value)) < 400 and "(100000 characters)" in audiences(err.value).failed
    # no such workspace; no workspace in a folder
    monkeypatch.setenv("SLICS_WORKSPACES", str(tmp_path))
    with pytest.raises(FileNotFoundError) as err:
        workspace_path("nosuch")
    assert audiences(err.value).failed == "there is no workspace named 'nosuch' here"
    assert str(tmp_path) in audiences(err.value).operator_fix and str(tmp_path) not in audiences(err.value).failed
    with pytest.raises(FileNotFoundError) as err:
        load_workspace(tmp_path / "empty")
    assert "'empty'" in audiences(err.value).failed and "`slics workspace`" in audiences(err.value).operator_fix
    # a workspace without a generator, alignment or vocabulary
    rng = np.random.default_rng(0)
    data = LabelledEmbeddings(raw=rng.standard_normal((30, 5)).astype(np.float32), ids=[str(i) for i in range(30)],
                              labels=Labels(np.eye(2, dtype=bool)[np.arange(30) % 2], ["a", "b"]))
    build_workspace(data, tmp_path / "toys", methods=["S-SLiCS"], d0_values=(1,), n_iter=1)
    ws = load_workspace(tmp_path / "toys")
    for call, failed, command in ((load_workspace_generator, "has no generator", "`slics align --workspace toys "
                                   "--generator sd-1.5`"),
                                  (load_workspace_alignment, "has no generator alignment", "`slics align --workspace "
                                   "toys --generator sd-1.5`"),
                                  (workspace_vocabulary, "has no word vocabulary", "`slics workspace --encoder ...`")):
        with pytest.raises(FileNotFoundError) as err:
            call(ws)
        told = audiences(err.value)
        assert failed in told.failed and "slics" not in told.failed and command in told.operator_fix, told
        assert command in str(err.value)  # the command line's one line is unchanged
    # weights not on this machine
    with pytest.raises(MissingWeightsError) as err:
        resolve("sd-1.5", cache_dir=tmp_path / "hub")
    told = audiences(err.value)
    assert told.failed.endswith("weights are not on this machine") and "sd-1.5" not in told.failed
    assert "`slics download sd-1.5`" in told.operator_fix and str(tmp_path) not in told.failed


# ------------------------------------------------------------------ the page's text
@pytest.fixture
def details():
    from streamlit import config

    before = config.get_option("client.showErrorDetails")
    yield lambda value: config.set_option("client.showErrorDetails", value)
    config.set_option("client.showErrorDetails", before)


@pytest.mark.parametrize("setting, operator", [("full", True), (True, True), ("stacktrace", False), ("type", False),
                                               ("none", False)])
def test_visitor_text_shows_the_operator_part_only_with_full_details(details, setting, operator, caplog):
    import logging

    from app_pages._errors import visitor_text

    details(setting)
    exc = explain(FileNotFoundError("workspace 'toys' has no generator: give it one with "
                                    "`slics align --workspace toys --generator sd-1.5`"),
                  "workspace 'toys' has no generator", visitor_fix="the other pages work without one",
                  operator_fix="give it one with `slics align --workspace toys --generator sd-1.5`")
    with caplog.at_level(logging.WARNING, logger="slics.app"):
        shown = visitor_text(exc, "No generator")
    assert shown.startswith("No generator: workspace \\'toys\\' has no generator. The other pages work without one\\.")
    assert ("`slics align --workspace toys --generator sd-1.5`" in shown) is operator, shown
    assert any("slics align --workspace toys" in r.getMessage() for r in caplog.records)  # the log always has it


def test_visitor_text_without_audiences_cuts_for_a_visitor_and_shows_the_operator_the_whole_line(details):
    from app_pages._errors import visitor_text

    msg = "cannot create '/srv/slics/cache' (read-only file system); set $SLICS_EMOJI_CACHE to a writable folder"
    details("none")
    shown = visitor_text(msg, "Build failed", log=False)
    assert "/srv" not in shown and "SLICS" not in shown and "read\\-only file system" in shown, shown
    details("full")
    shown = visitor_text(msg, "Build failed", log=False)
    assert "\\/srv\\/slics\\/cache" in shown and "SLICS\\_EMOJI\\_CACHE" in shown, shown


# ------------------------------------------------------------------ long values given by a user
def test_a_long_id_or_label_is_not_echoed_whole(capsys):
    """A 10⁵-character value: its start and length in the message, and what to do after it still read."""
    from slics_core.cli import main
    from slics_core.errors import short_words
    from slics_core.labels import Labels

    long = "x" * 100_000
    with pytest.raises(ValueError) as err:
        Labels(np.zeros((2, 2), dtype=bool), [long, long])
    msg = user_message(err.value)
    assert len(msg) < 400 and "(100000 characters)" in msg and msg.endswith("names must be unique."), msg
    assert short_words("a b") == "a b" and short_words("y" * 300) == "y" * 300  # short words as they are
    assert main(["workspace", "--name", "a" * 100_000, "--cache", "/nonexistent-cache"]) == 2
    line = capsys.readouterr().err
    assert line.count("\n") == 1 and len(line) < 500 and "(100000 characters)" in line, line[:500]


def test_an_encoder_that_cannot_be_loaded_is_named_without_its_folder(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from huggingface_hub import constants

    from slics_core.explorer.encoding import load_query_encoder

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    with pytest.raises(FileNotFoundError) as err:
        load_query_encoder(SimpleNamespace(encoder=f"local:{tmp_path}/models/myclip", name="toys"))
    told = audiences(err.value)
    assert told.failed == "encoder 'myclip' of workspace 'toys' cannot be loaded here", told
    assert str(tmp_path) in told.operator_fix and str(tmp_path) in str(err.value)
    with pytest.raises(FileNotFoundError) as err:
        load_query_encoder(SimpleNamespace(encoder="ViT-B-32/openai", name="toys"))
    told = audiences(err.value)
    assert "weights are not on this machine" in told.failed and str(tmp_path) not in told.failed, told
    assert "`slics download ViT-B-32/openai`" in told.operator_fix, told

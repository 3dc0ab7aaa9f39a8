"""Issue 15, smaller items: CSV files (encoding, field counts) and options that would give an empty table."""
import numpy as np
import pytest
from PIL import Image

from slics_core.cli import main
from slics_core.datasets import load_folder
from slics_core.precomputed import load_precomputed


@pytest.fixture
def photos(tmp_path):
    d = tmp_path / "photos"
    d.mkdir()
    for n in ("a.jpg", "b.jpg", "c.jpg"):
        Image.new("RGB", (4, 4)).save(d / n)
    return d


# ----------------------------------------------------------------------------- CSV files
def test_label_csv_not_utf8_names_file_line_and_fix(photos, tmp_path):
    bad = tmp_path / "labels.csv"
    bad.write_bytes(b"image,animal\na.jpg,1\nb.jpg,0\n" + "caf\u00e9.jpg,1\n".encode("latin-1"))
    with pytest.raises(ValueError) as info:
        load_folder(photos, bad)
    msg = str(info.value)
    assert str(bad) in msg and "line 4" in msg and "0xe9" in msg and "UTF-8" in msg and "\n" not in msg


def test_label_csv_utf8_with_bom_and_non_ascii_names(photos, tmp_path):
    (photos / "caf\u00e9.jpg").write_bytes((photos / "a.jpg").read_bytes())
    ok = tmp_path / "labels.csv"
    ok.write_bytes(b"\xef\xbb\xbf" + "image,animal\ncaf\u00e9.jpg,1\nb.jpg,0\n".encode())
    ds = load_folder(photos, ok)
    assert ds.ids == ["caf\u00e9.jpg", "b.jpg"] and ds.concept_names == ["animal"]
    np.testing.assert_array_equal(ds.Y[:, 0], [True, False])


@pytest.mark.parametrize("row, n_fields", [("b.jpg,0,1,1", 4), ("b.jpg,1", 2), ("b.jpg", 1)])
def test_label_csv_row_with_wrong_field_count_is_refused(photos, tmp_path, row, n_fields):
    bad = tmp_path / "labels.csv"
    bad.write_text(f"image,animal,person\na.jpg,1,0\n\n{row}\nc.jpg,0,1\n")  # blank line 3 is skipped
    with pytest.raises(ValueError) as info:
        load_folder(photos, bad)
    msg = str(info.value)
    assert str(bad) in msg and "line 4" in msg and f"{n_fields} fields where the header has 3" in msg


def test_label_csv_quoted_commas_and_multiline_fields(photos, tmp_path):
    """Quoted values may hold commas and newlines; line numbers stay those of the file."""
    f = tmp_path / "long.csv"
    f.write_text('image,labels\n"a.jpg","animal,person"\n"b.jpg","animal\nperson"\nc.jpg,x,y\n')
    with pytest.raises(ValueError, match="line 5: 3 fields"):
        load_folder(photos, f)
    f.write_text('image,labels\n"a.jpg","animal,person"\nc.jpg,animal\n')
    ds = load_folder(photos, f)
    np.testing.assert_array_equal(ds.Y, [[1, 1], [1, 0]])


def test_label_csv_empty_and_duplicate_columns(photos, tmp_path):
    f = tmp_path / "labels.csv"
    f.write_text("")
    with pytest.raises(ValueError, match="empty"):
        load_folder(photos, f)
    f.write_text("image,animal,animal\na.jpg,1,0\n")
    with pytest.raises(ValueError, match="'animal' appears twice"):
        load_folder(photos, f)


def test_metadata_csv_checked_like_label_files(tmp_path):
    E = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    np.save(tmp_path / "e.npy", E)
    meta = tmp_path / "meta.csv"
    meta.write_text("id,labels\nx1,cat\nx2,dog\nx3,cat|dog\n")
    _, ds = load_precomputed(tmp_path / "e.npy", metadata=meta)
    assert ds.ids == ["x1", "x2", "x3"] and ds.concept_names == ["cat", "dog"]
    np.testing.assert_array_equal(ds.Y, [[1, 0], [0, 1], [1, 1]])
    meta.write_text("id,labels\nx1,cat\nx2,dog,extra\nx3,cat\n")
    with pytest.raises(ValueError, match=r"meta\.csv' line 3: 3 fields where the header has 2"):
        load_precomputed(tmp_path / "e.npy", metadata=meta)
    meta.write_bytes(b"id\nx1\nx\xff2\nx3\n")
    with pytest.raises(ValueError, match=r"meta\.csv' is not UTF-8 text \(byte 0xff on line 3\)"):
        load_precomputed(tmp_path / "e.npy", metadata=meta)
    txt = tmp_path / "ids.txt"
    txt.write_bytes(b"x1\nx\xff2\nx3\n")
    with pytest.raises(ValueError, match=r"ids\.txt' is not UTF-8 text"):
        load_precomputed(tmp_path / "e.npy", metadata=txt)


def test_cli_reports_bad_csv_in_one_line(photos, tmp_path, capsys):
    bad = tmp_path / "labels.csv"
    bad.write_text("image,animal\na.jpg,1,1\n")
    code = main(["embed", "--dataset", "folder", "--images", str(photos), "--labels", str(bad),
                 "--encoder", "ViT-B-32/random@32", "--cache", str(tmp_path / "cache"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and str(bad) in err and "line 2" in err
    assert not (tmp_path / "cache").exists()  # refused before anything was written


# ----------------------------------------------------------------------------- options giving empty tables
@pytest.mark.parametrize("command, extra, option", [
    ("evaluate", ["--seeds", "0"], "--seeds"),
    ("evaluate", ["--methods", ","], "--methods"),
    ("evaluate", ["--methods", " "], "--methods"),
    ("evaluate", ["--sweep", "5", "3"], "--sweep"),
    ("evaluate", ["--sweep", "0", "3"], "--sweep"),
    ("evaluate", ["--sweep", "2", "3", "--n-val", "0"], "--n-val"),
    ("evaluate", ["--n-query", "0"], "--n-query"),
    ("evaluate", ["--n-train", "0"], "--n-train"),
    ("evaluate", ["--k", "0"], "--k"),
    ("evaluate", ["--n-atoms", "0"], "--n-atoms"),
    ("evaluate", ["--n-words", "0"], "--n-words"),
    ("evaluate", ["--n-val", "-1"], "--n-val"),
    ("fit", ["--out", "m.npz", "--n-atoms", "0"], "--n-atoms"),
    ("fit", ["--out", "m.npz", "--n-query", "0"], "--n-query"),
    ("captions", ["--model", "m.npz", "--top", "0"], "--top"),
    ("workspace", ["--n-words", "0"], "--n-words"),
    ("workspace", ["--d0", "3", "5", "--n-val", "0"], "--n-val"),
    ("reproduce", ["--dataset", "emoji", "--encoder", "emoji-small", "--seeds", "0"], "--seeds"),
    ("reproduce", ["--dataset", "emoji", "--encoder", "emoji-small", "--sweep", "9", "4"], "--sweep"),
])
def test_options_that_give_an_empty_table_are_refused(command, extra, option, tmp_path, capsys):
    """Refused in one line naming the option, before the (missing) cache is even opened."""
    where = ["--out-dir", str(tmp_path / "out")] if command == "reproduce" else ["--cache", str(tmp_path / "none")]
    assert main([command, *where, *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"slics {command}: error: {option} ") and err.count("\n") == 1, err
    assert not (tmp_path / "none").exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize("extra", [[], ["--sweep", "3", "3"], ["--n-val", "0"], ["--sweep", "2", "3", "--n-val", "1"]])
def test_valid_options_reach_the_cache(extra, tmp_path, capsys):
    """The same checks let sensible values through (the missing cache is what is reported)."""
    assert main(["evaluate", "--cache", str(tmp_path / "none"), *extra]) == 2
    err = capsys.readouterr().err
    assert "none" in err and "must be at least" not in err and "--sweep" not in err


# ----------------------------------------------------------------------------- Streamlit settings
def _streamlit_config(*overrides, env=None):
    """Options as Streamlit itself reads them from .streamlit/config.toml (plus overrides), from the repository root."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-m", "streamlit", "config", "show", *overrides], cwd=root,
                          env={**os.environ, **(env or {})}, capture_output=True, text=True, check=True, timeout=120)
    out = {}
    section = None
    for line in proc.stdout.splitlines():
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
        elif "=" in line and not line.startswith("#"):
            key, value = (s.strip() for s in line.split("=", 1))
            out[f"{section}.{key}"] = value.strip('"')
    return out


def test_laptop_settings_open_a_tab_without_deploy_button():
    cfg = _streamlit_config()
    assert cfg["server.headless"] == "false"  # a browser tab opens on a laptop
    assert cfg["server.showEmailPrompt"] == "false"  # ... without asking for an e-mail address first
    assert cfg["client.toolbarMode"] == "viewer"  # no Deploy button, no developer menu
    assert cfg["server.maxUploadSize"] == "20"
    assert cfg["server.fileWatcherType"] == "none"  # never watches the repository's .venv (issue 24)


@pytest.mark.parametrize("how", ["flags", "env"])
def test_classroom_switch_hides_error_details(how):
    """The documented classroom switch (README) is accepted by Streamlit and overrides the laptop settings."""
    if how == "flags":
        cfg = _streamlit_config("--server.headless", "true", "--client.showErrorDetails", "none")
    else:
        cfg = _streamlit_config(env={"STREAMLIT_SERVER_HEADLESS": "true",
                                     "STREAMLIT_CLIENT_SHOW_ERROR_DETAILS": "none"})
    assert cfg["server.headless"] == "true" and cfg["client.showErrorDetails"] == "none"
    assert cfg["client.toolbarMode"] == "viewer"

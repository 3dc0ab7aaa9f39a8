"""Hostile-input catalogue, class 1: labels must land on the right images (one-to-one matching).

Fixtures are clip-retrieval's real output layout (``img_emb/img_emb_N.npy`` float16 +
``metadata/metadata_N.parquet`` with ``image_path``), a ``.npy`` + metadata table, and an
image folder with a CSV label file.
"""
import numpy as np
import pandas as pd
import pytest
from PIL import Image

from slics_core.cli import main
from slics_core.datasets import load_folder
from slics_core.precomputed import load_precomputed

ROOT = "/srv/photos"


def _clip_retrieval(root, n_per_set=17, d=8):
    """clip-retrieval output of a folder with ``set1/img_XX.jpg`` and ``set2/img_XX.jpg`` (same file names)."""
    rng = np.random.default_rng(0)
    (root / "img_emb").mkdir(parents=True)
    (root / "metadata").mkdir()
    ids = []
    for shard, s in enumerate(("set1", "set2")):
        part = [f"{ROOT}/{s}/img_{i:02d}.jpg" for i in range(n_per_set)]
        np.save(root / "img_emb" / f"img_emb_{shard}.npy", rng.standard_normal((n_per_set, d)).astype(np.float16))
        pd.DataFrame({"image_path": part, "caption": [""] * n_per_set}).to_parquet(
            root / "metadata" / f"metadata_{shard}.parquet")
        ids += part
    return ids


def test_repeated_file_names_in_two_folders_label_only_their_own_rows(tmp_path):
    """The audit's case: the CSV names the set1 rows relatively; set2's twins must stay unlabelled."""
    ids = _clip_retrieval(tmp_path / "emb")
    labels = tmp_path / "labels.csv"
    labels.write_text("image,labels\n" + "".join(f"set1/img_{i:02d}.jpg,cat\n" for i in range(17)))
    _, ds = load_precomputed(tmp_path / "emb", labels=labels)
    assert ds.ids == ids
    lab = ds.Y[:, ds.concept_names.index("cat")]
    assert lab[:17].all() and not lab[17:].any()
    assert ds.label_report == "17 of 17 label rows matched, 17 ids unlabelled"


def test_each_folder_gets_its_own_rows(tmp_path):
    _clip_retrieval(tmp_path / "emb")
    labels = tmp_path / "labels.csv"
    labels.write_text("image,labels\n" + "".join(f"set1/img_{i:02d}.jpg,cat\nset2/img_{i:02d}.jpg,dog\n"
                                                 for i in range(17)))
    _, ds = load_precomputed(tmp_path / "emb", labels=labels)
    cat, dog = ds.concept_names.index("cat"), ds.concept_names.index("dog")
    assert ds.Y[:17, cat].all() and not ds.Y[:17, dog].any()
    assert ds.Y[17:, dog].all() and not ds.Y[17:, cat].any()
    assert ds.label_report == "34 of 34 label rows matched, 0 ids unlabelled"


def test_bare_name_shared_by_two_ids_is_refused_naming_them(tmp_path):
    _clip_retrieval(tmp_path / "emb")
    labels = tmp_path / "labels.csv"
    labels.write_text("image,labels\nimg_00.jpg,cat\n")
    with pytest.raises(ValueError) as info:
        load_precomputed(tmp_path / "emb", labels=labels)
    msg = str(info.value)
    assert "\n" not in msg and "line 2" in msg and "'img_00.jpg'" in msg
    assert f"{ROOT}/set1/img_00.jpg" in msg and f"{ROOT}/set2/img_00.jpg" in msg


def _refused(tmp_path, name, text, match):
    """Import the two-folder clip-retrieval fixture with the label file ``name`` holding ``text``: refused."""
    _clip_retrieval(tmp_path / "emb")
    (tmp_path / name).write_text(text)
    with pytest.raises(ValueError, match=match):
        load_precomputed(tmp_path / "emb", labels=tmp_path / name)


def test_labels_matching_no_id_is_an_error(tmp_path):
    _refused(tmp_path, "labels.csv", "image,labels\nother/img_00.jpg,cat\nother/img_01.jpg,dog\n",
             r"none of the 2 label rows .*labels\.csv.* names one of the 34 ids")


def test_matching_uses_whole_path_components(tmp_path):
    """``g_00.jpg`` is a string suffix of ``img_00.jpg`` but not a path suffix."""
    E = np.zeros((2, 4), np.float32) + np.eye(2, 4, dtype=np.float32)
    np.save(tmp_path / "e.npy", E)
    (tmp_path / "ids.txt").write_text("a/img_00.jpg\na/xg_01.jpg\n")
    labels = tmp_path / "labels.csv"
    labels.write_text("image,labels\ng_00.jpg,cat\nimg_00.jpg,dog\n")
    _, ds = load_precomputed(tmp_path / "e.npy", metadata=tmp_path / "ids.txt", labels=labels)
    assert ds.concept_names == ["dog"]  # cat's row named no id
    np.testing.assert_array_equal(ds.Y[:, 0], [True, False])
    assert ds.label_report == "1 of 2 label rows matched, 1 ids unlabelled"


def test_images_root_makes_a_short_name_exact(tmp_path):
    """With --images, ``x.jpg`` is ROOT/x.jpg, not ROOT/sub/x.jpg; absolute label paths also match."""
    E = np.eye(3, 4, dtype=np.float32)
    np.save(tmp_path / "e.npy", E)
    (tmp_path / "ids.txt").write_text(f"{ROOT}/x.jpg\n{ROOT}/sub/x.jpg\n{ROOT}/y.jpg\n")
    labels = tmp_path / "labels.csv"
    labels.write_text(f"image,labels\nx.jpg,cat\nsub/x.jpg,dog\n{ROOT}/y.jpg,cow\n")
    with pytest.raises(ValueError, match="fits 2 ids"):  # without the root, x.jpg is ambiguous
        load_precomputed(tmp_path / "e.npy", metadata=tmp_path / "ids.txt", labels=labels)
    _, ds = load_precomputed(tmp_path / "e.npy", metadata=tmp_path / "ids.txt", labels=labels, images=ROOT)
    np.testing.assert_array_equal(ds.Y, np.eye(3, dtype=bool))
    assert ds.concept_names == ["cat", "dog", "cow"]


def test_two_label_rows_for_one_id_are_refused(tmp_path):
    _refused(tmp_path, "labels.csv", f"image,labels\nset1/img_03.jpg,cat\n{ROOT}/set1/img_03.jpg,dog\n",
             r"lines 2 and 3 both name .*set1/img_03\.jpg")


def test_json_label_entries_are_named_in_messages(tmp_path):
    _refused(tmp_path, "labels.json", '{"set1/img_00.jpg": ["cat"], "img_01.jpg": ["dog"]}',
             r"entry 2: 'img_01\.jpg' fits 2 ids")


def test_folder_loader_refuses_ambiguous_and_duplicate_rows(tmp_path):
    d = tmp_path / "photos"
    for s in ("set1", "set2"):
        (d / s).mkdir(parents=True)
        for i in range(2):
            Image.new("RGB", (4, 4)).save(d / s / f"img_{i}.jpg")
    f = tmp_path / "labels.csv"
    f.write_text("image,labels\nset1/img_0.jpg,cat\nset2/img_0.jpg,dog\nimg_1.jpg,cow\n")
    with pytest.raises(ValueError, match=r"line 4: 'img_1\.jpg' fits 2 ids"):
        load_folder(d, f)
    f.write_text(f"image,labels\nset1/img_0.jpg,cat\n{d}/set1/img_0.jpg,dog\n")
    with pytest.raises(ValueError, match="lines 2 and 3 both name"):
        load_folder(d, f)
    f.write_text(f"image,labels\nset1/img_0.jpg,cat\n{d}/set2/img_1.jpg,dog\n")
    ds = load_folder(d, f)
    assert ds.ids == ["set1/img_0.jpg", "set2/img_1.jpg"]
    np.testing.assert_array_equal(ds.Y, np.eye(2, dtype=bool))


def test_cli_import_prints_the_match_count(tmp_path, capsys):
    _clip_retrieval(tmp_path / "emb")
    labels = tmp_path / "labels.csv"
    labels.write_text("image,labels\n" + "".join(f"set1/img_{i:02d}.jpg,cat\n" for i in range(17))
                      + "nowhere/img_00.jpg,dog\n")
    code = main(["embed", "--dataset", "precomputed", "--embeddings", str(tmp_path / "emb"), "--labels", str(labels),
                 "--cache", str(tmp_path / "cache")])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "17 of 18 label rows matched, 17 ids unlabelled" in err


def test_labels_that_are_a_folder_say_so(tmp_path, capsys):
    """``--labels <folder>``: the folder exists, so "no label file at" misleads; say a labels CSV is needed."""
    _clip_retrieval(tmp_path / "emb")
    (tmp_path / "labels").mkdir()
    code = main(["embed", "--dataset", "precomputed", "--embeddings", str(tmp_path / "emb"), "--labels",
                 str(tmp_path / "labels"), "--cache", str(tmp_path / "cache")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert f"{str(tmp_path / 'labels')!r} is a folder, not a label file; give the labels CSV file" in err, err
    assert "no label file" not in err

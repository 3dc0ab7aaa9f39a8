"""Every data source through the one pipeline, from fixtures written in the real formats.

COCO ``instances_*.json`` (real field structure; some supercategories have no image), MIRFlickr25K's
official layout (upper-case extensions, a PNG named ``.jpg``, unlabelled images, annotation lines naming
absent images), a folder + CSV, and precomputed embeddings in clip-retrieval's layout
(``img_emb/img_emb_0.npy`` + ``metadata/metadata_0.parquet``). Each goes embed -> workspace -> evaluate
-> fit -> captions -> every app page, with the offline ``emoji-small`` encoder; the folder also with a
real architecture with random weights (``ViT-B-32/random@64``).
"""
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from streamlit.testing.v1 import AppTest

from slics_core.cli import main
from slics_core.explorer import scoring
from slics_core.explorer.workspace_files import load_workspace, workspace_path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "data" / "coco_categories.json"
PAGES = ("retrieve", "subspaces", "atoms", "captions", "generate", "evaluate", "learn", "cones")
COLOURS = {"person": (220, 180, 150), "vehicle": (40, 40, 200), "animal": (140, 90, 30), "food": (230, 60, 40),
           "kitchen": (200, 200, 200)}


def _photo(path, colour, rng, fmt="JPEG"):
    a = np.clip(np.asarray(colour) + rng.normal(0, 25, (24, 24, 3)), 0, 255).astype(np.uint8)
    Image.fromarray(a).save(path, format=fmt)


def _coco_categories():
    if SHARED.is_file():
        cats = json.loads(SHARED.read_text())
        cats = cats["categories"] if isinstance(cats, dict) else cats
    else:  # the first categories of COCO, with COCO's ids and supercategories
        cats = [{"id": 1, "name": "person", "supercategory": "person"},
                {"id": 2, "name": "bicycle", "supercategory": "vehicle"},
                {"id": 3, "name": "car", "supercategory": "vehicle"},
                {"id": 16, "name": "bird", "supercategory": "animal"},
                {"id": 18, "name": "dog", "supercategory": "animal"},
                {"id": 52, "name": "banana", "supercategory": "food"},
                {"id": 44, "name": "bottle", "supercategory": "kitchen"},
                {"id": 62, "name": "chair", "supercategory": "furniture"}]
    return [{"supercategory": c["supercategory"], "id": int(c["id"]), "name": c["name"]} for c in cats]


def make_coco(root, rng, n=70):
    cats = _coco_categories()
    used = [c for c in cats if c["supercategory"] in COLOURS]  # other supercategories: no image at all
    (root / "val2017").mkdir(parents=True)
    images, anns = [], []
    for i in range(n):
        picked = rng.choice(len(used), size=int(rng.integers(1, 3)), replace=False)
        fname = f"{i + 1:012d}.jpg"
        _photo(root / "val2017" / fname, COLOURS[used[picked[0]]["supercategory"]], rng)
        images.append({"license": 1, "file_name": fname, "coco_url": f"http://images.cocodataset.org/val2017/{fname}",
                       "height": 24, "width": 24, "date_captured": "2013-11-14 17:02:52", "flickr_url": "",
                       "id": 1000 + i})
        for c in picked:
            anns.append({"segmentation": [[1.0, 1.0, 5.0, 1.0, 5.0, 5.0]], "area": 16.0, "iscrowd": 0,
                         "image_id": 1000 + i, "bbox": [1.0, 1.0, 4.0, 4.0], "category_id": used[c]["id"],
                         "id": len(anns) + 1})
    _photo(root / "val2017" / "unannotated.jpg", (0, 0, 0), rng)
    images.append({"license": 1, "file_name": "unannotated.jpg", "height": 24, "width": 24, "id": 5})
    inst = {"info": {"description": "COCO 2017 Dataset"}, "licenses": [{"id": 1, "name": "x", "url": ""}],
            "images": images, "annotations": anns, "categories": cats}
    (root / "instances_val2017.json").write_text(json.dumps(inst))
    return ["--dataset", "coco", "--annotations", str(root / "instances_val2017.json"), "--images",
            str(root / "val2017")]


def make_mirflickr(root, rng, n=70):
    img_dir = root / "mirflickr"
    ann = root / "mirflickr25k_annotations_v080"
    img_dir.mkdir(parents=True)
    ann.mkdir()
    lists = {k: [] for k in ("animals", "food", "indoor", "night", "people", "plant_life", "sky", "structures",
                             "sunset", "transport", "water", "bird", "dog", "baby", "female", "male", "portrait",
                             "flower", "tree", "clouds", "car", "lake", "river", "sea")}
    looks = {"sky": (120, 170, 240), "people": (220, 180, 150), "animals": (140, 90, 30), "water": (20, 60, 160)}
    for k in range(1, n + 1):
        label = list(looks)[k % 4]
        name = f"im{k}.JPG" if k % 7 == 0 else f"im{k}.jpg"  # upper-case extensions exist in the wild
        _photo(img_dir / name, looks[label], rng, fmt="PNG" if k % 11 == 0 else "JPEG")  # PNGs named .jpg
        if k % 13 == 0:
            continue  # an unlabelled image
        lists[label].append(k)
        if label == "water":
            lists["sea"].append(k)
        if label == "animals" and k % 2:
            lists["dog"].append(k)
    lists["night"] += [n + 5, n + 9]  # annotation lines naming images that are absent
    for label, nums in lists.items():
        (ann / f"{label}.txt").write_text("".join(f"{x}\n" for x in nums))
    (ann / "README.txt").write_text("MIRFLICKR-25000 annotations\n")
    return ["--dataset", "mirflickr", "--root", str(root)]


def make_folder(root, rng, n=60):
    (root / "photos" / "sub").mkdir(parents=True)
    rows = ["image,labels,sub_labels"]
    for i in range(n):
        lab = ["red", "green", "blue"][i % 3]
        rel = f"sub/p{i}.jpg" if i % 5 == 0 else f"p{i}.jpg"
        _photo(root / "photos" / rel, {"red": (220, 30, 30), "green": (30, 200, 30), "blue": (30, 30, 220)}[lab], rng)
        extra = "|warm" if i % 4 == 0 else ""
        sub = f"{lab}/dark" if i % 2 else f"{lab}/light"
        rows.append(f"{rel},{lab}{extra},{sub}")
    (root / "labels.csv").write_text("\n".join(rows) + "\n")
    return ["--dataset", "folder", "--images", str(root / "photos"), "--labels", str(root / "labels.csv")]


def make_precomputed(root, rng, n=80, d=64):
    """clip-retrieval's output layout (two shards), labels in a separate CSV keyed by image path."""
    (root / "emb" / "img_emb").mkdir(parents=True)
    (root / "emb" / "metadata").mkdir()
    centres = rng.standard_normal((3, d))
    rows = ["image,labels"]
    for shard, (lo, hi) in enumerate(((0, 50), (50, n))):
        ids = [f"/data/images/{i:05d}.jpg" for i in range(lo, hi)]
        labs = [i % 3 for i in range(lo, hi)]
        E = centres[labs] + 0.4 * rng.standard_normal((hi - lo, d))
        np.save(root / "emb" / "img_emb" / f"img_emb_{shard}.npy", E.astype(np.float16))
        pd.DataFrame({"image_path": ids, "caption": ["" for _ in ids]}).to_parquet(
            root / "emb" / "metadata" / f"metadata_{shard}.parquet")
        rows += [f"{p},{['cat', 'car', 'cup'][y]}" for p, y in zip(ids, labs) if p[-6] != "7"]  # some unlabelled
    (root / "labels.csv").write_text("\n".join(rows) + "\n")
    return ["--dataset", "precomputed", "--embeddings", str(root / "emb"), "--labels", str(root / "labels.csv")]


SOURCES = {"coco": make_coco, "mirflickr": make_mirflickr, "folder": make_folder, "precomputed": make_precomputed}


@pytest.fixture
def workspaces_root(tmp_path, monkeypatch):
    root = tmp_path / "workspaces"
    monkeypatch.setenv("SLICS_WORKSPACES", str(root))
    return root


def _pipeline(tmp_path, source, encoder, capsys):
    rng = np.random.default_rng(0)
    args = SOURCES[source](tmp_path / "data", rng)
    cache = tmp_path / "cache"
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["person", "car", "dog", "sky", "water", "red", "green", "blue", "food", "cat",
                                "cup", "tree", "boat", "bowl"]) + "\n")
    assert main(["embed", *args, "--encoder", encoder, "--cache", str(cache), "--batch-size", "16",
                 "--no-progress"]) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert main(["workspace", "--cache", str(cache), "--name", source, "--d0", "2", "3", "--n-iter", "2",
                 "--vocab", str(vocab), "--quiet"]) == 0, capsys.readouterr().err
    ws = load_workspace(workspace_path(source))
    assert ws.encoder == encoder
    # every method of the registry is there: U-SLiCS survives concepts its zero-shot labels leave empty
    assert set(ws.methods) >= {"S-SVD", "S-SLiCS", "U-SLiCS", "UF", "F-SpLiCE", "SpLiCE"}, ws.skipped
    assert ws.chosen_d0 in (2, 3) and [r["d0"] for r in ws.d0_scores] == [2, 3]
    tr = ws.index["train"]
    U = ws.raw / np.linalg.norm(ws.raw, axis=1, keepdims=True)
    C = U - U[tr].mean(0)  # centred with the training mean only
    np.testing.assert_allclose(ws.X, C / np.linalg.norm(C, axis=1, keepdims=True), atol=1e-5)
    recs = scoring.methods_table(ws, 2, k=5, modes=("partial",))
    assert {r["method"] for r in recs} == set(ws.methods)
    res = tmp_path / "res"
    assert main(["evaluate", "--cache", str(cache), "--n-atoms", "2", "--n-iter", "2", "--k", "5", "--vocab",
                 str(vocab), "--seeds", "1", "--out-dir", str(res)]) == 0, capsys.readouterr().err
    rows = {r["method"]: r for r in json.loads((res / "methods.json").read_text())}
    assert set(rows) == set(ws.methods) and not any(r["skipped"] for r in rows.values()), rows
    model = tmp_path / "m.npz"
    assert main(["fit", "--cache", str(cache), "--out", str(model), "--n-atoms", "2", "--n-iter", "2"]) == 0
    assert main(["captions", "--model", str(model), "--cache", str(cache), "--vocab", str(vocab), "--top", "2",
                 "--out", str(tmp_path / "caps.json")]) == 0, capsys.readouterr().err
    caps = json.loads((tmp_path / "caps.json").read_text())
    assert list(caps) == ws.concept_names and all(len(v) == 2 for v in caps.values())
    return ws


def _every_page(name):
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.query_params["ws"] = name
    at.run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    assert at.metric[0].value == str(len(load_workspace(workspace_path(name))))
    for page in PAGES:
        at.switch_page(f"app_pages/{page}.py").run()
        assert not at.exception, (page, at.exception)
        assert not at.error, (page, [e.value for e in at.error])
        if page == "retrieve":
            assert at.selectbox(key="method").options == ["S-SVD", "S-SLiCS", "U-SLiCS", "UF", "F-SpLiCE", "SpLiCE"]


@pytest.mark.slow
@pytest.mark.parametrize("source", list(SOURCES))
def test_source_through_the_pipeline_and_every_page(source, tmp_path, workspaces_root, capsys):
    ws = _pipeline(tmp_path, source, "emoji-small", capsys)
    if source == "coco":  # supercategories without an image are left out (a concept needs examples)
        assert set(ws.concept_names) == set(COLOURS)
        assert ws.Z is not None and all(n in {c["name"] for c in _coco_categories()} for n in ws.sub_names)
    if source == "mirflickr":
        assert ws.concept_names == ["animals", "people", "sky", "water"] and "7" in ws.ids  # im7.JPG was found
        assert "13" not in [ws.ids[i] for i in np.flatnonzero(ws.Y.any(axis=1))]
    if source == "precomputed":
        assert ws.paths is None or all(p is None for p in ws.paths)  # no image files: placeholder tiles
    _every_page(source)


@pytest.mark.slow
def test_real_architecture_with_random_weights(tmp_path, workspaces_root, capsys):
    ws = _pipeline(tmp_path, "folder", "ViT-B-32/random@64", capsys)
    assert ws.X.shape[1] == 512 and ws.Z.shape[1] == 6  # red/dark, red/light, ...


def test_registered_method_appears_in_table_and_picker(tmp_path, workspaces_root, capsys):
    """Adding a method to the registry makes it fitted, scored and offered, with no other change."""
    from slics_core.methods import REGISTRY, Method, register
    from slics_core.slics import SLiCS

    def fit_shuffled(inputs, d0, *, n_iter, batch_size, seed, ridge):  # labels permuted: a weak method
        Y = inputs.Y[np.random.default_rng(seed).permutation(len(inputs.Y))]
        return SLiCS(n_atoms=d0, n_iter=0).fit(inputs.X, Y, concept_names=inputs.concept_names)

    register(Method("Shuffled", "S-SVD on shuffled labels (test)", fit_shuffled, SLiCS.load, needs=("labels",)))
    try:
        ws = _pipeline(tmp_path, "precomputed", "emoji-small", capsys)
        assert "Shuffled" in ws.methods and ("Shuffled", 2) in ws.models
        recs = scoring.methods_table(ws, 2, k=5)
        assert {r["method"] for r in recs} >= {"Shuffled", "S-SLiCS"}
        import streamlit as st

        st.cache_resource.clear()  # the app keeps opened workspaces per process
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
        at.query_params["ws"] = "precomputed"
        at.run()
        at.switch_page("app_pages/retrieve.py").run()
        assert not at.exception
        assert "Shuffled" in at.selectbox(key="method").options
    finally:
        REGISTRY.pop("Shuffled", None)  # the registry as it was


def test_bad_workspace_link_shows_message_and_picker(workspaces_root):
    for bad in ("../../etc", "no-such-workspace"):
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
        at.query_params["ws"] = bad
        at.run()
        assert not at.exception
        assert at.error and "Could not open workspace" in at.error[0].value
        assert "ws" not in at.query_params  # dropped, so a reload does not fail again
        assert at.selectbox(key="ws_recover").options  # the picker is there

"""Loaders on small fixtures written in the real formats, robust image loading."""
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from slics_core.datasets import MIRFLICKR_HIERARCHY, load_coco, load_folder, load_mirflickr
from slics_core.images import ImageLoadError, load_image


@pytest.fixture
def odd_images(tmp_path):
    d = tmp_path / "imgs"
    d.mkdir()
    Image.new("RGB", (8, 6), (200, 10, 10)).save(d / "plain.jpg")
    Image.new("RGB", (5, 5), (0, 0, 255)).save(d / "png_named.jpg", format="PNG")
    Image.new("CMYK", (4, 4), (0, 255, 255, 0)).save(d / "cmyk.jpg", format="JPEG")
    arr = np.full((4, 6), 65535, dtype=np.uint16)
    arr[0, 0] = 0
    Image.fromarray(arr).save(d / "deep16.png")
    rot = Image.new("RGB", (10, 4), (0, 255, 0))
    exif = rot.getexif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise on display
    rot.save(d / "rotated.jpg", exif=exif.tobytes())
    Image.new("RGBA", (3, 3), (0, 0, 0, 0)).save(d / "alpha.png")
    (d / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    (d / "notes.png").write_text("hello")
    good = d / "trunc.jpg"
    Image.new("RGB", (64, 64), (1, 2, 3)).save(good, quality=95)
    good.write_bytes(good.read_bytes()[:200])
    return d


#: The real COCO category table, kept with the tests (tests/data/NOTICE: CC BY 4.0, COCO Consortium).
COCO_CATEGORIES = Path(__file__).resolve().parent / "data" / "coco_categories.json"

def test_load_image_handles_real_world_quirks(odd_images):
    d = odd_images
    assert load_image(d / "png_named.jpg").getpixel((0, 0)) == (0, 0, 255)
    cmyk = load_image(d / "cmyk.jpg")
    assert cmyk.mode == "RGB" and cmyk.getpixel((1, 1))[0] > 200 and cmyk.getpixel((1, 1))[1] < 60
    deep = load_image(d / "deep16.png")
    assert deep.mode == "RGB" and deep.getpixel((1, 1)) == (255, 255, 255) and deep.getpixel((0, 0)) == (0, 0, 0)
    assert load_image(d / "rotated.jpg").size == (4, 10)
    assert load_image(d / "alpha.png").getpixel((1, 1)) == (255, 255, 255)
    for bad in ("broken.jpg", "notes.png", "trunc.jpg", "missing.jpg"):
        with pytest.raises(ImageLoadError):
            load_image(d / bad)
    with pytest.raises(ImageLoadError, match="larger"):
        load_image(d / "plain.jpg", max_pixels=10)


def test_load_image_takes_images_and_refuses_the_rest(odd_images):
    loaded, refused = [], []
    for i, n in enumerate(("plain.jpg", "broken.jpg", "cmyk.jpg", "notes.png")):
        try:
            assert load_image(odd_images / n).mode == "RGB"
            loaded.append(i)
        except ImageLoadError as exc:
            assert n in str(exc)
            refused.append(i)
    assert (loaded, refused) == ([0, 2], [1, 3])


def test_coco_loader(tmp_path):
    img = tmp_path / "train"
    img.mkdir()
    cats = [{"id": 1, "name": "person", "supercategory": "person"},
            {"id": 18, "name": "dog", "supercategory": "animal"},
            {"id": 17, "name": "cat", "supercategory": "animal"},
            {"id": 3, "name": "car", "supercategory": "vehicle"}]
    data = {"images": [{"id": 5, "file_name": "a.jpg"}, {"id": 2, "file_name": "b.jpg"},
                       {"id": 9, "file_name": "c.jpg"}],
            "annotations": [{"image_id": 5, "category_id": 18}, {"image_id": 5, "category_id": 1},
                            {"image_id": 2, "category_id": 17}, {"image_id": 2, "category_id": 17}],
            "categories": cats}
    ann = tmp_path / "instances_train.json"
    ann.write_text(json.dumps(data))
    ds = load_coco(ann, img)
    assert ds.ids == ["2", "5", "9"]
    assert ds.concept_names == ["person", "vehicle", "animal"]  # by category id order
    assert ds.sub_names == ["person", "car", "cat", "dog"]
    np.testing.assert_array_equal(ds.Y, [[0, 0, 1], [1, 0, 1], [0, 0, 0]])
    np.testing.assert_array_equal(ds.Z, [[0, 0, 1, 0], [1, 0, 0, 1], [0, 0, 0, 0]])
    np.testing.assert_array_equal(ds.sub_to_concept, [0, 1, 2, 2])
    assert ds.paths[0].endswith("b.jpg")
    ann.write_text("{not json")
    with pytest.raises(ValueError, match="JSON"):
        load_coco(ann, img)


def test_coco_real_category_file_gives_12_supercategories(tmp_path):
    cats = json.loads(COCO_CATEGORIES.read_text())
    ann = tmp_path / "i.json"
    ann.write_text(json.dumps({"images": [], "annotations": [], "categories": cats}))
    ds = load_coco(ann, tmp_path)
    assert len(ds.concept_names) == 12 and len(ds.sub_names) == 80
    assert ds.concept_names[:4] == ["person", "vehicle", "outdoor", "animal"]


def test_mirflickr_official_layout(tmp_path):
    (tmp_path / "mirflickr").mkdir()
    for n in (1, 2, 3, 10):
        Image.new("RGB", (4, 4)).save(tmp_path / "mirflickr" / f"im{n}.jpg")
    ann = tmp_path / "mirflickr25k_annotations_v080"
    ann.mkdir()
    labels = list(MIRFLICKR_HIERARCHY) + [s for v in MIRFLICKR_HIERARCHY.values() for s in v]
    assert len(labels) == 24
    for lab in labels:
        (ann / f"{lab}.txt").write_text("")
    (ann / "animals.txt").write_text("1\n")
    (ann / "dog.txt").write_text("2\n10\n")
    (ann / "sky.txt").write_text("3\n")
    (ann / "dog_r1.txt").write_text("10\n")
    ds = load_mirflickr(tmp_path)
    assert ds.ids == ["1", "2", "3", "10"]
    assert len(ds.concept_names) == 11 and len(ds.sub_names) == 13
    a, sky = ds.concept_names.index("animals"), ds.concept_names.index("sky")
    dog = ds.sub_names.index("dog")
    np.testing.assert_array_equal(ds.Y[:, a], [1, 1, 0, 1])  # dog implies animals
    np.testing.assert_array_equal(ds.Y[:, sky], [0, 0, 1, 0])
    np.testing.assert_array_equal(ds.Z[:, dog], [0, 1, 0, 1])
    assert ds.concept_names[ds.sub_to_concept[dog]] == "animals"
    strict = load_mirflickr(tmp_path, relevant_only=True)
    np.testing.assert_array_equal(strict.Z[:, dog], [0, 0, 0, 1])
    (ann / "sea.txt").unlink()
    with pytest.raises(FileNotFoundError, match="sea.txt"):
        load_mirflickr(tmp_path)


def test_generic_folder_csv_wide_long_and_json(tmp_path):
    d = tmp_path / "photos"
    (d / "sub").mkdir(parents=True)
    for n in ("a.jpg", "b.png", "sub/c.jpg"):
        Image.new("RGB", (4, 4)).save(d / n)
    wide = tmp_path / "wide.csv"
    wide.write_text("image,animal,person,animal/dog\na.jpg,1,0,1\nb.png,0,1,0\nsub/c.jpg,1,1,0\n")
    ds = load_folder(d, wide)
    assert ds.concept_names == ["animal", "person"] and ds.sub_names == ["animal/dog"]
    np.testing.assert_array_equal(ds.Y, [[1, 0], [0, 1], [1, 1]])
    np.testing.assert_array_equal(ds.Z[:, 0], [1, 0, 0])
    long = tmp_path / "long.csv"
    long.write_text("file,labels,sub_labels\nc.jpg,person|animal,animal/cat\nb.png,person,\n")
    ds2 = load_folder(d, long)
    assert ds2.paths[0].endswith("c.jpg")
    np.testing.assert_array_equal(ds2.Y, [[1, 1], [1, 0]])
    assert ds2.concept_names[ds2.sub_to_concept[0]] == "animal"
    js = tmp_path / "l.json"
    js.write_text(json.dumps({"a.jpg": ["x"], "b.png": ["y", "x"]}))
    ds3 = load_folder(d, js)
    np.testing.assert_array_equal(ds3.Y, [[1, 0], [1, 1]])
    assert ds3.Z is None
    assert len(load_folder(d)) == 3
    bad = tmp_path / "bad.csv"
    bad.write_text("image,animal\nzzz.jpg,1\n")
    with pytest.raises(ValueError, match="zzz.jpg"):
        load_folder(d, bad)
    bad.write_text("image,animal\na.jpg,yes\n")
    with pytest.raises(ValueError, match="0/1"):
        load_folder(d, bad)

"""Emoji world: sprite assets and the seeded scene generator."""
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from slics_core.emoji import catalog
from slics_core.emoji.scenes import N_SUPER_PROBS, load_sprites, make_caption, make_scenes, render_scene

#: The real COCO category table, kept with the tests (tests/data/NOTICE: CC BY 4.0, COCO Consortium).
COCO_JSON = Path(__file__).resolve().parent / "data" / "coco_categories.json"


def _hash(a):
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def test_catalog_covers_coco():
    assert len(catalog.CATEGORIES) >= 60
    assert set(catalog.CATEGORY_SUPER.values()) == set(catalog.SUPERCATEGORIES)
    assert len(catalog.SUPERCATEGORIES) == 12 and len(catalog.ALL_COCO_CATEGORIES) == 80
    assert set(catalog.CATEGORIES) | set(catalog.MISSING_CATEGORIES) == set(catalog.ALL_COCO_CATEGORIES)
    rows = json.loads(COCO_JSON.read_text())
    # the built-in table is COCO's: names and supercategories in id order
    coco = [(r["name"], r["supercategory"]) for r in sorted(rows, key=lambda r: r["id"])]
    assert [c for c, _ in coco] == list(catalog.ALL_COCO_CATEGORIES)
    assert [catalog.SUPERCATEGORIES.index(s) for _, s in coco] == list(catalog.SUB_TO_CONCEPT)
    supers = {r["name"]: r["supercategory"] for r in rows}
    assert all(supers[c] == s for c, s in catalog.CATEGORY_SUPER.items())


def test_sprite_assets_valid_and_licensed():
    for c in catalog.CATEGORIES:
        path = catalog.SPRITES_DIR / catalog.sprite_filename(c)
        with Image.open(path) as im:
            assert im.format == "PNG" and im.mode == "RGBA" and im.size == (48, 48)
            alpha = np.asarray(im.getchannel("A"))
        assert (alpha > 128).mean() > 0.1 and (alpha < 128).any(), c  # drawn, with a transparent surround
    total = sum(p.stat().st_size for p in catalog.SPRITES_DIR.glob("*.png"))
    assert total < 1_000_000
    notice = (catalog.ASSETS_DIR / "emoji" / "NOTICE").read_text()
    assert "Apache" in notice and "fonts-noto-color-emoji" in notice
    assert "Apache License" in (catalog.ASSETS_DIR / "emoji" / "LICENSE").read_text()
    with pytest.raises(ValueError):
        catalog.sprite_filename("fire hydrant")


def test_same_seed_same_scenes_and_independent_of_batch():
    a = make_scenes(40, seed=7)
    b = make_scenes(40, seed=7)
    assert _hash(a.images) == _hash(b.images)
    assert a.captions == b.captions and np.array_equal(a.general, b.general) and np.array_equal(a.sub, b.sub)
    c = make_scenes(10, seed=7, start=30)
    assert np.array_equal(c.images, a.images[30:]) and c.captions == a.captions[30:]
    d = make_scenes(40, seed=8)
    assert _hash(d.images) != _hash(a.images)


def test_label_statistics_and_consistency():
    s = make_scenes(1500, seed=11)
    n_super = s.general.sum(1)
    expected = float(np.dot(np.arange(1, 5), N_SUPER_PROBS))
    assert abs(n_super.mean() - expected) < 0.1 and abs(expected - 2.3) < 1e-9
    assert n_super.min() >= 1 and n_super.max() <= 4
    counts = np.array([len(o) for o in s.objects])
    assert counts.min() >= 1 and counts.max() <= 4 and np.all(counts >= n_super)
    # every supercategory appears, with several of its categories
    assert np.all(s.general.mean(0) > 0.1)
    used = np.flatnonzero(s.sub.sum(0))
    assert len(used) == len(catalog.CATEGORIES)
    for i in range(len(s)):
        cats = set(s.objects[i])
        assert {catalog.ALL_COCO_CATEGORIES[j] for j in np.flatnonzero(s.sub[i])} == cats
        assert {catalog.SUPERCATEGORIES[j] for j in np.flatnonzero(s.general[i])} == \
            {catalog.CATEGORY_SUPER[c] for c in cats}
        for c in cats:
            assert c in s.captions[i] and catalog.CATEGORY_SUPER[c] in s.captions[i]
    # images vary: different scenes, not a constant background
    assert len({_hash(im) for im in s.images[:200]}) == 200
    assert s.images.dtype == np.uint8 and s.images.shape[1:] == (64, 64, 3)


def test_objects_are_drawn():
    sprites = load_sprites()
    img, cats = render_scene(3, 0, 64, sprites)
    # the same scene without objects differs: re-render with fully transparent sprites
    blank = {c: Image.new("RGBA", im.size, (0, 0, 0, 0)) for c, im in sprites.items()}
    bg, cats2 = render_scene(3, 0, 64, blank)
    assert cats == cats2
    assert np.abs(img.astype(int) - bg.astype(int)).sum(-1).astype(bool).mean() > 0.05


def test_caption_and_bad_input(tmp_path):
    assert make_caption(["dog", "dog", "pizza"]) == "a picture of two dogs (animal) and a pizza (food)"
    with pytest.raises(ValueError):
        make_caption([])
    with pytest.raises(ValueError):
        make_scenes(-1)
    with pytest.raises(ValueError):
        make_scenes(2.5)
    with pytest.raises(ValueError):
        render_scene(0, 0, image_size=16)
    with pytest.raises(FileNotFoundError):
        make_scenes(1, sprites_dir=tmp_path)
    (tmp_path / "broken").mkdir()
    for c in catalog.CATEGORIES:
        (tmp_path / "broken" / catalog.sprite_filename(c)).write_bytes(b"not a png")
    with pytest.raises(ValueError):
        make_scenes(1, sprites_dir=tmp_path / "broken")
    assert len(make_scenes(0)) == 0


def test_sub_to_concept_matches_coco_reference():
    import json

    from slics_core.emoji.catalog import ALL_COCO_CATEGORIES, SUB_TO_CONCEPT, SUPERCATEGORIES

    ref = {c["name"]: c["supercategory"] for c in json.loads(COCO_JSON.read_text())}
    assert [SUPERCATEGORIES[j] for j in SUB_TO_CONCEPT] == [ref[c] for c in ALL_COCO_CATEGORIES]


def test_layout_says_where_each_object_was_drawn():
    from slics_core.emoji.scenes import BACKGROUND_KINDS

    sprites = load_sprites()
    blank = {c: Image.new("RGBA", im.size, (0, 0, 0, 0)) for c, im in sprites.items()}
    checked = 0
    for idx in range(40):
        img, cats, lay = render_scene(5, idx, 64, sprites, layout=True)
        plain, cats_plain = render_scene(5, idx, 64, sprites)
        assert cats == cats_plain and np.array_equal(img, plain)  # asking for the layout changes nothing
        assert lay["background"] in BACKGROUND_KINDS and len(lay["colour"]) == 3
        assert len(lay["cells"]) == len(cats)
        if len(cats) < 2 or len(set(cats)) < len(cats):
            assert len(cats) > 1 or lay["cells"] == [None]
            continue
        bg, _ = render_scene(5, idx, 64, blank)
        for k, c in enumerate(cats):  # draw only object k (a unique category): where it lands
            one = dict(blank, **{c: sprites[c]})
            drawn, _ = render_scene(5, idx, 64, one)
            ys, xs = np.nonzero(np.abs(drawn.astype(int) - bg.astype(int)).sum(-1) > 30)
            cell = int(ys.mean() >= 32) * 2 + int(xs.mean() >= 32)
            assert cell == lay["cells"][k], (idx, c)
            checked += 1
    assert checked >= 10

"""Damaged JPEGs that Pillow decodes without a word (issue 40: they were embedded silently although docs/scale.md
says damaged files are reported): :func:`slics_core._jpeg.jpeg_damage`, ``load_image(check_data=True)`` and the
embedding cache's failures.

The damage is planted in real JPEGs written here by Pillow: the end cut off and the end-of-image marker put back
(what a broken copy or download leaves), or a run of bytes zeroed in the middle. The null: valid JPEGs of every
kind Pillow writes (sizes, grey, CMYK, chroma subsampling, progressive, optimised tables, restart markers) are
never called damaged.
"""
import io

import numpy as np
import pytest
from PIL import Image

from slics_core._jpeg import jpeg_damage
from slics_core.images import ImageLoadError, load_image

EOI = b"\xff\xd9"


def _photo(rng, w, h, mode="RGB"):
    small = rng.integers(0, 256, (max(1, h // 16), max(1, w // 16), 3), dtype=np.uint8)
    base = np.asarray(Image.fromarray(small).resize((w, h), Image.BICUBIC), np.float64)
    noisy = base + rng.normal(0, float(rng.choice([0.0, 4.0, 20.0])), base.shape)
    return Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8)).convert(mode)


def _jpegs(seed, n):
    """``n`` valid JPEGs (bytes, options) of varied kinds."""
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < n:
        w, h = int(rng.integers(1, 400)), int(rng.integers(1, 300))
        mode = str(rng.choice(["RGB", "RGB", "L", "CMYK"]))
        kw = {"quality": int(rng.integers(5, 100)), "progressive": bool(rng.random() < 0.4),
              "optimize": bool(rng.random() < 0.3)}
        if mode == "RGB":
            kw["subsampling"] = int(rng.choice([0, 1, 2]))
        if rng.random() < 0.3:
            kw["restart_marker_blocks"] = int(rng.integers(1, 40))
        buf = io.BytesIO()
        try:
            _photo(rng, w, h, mode).save(buf, "JPEG", **kw)
        except OSError:  # a combination Pillow's encoder refuses
            continue
        out.append((buf.getvalue(), {"mode": mode, "size": (w, h), **kw}))
    return out


def _decodes(data) -> bool:
    try:
        Image.open(io.BytesIO(data)).load()
        return True
    except (OSError, SyntaxError):
        return False


def test_valid_jpegs_are_never_called_damaged():
    for data, kw in _jpegs(0, 150):
        assert jpeg_damage(data) is None, kw


@pytest.mark.parametrize("progressive", [False, True])
def test_an_end_cut_off_with_the_marker_put_back_decodes_and_is_found(progressive):
    """Cut the last quarter of the compressed data and put the end-of-image marker back: Pillow decodes the file
    (the missing blocks grey) with no error; the walk finds that the data end before the last block."""
    rng = np.random.default_rng(1)
    for _ in range(10):
        buf = io.BytesIO()
        _photo(rng, int(rng.integers(64, 400)), int(rng.integers(64, 300))).save(
            buf, "JPEG", quality=int(rng.integers(50, 95)), progressive=progressive)
        data = buf.getvalue()
        damaged = data[:len(data) * 3 // 4] + EOI
        assert _decodes(damaged)  # the silent case: no error from the decoder
        assert jpeg_damage(damaged) == "compressed data damaged: the data end before the last block"
        assert jpeg_damage(data) is None


def test_zeroed_bytes_in_the_middle_are_found_in_most_files():
    """A run of zeroed bytes inside the compressed data (a damaged disk block): of the files Pillow still decodes,
    the walk finds most (a zeroed run can decode as valid codes that end in step: those stay unfound)."""
    found = decodable = 0
    for data, _ in _jpegs(2, 80):
        if len(data) < 4000:
            continue
        bad = bytearray(data)
        at = len(bad) * 2 // 5
        bad[at:at + 256] = bytes(256)
        if _decodes(bytes(bad)):
            decodable += 1
            found += jpeg_damage(bytes(bad)) is not None
    assert decodable >= 10 and found >= 0.8 * decodable, (found, decodable)


def test_load_image_refuses_a_damaged_jpeg_only_when_asked(tmp_path):
    buf = io.BytesIO()
    _photo(np.random.default_rng(3), 320, 240).save(buf, "JPEG", quality=90)
    path = tmp_path / "broken.jpg"
    path.write_bytes(buf.getvalue()[:-400] + EOI)
    assert load_image(path).size == (320, 240)  # the default: as Pillow decodes it (the app's thumbnails)
    with pytest.raises(ImageLoadError, match=r"broken\.jpg: damaged JPEG \(compressed data damaged: the data end"):
        load_image(path, check_data=True, draft=64)
    good = tmp_path / "good.jpg"
    good.write_bytes(buf.getvalue())
    assert load_image(good, check_data=True).size == (320, 240)


@pytest.mark.parametrize("transfer", ["uint8", "jpeg"])
def test_the_embedding_cache_reports_damaged_jpegs_as_skipped(tmp_path, transfer):
    """Both routes: the damaged JPEG is left out and recorded with its reason, like an unreadable file."""
    from slics_core.embed import embed_dataset
    from slics_core.encoders import create_encoder

    rng = np.random.default_rng(4)
    paths = []
    for i in range(6):
        p = tmp_path / f"im{i}.jpg"
        buf = io.BytesIO()
        _photo(rng, 96, 80).save(buf, "JPEG", quality=90)
        p.write_bytes(buf.getvalue()[:-300] + EOI if i == 2 else buf.getvalue())
        paths.append(str(p))
    store, stats = embed_dataset(paths, [f"id{i}" for i in range(6)], create_encoder("emoji-small", device="cpu"),
                                 tmp_path / "cache", batch_size=4, workers=0, progress=False, transfer=transfer)
    assert stats["failed"] == 1
    [failed] = store.failed()
    assert failed["id"] == "id2" and "im2.jpg: damaged JPEG (compressed data damaged" in failed["reason"]
    E, ids, _ = store.load()
    assert ids == ["id0", "id1", "id3", "id4", "id5"] and np.isfinite(E).all()

"""Hostile-input catalogue, class 5: every upload decodes within a memory budget.

A small file can declare many pixels: a 460 KB PNG of 110 megapixels cost 2.5 GB to decode. Formats
without a reduced-scale decode (all but JPEG) are refused from their header when decoding them would
take more than ``max_decode_bytes``; JPEGs are decoded at a reduced DCT scale. Peak memory per
upload is measured in ``benchmarks/bench_uploads.py`` (docs/security.md).
"""
import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image, ImageFile

from slics_core.explorer import uploads
from slics_core.explorer.uploads import DEFAULT_MAX_DECODE_BYTES, UploadError, load_upload


def _png_header_only(width, height, colour_type=2, depth=8):
    def chunk(tag, body):
        return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", zlib.crc32(tag + body) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, depth, colour_type, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" * 16))
            + chunk(b"IEND", b""))


def _bmp_header_only(width, height, bits=24):
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, bits, 0, 0, 2835, 2835, 0, 0)
    head = b"BM" + struct.pack("<IHHI", 14 + len(info) + 16, 0, 0, 14 + len(info))
    return head + info + b"\0" * 16


@pytest.fixture
def no_decoding(monkeypatch):
    """Fail if any pixel is decoded."""
    def refuse(self, *a, **k):
        raise AssertionError("pixels were decoded")

    Image.init()  # (plug-ins draw prototype images when they load)

    monkeypatch.setattr(Image.Image, "load", refuse)
    monkeypatch.setattr(Image.core, "new", lambda *a, **k: refuse(None))


@pytest.mark.parametrize("make, name", [
    (lambda: _png_header_only(10_500, 10_500), "big.png"),          # the audit's 110 MP PNG (RGB)
    (lambda: _png_header_only(9_000, 9_000, colour_type=6), "rgba.png"),
    (lambda: _png_header_only(6_000, 6_000, colour_type=0, depth=16), "grey16.png"),
    (lambda: _png_header_only(7_000, 7_000, colour_type=3), "palette.png"),
    (lambda: _bmp_header_only(9_000, 9_000), "big.bmp"),
])
def test_decode_over_the_memory_budget_is_refused_from_the_header(make, name, no_decoding):
    data = make()
    assert len(data) < 300
    with pytest.raises(UploadError) as info:
        load_upload(data, name)
    msg = str(info.value)
    assert name in msg and "MB" in msg and "memory" in msg and "\n" not in msg, msg


def test_the_budget_is_a_parameter():
    data = io.BytesIO()
    Image.new("RGB", (400, 300), (10, 20, 30)).save(data, format="PNG")
    with pytest.raises(UploadError, match="memory"):
        load_upload(data.getvalue(), "a.png", max_decode_bytes=400 * 300 * 4)
    assert load_upload(data.getvalue(), "a.png", max_decode_bytes=400 * 300 * 14).size == (400, 300)


def test_a_large_jpeg_is_within_budget_through_reduced_decoding(no_decoding, monkeypatch):
    """The JPEG header is judged at the DCT scale it will be decoded at, so a 100 MP photo passes."""
    seen = {}
    real = uploads.decode_cost

    def spy(size, mode, fmt, max_side):
        seen["cost"] = real(size, mode, fmt, max_side)
        return seen["cost"]

    monkeypatch.setattr(uploads, "decode_cost", spy)
    # a JPEG header (SOI + SOF0 of 11000 x 9000, 3 components) is enough for the check
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 17, 8, 9000, 11000, 3) + b"\x01\x22\x00\x02\x11\x01\x03\x11\x01"
    data = b"\xff\xd8" + sof + b"\xff\xd9"
    with pytest.raises((UploadError, AssertionError)):
        load_upload(data, "phone.jpg")
    assert 0 < seen["cost"] < DEFAULT_MAX_DECODE_BYTES


def test_default_budget_accepts_a_twelve_megapixel_png():
    arr = np.zeros((3000, 4000, 3), np.uint8)
    arr[:, 2000:] = 255
    data = io.BytesIO()
    Image.fromarray(arr).save(data, format="PNG", compress_level=1)
    out = load_upload(data.getvalue(), "photo.png")
    assert out.size == (2048, 1536)


def test_a_huge_image_in_a_shared_workspace_is_a_grey_tile(tmp_path, monkeypatch):
    """The app reads a dataset workspace's image files: they get the same budget as uploads."""
    from slics_core.data import LabelledEmbeddings
    from slics_core.explorer.build import build_workspace
    from slics_core.images import ImageLoadError
    from slics_core.labels import Labels

    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(_png_header_only(10_500, 10_500))
    rng = np.random.default_rng(0)
    data = LabelledEmbeddings(raw=rng.standard_normal((20, 4)).astype(np.float32), ids=[str(i) for i in range(20)],
                              labels=Labels(np.eye(2, dtype=bool)[np.arange(20) % 2], ["a", "b"]),
                              paths=[str(bomb)] * 20)
    ws = build_workspace(data, None, methods=["UF"], d0_values=(1,), n_iter=1)
    monkeypatch.setattr(ImageFile.ImageFile, "load", lambda self: pytest.fail("pixels were decoded"))
    with pytest.raises(ImageLoadError, match=r"bomb\.png: 10500x10500 .* MB to decode"):
        ws.image(0)
    assert ws.thumbnail(0, 16).size == (16, 16)  # the grey tile

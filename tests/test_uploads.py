"""load_upload: every case is generated here with Pillow; the ground truth is the pixels written."""
import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image, features

from slics_core.explorer.uploads import UploadError, load_upload


def _save(im, fmt, **kw):
    buf = io.BytesIO()
    im.save(buf, format=fmt, **kw)
    return buf.getvalue()


def _pattern(h=6, w=10):
    """An asymmetric RGB pattern (every pixel distinct) so that any rotation/flip is detected."""
    y, x = np.mgrid[0:h, 0:w]
    return np.stack([x * 20 + 5, y * 30 + 7, (x + y * w) % 256], axis=-1).astype(np.uint8)


def _blocky(h=6, w=10, block=16):
    """The pattern with each pixel blown up to a block (survives JPEG compression)."""
    return np.kron(_pattern(h, w), np.ones((block, block, 1), np.uint8))


# --------------------------------------------------------------------- plain images
@pytest.mark.parametrize("fmt", ["PNG", "BMP", "TIFF", "GIF"])
def test_lossless_rgb_roundtrip(fmt):
    arr = _pattern()
    if fmt == "GIF":  # 60 distinct colours fit a palette
        im = Image.fromarray(arr).quantize(colors=256, method=Image.Quantize.MAXCOVERAGE)
        arr = np.asarray(im.convert("RGB"))
    else:
        im = Image.fromarray(arr)
    out = load_upload(_save(im, fmt), f"x.{fmt.lower()}")
    assert out.mode == "RGB"
    np.testing.assert_array_equal(np.asarray(out), arr)


def test_accepts_file_like_objects():
    arr = _pattern()
    out = load_upload(io.BytesIO(_save(Image.fromarray(arr), "PNG")))
    np.testing.assert_array_equal(np.asarray(out), arr)


def test_jpeg_close_to_written_pixels():
    arr = _blocky()
    out = np.asarray(load_upload(_save(Image.fromarray(arr), "JPEG", quality=95)), dtype=int)
    assert out.shape == arr.shape
    assert np.abs(out - arr.astype(int)).mean() < 3


# --------------------------------------------------------------------- EXIF orientation
# stored pixels -> what a viewer shows, written with numpy (independent of PIL's transpose)
_DISPLAY = {
    2: lambda a: a[:, ::-1],
    3: lambda a: a[::-1, ::-1],
    4: lambda a: a[::-1, :],
    5: lambda a: np.transpose(a, (1, 0, 2)),
    6: lambda a: np.rot90(a, k=-1),  # rotate 90 clockwise
    7: lambda a: np.transpose(a[::-1, ::-1], (1, 0, 2)),  # anti-transpose
    8: lambda a: np.rot90(a, k=1),  # rotate 90 counter-clockwise
}


@pytest.mark.parametrize("orientation", sorted(_DISPLAY))
def test_exif_orientation_png_exact(orientation):
    stored = _pattern()
    exif = Image.Exif()
    exif[0x0112] = orientation
    data = _save(Image.fromarray(stored), "PNG", exif=exif)
    out = np.asarray(load_upload(data, "rot.png"))
    np.testing.assert_array_equal(out, _DISPLAY[orientation](stored))


@pytest.mark.parametrize("orientation", [3, 6, 8])
def test_exif_orientation_jpeg_comes_back_upright(orientation):
    upright = _blocky(4, 7)
    # store the pixels so that the viewer's transform gives back `upright`
    inverse = {3: lambda a: a[::-1, ::-1], 6: lambda a: np.rot90(a, k=1), 8: lambda a: np.rot90(a, k=-1)}
    stored = np.ascontiguousarray(inverse[orientation](upright))
    np.testing.assert_array_equal(_DISPLAY[orientation](stored), upright)  # the inverse is right
    exif = Image.Exif()
    exif[0x0112] = orientation
    data = _save(Image.fromarray(stored), "JPEG", quality=95, exif=exif)
    out = np.asarray(load_upload(data, "photo.jpg"), dtype=int)
    assert out.shape == upright.shape
    assert np.abs(out - upright.astype(int)).mean() < 3


# --------------------------------------------------------------------- colour modes
def test_cmyk_tiff_pure_inks():
    # (C, M, Y, K) -> expected RGB with no black ink: 255 - ink; full black ink: black
    cmyk = np.array([[[255, 0, 0, 0], [0, 255, 0, 0], [0, 0, 255, 0], [0, 0, 0, 0], [0, 0, 0, 255]]], np.uint8)
    expected = np.array([[[0, 255, 255], [255, 0, 255], [255, 255, 0], [255, 255, 255], [0, 0, 0]]], np.uint8)
    data = _save(Image.fromarray(cmyk, "CMYK"), "TIFF")
    np.testing.assert_array_equal(np.asarray(load_upload(data, "print.tif")), expected)


def test_cmyk_jpeg_decodes_to_rgb():
    cmyk = np.zeros((32, 32, 4), np.uint8)
    cmyk[:, :16, 0] = 255  # cyan left half
    data = _save(Image.fromarray(cmyk, "CMYK"), "JPEG", quality=95)
    out = np.asarray(load_upload(data, "print.jpg"), dtype=int)
    assert out.shape == (32, 32, 3)
    assert np.abs(out[:, :16] - [0, 255, 255]).mean() < 8
    assert np.abs(out[:, 16:] - [255, 255, 255]).mean() < 8


def test_rgba_composited_on_white():
    rgba = np.array([[[255, 0, 0, 255], [255, 0, 0, 0], [255, 0, 0, 128], [0, 0, 255, 64]]], np.uint8)
    a = rgba[..., 3:].astype(float) / 255
    expected = a * rgba[..., :3] + (1 - a) * 255
    out = np.asarray(load_upload(_save(Image.fromarray(rgba, "RGBA"), "PNG")), dtype=float)
    assert np.abs(out - expected).max() <= 1


def test_la_composited_on_white():
    la = np.array([[[0, 255], [0, 0], [100, 128]]], np.uint8)
    a = la[..., 1].astype(float) / 255
    grey = a * la[..., 0] + (1 - a) * 255
    out = np.asarray(load_upload(_save(Image.fromarray(la, "LA"), "PNG")), dtype=float)
    for c in range(3):
        assert np.abs(out[..., c] - grey).max() <= 1


@pytest.mark.parametrize("fmt", ["PNG", "GIF"])
def test_palette_with_transparency(fmt):
    idx = np.array([[0, 1, 2], [2, 1, 0]], np.uint8)
    im = Image.fromarray(idx, "P")
    im.putpalette([0, 0, 0, 255, 0, 0, 0, 128, 0] + [0] * (256 * 3 - 9))
    data = _save(im, fmt, transparency=0)
    colours = {0: (255, 255, 255), 1: (255, 0, 0), 2: (0, 128, 0)}  # index 0 is transparent -> white
    expected = np.array([[colours[int(v)] for v in row] for row in idx], np.uint8)
    np.testing.assert_array_equal(np.asarray(load_upload(data, f"p.{fmt.lower()}")), expected)


def test_palette_without_transparency():
    idx = np.array([[0, 1], [1, 0]], np.uint8)
    im = Image.fromarray(idx, "P")
    im.putpalette([10, 20, 30, 200, 100, 50] + [0] * (256 * 3 - 6))
    expected = np.array([[[10, 20, 30], [200, 100, 50]], [[200, 100, 50], [10, 20, 30]]], np.uint8)
    np.testing.assert_array_equal(np.asarray(load_upload(_save(im, "PNG"))), expected)


def test_16bit_grey_png_scaled_to_8bit():
    vals = np.array([[0, 257, 32768, 65535]], np.uint16)
    data = _save(Image.fromarray(vals), "PNG")
    assert Image.open(io.BytesIO(data)).mode.startswith("I")
    out = np.asarray(load_upload(data, "deep.png"))
    expected = np.rint(vals / 65535 * 255).astype(np.uint8)
    for c in range(3):
        np.testing.assert_array_equal(out[..., c], expected)


def test_32bit_int_tiff_scaled_to_8bit():
    vals = np.array([[0, 1000, 40000, 65535]], np.int32)
    data = _save(Image.fromarray(vals, "I"), "TIFF")
    out = np.asarray(load_upload(data, "deep.tif"))
    expected = np.rint(vals / 65535 * 255).astype(np.uint8)
    np.testing.assert_array_equal(out[..., 1], expected)


def test_float_tiff_min_max_scaled():
    vals = np.array([[-1.0, 0.0, 0.5, 3.0]], np.float32)
    data = _save(Image.fromarray(vals, "F"), "TIFF")
    out = np.asarray(load_upload(data, "float.tif"))
    expected = np.rint((vals - vals.min()) / (vals.max() - vals.min()) * 255).astype(np.uint8)
    np.testing.assert_array_equal(out[..., 0], expected)


def test_greyscale_and_bilevel():
    g = np.array([[0, 50, 200, 255]], np.uint8)
    out = np.asarray(load_upload(_save(Image.fromarray(g, "L"), "PNG")))
    np.testing.assert_array_equal(out, np.repeat(g[..., None], 3, axis=2))
    b = np.array([[True, False, True]])
    out = np.asarray(load_upload(_save(Image.fromarray(b), "PNG")))
    np.testing.assert_array_equal(out[..., 0], np.where(b, 255, 0))


# --------------------------------------------------------------------- animations: first frame
def _frames():
    cols = [(255, 0, 0), (0, 255, 0), (0, 0, 255)]
    return [Image.new("RGB", (8, 8), c) for c in cols]


@pytest.mark.parametrize("fmt", ["GIF", "PNG", "WEBP"])
def test_animated_first_frame(fmt):
    if fmt == "WEBP" and not features.check("webp"):
        pytest.skip("Pillow built without WebP")
    frames = _frames()
    kw = {"lossless": True} if fmt == "WEBP" else {}
    data = _save(frames[0], fmt, save_all=True, append_images=frames[1:], duration=100, loop=0, **kw)
    with Image.open(io.BytesIO(data)) as im:
        assert getattr(im, "n_frames", 1) == 3  # really animated
    out = np.asarray(load_upload(data, f"anim.{fmt.lower()}"), dtype=int)
    assert np.abs(out - [255, 0, 0]).max() <= 2


# --------------------------------------------------------------------- refusals
def test_empty_file():
    with pytest.raises(UploadError, match="empty"):
        load_upload(b"", "nothing.png")


def test_too_many_bytes():
    data = _save(Image.fromarray(_pattern(40, 40)), "PNG")
    with pytest.raises(UploadError, match="limit"):
        load_upload(data, "big.png", max_bytes=len(data) - 1)
    assert load_upload(data, "big.png", max_bytes=len(data)).size == (40, 40)


@pytest.mark.parametrize("content, what", [
    (b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer\n%%EOF\n", "PDF"),
    (b"hello, this is a text file renamed to .png\n", "text"),
    (b"PK\x03\x04" + bytes(100), "ZIP"),
    (bytes(range(256)) * 4, "not an image"),
])
def test_non_images_named_png(content, what):
    with pytest.raises(UploadError, match=what) as exc:
        load_upload(content, "photo.png")
    assert "photo.png" in str(exc.value)


def test_eps_is_refused_without_running_ghostscript():
    eps = b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\nshowpage\n"
    with pytest.raises(UploadError):
        load_upload(eps, "x.png")


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_truncated_file(fmt):
    rng = np.random.default_rng(0)
    noise = rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)  # incompressible: the cut hits pixel data
    data = _save(Image.fromarray(noise), fmt)
    with pytest.raises(UploadError, match="truncated or corrupt"):
        load_upload(data[: len(data) // 2], f"cut.{fmt.lower()}")


def test_corrupt_png_checksum():
    data = bytearray(_save(Image.fromarray(_pattern(20, 20)), "PNG"))
    pos = data.index(b"IDAT") + 10
    data[pos] ^= 0xFF  # pixel data changed, CRC no longer matches
    with pytest.raises(UploadError, match="truncated or corrupt"):
        load_upload(bytes(data), "bad.png")


def _png_header_only(width, height):
    """A tiny PNG that declares ``width`` x ``height`` pixels (a decompression-bomb header)."""
    def chunk(tag, body):
        return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", zlib.crc32(tag + body) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" * 16))
            + chunk(b"IEND", b""))


def test_max_pixels_checked_before_decoding():
    data = _png_header_only(12_000, 12_000)  # 144 MP declared in a file of ~60 bytes (under Pillow's hard guard)
    assert len(data) < 200
    with pytest.raises(UploadError, match="megapixels"):
        load_upload(data, "bomb.png")


def test_pillow_bomb_guard_is_an_upload_error():
    # with our own limit off, Pillow's guard must still stop it (error above 2x MAX_IMAGE_PIXELS,
    # warning above 1x, which is turned into an error)
    limit = Image.MAX_IMAGE_PIXELS
    side_err = int((2.2 * limit) ** 0.5)
    side_warn = int((1.3 * limit) ** 0.5)
    for side in (side_err, side_warn):
        with pytest.raises(UploadError, match="decompression bomb"):
            load_upload(_png_header_only(side, side), "bomb.png", max_pixels=None)


def test_small_max_pixels():
    data = _save(Image.fromarray(_pattern(20, 20)), "PNG")
    with pytest.raises(UploadError, match="megapixels"):
        load_upload(data, max_pixels=399)
    assert load_upload(data, max_pixels=400).size == (20, 20)


def test_upload_error_is_value_error():
    assert issubclass(UploadError, ValueError)
    with pytest.raises(TypeError):
        load_upload(12345)


def test_hundred_megapixel_jpeg_is_decoded_small(monkeypatch):
    """A ~100 MP phone photo is accepted and decoded at a reduced DCT scale (memory stays bounded)."""
    from PIL import ImageDraw, JpegImagePlugin

    w, h = 11_000, 9_000  # 99 MP
    im = Image.new("RGB", (w, h), (200, 30, 30))
    ImageDraw.Draw(im).rectangle([w // 2, 0, w - 1, h - 1], fill=(30, 30, 200))  # right half blue
    buf = io.BytesIO()
    im.save(buf, format="JPEG", quality=80)
    del im
    drafts = []
    real = JpegImagePlugin.JpegImageFile.draft

    def spy(self, mode, size):
        out = real(self, mode, size)
        drafts.append((size, self.size))
        return out

    monkeypatch.setattr(JpegImagePlugin.JpegImageFile, "draft", spy)
    out = load_upload(buf.getvalue(), "phone.jpg")
    assert max(out.size) == 2048 and abs(out.size[0] / out.size[1] - w / h) < 0.01
    # decoded at 1/4 scale (2750 x 2250): the smallest DCT scale whose longer side is >= 2048
    assert drafts and drafts[-1][1] == (w // 4, h // 4)
    a = np.asarray(out)
    assert np.abs(a[100, 100].astype(int) - (200, 30, 30)).max() < 12
    assert np.abs(a[100, -100].astype(int) - (30, 30, 200)).max() < 12


def test_large_png_is_scaled_down_to_max_side():
    arr = np.zeros((2000, 3000, 3), np.uint8)
    arr[:, :1500] = (250, 200, 0)
    data = _save(Image.fromarray(arr), "PNG")
    out = load_upload(data, "wide.png", max_side=500)
    assert out.size == (500, 333)
    a = np.asarray(out)
    assert tuple(a[10, 10]) == (250, 200, 0) and tuple(a[10, -10]) == (0, 0, 0)
    assert load_upload(data, "wide.png", max_side=None).size == (3000, 2000)

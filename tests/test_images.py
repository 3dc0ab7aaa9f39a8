"""The one image decoder: one pixel limit for dataset images and uploads."""
import pytest
from test_uploads import _png_header_only

from slics_core.explorer.uploads import DEFAULT_MAX_PIXELS, UploadError, load_upload
from slics_core.images import MAX_PIXELS, ImageLoadError, load_image


def test_one_pixel_limit_for_files_and_uploads(tmp_path):
    assert DEFAULT_MAX_PIXELS == MAX_PIXELS == 120_000_000
    over = _png_header_only(12_000, 10_001)  # 120.012 MP, under Pillow's own guard (about 179 MP)
    (tmp_path / "over.png").write_bytes(over)
    with pytest.raises(ImageLoadError, match="larger than the limit of 120000000"):
        load_image(tmp_path / "over.png")
    with pytest.raises(UploadError, match="limit is 120 megapixels"):
        load_upload(over, "over.png")


def test_broken_exif_keeps_the_pixels_in_both_front_ends(tmp_path, monkeypatch):
    import io

    import numpy as np
    from PIL import Image, ImageOps

    pixels = np.zeros((4, 6, 3), np.uint8)
    pixels[0, 0] = (255, 0, 0)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "PNG")
    (tmp_path / "a.png").write_bytes(buf.getvalue())

    def broken(im):
        raise SyntaxError("not a valid EXIF block")

    monkeypatch.setattr(ImageOps, "exif_transpose", broken)
    for image in (load_image(tmp_path / "a.png"), load_upload(buf.getvalue(), "a.png")):
        np.testing.assert_array_equal(np.asarray(image), pixels)  # as stored, not refused

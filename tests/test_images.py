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

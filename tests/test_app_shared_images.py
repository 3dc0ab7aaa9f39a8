"""The per-process store of what every session draws (app_pages/_images.py): encoded thumbnails and labels."""
import base64
import io
import re

import numpy as np
from PIL import Image, ImageOps
from streamlit.testing.v1 import AppTest

from app_pages._images import _Shared, jpeg_url


def _jpeg_of(url: str) -> bytes:
    head, _, data = url.partition(",")
    assert head == "data:image/jpeg;base64"
    return base64.b64decode(data, validate=True)


def _show_image(url):
    import streamlit as st

    st.image(url)


def test_jpeg_url_carries_the_bytes_and_st_image_passes_it_through():
    im = Image.new("RGB", (5, 3), (200, 10, 30))
    data = _pil_jpeg(im, 100)
    url = jpeg_url(data)
    assert _jpeg_of(url) == data
    # st.image hands a data: URL to the browser as it is (no media file, no HTTP request)
    at = AppTest.from_function(_show_image, args=(url,)).run()
    assert not at.exception and at.image[0].value == [url]
    back = Image.open(io.BytesIO(_jpeg_of(url)))
    assert back.format == "JPEG" and back.size == (5, 3)


def _pil_jpeg(im, quality: int) -> bytes:
    buf = io.BytesIO()
    im.convert("RGB").save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def test_thumbnail_bytes_are_jpeg_at_quality_90(ws):
    store = _Shared(ws)
    sent = full = 0
    for r in (0, 7, len(ws) - 1):
        assert _jpeg_of(store.thumbnail(r, 96)) == _pil_jpeg(ws.thumbnail(r, 96), 90)
        framed = ImageOps.expand(ws.thumbnail(r, 96), border=4, fill="#2e9d4f")
        assert _jpeg_of(store.thumbnail(r, 96, "#2e9d4f")) == _pil_jpeg(framed, 90)
        sent += len(_jpeg_of(store.thumbnail(r, 96)))
        # what st.image's own encoder makes of the PIL image (a JPEG at quality 100; what the store sent before)
        full += len(_pil_jpeg(ws.thumbnail(r, 96), 100))
    assert sent < 0.6 * full  # the bytes a page sends per thumbnail
    assert store.thumbnail(0, 96) != store.thumbnail(1, 96)
    assert store.thumbnail(0, 96) != store.thumbnail(0, 160)


def test_thumbnail_store_is_reused_and_bounded(ws):
    one = len(_Shared(ws).thumbnail(0, 96))
    store = _Shared(ws, max_bytes=int(3.5 * one))
    first = store.thumbnail(0, 96)
    assert store.thumbnail(0, 96) is first  # served from the store, not encoded again
    for r in range(1, 12):
        store.thumbnail(r, 96)
        assert store.nbytes <= store.max_bytes
        assert store.nbytes == sum(len(b) for b in store.thumbs.values())
    assert (0, 96, None) not in store.thumbs  # least recently used went first
    assert (11, 96, None) in store.thumbs
    assert store.thumbnail(0, 96) == first  # made again, same bytes


def test_labels_name_concepts_then_sub_labels(ws):
    store = _Shared(ws)
    r = int(np.flatnonzero(ws.Y.sum(axis=1) >= 2)[0])
    concepts = [ws.concept_names[j] for j in np.flatnonzero(ws.Y[r])]
    subs = [ws.sub_names[j] for j in np.flatnonzero(ws.Z[r])]
    assert store.label(r) == ", ".join(concepts) + " — " + ", ".join(subs)
    assert store.label(r) is store.label(r)



def test_gallery_html_escapes_captions_and_lays_out_columns():
    from app_pages._images import gallery_html

    body = gallery_html(["data:image/jpeg;base64,AAAA", "data:image/jpeg;base64,BBBB"],
                        captions=['#1 · <b onmouseover="x">cat</b>', "#2"], n_cols=3, borders=["#2e9d4f", None])
    assert "<b " not in body and "&lt;b onmouseover=&quot;x&quot;&gt;cat&lt;/b&gt;" in body
    assert body.count("<img ") == 2 and 'src="data:image/jpeg;base64,AAAA"' in body
    assert "repeat(3," in body and body.count("border:4px solid #2e9d4f") == 1
    body = gallery_html(["data:image/jpeg;base64,AAAA"], captions=["abc\u202egpj.exe " + "x" * 100_000])
    assert "\u202e" not in body and "abc\\u202egpj.exe" in body and len(body) < 2_000  # bidi shown, cut


def test_a_caption_breaks_between_its_parts_not_inside_one():
    """Each part of "#3 · 0.71 · gen yes, sub no" is one inline block (a narrow column puts "gen yes, sub no" on
    its own line instead of cutting it after "gen yes,"); the text read is the caption, escaped."""
    import html

    from app_pages._images import caption_html, gallery_html

    out = caption_html("#3 · 0.71 · gen yes, sub no")
    blocks = re.findall(r'<span style="display:inline-block">(.*?)</span>', out)
    assert blocks == ["#3 ·", "0.71 ·", "gen yes, sub no"]
    assert re.sub(r"<[^>]+>", "", out) == "#3 · 0.71 · gen yes, sub no"
    assert re.findall(r'<span[^>]*>([^<]*)</span>', caption_html("<i>x</i> · y")) == ["&lt;i&gt;x&lt;/i&gt; ·", "y"]
    body = gallery_html(["data:image/jpeg;base64,AAAA"], captions=["#1 · 0.50 · gen no"])
    assert html.unescape(re.search(r'alt="([^"]*)"', body).group(1)) == "#1 · 0.50 · gen no"  # alt: the plain text
    assert "<figcaption" in body and out.count("<span") == 3


def test_a_pickable_gallery_is_buttons_numbered_by_position():
    from app_pages._images import gallery_html

    urls = [f"data:image/jpeg;base64,{c}" for c in ("AAAA", "BBBB", "CCCC")]
    body = gallery_html(urls, captions=['<img src=x onerror="alert(1)">', "#2", "#3"], pickable=True)
    assert re.findall(r'<button type="button" data-i="(\d+)"[^>]*><img src="([^"]+)"', body) == \
        [("0", urls[0]), ("1", urls[1]), ("2", urls[2])]
    assert "<img src=x" not in body and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in body
    assert "<button" not in gallery_html(urls)  # a gallery nobody picks from has no buttons


def test_picked_row_reads_only_a_position_in_the_gallery():
    from app_pages._images import picked_row

    rows = [40, 7, 13]
    assert [picked_row(i, rows) for i in range(3)] == rows
    for bad in (3, -1, 1.0, True, False, "1", None, [1]):
        assert picked_row(bad, rows) is None, bad


def test_a_clickable_gallery_refuses_other_images():
    """The clickable gallery's HTML is not sanitised by Streamlit: it takes only the app's own thumbnails."""
    import pytest

    from app_pages import _images
    from slics_core.explorer.pool import Pool

    class _Ws:  # pool thumbnails of a sharded workspace (remote URLs when opted in) are not workspace rows
        pass

    shards = Pool("shards", 3, None)  # hits without workspace rows, as a sharded pool's
    with pytest.raises(ValueError, match="cannot be made the query"):
        _images.image_gallery(_Ws(), shards.hits([1, 2], [0.9, 0.8]), pick_key="pick_x")

"""The per-process store of what every session draws (app_pages/_ui.py): encoded thumbnails and labels."""
import numpy as np
from PIL import ImageOps
from streamlit.elements.lib.image_utils import _pil_to_bytes

from app_pages._ui import _Shared


def test_thumbnail_bytes_are_what_st_image_would_send(ws):
    store = _Shared(ws)
    for r in (0, 7, len(ws) - 1):
        # Streamlit's own encoder of a PIL image (what st.image did with ws.thumbnail before)
        assert store.thumbnail(r, 96) == _pil_to_bytes(ws.thumbnail(r, 96), "JPEG")
        framed = ImageOps.expand(ws.thumbnail(r, 96), border=4, fill="#2e9d4f")
        assert store.thumbnail(r, 96, "#2e9d4f") == _pil_to_bytes(framed, "JPEG")
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


"""Images on the pages: thumbnails encoded once per process and shared by every session, image grids.

Thumbnails are the bulk of a page (Retrieve draws ~120 per run): each is encoded once per process
(JPEG bytes, as st.image would encode a PIL image) and shared by every session and rerun, as a
``data:`` URL. st.image passes a URL through untouched, so a drawn thumbnail costs the server no
decoding, no hashing into the media file manager and no HTTP request of its own (the browser has the
image in the page message; measured in benchmarks/bench_load.py and README, "A classroom server").
The store is one st.cache_resource object per workspace, asked for once per grid (a cached call
costs ~0.3 ms, too much to pay per image), and bounded: least recently used thumbnails beyond
THUMB_BYTES go. Retrieve's galleries are each drawn as one HTML element (:func:`image_gallery`) instead of an
st.image and a column per picture: what the browser builds again on every query pick.
"""
from __future__ import annotations

import base64
import functools
import html
import io
import threading
from collections import OrderedDict

import streamlit as st
import streamlit.components.v2 as components_v2
from PIL import ImageOps

from app_pages import _html, _safe
from app_pages import _state as state
from app_pages._workspace import ws_id

THUMB_BYTES = 64 * 2**20
JPEG_URL = "data:image/jpeg;base64,"
#: JPEG quality of thumbnails: 90 is a third of quality 100's bytes (3.6 against 9.7 kB for a 96-px emoji scene),
#: which Retrieve sends ~130 of per query pick (docs/performance.md, "Clicks a presenter does not wait for").
THUMB_QUALITY = 90


def _encoded(im, fmt: str, **options) -> bytes:
    buf = io.BytesIO()
    im.save(buf, format=fmt, **options)
    return buf.getvalue()


def jpeg_url(data: bytes) -> str:
    """The ``data:`` URL of JPEG bytes (what :func:`show_image` draws)."""
    return JPEG_URL + base64.b64encode(data).decode("ascii")


class _Shared:
    """Per-workspace things every session draws: thumbnails as JPEG ``data:`` URLs (bounded LRU) and label
    texts."""

    def __init__(self, ws, max_bytes: int = THUMB_BYTES):
        self.ws, self.max_bytes, self.nbytes = ws, max_bytes, 0
        self.thumbs, self.labels, self.lock = OrderedDict(), {}, threading.Lock()

    def _kept(self, key, make) -> str:
        """The URL kept under ``key``, else ``make()`` (a PIL image, or a URL string passed as it is) encoded once,
        kept (least recently used first out past :attr:`max_bytes`) and returned."""
        with self.lock:
            url = self.thumbs.get(key)
            if url is not None:
                self.thumbs.move_to_end(key)
                return url
        im = make()
        url = im if isinstance(im, str) else jpeg_url(_encoded(im.convert("RGB"), "JPEG", quality=THUMB_QUALITY))
        with self.lock:
            if key not in self.thumbs:
                self.thumbs[key] = url
                self.nbytes += len(url)
            while self.nbytes > self.max_bytes and len(self.thumbs) > 1:
                self.nbytes -= len(self.thumbs.popitem(last=False)[1])
        return url

    def thumbnail(self, row: int, size: int, border: str | None = None) -> str:
        def make():
            im = self.ws.thumbnail(int(row), int(size))
            return im if border is None else ImageOps.expand(im, border=4, fill=border)
        return self._kept((int(row), int(size), border), make)

    def hit(self, hits, i: int, size: int) -> str:
        """The ``i``-th hit's thumbnail URL (:meth:`slics_core.explorer.pool.Hits.thumbnail`): a hit with a workspace
        row is :meth:`thumbnail` of the row (the same bytes in every gallery); a shard row's is encoded once too,
        or a remote http(s) URL passed as it is (the browser loads it)."""
        if hits.rows is not None:
            return self.thumbnail(int(hits.rows[i]), size)
        return self._kept(("pool", int(hits.positions[i]), int(size)), lambda: hits.thumbnail(i, size))

    def label(self, i: int) -> str:
        i = int(i)
        text = self.labels.get(i)
        if text is None:
            lab = self.ws.labels_of(i)
            text = ", ".join(lab["concepts"])
            if lab.get("sub_labels"):
                text += " — " + ", ".join(lab["sub_labels"])
            self.labels[i] = text
        return text


@st.cache_resource(show_spinner=False, max_entries=4)
def _shared(key: str, _ws) -> _Shared:
    return _Shared(_ws)


def shared(ws) -> _Shared:
    """The workspace's :class:`_Shared` store (one per workspace and process)."""
    return _shared(ws_id(ws), ws)


def thumbnail(ws, row: int, size: int = 128, border: str | None = None) -> str:
    """JPEG ``data:`` URL of :meth:`Workspace.thumbnail` (with a 4-px ``border`` colour), encoded once per
    ``(workspace, row, size, border)`` and shared by every session (pass to :func:`show_image`)."""
    return shared(ws).thumbnail(row, size, border)


def show_image(url, **kw):
    """``st.image`` of ``data:`` URLs from :func:`thumbnail` (one or a list; drawn as they are).

    A ``caption`` (str or list) is shown as plain text (:func:`app_pages._safe.text`): captions carry
    dataset ids, labels and file names."""
    cap = kw.get("caption")
    if cap is not None:
        kw["caption"] = [_safe.text(c) for c in cap] if isinstance(cap, (list, tuple)) else _safe.text(cap)
    return st.image(url, **kw)


def picked_row(value, rows: list) -> int | None:
    """The workspace row a gallery click names: ``value`` is the clicked image's position in ``rows`` (what the
    browser sends); anything else (a bool, a float, out of range, missing) names none."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < len(rows):
        return None
    return int(rows[value])


def _pick_from_gallery(key: str, rows: list) -> None:
    """on_picked_change of a clickable gallery: the clicked image becomes the query."""
    value = st.session_state.get(key)
    row = picked_row(value.get("picked") if isinstance(value, dict) else None, rows)
    if row is not None:
        state.set_query(row)


#: A clickable gallery (:func:`image_gallery` with ``pick_key``): the browser draws the HTML it is given (the same
#: :func:`gallery_html` st.html would draw, every value escaped, images only our ``data:`` URLs) once per change and
#: reports a click on an image as the trigger ``picked`` (the image's position). Images are buttons: keyboard users
#: reach them with Tab and pick with Enter or Space.
_GALLERY_JS = """
export default function (component) {
  const { data, setTriggerValue, parentElement } = component;
  let root = parentElement.querySelector(':scope > .slics-gallery-root');
  if (!root) {
    root = document.createElement('div');
    root.className = 'slics-gallery-root';
    parentElement.appendChild(root);
    root.addEventListener('click', (event) => {
      const button = event.target.closest('button[data-i]');
      if (button && root.contains(button)) setTriggerValue('picked', Number(button.dataset.i));
    });
  }
  if (root.slicsHtml !== data.html) {  // the same gallery again draws nothing
    root.innerHTML = data.html;
    root.slicsHtml = data.html;
  }
}
"""
_GALLERY_CSS = """
.slics-gallery-root button[data-i] { all: unset; display: block; width: 100%; cursor: pointer; }
.slics-gallery-root button[data-i]:hover img { filter: brightness(0.88); }
.slics-gallery-root button[data-i]:focus-visible { outline: 3px solid var(--st-primary-color); outline-offset: 2px; }
"""
_clickable_gallery = components_v2.component("slics_gallery", js=_GALLERY_JS, css=_GALLERY_CSS,
                                                isolate_styles=False)


def _is_hits(items) -> bool:
    return hasattr(items, "positions") and hasattr(items, "thumbnail")


def image_grid(ws, items, captions=None, n_cols: int = 5, size: int = 128, borders=None):
    """Thumbnails in a grid, an ``st.image`` per cell: ``items`` are workspace rows, or a pool's
    :class:`~slics_core.explorer.pool.Hits` (shard rows too). ``borders``: per-image colour or None (relevance
    marks; drawn into the image). For a grid whose images can be made the query, see :func:`image_gallery`."""
    hits = items if _is_hits(items) else None
    n = len(items)
    if not n:
        st.caption("No images.")
        return
    store = shared(ws)
    for start in range(0, n, n_cols):  # one row of columns at a time: rows stay aligned whatever
        cols = st.columns(n_cols)      # the captions' heights (a column per grid drifted apart)
        for k in range(start, min(start + n_cols, n)):
            with cols[k - start]:
                border = None if borders is None else borders[k]
                url = store.thumbnail(int(items[k]), size, border) if hits is None else \
                    store.hit(hits, k, size) if border is None else store.thumbnail(int(hits.rows[k]), size, border)
                show_image(url, caption=None if captions is None else captions[k], width="stretch")


#: What separates a gallery caption's parts ("#3 · 0.71 · gen yes, sub no"); a caption breaks between parts.
CAPTION_PARTS = " · "


def caption_html(text) -> str:
    """A gallery caption's HTML: plain text (bidi controls shown as escapes, cut to 200 characters; escaped),
    each part between :data:`CAPTION_PARTS` an inline block, so a narrow column breaks the caption between its
    parts ("#3 · 0.71 ·" above "gen yes, sub no"), inside a part only when the part alone is wider than the
    column."""
    parts = _safe.plain(text).split(CAPTION_PARTS)
    return " ".join(f'<span style="display:inline-block">{html.escape(part, quote=True)}'
                    f'{" ·" if i < len(parts) - 1 else ""}</span>' for i, part in enumerate(parts))


def gallery_html(urls, captions=None, n_cols: int = 5, borders=None, pickable: bool = False) -> str:
    """One HTML block of a gallery: ``n_cols`` equal columns of images (``data:`` URLs), each with its
    caption (:func:`caption_html`) and an
    optional 4-px border colour. ``pickable``: each image is a button (``data-i``: its position) that makes
    it the query (see :func:`image_gallery`)."""
    cells = []
    for k, url in enumerate(urls):
        border = None if borders is None else borders[k]
        frame = f"border:4px solid {html.escape(border, quote=True)};" if border else ""
        cap = "" if captions is None else html.escape(_safe.plain(captions[k]), quote=True)  # bidi shown, cut
        shown = "" if captions is None else caption_html(captions[k])
        img = (f'<img src="{html.escape(url, quote=True)}" alt="{cap}" '
               f'style="width:100%;display:block;box-sizing:border-box;{frame}">')
        if pickable:
            img = (f'<button type="button" data-i="{k}" title="Make #{k + 1} the query" '
                   f'aria-label="Make #{k + 1} the query">{img}</button>')
        cells.append(f'<figure style="margin:0">{img}'
                     f'<figcaption style="font-size:0.8rem;opacity:0.7;text-align:center">{shown}</figcaption>'
                     '</figure>')
    return (f'<div class="slics-gallery" style="display:grid;grid-template-columns:repeat({int(n_cols)},minmax(0,1fr));'
            f'gap:0.75rem 1rem">{"".join(cells)}</div>')


def image_gallery(ws, items, captions=None, n_cols: int = 5, size: int = 128, borders=None,
                  pick_key: str | None = None, head: str = ""):
    """:func:`image_grid` drawn as ONE element (``st.html``): the same thumbnails, captions and borders.

    A grid of ``st.image`` calls is an element per image and a column block per cell, each a React component the
    browser builds again on every run and a caption it parses as Markdown; a query pick on Retrieve redrew ~130 of
    them. One HTML block per gallery is one element (docs/performance.md). Borders are CSS, so a row's thumbnail
    is the same bytes in every gallery and relevance colour. ``items``: workspace rows, or a pool search's
    :class:`~slics_core.explorer.pool.Hits` (its thumbnails; hits without workspace rows, a sharded pool's,
    cannot be made the query). ``head``: HTML drawn above the grid in the same element (a title, built with
    :mod:`app_pages._html`: its values escaped).

    With ``pick_key``, a click on an image makes it the query: the gallery is then one clickable element (a
    ``st.components.v2`` component, key ``pick_key``, event ``picked``: the image's position in ``rows``) instead
    of st.html and a row of "#1 … #k" pills under it, which were a third of Retrieve's page (DOM nodes) and a fifth
    of the browser's work per query pick (docs/performance.md, "Fourth pass: clickable galleries").
    """
    hits = items if _is_hits(items) else None
    rows = [int(r) for r in items] if hits is None else None if hits.rows is None else [int(r) for r in hits.rows]
    if pick_key is not None and rows is None:
        raise ValueError("a sharded pool's positions are not workspace rows: they cannot be made the query")
    if not len(items):
        if head:
            st.html(head + _html.caption("No images."))
        else:
            st.caption("No images.")
        return
    store = shared(ws)
    urls = [store.thumbnail(r, size) for r in rows] if hits is None else \
        [store.hit(hits, i, size) for i in range(len(hits))]
    body = head + gallery_html(urls, captions, n_cols, borders, pickable=pick_key is not None)
    if pick_key is None:
        st.html(body)
    else:  # the component's HTML is not sanitised: only the store's own thumbnails and escaped values are in it
        _clickable_gallery(key=pick_key, data={"html": body},
                           on_picked_change=functools.partial(_pick_from_gallery, pick_key, rows))


def remote_hosts_caption(ws) -> None:
    """One caption naming the hosts remote pool thumbnails load from (nothing unless the workspace opted in)."""
    if ws.remote_thumbnails:
        hosts = ", ".join(ws.pool_shards.get("remote_hosts") or []) or "none"
        st.caption(f"Remote thumbnails: your browser loads them from {_safe.text(hosts)} (this workspace was built "
                   "with --remote-thumbnails).")


def png_bytes(img) -> bytes:
    return _encoded(img, "PNG")


def label_text(ws, i: int) -> str:
    """"concepts — sub-labels" of item ``i`` (made once per workspace and row; pickers that list many rows
    should call ``shared(ws).label`` directly)."""
    return shared(ws).label(i)

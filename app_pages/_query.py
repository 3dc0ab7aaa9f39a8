"""Query picking shared by the Retrieve and Generate pages (arrangement only).

Widget keys: query_pick (selectbox of query-set rows), query_upload (file uploader),
query_strip_prev / query_strip_next / query_thumb_<i> (thumbnail strip), query_use_upload,
concepts (concept multiselect).

State: ``st.session_state["query"]`` is a workspace row (int) or ``"upload"``;
``["upload_query"]`` holds the last good upload (image + embeddings);
``["picked_concepts"]`` keeps the concept picks across pages; URL ``?q=<row>&c=<names>``.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import streamlit as st

from app_pages._ui import int_param, label_text, query_encoder, query_rows, ws_id
from slics_core.explorer.queries import likely_concepts, parse_concept_param, upload_thresholds
from slics_core.datasets import ImageLoadError
from slics_core.explorer.uploads import UploadError, load_upload
from slics_core.explorer.workspace import embed_query

STRIP = 8  # thumbnails in the strip


@dataclass
class Query:
    """The current query: ``key`` identifies it in caches (``row:<r>`` or ``upload:<sha1>``)."""

    key: str
    row: int | None
    image: object
    raw: np.ndarray
    x: np.ndarray
    Y: np.ndarray | None
    Z: np.ndarray | None
    title: str

    @property
    def is_upload(self) -> bool:
        return self.row is None


def _set_query(row):
    st.session_state["query"] = int(row)
    st.session_state["query_pick"] = int(row)


def _on_pick():
    st.session_state["query"] = int(st.session_state["query_pick"])


def _on_concepts():
    st.session_state["picked_concepts"] = list(st.session_state["concepts"])


def _use_upload():
    st.session_state["query"] = "upload"


def _shift_strip(step, n):
    st.session_state["query_strip_start"] = int(st.session_state.get("query_strip_start", 0) + step) % max(n, 1)


def _handle_upload(ws, up):
    """Decode + embed a new upload once (by content hash); errors are kept to be shown while it stays."""
    data = up.getvalue()
    sha = hashlib.sha1(data).hexdigest()
    if st.session_state.get("upload_seen") == sha:
        return
    st.session_state["upload_seen"] = sha
    st.session_state["upload_error"] = None
    try:
        img = load_upload(data, up.name)
    except UploadError as exc:
        st.session_state["upload_error"] = ("error", str(exc))
        return
    try:
        enc = query_encoder(ws)
        raw, x = embed_query(ws, enc, img)
    except FileNotFoundError as exc:
        st.session_state["upload_error"] = ("warning", f"Uploads cannot be embedded here: {exc}")
        return
    except ValueError as exc:
        st.session_state["upload_error"] = ("error", f"“{up.name}” could not be embedded: {exc}")
        return
    shown = img.copy()
    shown.thumbnail((512, 512))  # only a display copy is kept in the session
    st.session_state["upload_query"] = {"sha": sha, "name": up.name, "image": shown, "raw": raw, "x": x,
                                        "ws": ws_id(ws)}
    st.session_state["query"] = "upload"


def query_picker(ws, required: bool = False) -> Query | None:
    """Draw the query pickers (query set, thumbnail strip, upload) and return the current query.

    With ``required``, a page without a query shows how to get one and stops instead of returning None.
    """
    q = _query_picker(ws)
    if q is None and required:
        st.info("Pick a query from the query set or upload an image to start.")
        st.stop()
    return q


def _query_picker(ws) -> Query | None:
    rows = [int(r) for r in query_rows(ws)]
    if not rows:
        st.info("This workspace has no query split; upload an image to query it.")
    if "query" not in st.session_state:
        q = int_param("q")
        # default: the first query with several concepts (the interesting case for concept filtering)
        multi = [r for r in rows if int(np.count_nonzero(ws.Y[r])) >= 2]
        st.session_state["query"] = q if q in rows else (multi or rows or ["upload"])[0]
    cur = st.session_state["query"]
    if cur != "upload" and cur not in rows:  # e.g. the workspace changed
        cur = st.session_state["query"] = rows[0] if rows else "upload"
    up_state = st.session_state.get("upload_query")
    if up_state is not None and up_state.get("ws") != ws_id(ws):
        st.session_state.pop("upload_query", None)
        up_state = None
        if cur == "upload":
            cur = st.session_state["query"] = rows[0] if rows else "upload"

    pick_col, up_col = st.columns([3, 2])
    with pick_col:
        if rows:
            # widget state does not survive a page switch (widget ids differ per page): re-seed it each run
            # from "query", which the callbacks keep up to date
            if cur in rows:
                st.session_state["query_pick"] = cur
            elif st.session_state.get("query_pick") not in rows:
                st.session_state["query_pick"] = rows[0]
            st.selectbox("Query from the query set", rows, key="query_pick", on_change=_on_pick,
                         format_func=lambda r: f"#{r} · {label_text(ws, r)}")
            n = len(rows)
            start = int(st.session_state.get("query_strip_start", 0)) % n
            shown = [rows[(start + i) % n] for i in range(min(STRIP, n))]
            cols = st.columns(len(shown))
            for i, r in enumerate(shown):
                with cols[i]:
                    st.image(ws.thumbnail(r, 96), width="stretch")
                    st.button(f"#{r}", key=f"query_thumb_{i}", on_click=_set_query, args=(r,),
                              type="primary" if r == cur else "secondary", width="stretch",
                              help=f"Use query #{r}: {label_text(ws, r)}")
            nav = st.columns([1, 1, 4])
            nav[0].button("◀ previous", key="query_strip_prev", on_click=_shift_strip, args=(-STRIP, n),
                          help="Previous query images", width="stretch")
            nav[1].button("next ▶", key="query_strip_next", on_click=_shift_strip, args=(STRIP, n),
                          help="Next query images", width="stretch")
    with up_col:
        up = st.file_uploader("…or upload a query image", key="query_upload",
                              help="PNG, JPEG, GIF, WebP, BMP or TIFF up to 20 MB (first frame of animations).")
        if up is None:
            st.session_state["upload_seen"] = None  # the same file uploaded again is a new upload
        else:
            _handle_upload(ws, up)
            err = st.session_state.get("upload_error")
            if err:
                (st.error if err[0] == "error" else st.warning)(err[1])
                if st.session_state.get("query") != "upload":
                    st.caption("The previous query is kept.")
        up_state = st.session_state.get("upload_query")
        if up_state is not None and st.session_state["query"] != "upload":
            st.button(f"Use the uploaded image “{up_state['name']}” again", key="query_use_upload",
                      on_click=_use_upload)

    cur = st.session_state["query"]
    if cur == "upload":
        u = st.session_state.get("upload_query")
        if u is None:
            return None
        return Query(key=f"upload:{u['sha']}", row=None, image=u["image"], raw=u["raw"], x=u["x"], Y=None,
                     Z=None, title=f"Upload “{u['name']}”")
    r = int(cur)
    try:
        image = ws.image(r)
    except ImageLoadError:
        image = ws.thumbnail(r, 256)  # a grey tile: the file is gone or damaged, its embedding is still there
    return Query(key=f"row:{r}", row=r, image=image, raw=np.asarray(ws.raw[r]), x=np.asarray(ws.X[r]),
                 Y=np.asarray(ws.Y[r], bool), Z=None if ws.Z is None else np.asarray(ws.Z[r], bool),
                 title=f"Query #{r}" + (f" ({ws.ids[r]})" if ws.ids else ""))


@st.cache_data(show_spinner="Calibrating pre-selection thresholds…", max_entries=16)
def _thresholds(key: str, method: str, d0, _ws, _model):
    val = np.asarray(_ws.index["val"])
    return upload_thresholds(_model, _ws.X[val], _ws.Y[val])


def preselection(ws, q: Query, model, method: str, d0, scores):
    """``(names, rule)``: the concepts to pre-select for ``q`` and the rule used (see slics_core.explore)."""
    names = list(ws.concept_names)
    if q.Y is not None:
        return [names[j] for j in np.flatnonzero(q.Y)], "its known labels"
    t = _thresholds(ws_id(ws), method, d0, ws, model)
    return ([names[j] for j in likely_concepts(scores, t)],
            "concepts whose score passes a per-concept threshold (best F1 on the validation split), "
            "or the best one")


def show_query(ws, q: Query, width: int = 220):
    """The query image and its known labels."""
    st.image(q.image, caption=q.title, width=width)
    if q.row is not None:
        lab = ws.labels_of(q.row)
        st.markdown("**Concepts:** " + (", ".join(lab["concepts"]) or "none"))
        if lab.get("sub_labels"):
            st.markdown("**Sub-labels:** " + ", ".join(lab["sub_labels"]))
    else:
        st.caption("Uploaded image: labels unknown.")


def concept_picker(ws, q: Query, preselect, label: str = "Concepts") -> list:
    """The concept multiselect (key ``concepts``); re-seeded with ``preselect`` (names) when the query changes.

    On the first run a ``?c=`` deep link wins over ``preselect``. Returns concept indices.
    """
    names = list(ws.concept_names)
    if "picked_concepts" not in st.session_state:
        from_url = parse_concept_param(st.query_params.get("c"), names)
        st.session_state["picked_concepts"] = from_url or None
        st.session_state["concepts_for"] = q.key if from_url else None
    if st.session_state.get("concepts_for") != q.key:
        st.session_state["concepts_for"] = q.key
        st.session_state["picked_concepts"] = [n for n in preselect if n in names]
    # re-seed the widget from the persistent copy (kept by the on_change callback; survives page switches)
    st.session_state["concepts"] = [n for n in (st.session_state["picked_concepts"] or []) if n in names]
    picked = st.multiselect(label, names, key="concepts", on_change=_on_concepts)
    return [names.index(n) for n in picked]


def write_deep_link(q: Query | None, concept_names_picked):
    """Keep ``?q=<row>&c=<names>`` in the URL in step with the page."""
    if q is not None and q.row is not None:
        st.query_params["q"] = str(q.row)
    elif "q" in st.query_params:
        del st.query_params["q"]
    if concept_names_picked:
        st.query_params["c"] = ",".join(concept_names_picked)
    elif "c" in st.query_params:
        del st.query_params["c"]

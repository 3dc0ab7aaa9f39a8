"""Query picking shared by the Retrieve, Generate and Mix pages (arrangement only).

Widget keys: query_pick (selectbox of query-set rows), query_upload (file uploader),
query_text (text query box), query_strip_prev / query_strip_next / query_thumb_<i> (thumbnail
strip), query_use_upload, concepts (concept multiselect).

State (see :mod:`app_pages._state`): ``st.session_state["query"]`` is a workspace row (int: any
row, e.g. a gallery image or a map point made the query), ``"text:<phrase>"`` or ``"upload"``;
``["upload_query"]`` holds the last good upload (image + embeddings);
``["picked_concepts"]`` keeps the concept picks across pages; ``[KEPT_QUERY]`` (``"kept_query"``) is the
query the picker last resolved as an embedding, and the edited embeddings Retrieve ranked by (:func:`keep_edit`),
for any page to read (:func:`current_query_vectors`; the rule: :mod:`slics_core.explorer.current_query`).
All but uploads are in the URL.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import streamlit as st

from app_pages import _safe
from app_pages import _state as state
from app_pages._errors import visitor_text
from app_pages._images import shared, show_image, thumbnail
from app_pages._ui import query_rows
from app_pages._workspace import query_encoder, ws_id
from slics_core.explorer.current_query import current_query, edit_key, query_key
from slics_core.explorer.edits import edit_query
from slics_core.explorer.encoding import embed_query, embed_text_query
from slics_core.explorer.queries import likely_concepts, upload_thresholds
from slics_core.explorer.uploads import UploadError, load_upload
from slics_core.images import ImageLoadError

#: Session key of the kept query (its key, workspace, embedding and edited embeddings).
KEPT_QUERY = "kept_query"
STRIP = 6  # thumbnails in the strip (each with its "Use" button, whose label must fit the column at 1024 px)


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
    text: str | None = None

    @property
    def is_upload(self) -> bool:
        return self.row is None and self.text is None


def _set_query(row):
    state.set_query(int(row))


def _on_pick():
    state.set_query(int(st.session_state["query_pick"]))


def _on_text():
    phrase = " ".join(str(st.session_state.get("query_text") or "").split())
    if phrase:
        state.set_query(state.TEXT_PREFIX + phrase)


@st.cache_data(show_spinner="Embedding the text…", max_entries=256)
def _text_embedding(key: str, phrase: str, _ws):
    return embed_text_query(_ws, query_encoder(_ws), phrase)


def _on_concepts():
    st.session_state["picked_concepts"] = list(st.session_state["concepts"])


def _use_upload():
    state.set_query("upload")


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
        st.session_state["upload_error"] = ("error", _safe.text(exc))
        return
    try:
        enc = query_encoder(ws)
        raw, x = embed_query(ws, enc, img)
    except FileNotFoundError as exc:
        st.session_state["upload_error"] = ("warning", visitor_text(exc, "Uploads cannot be embedded here",
                                                                    "Pick a query from the query set instead."))
        return
    except ValueError as exc:
        st.session_state["upload_error"] = ("error", visitor_text(exc, f"{_safe.code(up.name)} could not be embedded",
                                                                  "Try another image."))
        return
    shown = img.copy()
    shown.thumbnail((512, 512))  # only a display copy is kept in the session
    st.session_state["upload_query"] = {"sha": sha, "name": up.name, "image": shown, "raw": raw, "x": x,
                                        "ws": ws_id(ws)}
    state.set_query("upload")


def query_picker(ws, required: bool = False) -> Query | None:
    """Draw the query pickers (query set, thumbnail strip, upload) and return the current query.

    With ``required``, a page without a query shows how to get one and stops instead of returning None.
    """
    q = _query_picker(ws)
    if q is not None:
        kept = st.session_state.get(KEPT_QUERY)
        if kept is None or kept.get("key") != q.key or kept.get("ws") != ws_id(ws):
            st.session_state[KEPT_QUERY] = {"ws": ws_id(ws), "key": q.key, "x": np.asarray(q.x), "edits": {}}
    if q is None and required:
        st.info("Pick a query from the query set or upload an image to start.")
        state.stop()
    return q


def _valid(ws, cur) -> bool:
    if cur == "upload":
        return st.session_state.get("upload_query") is not None
    if isinstance(cur, str):
        return cur.startswith(state.TEXT_PREFIX)
    return isinstance(cur, (int, np.integer)) and 0 <= int(cur) < len(ws)


def _query_picker(ws) -> Query | None:
    rows = [int(r) for r in query_rows(ws)]
    if not rows:
        st.info("This workspace has no query split; upload an image or type a text query.")
    up_state = st.session_state.get("upload_query")
    if up_state is not None and up_state.get("ws") != ws_id(ws):  # an upload embedded for another workspace
        st.session_state.pop("upload_query", None)
    # a new upload becomes the query before anything is drawn (so the strip highlights it at once)
    up = st.session_state.get("query_upload")
    if up is None:
        st.session_state["upload_seen"] = None  # the same file uploaded again is a new upload
    else:
        _handle_upload(ws, up)
    if "query" not in st.session_state or not _valid(ws, st.session_state["query"]):
        # default: the first query with several concepts (the interesting case for concept filtering)
        multi = [r for r in rows if int(np.count_nonzero(ws.Y[r])) >= 2]
        st.session_state["query"] = (multi or rows or ["upload"])[0]
    cur = st.session_state["query"]

    pick_col, up_col = st.columns([3, 2])
    with pick_col:
        if rows:
            # widget state does not survive a page switch (widget ids differ per page): re-seed it each run
            # from "query", which the callbacks keep up to date; a row outside the query split (a gallery
            # image or a map point made the query) is offered too
            in_split, store = set(rows), shared(ws)
            options = rows if not isinstance(cur, (int, np.integer)) or cur in in_split else [int(cur)] + rows
            st.session_state["query_pick"] = int(cur) if isinstance(cur, (int, np.integer)) else \
                (st.session_state.get("query_pick") if st.session_state.get("query_pick") in options else options[0])
            st.selectbox("Query from the query set", options, key="query_pick", on_change=_on_pick,
                         format_func=lambda r: _safe.plain(f"#{r} · {store.label(r)}")
                         + ("" if r in in_split else " (pool)"))
            n = len(rows)
            start = int(st.session_state.get("query_strip_start", 0)) % n
            shown = [rows[(start + i) % n] for i in range(min(STRIP, n))]
            cols = st.columns(STRIP, gap="xsmall")
            for i, r in enumerate(shown):
                with cols[i]:
                    show_image(store.thumbnail(r, 96), caption=f"#{r}", width="stretch")
                    # one short word fits the narrowest column; the current query's button is highlighted
                    st.button("Use", key=f"query_thumb_{i}", on_click=_set_query, args=(r,),
                              type="primary" if r == cur else "secondary", width="stretch",
                              help=(f"#{r} is the query now" if r == cur else f"Use query #{r}")
                              + f": {_safe.text(store.label(r))}")
            nav = st.columns(3)
            nav[0].button("◀ previous", key="query_strip_prev", on_click=_shift_strip, args=(-STRIP, n),
                          help="Previous query images", width="stretch")
            nav[1].button("next ▶", key="query_strip_next", on_click=_shift_strip, args=(STRIP, n),
                          help="Next query images", width="stretch")
    with up_col:
        cur_text = cur[len(state.TEXT_PREFIX):] if isinstance(cur, str) and cur.startswith(state.TEXT_PREFIX) else ""
        st.session_state["query_text"] = cur_text
        st.text_input("…or describe the query in words (press Enter)", key="query_text", on_change=_on_text,
                      placeholder="e.g. a cat next to a pizza",
                      help="Embedded with the workspace's text encoder and prepared like the caption vocabulary "
                           "(centred on the text mean), then split into concept components like an image.")
        st.file_uploader("…or upload a query image", key="query_upload",
                         help="PNG, JPEG, GIF, WebP, BMP or TIFF up to 20 MB (first frame of animations; large "
                              "photos are scaled down).")
        if up is not None:
            err = st.session_state.get("upload_error")
            if err:
                (st.error if err[0] == "error" else st.warning)(err[1])
                if st.session_state.get("query") != "upload":
                    st.caption("The previous query is kept.")
        up_state = st.session_state.get("upload_query")
        if up_state is not None and st.session_state["query"] != "upload":
            st.button(f"Use the uploaded image {_safe.code(up_state['name'])} again", key="query_use_upload",
                      on_click=_use_upload)

    cur = st.session_state["query"]
    if cur == "upload":
        u = st.session_state.get("upload_query")
        if u is None:
            return None
        return Query(key=query_key(cur, u), row=None, image=u["image"], raw=u["raw"], x=u["x"], Y=None,
                     Z=None, title=f"Upload “{u['name']}”")
    if isinstance(cur, str):
        phrase = cur[len(state.TEXT_PREFIX):]
        try:
            raw, x = _text_embedding(ws_id(ws), phrase, ws)
        except (FileNotFoundError, ValueError) as exc:
            st.warning(visitor_text(exc, "Text queries cannot be used here",
                                    "Pick a query from the query set or upload an image instead."))
            return None
        return Query(key=query_key(cur), row=None, image=None, raw=raw, x=x, Y=None, Z=None, title=f"Text “{phrase}”",
                     text=phrase)
    return row_query(ws, int(cur))


def row_query(ws, r: int) -> Query:
    """The query made of workspace row ``r``."""
    try:
        image = ws.image(r)
    except ImageLoadError:
        image = ws.thumbnail(r, 256)  # a grey tile: the file is gone or damaged, its embedding is still there
    return Query(key=query_key(r), row=r, image=image, raw=np.asarray(ws.raw[r]), x=np.asarray(ws.X[r]),
                 Y=np.asarray(ws.Y[r], bool), Z=None if ws.Z is None else np.asarray(ws.Z[r], bool),
                 title=f"Query #{r}" + (f" ({ws.ids[r]})" if ws.ids else ""))


def keep_edit(q: Query, edit: str, name: str, strength: float, x) -> None:
    """Keep the edited embedding ``x`` of ``q`` (Retrieve's "without" / "more of") beside the kept query."""
    kept = st.session_state.get(KEPT_QUERY)
    if kept is not None and kept.get("key") == q.key:
        kept["edits"][edit_key(edit, name, strength)] = np.asarray(x)


def current_query_vectors(ws, concept_names, model=None) -> list:
    """The current query's vectors (:func:`slics_core.explorer.current_query.current_query`): the query, then the
    asked edits Retrieve computed for it; with ``model``, an asked edit of a row query Retrieve has not computed
    (a link with ``rm=`` / ``boost=`` opened here first) is computed with it, as Retrieve would (the row's labels
    active: :func:`preselection`'s rule for a row)."""
    ss = st.session_state
    upload, kept = ss.get("upload_query"), ss.get(KEPT_QUERY)
    names = list(concept_names)

    def edit_fn(edit, name, strength, x, row):
        return edit_query(model, x, names.index(name), edit, strength=strength,
                          active=np.flatnonzero(ws.Y[row]).tolist())[0]

    return current_query(ss.get("query"), ws.X, edits=state.edits(concept_names),
                         upload=upload if upload is not None and upload.get("ws") == ws_id(ws) else None,
                         kept=kept if kept is not None and kept.get("ws") == ws_id(ws) else None,
                         edit_fn=None if model is None else edit_fn)


@st.cache_data(show_spinner="Calibrating pre-selection thresholds…", max_entries=16)
def _thresholds(key: str, method: str, d0, _ws, _model):
    val = np.asarray(_ws.index["val"])
    return upload_thresholds(_model, _ws.X[val], _ws.Y[val])


def preselection(ws, q: Query, model, method: str, d0, scores):
    """``(names, rule)``: the concepts to pre-select for ``q`` and the rule used (see slics_core.explorer.queries)."""
    names = list(ws.concept_names)
    if q.Y is not None:
        return [names[j] for j in np.flatnonzero(q.Y)], "its known labels"
    if q.text is not None:
        return [names[int(np.argmax(scores))]], "the best-scoring concept of the text"
    t = _thresholds(ws_id(ws), method, d0, ws, model)
    return ([names[j] for j in likely_concepts(scores, t)],
            "concepts whose score passes a per-concept threshold (best F1 on the validation split), "
            "or the best one")


def show_query(ws, q: Query, width: int = 220):
    """The query image (or phrase) and its known labels."""
    if q.text is not None:
        st.markdown(f"### “{_safe.text(q.text)}”")
        st.caption("Text query: labels unknown.")
        return
    if q.row is not None:  # the row's image (or its grey tile), encoded once per process
        show_image(thumbnail(ws, q.row, max(q.image.size)), caption=q.title, width=width)
    else:
        show_image(q.image, caption=q.title, width=width)
    if q.row is not None:
        lab = ws.labels_of(q.row)
        st.markdown("**Concepts:** " + (_safe.text(", ".join(lab["concepts"])) or "none"))
        if lab.get("sub_labels"):
            st.markdown("**Sub-labels:** " + _safe.text(", ".join(lab["sub_labels"])))
    else:
        st.caption("Uploaded image: labels unknown.")


def concept_picker(ws, q: Query, preselect, label: str = "Concepts") -> list:
    """The concept multiselect (key ``concepts``); re-seeded with ``preselect`` (names) when the query changes.

    On the first run a ``?c=`` deep link wins over ``preselect``. Returns concept indices.
    """
    names = list(ws.concept_names)
    if st.session_state.get("concepts_for") == state.LINKED:
        st.session_state["concepts_for"] = q.key
    if st.session_state.get("concepts_for") != q.key:
        st.session_state["concepts_for"] = q.key
        st.session_state["picked_concepts"] = [n for n in preselect if n in names]
    # re-seed the widget from the persistent copy (kept by the on_change callback; survives page switches)
    st.session_state["concepts"] = [n for n in (st.session_state["picked_concepts"] or []) if n in names]
    picked = st.multiselect(label, names, key="concepts", on_change=_on_concepts, format_func=_safe.plain)
    return [names.index(n) for n in picked]

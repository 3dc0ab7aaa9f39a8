"""Shared Streamlit helpers of the pages: the current workspace, pickers, image grids.

Only arrangement and caching live here; every computation is in ``slics_core``.

Conventions shared by all pages
-------------------------------
* The shared state (workspace, query, concepts, method, d0, component mode, k) and its URL
  form are described in :mod:`app_pages._state`. ``?ws=`` is a workspace *name* under
  ``$SLICS_WORKSPACES``, never a path: a link cannot make the server open an arbitrary folder.
* Pickers (method, d0, component, k) show and change the shared values.
* Cached arrays use ``st.cache_data`` with an explicit workspace id
  (:func:`ws_id`) as argument and the workspace itself as ``_ws`` (not hashed).
"""
from __future__ import annotations

import base64
import io
import re
import threading
import time
from collections import OrderedDict

import numpy as np
import streamlit as st
from PIL import ImageOps

from app_pages import _safe
from app_pages import _state as state
from app_pages._state import apply_link, capture_link, link_problems
from slics_core.captions import prepare_text_embeddings
from slics_core.explorer.quantized import quantization_info, quantized_pool_index
from slics_core.explorer.generation import generator_version, load_workspace_generator
from slics_core.explorer.emoji_build import PROVISIONAL_D0, BuildProgress, start_emoji_workspace
from slics_core.explorer.encoding import load_query_encoder, workspace_vocabulary
from slics_core.explorer.workspace import EMOJI, list_workspaces, load_workspace, workspace_path
from slics_core.methods import get_method
from slics_core.retrieval import build_index


# ---------------------------------------------------------------------- workspace
@st.cache_resource(show_spinner=False)
def _registry():
    """Process-wide store of opened workspaces: ``open[choice]`` is a
    :class:`slics_core.explorer.emoji_build.BuildProgress` whose ``workspace`` is the newest usable one
    (the emoji world's cold start publishes a preview first, then the whole workspace, from a
    background thread), shared by every tab and session (so a second tab sees the live progress)."""
    return {"lock": threading.Lock(), "open": {}}


def _open_workspace(choice: str) -> BuildProgress:
    """The shared handle of ``choice``, opening it (a dataset workspace: at once; the emoji world:
    from its cache at once, else a background build is started) if no session has yet.

    A failed background build is forgotten here, so that the next visit tries again.
    """
    reg = _registry()
    with reg["lock"]:
        handle = reg["open"].get(choice)
        if handle is not None and handle.error is not None and handle.workspace is None:
            reg["open"].pop(choice)
            raise _BuildFailed(handle.error)
        if handle is None:
            if len(reg["open"]) >= 4:  # forget the oldest finished one
                old = next((c for c, h in reg["open"].items() if h.finished), None)
                if old is not None:
                    reg["open"].pop(old)
            if choice == EMOJI:
                handle = start_emoji_workspace()
            else:
                handle = BuildProgress()
                handle.publish(load_workspace(workspace_path(choice)), final=True)
            reg["open"][choice] = handle
        return handle


class _BuildFailed(ValueError):
    """A background build failed (its one-line message)."""


_PATH = re.compile(r"(?<![\w.:/])/(?:[^\s/`'\"]+/)+([^\s/`'\"]*)")


def server_text(message) -> str:
    """``message`` as students may see it: with error details off (``client.showErrorDetails`` not "full",
    the README's classroom server) the server's folders are cut from absolute paths (``…/name``)."""
    text = str(message)
    if st.get_option("client.showErrorDetails") in ("full", True):
        return text
    return _PATH.sub(lambda m: "…/" + m.group(1), text)


def _progress_text(snap) -> str:
    stage = snap["stage"]
    if snap["total"] > 1:
        stage += f" ({snap['done']}/{snap['total']})"
    return f"{stage} · {snap['percent']:.0f} % · {snap['stage_elapsed']:.0f} s in this step, " \
           f"{snap['elapsed']:.0f} s in all"


def _progress_bar(handle):
    """Wait (polling the shared progress, so every tab sees it move) until ``handle`` has a workspace."""
    bar = st.progress(0.0, text="Preparing the workspace…")
    while handle.workspace is None and not handle.finished:
        snap = handle.snapshot()
        bar.progress(min(1.0, snap["percent"] / 100), text="Preparing the workspace: " + _progress_text(snap))
        time.sleep(0.3)
    bar.empty()


@st.fragment(run_every=2)
def _build_banner(handle, seen_generation: int):
    """Live progress of a background build; reruns the page when a newer workspace is published."""
    snap = handle.snapshot()
    if snap["generation"] != seen_generation:
        st.rerun()
    if snap["error"]:
        st.warning(f"Building the whole workspace failed: {_safe.text(server_text(snap['error']))}. The preview stays usable; restart the "
                   "server to try again, or prepare the cache with `slics emoji-build`.")
        return
    st.progress(min(1.0, snap["percent"] / 100),
                text="Preview open: the first scenes of the emoji world, S-SLiCS at a provisional d0 = "
                     f"{PROVISIONAL_D0} (d0 is chosen on validation when the build finishes). Building the whole "
                     "world in the background (every method, every d0; this page updates by itself): "
                     + _progress_text(snap))


def workspace_choices() -> dict:
    """Label -> choice of every workspace that can be opened."""
    out = {"Emoji world (offline demo)": EMOJI}
    for name, path in list_workspaces():
        out[f"{name} ({path.name})" if name != path.name else name] = path.name
    return out


def current_choice() -> str:
    capture_link()
    if "ws_choice" not in st.session_state:
        st.session_state["ws_choice"] = EMOJI
    return st.session_state["ws_choice"]


def get_workspace():
    """The current workspace (opened once per process and shared by every session).

    The emoji world's cold start waits only for its preview (live progress, polled from the shared
    build); while the whole world is built in the background every page shows its progress and
    reruns itself when it is published. A workspace that cannot be opened (unknown name, damaged
    folder, unwritable cache, failed build) shows one message and the workspace picker; ``?ws=`` is
    dropped from the URL so a reload does not fail again.
    """
    choice = current_choice()
    error = None
    placeholder = st.empty()
    with placeholder.container():
        try:
            handle = _open_workspace(choice)
            if handle.workspace is None:
                _progress_bar(handle)
            if handle.workspace is None:
                with _registry()["lock"]:
                    _registry()["open"].pop(choice, None)
                error = handle.error or "the build stopped"
        except (OSError, ValueError) as exc:
            error = exc
    placeholder.empty()
    if error is not None:
        st.error(f"Could not open workspace {_safe.code(choice)}: {_safe.text(server_text(error))}")
        st.session_state.pop("ws_choice", None)
        st.session_state.pop("_link", None)  # the rest of the link was for that workspace
        if "ws" in st.query_params:
            del st.query_params["ws"]
        choices = workspace_choices()
        options = [c for c in choices if choices[c] != choice]
        picked = st.selectbox("Open another workspace", options, index=None, key="ws_recover")
        if picked is not None:
            st.session_state["ws_choice"] = choices[picked]
            st.rerun()
        state.stop()
    generation = handle.generation  # read before the workspace: a publication in between reruns once more
    ws = handle.workspace
    if not handle.finished or handle.error:
        _build_banner(handle, generation)
    # a link is checked against the whole world; its preview honours what it can meanwhile
    apply_link(ws, preview=getattr(ws, "building", None) is not None)
    problems = link_problems()
    if problems:
        st.warning("This link asked for things this workspace does not have, so they were left out: "
                   + "; ".join(problems) + ".")
    return ws


def ws_id(ws) -> str:
    """Explicit cache key of a workspace (kind + folder)."""
    return f"{ws.kind}:{ws.path}"


@st.cache_resource(show_spinner=False, max_entries=4)
def _pool_index(key: str, _ws):
    return build_index(_ws.X[_ws.index["pool"]], "auto")


def pool_index(ws):
    """Search index over the workspace's candidate pool, built (pool normalised) once per workspace and
    shared by every page and session."""
    return _pool_index(ws_id(ws), ws)


@st.cache_resource(show_spinner="Quantizing the pool with the workspace's token codebook…", max_entries=2)
def _quantized_pool_index(key: str, _ws):
    return quantized_pool_index(_ws), quantization_info(_ws, None)


def quantized_pool(ws):
    """``(index, info)`` of the workspace's quantized pool (TiTok codebook), built once per workspace and shared
    by every session (raises ValueError when the workspace has no codebook)."""
    return _quantized_pool_index(ws_id(ws), ws)


@st.cache_resource(show_spinner="Loading the encoder…", max_entries=4)
def _query_encoder(key: str, _ws):
    return load_query_encoder(_ws)


def query_encoder(ws):
    """The workspace's encoder for new images (raises FileNotFoundError if its weights are missing)."""
    return _query_encoder(ws_id(ws), ws)


def _generator_key(ws) -> str:
    """The generator cache's key: the workspace and the version of its recorded generator."""
    return f"{ws_id(ws)}:{generator_version(ws)}"


@st.cache_resource(show_spinner="Loading the generator…", max_entries=2)
def _generator(key: str, _ws):
    return load_workspace_generator(_ws)


def workspace_generator(ws):
    """The workspace's image generator, loaded once per workspace and shared by every page and session
    (raises FileNotFoundError / ValueError when there is none)."""
    return _generator(_generator_key(ws), ws)


@st.cache_resource(show_spinner=False, max_entries=4)
def _vocabulary(key: str, _ws):
    t0 = time.perf_counter()
    words, W = workspace_vocabulary(_ws)
    return words, prepare_text_embeddings(W)[0], time.perf_counter() - t0


def workspace_words(ws):
    """``(words, prepared text embeddings, seconds it took)`` of the workspace's caption vocabulary, prepared
    once per workspace for every page (raises FileNotFoundError when it has none)."""
    return _vocabulary(ws_id(ws), ws)


# ---------------------------------------------------------------------- pickers
# Each picker seeds its widget from the shared value (app_pages/_state.py) and copies changes
# back in on_change: the value survives page switches and is in the URL.
def _seed(widget_key: str, value) -> None:
    st.session_state[widget_key] = value


def require_dictionaries(ws) -> list:
    """The workspace's dictionary methods; a page about atoms or components stops with one message when
    there are none (e.g. a workspace built with ``--methods UF``)."""
    methods = ws.dictionary_methods()
    if not methods:
        st.info(f"Workspace {_safe.code(ws.name)} has no fitted dictionary (S-SVD, S-SLiCS or U-SLiCS), so this page has "
                "nothing to show; rebuild it with one of them among `slics workspace --methods`.")
        state.stop()
    return methods


def preferred_method(options) -> str:
    """The method a page shows when the shared one is not among ``options``: S-SLiCS if offered, else the
    first."""
    options = list(options)
    return "S-SLiCS" if "S-SLiCS" in options else options[0]


def method_picker(ws, key: str = "method", methods=None, label: str = "Method"):
    """Method selectbox over the workspace's fitted methods (the registry's order).

    The shared method is shown when it is an option here; otherwise (e.g. UF on a page of
    dictionary methods) the page shows S-SLiCS without changing the shared choice."""
    options = list(methods or ws.methods)
    cur = state.get("method", "S-SLiCS")
    _seed(key, cur if cur in options else preferred_method(options))
    return st.selectbox(label, options, key=key, on_change=state.copy_widget, args=(key, "method"))


COMPONENTS = {"partial": "ṽⱼ — partial (nearest point of the concept's cone)",
              "full": "vⱼ — full (joint disentanglement, picked concepts active)"}


def component_picker(key: str = "component", method: str | None = None):
    """ṽⱼ (partial) or vⱼ (full): the radio shared by the query pages; returns "partial" or "full".

    Disabled (showing the method's one kind of component) for methods that have only one."""
    modes = get_method(method).modes if method else tuple(COMPONENTS)
    if len(modes) == 1:
        _seed(f"{key}_fixed", modes[0])
        st.radio("Component", list(COMPONENTS), format_func=COMPONENTS.get, disabled=True,
                 key=f"{key}_fixed", help=f"{method} has one kind of component")
        return modes[0]
    cur = state.get("mode", "partial")
    _seed(key, cur if cur in modes else modes[0])
    return st.radio("Component", list(COMPONENTS), format_func=COMPONENTS.get, key=key,
                    on_change=state.copy_widget, args=(key, "mode"))


def d0_picker(ws, key: str = "d0", label: str = "Atoms per concept (d0)", method: str | None = None):
    """d0 slider over the fitted d0 values; disabled for a method without a dictionary (returns None then)."""
    options = list(ws.d0_values) or [0]
    cur = state.get("d0", ws.default_d0)
    if cur not in options:
        cur = ws.default_d0 if ws.default_d0 in options else options[0]
    if method and not get_method(method).dictionary:
        _seed(f"{key}_fixed", cur)
        st.select_slider(label, options=options, disabled=True, key=f"{key}_fixed", help=f"{method} has no atoms")
        return None
    _seed(key, cur)
    return st.select_slider(label, options=options, key=key, on_change=state.copy_widget, args=(key, "d0"),
                            format_func=lambda v: f"{v} (chosen)" if v == ws.default_d0 and ws.chosen_d0 else str(v))


def k_picker(key: str = "k", label: str = "Images per gallery (k)", max_k: int = 50) -> int:
    """The shared k (gallery size on Retrieve, k of mAP@k on Evaluate)."""
    cur = int(state.get("k", state.DEFAULT_K))
    _seed(key, min(max(cur, state.K_RANGE[0]), max_k))
    return int(st.slider(label, state.K_RANGE[0], max_k, key=key, on_change=state.copy_widget, args=(key, "k")))


# ---------------------------------------------------------------------- images
# Thumbnails are the bulk of a page (Retrieve draws ~120 per run): each is encoded once per process
# (JPEG bytes, as st.image would encode a PIL image) and shared by every session and rerun, as a
# ``data:`` URL. st.image passes a URL through untouched, so a drawn thumbnail costs the server no
# decoding, no hashing into the media file manager and no HTTP request of its own (the browser has the
# image in the page message; measured in benchmarks/bench_load.py and README, "A classroom server").
# The store is one st.cache_resource object per workspace, asked for once per grid (a cached call
# costs ~0.3 ms, too much to pay per image), and bounded: least recently used thumbnails beyond
# THUMB_BYTES go.
THUMB_BYTES = 64 * 2**20
JPEG_URL = "data:image/jpeg;base64,"


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

    def thumbnail(self, row: int, size: int, border: str | None = None) -> str:
        key = (int(row), int(size), border)
        with self.lock:
            url = self.thumbs.get(key)
            if url is not None:
                self.thumbs.move_to_end(key)
                return url
        im = self.ws.thumbnail(key[0], key[1])
        if border is not None:
            im = ImageOps.expand(im, border=4, fill=border)
        # the bytes st.image would make of an RGB PIL image
        url = jpeg_url(_encoded(im.convert("RGB"), "JPEG", quality=100))
        with self.lock:
            if key not in self.thumbs:
                self.thumbs[key] = url
                self.nbytes += len(url)
            while self.nbytes > self.max_bytes and len(self.thumbs) > 1:
                self.nbytes -= len(self.thumbs.popitem(last=False)[1])
        return url

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


def _pick_from_grid(key: str, rows: list) -> None:
    """on_change of a grid's "Query this" pills: the picked image becomes the query; the pills are cleared."""
    i = st.session_state.get(key)
    st.session_state[key] = None
    if i is not None:
        state.set_query(rows[int(i)])


def image_grid(ws, rows, captions=None, n_cols: int = 5, size: int = 128, borders=None, pick_key: str | None = None):
    """Thumbnails of workspace rows in a grid. ``borders``: per-image colour or None (relevance marks).

    With ``pick_key``, one row of pills under the grid, "#1" … "#n" (the images' ranks, in reading order:
    left to right, then down), makes the picked image the query (key ``pick_key``; its value is the index
    into ``rows`` until the callback clears it). One widget per grid instead of a button under every image:
    a button is a widget the server registers, hashes and sends on every run, and the browser reports
    back, which made Retrieve's ~120 of them a third of the server's CPU per click (benchmarks/bench_load.py).
    """
    rows = [int(r) for r in rows]
    if not rows:
        st.caption("No images.")
        return
    store = shared(ws)
    for start in range(0, len(rows), n_cols):  # one row of columns at a time: rows stay aligned whatever
        cols = st.columns(n_cols)               # the captions' heights (a column per grid drifted apart)
        for k in range(start, min(start + n_cols, len(rows))):
            with cols[k - start]:
                border = None if borders is None else borders[k]
                show_image(store.thumbnail(rows[k], size, border), caption=None if captions is None else captions[k],
                           width="stretch")
    if pick_key is not None:
        # (they wrap onto more lines instead of scrolling sideways: PILLS_WRAP, drawn once per run by app.py)
        st.pills("Query this image (by its number: #1 top left, then left to right)", list(range(len(rows))),
                 format_func=lambda i: f"#{i + 1}", key=pick_key, on_change=_pick_from_grid, args=(pick_key, rows))


#: Page style drawn once per run by the frame (app.py): pills wrap onto more lines instead of scrolling
#: sideways (a gallery's 20 "Query this image" pills outgrow half a page).
PILLS_WRAP = ('<style>[data-testid="stButtonGroup"] [role=radiogroup] {flex-wrap: wrap; overflow: visible}'
              '</style>')


def png_bytes(img) -> bytes:
    return _encoded(img, "PNG")


def csv_download(df, filename: str, label: str = "Download CSV", key: str | None = None):
    st.download_button(label, df.to_csv(index=False).encode(), file_name=filename, mime="text/csv", key=key)


def query_rows(ws) -> np.ndarray:
    return np.asarray(ws.index["query"])


def label_text(ws, i: int) -> str:
    """"concepts — sub-labels" of item ``i`` (made once per workspace and row; pickers that list many rows
    should call ``shared(ws).label`` directly)."""
    return shared(ws).label(i)


def nav_link(page: str, label: str, icon: str | None = None) -> None:
    """A link to another page of the app (nothing when the page runs on its own, e.g. in a unit test)."""
    from streamlit.errors import StreamlitPageNotFoundError

    try:
        st.page_link(page, label=label, icon=icon)
    except StreamlitPageNotFoundError:
        pass


def page_intro(look_at: str, more: str | None = None) -> None:
    """A page's opening: one sentence on what to look at, optional detail, and the glossary link."""
    st.markdown(f"**What to look at:** {look_at}")
    if more:
        st.caption(more)


def sidebar_workspace_note(ws):
    with st.sidebar:
        st.caption(f"Workspace: **{_safe.text(ws.name)}** · {len(ws)} items · {ws.X.shape[1]}-d")

"""Shared Streamlit helpers of the pages: the current workspace, pickers, image grids.

Only arrangement and caching live here; every computation is in ``slics_core``.

Conventions shared by all pages
-------------------------------
* The current workspace is ``st.session_state["ws_choice"]``: ``"emoji"`` or the
  *name* of a workspace folder under ``$SLICS_WORKSPACES``; deep link ``?ws=<name>``
  (never a path: a link cannot make the server open an arbitrary folder).
* The current query is ``st.session_state["query"]``: an int (a row of the
  workspace, taken from its query split) or the string ``"upload"``; deep link
  ``?q=<row>``. Picked concepts: ``?c=name1,name2``.
* Method and d0 pickers write ``st.session_state["method"]`` / ``["d0"]``.
* Cached arrays use ``st.cache_data`` with an explicit workspace id
  (:func:`ws_id`) as argument and the workspace itself as ``_ws`` (not hashed).
"""
from __future__ import annotations

import io
import time

import numpy as np
import streamlit as st

from slics_core.explorer.workspace import (
    EMOJI,
    PROVISIONAL_D0,
    BuildProgress,
    list_workspaces,
    load_query_encoder,
    load_workspace,
    start_emoji_workspace,
    workspace_path,
)
from slics_core.methods import get_method
from slics_core.retrieval import build_index


# ---------------------------------------------------------------------- workspace
@st.cache_resource(show_spinner=False)
def _registry():
    """Process-wide store of opened workspaces: ``open[choice]`` is a
    :class:`slics_core.explorer.workspace.BuildProgress` whose ``workspace`` is the newest usable one
    (the emoji world's cold start publishes a preview first, then the whole workspace, from a
    background thread), shared by every tab and session (so a second tab sees the live progress)."""
    import threading

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
        st.warning(f"Building the whole workspace failed: {snap['error']}. The preview stays usable; restart the "
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
    if "ws_choice" not in st.session_state:
        st.session_state["ws_choice"] = st.query_params.get("ws", EMOJI)
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
        st.error(f"Could not open workspace `{choice}`: {error}")
        st.session_state.pop("ws_choice", None)
        if "ws" in st.query_params:
            del st.query_params["ws"]
        choices = workspace_choices()
        options = [c for c in choices if choices[c] != choice]
        picked = st.selectbox("Open another workspace", options, index=None, key="ws_recover")
        if picked is not None:
            st.session_state["ws_choice"] = choices[picked]
            st.rerun()
        st.stop()
    generation = handle.generation  # read before the workspace: a publication in between reruns once more
    ws = handle.workspace
    if not handle.finished or handle.error:
        _build_banner(handle, generation)
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


@st.cache_resource(show_spinner="Loading the encoder…", max_entries=4)
def _query_encoder(key: str, _ws):
    return load_query_encoder(_ws)


def query_encoder(ws):
    """The workspace's encoder for new images (raises FileNotFoundError if its weights are missing)."""
    return _query_encoder(ws_id(ws), ws)


# ---------------------------------------------------------------------- pickers
def method_picker(ws, key: str = "method", methods=None, label: str = "Method"):
    """Method selectbox over the workspace's fitted methods (the registry's order);
    a value left by another page or workspace that is not an option here is dropped."""
    options = list(methods or ws.methods)
    if key in st.session_state and st.session_state[key] not in options:
        del st.session_state[key]
    default = st.session_state.get(key, "S-SLiCS")
    idx = options.index(default) if default in options else 0
    return st.selectbox(label, options, index=idx, key=key)


COMPONENTS = {"partial": "ṽⱼ — partial (nearest point of the concept's cone)",
              "full": "vⱼ — full (joint disentanglement, picked concepts active)"}


def component_picker(key: str = "component", method: str | None = None):
    """ṽⱼ (partial) or vⱼ (full): the radio shared by the query pages; returns "partial" or "full".

    Disabled (showing the method's one kind of component) for methods that have only one."""
    modes = get_method(method).modes if method else tuple(COMPONENTS)
    if len(modes) == 1:
        st.radio("Component", list(COMPONENTS), format_func=COMPONENTS.get, index=0, disabled=True,
                 key=f"{key}_fixed", help=f"{method} has one kind of component")
        return modes[0]
    return st.radio("Component", list(COMPONENTS), format_func=COMPONENTS.get, key=key)


def d0_picker(ws, key: str = "d0", label: str = "Atoms per concept (d0)", method: str | None = None):
    """d0 slider; disabled for a method without a dictionary (returns None then)."""
    options = ws.d0_values
    if method and not get_method(method).dictionary:
        st.select_slider(label, options=options or [0], disabled=True, key=f"{key}_fixed",
                         help=f"{method} has no atoms")
        return None
    default = st.session_state.get(key, ws.default_d0)
    if default not in options:
        default = ws.default_d0
    return st.select_slider(label, options=options, value=default, key=key)


# ---------------------------------------------------------------------- images
def image_grid(ws, rows, captions=None, n_cols: int = 5, size: int = 128, borders=None):
    """Thumbnails of workspace rows in a grid. ``borders``: per-image colour or None (relevance marks)."""
    rows = [int(r) for r in rows]
    if not rows:
        st.caption("No images.")
        return
    cols = st.columns(n_cols)
    for k, r in enumerate(rows):
        with cols[k % n_cols]:
            im = ws.thumbnail(r, size)
            if borders is not None and borders[k] is not None:
                from PIL import ImageOps

                im = ImageOps.expand(im, border=4, fill=borders[k])
            st.image(im, caption=None if captions is None else captions[k], width="stretch")


def png_bytes(img) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def csv_download(df, filename: str, label: str = "Download CSV", key: str | None = None):
    st.download_button(label, df.to_csv(index=False).encode(), file_name=filename, mime="text/csv", key=key)


def query_rows(ws) -> np.ndarray:
    return np.asarray(ws.index["query"])


def label_text(ws, i: int) -> str:
    lab = ws.labels_of(i)
    s = ", ".join(lab["concepts"])
    if lab.get("sub_labels"):
        s += " — " + ", ".join(lab["sub_labels"])
    return s


def int_param(name: str, default=None):
    """An int from the URL query parameters (None/default when absent or malformed)."""
    v = st.query_params.get(name)
    try:
        return int(v) if v is not None else default
    except ValueError:
        return default


def sidebar_workspace_note(ws):
    with st.sidebar:
        st.caption(f"Workspace: **{ws.name}** · {len(ws)} items · {ws.X.shape[1]}-d")

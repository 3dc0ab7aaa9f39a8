"""Shared Streamlit helpers of the pages: pickers of the shared values, page openings, downloads, links.

Only arrangement lives here; every computation is in ``slics_core``. The current workspace and the
resources cached per workspace are in :mod:`app_pages._workspace`, thumbnails and image grids in
:mod:`app_pages._images`.

Pickers (method, d0, component, k) show and change the shared values of :mod:`app_pages._state`
(and so the URL).
"""
from __future__ import annotations

import numpy as np
import streamlit as st

from app_pages import _safe
from app_pages import _state as state
from slics_core.methods import DEFAULT_METHOD, dictionary_method_words, get_method, preferred_method


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
        st.info(f"Workspace {_safe.code(ws.name)} has no fitted dictionary ({dictionary_method_words()}), "
                "so this page has nothing to show; the Retrieve page works without one.")
        state.stop()
    return methods


def method_picker(ws, key: str = "method", methods=None, label: str = "Method"):
    """Method selectbox over the workspace's fitted methods (the registry's order).

    The shared method is shown when it is an option here; otherwise (e.g. UF on a page of
    dictionary methods) the page shows S-SLiCS without changing the shared choice."""
    options = list(methods or ws.methods)
    cur = state.get("method", DEFAULT_METHOD)
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
                            format_func=lambda v: f"{v} (chosen)" if v == ws.default_d0 and ws.d0_on_validation
                            else str(v))


def k_picker(key: str = "k", label: str = "Images per gallery (k)", max_k: int = 50) -> int:
    """The shared k (gallery size on Retrieve, k of mAP@k on Evaluate)."""
    cur = int(state.get("k"))
    _seed(key, min(max(cur, state.K_RANGE[0]), max_k))
    return int(st.slider(label, state.K_RANGE[0], max_k, key=key, on_change=state.copy_widget, args=(key, "k")))


def csv_bytes(df) -> bytes:
    """A table as the bytes of its CSV download (no index column)."""
    return df.to_csv(index=False).encode()


def csv_download(df, filename: str, label: str = "Download CSV", key: str | None = None):
    """A CSV download button of ``df`` (a table, or its :func:`csv_bytes` made once and kept by the caller)."""
    data = df if isinstance(df, bytes) else csv_bytes(df)
    st.download_button(label, data, file_name=filename, mime="text/csv", key=key)


def query_rows(ws) -> np.ndarray:
    return np.asarray(ws.index["query"])


def page_intro(look_at: str, more: str | None = None) -> None:
    """A page's opening: one sentence on what to look at, optional detail, and the glossary link."""
    st.markdown(f"**What to look at:** {look_at}")
    if more:
        st.caption(more)


# ---------------------------------------------------------------------- tables
#: Rows st.dataframe shows before it scrolls (its default height).
DATAFRAME_ROWS = 10


def rows_note(n_rows: int, what: str = "rows") -> str | None:
    """The line under a table longer than :data:`DATAFRAME_ROWS` (st.dataframe shows that many and scrolls the
    rest, which nothing on screen says); None for a table shown whole."""
    n_rows = int(n_rows)
    if n_rows <= DATAFRAME_ROWS:
        return None
    return (f"{n_rows} {what}: the table shows {DATAFRAME_ROWS} at a time, scroll it for the rest "
            "(or download the CSV).")


def more_rows(n_rows: int, what: str = "rows") -> None:
    """:func:`rows_note` as a caption, when there is one."""
    note = rows_note(n_rows, what)
    if note:
        st.caption(note)

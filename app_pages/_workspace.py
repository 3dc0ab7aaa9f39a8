"""The pages' workspace: the process-wide registry of opened workspaces and their build progress, the
current workspace of a run, and the resources cached per workspace (pool index, encoder, generator,
vocabulary).

The frame (``app.py``) opens the current workspace once per run, before a page that explores it, and
draws the sidebar workspace note (:func:`open_for_run`); pages read it with :func:`get_workspace`.
``?ws=`` is a workspace *name* under ``$SLICS_WORKSPACES``, never a path: a link cannot make the server
open an arbitrary folder. Cached resources use ``st.cache_resource`` with an explicit workspace id
(:func:`ws_id`) as argument and the workspace itself as ``_ws`` (not hashed).
"""
from __future__ import annotations

import threading
import time

import streamlit as st

from app_pages import _safe
from app_pages import _state as state
from app_pages._errors import visitor_text
from app_pages._state import apply_link, capture_link, link_problems
from slics_core.errors import audiences, explain, user_message
from slics_core.explorer.arrival import prepare_pages, prepared
from slics_core.explorer.background import JOBS, BackgroundRun
from slics_core.explorer.emoji_build import (
    PROVISIONAL_D0,
    BuildProgress,
    progress_words,
    start_emoji_workspace,
    step_fraction,
)
from slics_core.explorer.encoding import load_query_encoder, prepared_vocabulary
from slics_core.explorer.generation import generator_version, load_workspace_generator
from slics_core.explorer.quantized import quantization_info, quantized_pool_problem
from slics_core.explorer.workspace import EMOJI
from slics_core.explorer.workspace_files import list_workspaces, load_workspace, workspace_path


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
                try:
                    folder = workspace_path(choice)
                except (FileNotFoundError, ValueError) as exc:  # no such workspace, or not a name
                    raise _no_such_workspace(exc) from None
                handle = BuildProgress()
                handle.publish(load_workspace(folder), final=True)
            reg["open"][choice] = handle
        return handle


class _BuildFailed(ValueError):
    """A background build failed (its one-line message)."""


class _NoSuchWorkspace(ValueError):
    """``?ws=`` names no workspace listed here."""


def _no_such_workspace(exc) -> _NoSuchWorkspace:
    """:class:`_NoSuchWorkspace` for the error of looking ``?ws=`` up: what failed and the operator's part as
    the library said, and what ``?ws=`` takes for a visitor."""
    told = audiences(exc)
    return explain(_NoSuchWorkspace(user_message(exc)),
                   told.failed if told is not None else "there is no workspace of that name here",
                   visitor_fix="; ".join(f for f in (told.visitor_fix if told is not None else "",
                                                     "a link's ?ws= takes the name of a workspace (its folder's "
                                                     "name), not a folder path") if f),
                   operator_fix=told.operator_fix if told is not None else "")


#: What a presenter can do while the emoji world's first build has published nothing yet.
_NOTHING_YET = ("Opening the emoji world for the first time. Nothing to explore yet: a preview (its first scenes, "
                "one model) opens on this page in a few seconds, then the whole world is built in the background.")


def _progress_bar(handle):
    """Wait (polling the shared progress, so every tab sees it move) until ``handle`` has a workspace: what is
    usable (nothing yet), then a bar of the current step's own progress naming the step (``progress_words``)."""
    st.info(_NOTHING_YET)
    bar = st.progress(0.0, text="Starting the build…")
    while handle.workspace is None and not handle.finished:
        snap = handle.snapshot()
        bar.progress(step_fraction(snap), text=progress_words(snap))
        time.sleep(0.3)
    bar.empty()


@st.fragment(run_every=2)
def _build_banner(handle, seen_generation: int):
    """Live progress of a background build; reruns the page when a newer workspace is published."""
    snap = handle.snapshot()
    if snap["generation"] != seen_generation:
        st.rerun()
    if snap["error"]:
        logged = st.session_state.get("_build_error_logged") == id(handle)  # the banner polls every 2 s
        st.session_state["_build_error_logged"] = id(handle)
        st.warning(visitor_text(snap["error"], "Building the whole workspace failed",
                                "The preview stays usable; the server's log has the details for whoever runs it.",
                                log=not logged))
        return
    ws = handle.workspace
    usable = (f"the preview, the first {len(ws):,} scenes of the emoji world with S-SLiCS at a provisional "
              f"d0 = {PROVISIONAL_D0} and UF, on every page" if snap.get("preview") and ws is not None else
              "the preview on every page")
    st.caption(f"**Usable now:** {usable} (d0 is chosen on validation when the build finishes). Building the whole "
               "world in the background (every method, every d0; this page updates by itself).")
    st.progress(step_fraction(snap), text=progress_words(snap))


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


def _open_current():
    """The current workspace, opened (once per process, shared by every session) with its link applied.

    The emoji world's cold start waits only for its preview (live progress, polled from the shared
    build); while the whole world is built in the background every page shows its progress and
    reruns itself when it is published. A workspace that cannot be opened (unknown name, damaged
    folder, unwritable cache, failed build) shows one message and the workspace picker and ends the
    run; ``?ws=`` is dropped from the URL so a reload does not fail again.
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
                with _registry()["lock"]:  # this failed handle only: another session may have started anew
                    if _registry()["open"].get(choice) is handle:
                        _registry()["open"].pop(choice)
                error = handle.error or "the build stopped"
        except (OSError, ValueError) as exc:
            error = exc
    placeholder.empty()
    if error is not None:
        st.error(visitor_text(error, f"Could not open workspace {_safe.code(choice)}",
                              "Pick another workspace below." if isinstance(error, _NoSuchWorkspace) else
                              "Pick another workspace below; the server's log has the details for whoever runs it."))
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


#: ``st.session_state`` key of the workspace the frame opened for the page running now (removed when the run ends).
_OPENED = "_ws_opened"


def prepare_in_background(ws):
    """A workspace whose store lacks this release's first views (built by an earlier release, or without
    ``prepare``: :func:`slics_core.explorer.arrival.prepared`) gets them from
    :func:`~slics_core.explorer.arrival.prepare_pages` in a background run (one per workspace and build, shared by
    every session), so that first visits read them instead of computing them while a visitor waits. Asked once
    per workspace and process (:meth:`Workspace.remember`). Returns the run, or None when nothing is to prepare."""
    if getattr(ws, "building", None) is not None or ws.remember("views-prepared", lambda: prepared(ws)):
        return None
    return JOBS.start(("prepare-pages", ws_id(ws), ws.build_id),
                      lambda: BackgroundRun(lambda progress: prepare_pages(ws, progress), name="slics-prepare-pages"))


@st.fragment(run_every=2)
def background_progress(run, words):
    """Live progress of a background run (:class:`slics_core.explorer.background.BackgroundRun`), its text
    ``words(snapshot)``, every 2 s; reruns the page when the run is done."""
    snap = run.snapshot()
    if snap["finished"]:
        st.rerun()
    st.progress(min(1.0, snap["done"] / max(1, snap["total"])), text=words(snap))


def _preparing_words(snap) -> str:
    return (f"This workspace's first views are being prepared in the background ({snap['stage']}, "
            f"{snap['elapsed']:.0f} s; once, after an upgrade): this page fills in by itself when it is done.")


def wait_for_prepared_views(ws) -> bool:
    """For a page whose first view is costly to compute (Evaluate): when the background preparation
    (:func:`prepare_in_background`) of ``ws`` is running, show its progress (the page reruns when it is done) and
    return True, so that the page stops instead of computing the same views a second time beside it."""
    run = JOBS.get(("prepare-pages", ws_id(ws), ws.build_id))
    if run is None or run.snapshot()["finished"]:
        return False
    background_progress(run, _preparing_words)
    return True


def open_for_run():
    """The frame's call (app.py), once per run before a page that explores a workspace: opens the current
    workspace (:func:`_open_current`) and draws the sidebar workspace note; the page reads it with
    :func:`get_workspace`. Pair with :func:`end_run`."""
    ws = _open_current()
    prepare_in_background(ws)  # a store without this release's first views: made in the background
    sidebar_workspace_note(ws)
    st.session_state[_OPENED] = ws
    return ws


def end_run() -> None:
    """The frame's call when a page's run ends (whatever way): the opened workspace is the next run's to open."""
    st.session_state.pop(_OPENED, None)


def get_workspace():
    """The workspace the frame opened for this run (:func:`open_for_run`); a page run on its own (a test of
    one page file) opens it here, with its note, for this run only."""
    ws = st.session_state.get(_OPENED)
    if ws is None:
        ws = _open_current()
        sidebar_workspace_note(ws)
    return ws


def ws_id(ws) -> str:
    """Explicit cache key of a workspace (kind + folder)."""
    return f"{ws.kind}:{ws.path}"


def quantized_pool(ws):
    """``(pool, info)`` of the workspace's quantized pool (TiTok codebook; a
    :class:`~slics_core.explorer.pool.Pool` of kind ``"quantized"``, kept on the workspace, which every session
    shares: its index is built once, under a spinner); raises ValueError saying why when it has none."""
    pool = ws.quantized_pool
    if pool is None:
        raise ValueError(quantized_pool_problem(ws))
    with st.spinner("Quantizing the pool with the workspace's token codebook…"):
        pool.index  # noqa: B018 -- built at the first use and kept on the pool
    return pool, quantization_info(ws, None)


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


def _vocabulary(ws):
    t0 = time.perf_counter()
    words, Wp = prepared_vocabulary(ws)
    return words, Wp, time.perf_counter() - t0


def workspace_words(ws):
    """``(words, prepared text embeddings, seconds it took)`` of the workspace's caption vocabulary, prepared
    once per workspace (kept on it: :meth:`Workspace.remember`) for every page (raises FileNotFoundError when it
    has none; nothing is kept then, so the next visit tries again)."""
    return ws.remember("vocabulary", lambda: _vocabulary(ws))


def sidebar_workspace_note(ws):
    """The sidebar's line naming the workspace, its size and width (drawn once per run, by :func:`open_for_run`)."""
    with st.sidebar:
        st.caption(f"Workspace: **{_safe.text(ws.name)}** · {len(ws)} items · {ws.X.shape[1]}-d")

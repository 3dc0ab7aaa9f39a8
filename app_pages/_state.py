"""The explorer's one shared state: kept in ``st.session_state``, mirrored to the URL.

Every page reads and writes the same few values, so a choice made on one page holds on the
others, and the URL always reopens the same view (``app.py`` calls :func:`sync_url` after
every run; a page that ends its run early calls :func:`stop`, which writes the URL first):

=================  =============  ==========================================================
session key        URL            value
=================  =============  ==========================================================
``ws_choice``      ``ws``         workspace name under ``$SLICS_WORKSPACES`` (absent: emoji)
``query``          ``q``          a workspace row (int), ``"text:<phrase>"``, or ``"upload"``
                                  (an upload stays in its session: it is not put in the URL)
``picked_concepts`` ``c``         concept names, comma-separated
``_s_method``      ``method``     method name (the registry's)
``_s_d0``          ``d0``         atoms per concept
``_s_mode``        ``mode``       ``partial`` (ṽⱼ) or ``full`` (vⱼ)
``_s_k``           ``k``          k of mAP@k on Evaluate (1-200), images per gallery on
                                  Retrieve / Mix (shown at most 50); ``DEFAULT_K`` until picked
``_s_rm``          ``rm``         a concept name: Retrieve's "without concept j" (x − vⱼ); Generate
                                  draws it too
``_s_boost``       ``boost``      ``<concept>:<λ>``, λ from 0 to 2: Retrieve's "more of j" (x + λṽⱼ)
``_s_q2``, ...     ``q2``, ...    page extras, in the URL while their page is open (:func:`use_extras`):
                                  Mix's ``q2``, ``c1``, ``c2``; Subspaces' ``colour`` (a colour
                                  mode, ``has concept:<c>`` / ``sub-label:<c>``) and ``pics`` (``1``);
                                  Atoms' ``atom`` (the picked atom of the shared method and d0;
                                  Retrieve and Subspaces set it when an atom is opened from an
                                  item's atoms, :mod:`app_pages._inspect`)
=================  =============  ==========================================================

Widgets never own these values: each picker seeds its widget from the shared value before
drawing it and copies the widget's value back in its ``on_change`` callback (widget state is
dropped by Streamlit when a page that does not draw the widget runs).

A link is read once per session (:func:`capture_link`, first run) and applied when the
workspace is open (:func:`apply_link`), because only then can it be checked: a value the
workspace cannot honour (unknown row, method, d0 or concept; a boost λ outside [0, 2]) is left out and listed by
:func:`link_problems`, which the pages show as one warning.
"""
from __future__ import annotations

from typing import NoReturn

import streamlit as st

from app_pages import _safe
from slics_core.explorer.current_query import TEXT_PREFIX
from slics_core.explorer.edits import parse_boost_param
from slics_core.explorer.map_colours import parse_colour_param
from slics_core.explorer.page_settings import DEFAULT_K
from slics_core.explorer.queries import parse_concept_param
from slics_core.explorer.workspace import EMOJI
from slics_core.methods import MODES

SHARED = ("method", "d0", "mode", "k")
#: The shared k: its range, and DEFAULT_K (explorer.page_settings; explorer.arrival prepares Evaluate's first view
#: at it) before a visitor picks one.
K_RANGE = (1, 200)
#: Shared values before a visitor picks them (:func:`get`); the others default per page.
DEFAULTS = {"k": DEFAULT_K}
LINKED = "<link>"  # concepts_for: picks from a link without a query, kept for the first query shown
_EXTRA_KEYS = ("q2", "c1", "c2", "colour", "pics", "atom")
#: The query edits (Retrieve, Generate): "without concept j" and "more of j" (:func:`edits`).
EDIT_KEYS = ("rm", "boost")


# ---------------------------------------------------------------------- reading
def capture_link() -> None:
    """On a session's first run, keep the URL's parameters to apply once the workspace is open."""
    ss = st.session_state
    if "_link_seen" in ss:
        return
    ss["_link_seen"] = True
    ss["_link"] = {k: st.query_params.get(k) for k in ("ws", "q", "c", *SHARED, *EDIT_KEYS, *_EXTRA_KEYS)
                   if st.query_params.get(k) is not None}
    if "ws" in ss["_link"] and "ws_choice" not in ss:
        ss["ws_choice"] = ss["_link"]["ws"]


def link_pending() -> bool:
    return bool(st.session_state.get("_link"))


def _int(v):
    try:
        return int(str(v).strip())
    except (TypeError, ValueError):
        return None


def apply_link(ws, *, preview: bool = False) -> None:
    """Apply the captured link to the open workspace ``ws`` (once); what it cannot honour is listed.

    ``preview``: ``ws`` is the emoji world's preview (its first scenes, same row numbers) while the
    whole world is built: what it can honour is applied once, nothing is reported, and the link is
    kept to be applied to the whole world when it is published.
    """
    ss = st.session_state
    if preview:
        link = ss.get("_link")
        if not link or ss.get("_link_preview_done"):
            return
        ss["_link_preview_done"] = True
    else:
        link = ss.pop("_link", None)
    if not link:
        return
    problems = []
    q = link.get("q")
    if q is not None:
        if str(q).startswith(TEXT_PREFIX) and str(q)[len(TEXT_PREFIX):].strip():
            ss["query"] = f"{TEXT_PREFIX}{' '.join(str(q)[len(TEXT_PREFIX):].split())}"
        else:
            r = _int(q)
            if r is not None and 0 <= r < len(ws):
                ss["query"] = r
            else:
                problems.append(f"query q={_safe.code(q)} is not an item of this workspace (0…{len(ws) - 1})")
    if "c" in link:
        names = list(ws.concept_names)
        asked = [n.strip() for n in str(link["c"]).split(",") if n.strip()]
        known = parse_concept_param(link["c"], names)
        unknown = [n for n in asked if n not in names]
        if known:
            ss["picked_concepts"] = known
            # the picks belong to the link's query, or to whatever query the page starts with
            ss["concepts_for"] = _query_key(ss.get("query")) or LINKED
        if unknown:
            problems.append("unknown concept(s) " + ", ".join(_safe.code(n) for n in unknown))
    if "method" in link:
        if link["method"] in ws.methods:
            ss["_s_method"] = link["method"]
        else:
            problems.append(f"method {_safe.code(link['method'])} is not fitted here ({', '.join(ws.methods)})")
    if "d0" in link:
        d0 = _int(link["d0"])
        if d0 in ws.d0_values:
            ss["_s_d0"] = d0
        else:
            problems.append(f"d0={_safe.code(link['d0'])} is not fitted here ({', '.join(map(str, ws.d0_values))})")
    if "mode" in link:
        if link["mode"] in MODES:
            ss["_s_mode"] = link["mode"]
        else:
            problems.append(f"mode={_safe.code(link['mode'])} is not 'partial' or 'full'")
    if "k" in link:
        k = _int(link["k"])
        if k is not None and K_RANGE[0] <= k <= K_RANGE[1]:
            ss["_s_k"] = k
        else:
            problems.append(f"k={_safe.code(link['k'])} is not a whole number from {K_RANGE[0]} to {K_RANGE[1]}")
    if "rm" in link:
        found = parse_concept_param(link["rm"], ws.concept_names)
        if len(found) == 1 and "," not in str(link["rm"]):
            ss["_s_rm"] = found[0]
        else:
            problems.append(f"rm={_safe.code(link['rm'])} is not a concept of this workspace")
    if "boost" in link:
        try:
            name, lam = parse_boost_param(link["boost"], ws.concept_names)
            ss["_s_boost"] = boost_value(name, lam)
        except ValueError as exc:
            problems.append(_safe.text(exc))
    if "q2" in link:
        r = _int(link["q2"])
        if r is not None and 0 <= r < len(ws):
            ss["_s_q2"] = r
        else:
            problems.append(f"second query q2={_safe.code(link['q2'])} is not an item of this workspace")
    for key in ("c1", "c2"):
        if key in link:
            if link[key] in ws.concept_names:
                ss[f"_s_{key}"] = link[key]
            else:
                problems.append(f"{key}={_safe.code(link[key])} is not a concept of this workspace")
    if "colour" in link:
        try:
            parse_colour_param(link["colour"], ws.concept_names)
            ss["_s_colour"] = str(link["colour"])
        except ValueError as exc:
            problems.append(_safe.text(exc))
    if "pics" in link:
        if str(link["pics"]) == "1":
            ss["_s_pics"] = "1"
        else:
            problems.append(f"pics={_safe.code(link['pics'])} is not 1 (pictures on)")
    if "atom" in link:  # its range depends on the dictionary: the Atoms page picks another atom when it is outside
        a = _int(link["atom"])
        if a is not None and a >= 0:
            ss["_s_atom"] = a
        else:
            problems.append(f"atom={_safe.code(link['atom'])} is not an atom number (0, 1, …)")
    if not preview:
        ss["_link_problems"] = problems


def link_problems() -> list:
    """What the opening link asked for and this workspace could not honour (shown once)."""
    return st.session_state.pop("_link_problems", [])


# ---------------------------------------------------------------------- values
def _query_key(q) -> str | None:
    if isinstance(q, int):
        return f"row:{q}"
    if isinstance(q, str) and q.startswith(TEXT_PREFIX):
        return q
    return None


def get(name: str, default=None):
    """A shared value (``method``, ``d0``, ``mode``, ``k``, or an extra); unset: ``default``, else
    :data:`DEFAULTS`' value."""
    return st.session_state.get(f"_s_{name}", DEFAULTS.get(name) if default is None else default)


def put(name: str, value) -> None:
    st.session_state[f"_s_{name}"] = value


def boost_value(name: str, lam: float) -> str:
    """The ``boost`` value of concept ``name`` and λ: ``"animal:1.5"``."""
    return f"{name}:{float(lam):g}"


def edits(concept_names) -> list:
    """The query edits asked for, as ``(edit, concept name, λ)``: ``("remove", name, 1.0)`` for ``rm`` then
    ``("boost", name, λ)`` for ``boost``; a value these concepts do not have is left out."""
    names = list(concept_names)
    out = []
    rm = st.session_state.get("_s_rm")
    if rm in names:
        out.append(("remove", rm, 1.0))
    boost = st.session_state.get("_s_boost")
    if boost:
        try:
            name, lam = parse_boost_param(boost, names)
            out.append(("boost", name, lam))
        except ValueError:
            pass
    return out


def copy_widget(widget_key: str, name: str) -> None:
    """``on_change`` callback: a picker's widget value becomes the shared value."""
    st.session_state[f"_s_{name}"] = st.session_state[widget_key]


def set_query(q) -> None:
    """Make ``q`` (a row, ``"text:…"`` or ``"upload"``) the current query, remembered in the history."""
    ss = st.session_state
    ss["query"] = int(q) if isinstance(q, int) or (isinstance(q, str) and q.isdigit()) else q
    hist = [h for h in ss.get("_s_history", []) if h != ss["query"]]
    if ss["query"] != "upload":
        ss["_s_history"] = ([ss["query"]] + hist)[:12]


def history() -> list:
    """Recent queries (rows and text queries), newest first."""
    return list(st.session_state.get("_s_history", []))


# ---------------------------------------------------------------------- writing
def sync_url() -> None:
    """Write the shared state to the URL: exactly what is set (a cleared value leaves the URL); while a link is
    still to be applied, the link itself."""
    ss = st.session_state
    if link_pending():  # not applied yet (a page that opens no workspace): the link stays as it came
        want = {k: str(v) for k, v in ss["_link"].items()}
        if {k: st.query_params.get(k) for k in st.query_params} != want:
            st.query_params.from_dict(want)
        return
    want = {}
    ch = ss.get("ws_choice")
    if ch and ch != EMOJI:
        want["ws"] = str(ch)
    q = ss.get("query")
    if isinstance(q, int) or (isinstance(q, str) and q.startswith(TEXT_PREFIX)):
        want["q"] = str(q)
    c = ss.get("picked_concepts")
    if c:
        want["c"] = ",".join(c)
    for name in (*SHARED, *EDIT_KEYS):
        v = ss.get(f"_s_{name}")
        if v is not None:
            want[name] = str(v)
    for name in ss.get("_page_extras") or ():
        v = ss.get(f"_s_{name}")
        if v is not None:
            want[name] = str(v)
    ss["_page_extras"] = ()
    if {k: st.query_params.get(k) for k in st.query_params} != want:
        st.query_params.from_dict(want)


def stop() -> NoReturn:
    """End this run early (``st.stop``) with the URL written first.

    Once ``st.stop()`` is requested Streamlit sends nothing more to the browser, so the write in
    ``app.py``'s ``finally`` would never reach the address bar: a page that stops early (Generate
    without a generator, Retrieve with every concept cleared) would leave it bare after a page switch,
    or holding values that no longer hold. Pages call this instead of ``st.stop()``.
    """
    sync_url()
    st.stop()


def use_extras(*names: str) -> None:
    """The current page keeps its extras in the URL on this run (default: Mix's ``q2``, ``c1``, ``c2``)."""
    st.session_state["_page_extras"] = names or ("q2", "c1", "c2")

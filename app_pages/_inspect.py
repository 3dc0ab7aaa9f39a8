"""Drawing of an item's atoms (Retrieve beside the query, Subspaces and Atoms for a picked item) and the link that
opens an atom on Atoms. The numbers come from :mod:`slics_core.explorer.inspection`; this module only draws them.

Widget keys: ``open_atom_<where>_<atom>`` (one button per atom of the table: it opens that atom on Atoms, or
picks it there when ``where`` is ``"atoms"``). State: the picked atom is the shared value ``atom``
(:mod:`app_pages._state`, in the URL while Atoms is open), with the shared ``method`` and ``d0`` of its dictionary.
"""
from __future__ import annotations

import streamlit as st

from app_pages import _pages, _safe
from app_pages import _state as state
from app_pages._workspace import ws_id
from slics_core.explorer.arrival import activity_codes, atom_words
from slics_core.explorer.atom_tables import atom_labels
from slics_core.explorer.inspection import ACTIVITY_CODES, atom_frequencies, item_atom_table
from slics_core.explorer.page_settings import profile_split

#: Atoms of an item that get an "open on Atoms" button (the table lists every atom that fires).
MAX_LINKS = 6


@st.cache_data(show_spinner=False, max_entries=16)
def _codes(key, method, d0, _ws):
    """Label-free codes of the activity items, once per dictionary (stored with the workspace)."""
    return activity_codes(_ws, method, d0)


def codes(ws, method, d0):
    """:func:`slics_core.explorer.arrival.activity_codes` of a dictionary, cached per workspace and dictionary."""
    return _codes(ws_id(ws), method, int(d0), ws)


@st.cache_data(show_spinner=False, max_entries=16)
def _frequencies(key, method, d0, _ws):
    return atom_frequencies(_codes(key, method, d0, _ws))


@st.cache_data(show_spinner=False, max_entries=16)
def _words(key, method, d0, _ws):
    """Every atom's words, once per dictionary (stored with the workspace); None without a vocabulary."""
    try:
        return atom_words(_ws, method, d0)
    except (FileNotFoundError, ImportError, ValueError):
        return None


@st.cache_data(show_spinner=False, max_entries=512)
def _item_table(key, method, d0, item_key, concepts, _ws, _x):
    """The atoms of one item (keyed by its id: ``row:<r>``, ``upload:<sha1>``, ``text:<phrase>``), over every
    concept (``concepts`` None) or over the tuple of concept indices ``concepts``."""
    model = _ws.model(method, d0)
    return item_atom_table(model, _x, atom_labels(model.groups_, _ws.concept_names),
                           _frequencies(key, method, d0, _ws), _words(key, method, d0, _ws), concepts=concepts)


def _pick(method, d0, atom):
    """on_click of an atom's button: the atom (and its dictionary) become the shared picks."""
    state.put("method", method)
    state.put("d0", int(d0))
    state.put("atom", int(atom))


def item_atoms_section(ws, method, d0, x, item_key: str, where: str, title: str, concepts=None) -> None:
    """The atoms that fire on one item, top first, with a button per atom (the first :data:`MAX_LINKS`) that opens
    it on Atoms (on Atoms itself, ``where="atoms"``, the button picks it there). ``concepts``: decompose over
    these concept indices only (default: every concept, no labels)."""
    concepts = None if concepts is None else tuple(sorted(int(c) for c in concepts))
    table = _item_table(ws_id(ws), method, int(d0), item_key, concepts, ws, x)
    st.markdown(f"**{_safe.text(title)}**")
    split = profile_split(ws)
    if not len(table):
        st.caption("No atom fires on it.")
        return
    shown = table[["label", "coefficient", "share", "fires_on"] + (["words"] if "words" in table else [])]
    st.dataframe(_safe.table(shown), hide_index=True, width="stretch", height=min(300, 38 + 35 * len(shown)),
                 column_config={"label": "atom", "coefficient": st.column_config.NumberColumn(format="%.3f"),
                                "share": st.column_config.NumberColumn("share of energy", format="percent"),
                                "fires_on": st.column_config.NumberColumn(f"fires on (% of {split} items)",
                                                                          format="percent")})
    over = ACTIVITY_CODES if concepts is None else (
        "NNLS over the atoms of " + ", ".join(_safe.text(ws.concept_names[c]) for c in concepts))
    st.caption(f"{method}, d0={int(d0)}: {over}. Share of energy: c²‖b‖² of the atom over the sum over "
               f"its atoms; fires on: share of the {len(ws.index.get(split, []))} {split} items on which the "
               f"atom fires, from the codes over every concept ({ACTIVITY_CODES}).")
    opens = "Pick" if where == "atoms" else "Open on Atoms"
    cols = st.columns(min(MAX_LINKS, len(table)))
    for i, (a, label) in enumerate(zip(table.atom[:MAX_LINKS], table.label[:MAX_LINKS])):
        with cols[i % len(cols)]:
            clicked = st.button(f"🧱 {_safe.text(label)}", key=f"open_atom_{where}_{int(a)}",
                                help=f"{opens} atom {int(a)} ({_safe.text(label)})",
                                on_click=_pick, args=(method, int(d0), int(a)), width="stretch")
        if clicked and where != "atoms" and not _pages.switch(_pages.ATOMS):  # a page run on its own
            st.success(f"Atom {int(a)} is picked: open the Atoms page.")

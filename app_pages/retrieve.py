"""Retrieve: a query's concepts, and per concept the top-k pool images by its component.

Widget keys: query_pick, query_upload, query_text, query_strip_prev, query_strip_next, query_thumb_<i>,
query_use_upload (app_pages/_query.py); concepts (multiselect); method; d0; component; k; retrieve_cols;
retrieve_csv (download); retrieve_quantized (toggle, workspaces with a token codebook); pick_<concept> /
pick_uf_<concept> (the clickable galleries: a click on an image makes it the query; app_pages/_images.py);
rm_concept, boost_concept, boost_lambda (the query edits, kept in the URL as ``rm`` / ``boost``); pick_remove,
pick_boost, pick_uf_remove, pick_uf_boost (the edited galleries, clickable too); open_atom_retrieve_<atom> (the
query's atoms: a click opens the atom on Atoms, app_pages/_inspect.py).
"""
import numpy as np
import pandas as pd
import streamlit as st

from app_pages import _html, _pages, _safe
from app_pages import _state as state
from app_pages._images import image_gallery, remote_hosts_caption
from app_pages._inspect import item_atoms_section
from app_pages._query import concept_picker, keep_edit, preselection, query_picker, show_query
from app_pages._ui import (
    component_picker,
    csv_download,
    d0_picker,
    k_picker,
    method_picker,
    more_rows,
    page_intro,
)
from app_pages._workspace import get_workspace, quantized_pool, ws_id
from slics_core.explorer.edits import BOOST_RANGE, edit_line, edit_title, edited_gallery
from slics_core.explorer.exports import with_settings
from slics_core.explorer.narration import component_words
from slics_core.explorer.queries import components_of_row, concept_galleries, concept_scores, galleries_table
from slics_core.methods import dictionary_method_words, get_method, uses_active

GREEN, ORANGE, RED = "#2e9d4f", "#e69500", "#d0342c"
NO_EDIT = "—"
#: The export's ``pool`` column by the kind of pool searched (slics_core.explorer.pool).
POOL_WORDS = {"memory": "float", "quantized": "quantized", "shards": "shards"}


@st.cache_data(show_spinner=False, max_entries=256)
def _components(key: str, method: str, d0, qkey: str, mode: str, active: tuple, _model, _x):
    return components_of_row(_model, _x, mode=mode, active=list(active) or None)


@st.cache_data(show_spinner=False, max_entries=256)
def _scores(key: str, method: str, d0, qkey: str, _model, _x):
    return concept_scores(_model, _x)


def _mark(rel_g, rel_s, r, word="gen"):
    g = None if rel_g is None else bool(rel_g[r])
    s = None if rel_s is None else bool(rel_s[r])
    if g is None:
        return None, ""
    colour = GREEN if g and s is not False else (ORANGE if g else RED)
    # words, not glyphs: a presenter reads "✗" as the letter X
    text = f"{word} {'yes' if g else 'no'}" + ("" if s is None else f", sub {'yes' if s else 'no'}")
    return colour, text


def _draw_gallery(ws, g, n_cols, pick_key, word="gen", head=""):
    """A gallery whose images a click makes the query; ``head``: HTML drawn above it in the same element
    (:mod:`app_pages._html`)."""
    if not len(g.rows):
        st.html(head + _html.caption(f"Empty: {g.note}."))
        return
    if g.hits.labels is None:  # a pool without labels (shards): no borders, and not rows a query can be picked from
        image_gallery(ws, g.hits, captions=[f"#{r + 1} · {g.scores[r]:.2f}" for r in range(len(g.rows))],
                      n_cols=n_cols, size=96, head=head)
        return
    borders, caps = [], []
    for r in range(len(g.rows)):
        colour, text = _mark(g.relevant_general, g.relevant_sub, r, word)
        borders.append(colour)
        caps.append(f"#{r + 1} · {g.scores[r]:.2f}" + (f" · {text}" if text else ""))
    image_gallery(ws, g.hits, captions=caps, n_cols=n_cols, size=96, borders=borders, pick_key=pick_key, head=head)


def _pct(v):
    return "—" if v is None or np.isnan(v) else f"{100 * v:.0f}%"


def _delta(a, b):
    if a is None or b is None or np.isnan(a) or np.isnan(b):
        return None
    return f"{100 * (a - b):+.0f} pts vs unfiltered"


def _precision_boxes(name, k, cg, uf) -> str:
    """The four P@k boxes of a concept's galleries (each box carries its fraction as ``data-precision``)."""
    boxes = []
    for kind, key in (("general", "precision_general"), ("sub-label", "precision_sub")):
        mine, whole = getattr(cg, key), getattr(uf, key)
        boxes.append(_html.metric(f"P@{k} {kind} · {name}", _pct(mine), _delta(mine, whole), gallery="concept",
                                  precision_of=kind, precision=_html.number_attr(mine)))
        boxes.append(_html.metric(f"P@{k} {kind} · unfiltered", _pct(whole), gallery="unfiltered",
                                  precision_of=kind, precision=_html.number_attr(whole)))
    return _html.metric_row(boxes)


def _title(bold, rest) -> str:
    """A gallery's title line: ``bold`` in bold, then ``rest`` (plain text, escaped)."""
    return f'<p style="margin:0 0 1rem 0"><strong>{_html.text(bold)}</strong> {_html.text(rest)}</p>'


#: Retrieve's query atoms: decomposed over every concept (an SAE dashboard's view) or over the picked ones.
ATOMS_OVER = {"every concept (no labels)": False, "the picked concepts (as the galleries)": True}


@st.fragment
def _query_atoms(ws, method, d0, q, picked):
    """The query's atoms, top first (a fragment: its buttons open an atom on Atoms; its switch reruns it alone)."""
    with st.expander("The query's atoms", expanded=True):
        if not get_method(method).dictionary:
            st.caption(f"{method} has no atoms: pick {dictionary_method_words()} to see the query's atoms.")
            return
        over = st.radio("Decompose the query over", list(ATOMS_OVER), horizontal=True, key="retrieve_atoms_over",
                        help="Every concept: the dictionary's own reading of the image, labels unused (on a "
                             "dictionary whose concepts share directions, atoms of absent concepts fire too). The "
                             "picked concepts: the decomposition the concept galleries use.")
        concepts = sorted(picked) if ATOMS_OVER[over] else None
        item_atoms_section(ws, method, int(d0), q.x, q.key, "retrieve", "Atoms that fire on the query, top first",
                           concepts=concepts)


st.title("🔎 Retrieve by concept")
ws = get_workspace()
page_intro("Look at how each concept's gallery keeps that concept of the query and drops the rest, while "
           "the unfiltered gallery beside it follows the whole scene.",
           "Pick, upload or describe a query. SLiCS splits its embedding into one component per concept; each "
           "picked concept retrieves the pool images closest to *its* component. Click any gallery image to make it "
           "the query and explore from there.")

q = query_picker(ws, required=True)

# ---------------------------------------------------------------- settings
with st.sidebar:
    st.subheader("Retrieval settings")
    method = method_picker(ws)
    spec = get_method(method)
    d0 = d0_picker(ws, method=method)
    mode = component_picker(method=method)
    k = k_picker()
    n_cols = st.slider("Columns per gallery", 2, 8, 4, key="retrieve_cols")
    quantized = ws.quantized_pool is not None and st.toggle(
        "Search the quantized pool", key="retrieve_quantized",
        help="Token embeddings (TiTok): every pool image is replaced by its nearest codeword per token and "
             "scored through look-up tables (sec. 4.4.1, Table 3's “Quant. pool”). Queries stay unquantized.")
    if quantized:
        qpool, qinfo = quantized_pool(ws)  # its index built once per workspace, with a spinner
        st.caption(f"Quantized pool: {qinfo['n_pool']} images × {qinfo['n_tokens']} tokens, codebook of "
                   f"{qinfo['codebook_size']}; {qinfo['code_bytes'] / 2**20:.2f} MB of codes instead of "
                   f"{qinfo['float_bytes'] / 2**20:.2f} MB of floats.")

model = ws.model(method, d0)
mkey = d0 if d0 is not None else 0

scores = _scores(ws_id(ws), method, mkey, q.key, model, q.x)
zs = ws.zero_shot(q.raw)
names = list(ws.concept_names)

preselect, rule = preselection(ws, q, model, method, mkey, scores)

left, right = st.columns([1, 2])
with left:
    show_query(ws, q)
with right:
    order = np.argsort(-scores, kind="stable")
    table = pd.DataFrame({
        "concept": [names[j] for j in order],
        "cos(ṽⱼ, x)": np.round(scores[order], 3),
    })
    if zs is not None:
        table["zero-shot cos"] = np.round(zs[0][order], 3)
    if q.Y is not None:
        table["known label"] = ["✓" if q.Y[j] else "" for j in order]
    st.markdown("**The query's concepts**, ranked by the cosine between the query and its projection on each "
                "concept's subspace" + ("" if spec.dictionary else f" ({method}: its concept components)"))
    st.dataframe(_safe.table(table), hide_index=True, width="stretch", height=min(460, 38 + 35 * len(table)))
    st.caption(f"Pre-selected: {rule}.")

picked = concept_picker(ws, q, preselect, label="Concepts to retrieve by")
if not picked:
    st.info("Pick at least one concept to see its gallery.")
    state.stop()

_query_atoms(ws, method, d0, q, picked)

active = tuple(sorted(picked)) if uses_active(spec, mode) else ()
V = _components(ws_id(ws), method, mkey, q.key, mode, active, model, q.x)
# the pool searched: the workspace's (rows in memory, or shards on disk through its index), or its quantized form
pool = qpool if quantized else ws.pool
pairs = concept_galleries(V, q.x, pool, picked, k, sub_to_concept=ws.sub_to_concept, query_sub=q.Z)
LABELLED = pairs[0][1].hits.labels is not None  # shard rows carry no labels: no borders, no P@k

st.divider()
if not LABELLED:
    st.caption(f"The pool is {ws.n_pool:,} images in shards on disk, searched through the workspace's index; shard "
               "rows carry no labels, so the galleries have no relevance borders and no P@k, and their images "
               "cannot be made the query.")
else:
    st.markdown(f"Border: <span style='color:{GREEN}'>■ relevant</span> (has the concept"
                + (", and shares the query's sub-label" if q.Z is not None else "") + ") · "
                f"<span style='color:{ORANGE}'>■ right concept, other sub-label</span> · "
                f"<span style='color:{RED}'>■ not relevant</span>", unsafe_allow_html=True)
for cg, uf in pairs:
    # per concept: its heading and P@k boxes as ONE element, and each gallery (title, grid) as one: a query pick
    # changes them all, and the browser builds every element again (docs/performance.md, "Third pass")
    name = names[cg.concept]
    st.html(_html.heading(name) + (_precision_boxes(name, k, cg, uf) if LABELLED else ""))
    a, b = st.columns(2)
    with a:
        _draw_gallery(ws, cg, n_cols, pick_key=f"pick_{cg.concept}",
                      head=_title(f"By the {name} component", f"({component_words(method, mode)})"))
    with b:
        _draw_gallery(ws, uf, n_cols, pick_key=f"pick_uf_{cg.concept}", head=_title("Unfiltered", "(whole query)"))
remote_hosts_caption(ws)

# ---------------------------------------------------------------- removal and boosting
def _copy_rm():
    v = st.session_state["rm_concept"]
    state.put("rm", None if v == NO_EDIT else v)


def _copy_boost():
    v = st.session_state["boost_concept"]
    state.put("boost", None if v == NO_EDIT else state.boost_value(v, st.session_state["boost_lambda"]))


@st.fragment
def _edited_galleries(ws, model, q, query_was, names, preselect, rule, k, n_cols, pool, export):
    """The "without j" / "more of j" section: its own fragment, so that choosing an edit reruns this section only
    (the query's galleries above are neither recomputed nor sent again); the URL is written here too, since a
    fragment's rerun does not reach app.py's final write. ``query_was``: the query state of the page's run; an
    image of these galleries made the query (a click on it) reruns the whole page. ``export(edited)``: the table
    and CSV of every gallery, drawn at the end of this fragment so that they hold the edited galleries shown."""
    if st.session_state.get("query") != query_was:
        st.rerun()
    st.divider()
    st.subheader("Without a concept, or more of it")
    st.caption("SLiCS is additive, so both edits are exact. *Without j* ranks the pool by x − vⱼ, vⱼ the full "
               "component of j in the joint decomposition over the query's concepts (" + _safe.text(rule) + "); "
               "*more of j* ranks it by x + λṽⱼ, ṽⱼ the partial component. Each edited gallery says what fraction of "
               "its images lacks (or has) the concept, beside the unfiltered gallery judged the same way.")
    asked = {edit: (name, lam) for edit, name, lam in state.edits(names)}
    st.session_state["rm_concept"] = asked["remove"][0] if "remove" in asked else NO_EDIT
    st.session_state["boost_concept"] = asked["boost"][0] if "boost" in asked else NO_EDIT
    st.session_state["boost_lambda"] = asked["boost"][1] if "boost" in asked else 1.0
    e1, e2, e3 = st.columns(3)
    e1.selectbox("Without concept", [NO_EDIT, *names], key="rm_concept", on_change=_copy_rm, format_func=_safe.plain)
    e2.selectbox("More of concept", [NO_EDIT, *names], key="boost_concept", on_change=_copy_boost,
                 format_func=_safe.plain)
    e3.slider("λ (more of)", *BOOST_RANGE, step=0.1, key="boost_lambda", on_change=_copy_boost,
              disabled="boost" not in asked)
    active = [names.index(n) for n in preselect if n in names]
    edited = []
    for edit, name, lam in state.edits(names):
        eq = edited_gallery(model, q.x, pool, names.index(name), k, edit=edit, strength=lam, active=active)
        keep_edit(q, edit, name, lam, eq.x)  # the edited query, for the other pages (Subspaces' map)
        edited.append((edit_title(edit, name, lam), eq))
        shown = _safe.text(name)
        st.markdown(f"**Without {shown}** (x − vⱼ)" if edit == "remove" else f"**More of {shown}** (x + {lam:g}·ṽⱼ)")
        a, b = st.columns(2)
        with a:
            if LABELLED:
                st.markdown(edit_line(eq.criterion, shown, k, eq.gallery.precision_general))
            if eq.gallery.note and len(eq.gallery.rows):
                st.caption(_safe.text(eq.gallery.note) + ".")
            _draw_gallery(ws, eq.gallery, n_cols, pick_key=f"pick_{edit}", word=eq.criterion)
        with b:
            st.markdown("Unfiltered" + ("" if not LABELLED else
                                        " · " + edit_line(eq.criterion, shown, k, eq.unfiltered.precision_general)))
            _draw_gallery(ws, eq.unfiltered, n_cols, pick_key=f"pick_uf_{edit}", word=eq.criterion)
    export(edited)
    state.sync_url()


def _galleries_export(edited):
    """The table of every gallery shown (the concept galleries, then the edited ones) and its CSV, with the
    settings that produced it, "rm" and "boost" included (one column each, the same on every row)."""
    df = galleries_table(pairs, None, names, edited=edited)  # ids: each gallery's hits'
    with st.expander("Table of the galleries"):
        st.dataframe(_safe.table(df), hide_index=True, width="stretch")
        more_rows(len(df))
    asked = {e: (n, lam) for e, n, lam in state.edits(names)}
    export = with_settings(df, workspace=ws.name, query=q.key, method=method, d0=d0, component=mode, k=k,
                           pool=POOL_WORDS[pool.kind],
                           rm=asked["remove"][0] if "remove" in asked else "",
                           boost=state.boost_value(*asked["boost"]) if "boost" in asked else "")
    safe_key = "".join(ch if ch.isalnum() else "-" for ch in q.key)[:60]
    csv_download(export, f"galleries-{safe_key}-{method}-d0{d0 or 'none'}-{mode}-k{k}.csv",
                 label="Download the galleries (CSV)", key="retrieve_csv")


_edited_galleries(ws, model, q, st.session_state.get("query"), names, preselect, rule, k, n_cols, pool,
                  _galleries_export)

_pages.link(_pages.MIX, label="Mix this query's concepts with another query's →", icon="🧪")

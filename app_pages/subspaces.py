# Widget keys: "method", "d0", "component", "color_by", "sub_concept" (concept whose sub-labels colour the map),
#   "kinds", "n_points", "map_split", "map_concepts", "map_seed", "mark_query", "fig5" (button: the paper's
#   Fig. 5 view), "highlight" (label search), "drag_mode", "tsne" (plotly chart selection), "picked_points"
#   (multiselect of point ids, fed by the chart selection), "map_focus" (which picked item the preview shows),
#   "map_use_query" (button: the previewed item becomes the query), "tsne_csv", "tsne_html", "picked_csv",
#   "pictures" (toggle: thumbnails on the map), "has_concept" (concept of the "has concept" colouring),
#   "pick_summary" (dataframe: "N / M have <concept>" of the picked items), "open_atom_subspaces_<atom>" (the
#   previewed item's atoms: a click opens the atom on Atoms, app_pages/_inspect.py)
"""Subspaces: t-SNE map of embeddings, their concept components and the atoms (paper Fig. 2b / Fig. 5).

Reading the map
---------------
* Colour is the concept (at most 15 colours: 12 concepts on the emoji world plus "several" / "none"),
  symbol the kind (● item embedding, ◆ component, ★ atom). Colouring by sub-label is done within one
  chosen concept (the others are grey): 71 sub-labels on one palette cannot be told apart.
* Hover texts are sentences ("component ṽ of *animal* · item #123 · horse"), see
  :func:`slics_core.explorer.maps.point_text`.
* Selection: ``st.plotly_chart(on_select="rerun", selection_mode=("points", "box", "lasso"))`` with
  ``clickmode="event+select"``; every trace carries the point id as ``customdata`` (the selection lists
  points per trace, so ids, not trace-local indices, identify them). Streamlit 1.67 sets
  ``clickmode="event"`` (no click selection) whenever the drag mode is box or lasso, which is why the
  old default ``dragmode="lasso"`` made clicks do nothing: the "Mouse" radio now starts in
  "click · zoom" and offers pan, box and lasso.
* "Highlight" dims every point whose labels do not contain the text (or that is not item ``#r``).
* "Pictures" draws up to 400 item embeddings as their 32-px thumbnails, plotly layout images in the same
  figure (which ones: :func:`slics_core.explorer.maps.picture_points`), the rest stay dots. The thumbnails
  are the shared ``data:`` URLs of :mod:`app_pages._images` (encoded once per process).
* Large maps (up to 20 000 items, 3 000 without openTSNE): the t-SNE engine by size
  (:func:`slics_core.explorer.layouts.tsne_engine`); a layout of more than ``BACKGROUND_MIN_POINTS`` points is
  computed in a background run (:data:`slics_core.explorer.background.JOBS`, the progress in an
  ``st.fragment(run_every=2)`` every tab sees) and stored in the workspace (:mod:`slics_core.explorer.arrival`);
  more than 2 000 points are drawn by :mod:`app_pages._map_figure` as WebGL traces with a compact hover.
* "Mark the current query" (:func:`app_pages._query.current_query_vectors`: a row, an upload, a typed phrase,
  and Retrieve's edits of it, "without j" / "more of j"): the query's vectors
  (:func:`slics_core.explorer.current_query.query_points`) are placed into the map without recomputing it, drawn as
  "✕ query (<label>)": an openTSNE map by ``TSNEEmbedding.transform`` (the fitted embedding kept in memory or
  rebuilt from the stored coordinates), a small scikit-learn map by its nearest points
  (:func:`slics_core.explorer.layouts.place_near`). A row query that is one of the map's items has its own points
  marked instead ("current query"); the query never changes the map's points, so it never lays the map out again.
  Only one label per query is written on the map (its item, or its first component); the others are in the hover.
* The map, its colour and picture controls, the preview and the selection summary are one ``st.fragment``:
  a toggle, a colour or a pick reruns only them, not the layout's controls. Colour mode and pictures are in
  the URL (``colour=has concept:animal``, ``pics=1``).

Image preview: a linked panel, not a hover tooltip
--------------------------------------------------
Plotly hover labels cannot show images, and ``st.plotly_chart`` reports selections (click, box,
lasso: ``on_select="rerun"`` with ``clickmode="event+select"``) but not hovers. The preview is
therefore a panel beside the map driven by the selection: click a point and its image (and the
button that makes it the query) appears on the right. The alternatives were weighed and not taken:
``streamlit-plotly-events`` (last release 2021, a separate iframe component whose events are not
maintained against current Streamlit) and Apple's ``embedding-atlas`` (a 24 MB wheel with a
WebGPU/WebGL front end and its own data stack: a second map with its own state, and a GPU-less
headless Chromium is exactly where WebGPU is missing). The linked panel needs no new dependency,
renders in any browser, and keeps one map, one state.
"""
import hashlib

import numpy as np
import streamlit as st

from app_pages import _pages, _safe
from app_pages import _state as state
from app_pages._errors import visitor_text
from app_pages._images import image_grid, label_text, shared, show_image, thumbnail
from app_pages._inspect import item_atoms_section
from app_pages._map_figure import COMPONENT_OF, GLYPHS, WEBGL_MIN_POINTS, map_figure
from app_pages._query import current_query_vectors
from app_pages._ui import (
    csv_bytes,
    csv_download,
    d0_picker,
    method_picker,
    more_rows,
    page_intro,
    require_dictionaries,
)
from app_pages._workspace import get_workspace, ws_id
from slics_core.explorer.arrival import (
    kept_embedding,
    known_map_layout,
    layout_name,
    map_embedding,
    map_layout_timed,
    map_points_view,
)
from slics_core.explorer.background import JOBS, BackgroundRun
from slics_core.explorer.current_query import query_points
from slics_core.explorer.exports import figure_html, with_settings
from slics_core.explorer.layouts import (
    BACKGROUND_MIN_POINTS,
    engine_note,
    max_map_items,
    place_near,
    place_points,
    tsne_engine,
)
from slics_core.explorer.map_colours import COLOUR_MODES, colour_param, map_colours, parse_colour_param
from slics_core.explorer.maps import (
    KINDS,
    MAX_PICTURES,
    match_points,
    point_text,
    sample_words,
    selected_point_ids,
    selection_summary,
)
from slics_core.explorer.page_settings import MAP_DEFAULTS
from slics_core.methods import MODES

MAX_SHOWN = 40
#: Side of a picture on the map in pixels (the thumbnail's size, and its size on screen).
PICTURE_PX = 32
#: Mouse modes: Streamlit turns plotly's click-to-select off while the drag mode is a box or lasso
#: (``clickmode="event"``), so clicking a point picks it only in the zoom and pan modes.
DRAG = {"click · zoom": "zoom", "click · pan": "pan", "box": "select", "lasso": "lasso"}

st.title("Subspaces")
page_intro("whether each concept's components (◆) gather around that concept's own atoms (★), away from "
           "the other concepts (t-SNE keeps neighbours, not distances); click, box or lasso points to see their "
           "images and make one the query.")

ws = get_workspace()
require_dictionaries(ws)


def _fig5_view():
    """The paper's Fig. 5: animal components and atoms, coloured by sub-label."""
    if "animal" in ws.concept_names:
        st.session_state["map_concepts"] = ["animal"]
        st.session_state["sub_concept"] = "animal"
    st.session_state["kinds"] = ["component", "atom"]
    st.session_state["color_by"] = "sub-label" if ws.Z is not None else "concept"
    _colour_changed()


def _colour_options():
    return [m for m in COLOUR_MODES if m != "sub-label" or ws.Z is not None]


def _colour_changed():
    """on_change of the colour widgets: their values become the shared ``colour`` (the URL's)."""
    ss = st.session_state
    mode = ss.get("color_by", "concept")
    concept = ss.get("sub_concept") if mode == "sub-label" else ss.get("has_concept") if mode == "has concept" \
        else None
    if mode in ("sub-label", "has concept") and concept not in ws.concept_names:  # just switched to the mode
        options = list(ss.get("map_concepts") or ws.concept_names)
        concept = "animal" if "animal" in options else options[0]
    state.put("colour", colour_param(mode, concept) if mode != "concept" else None)


def _pictures_changed():
    state.put("pics", "1" if st.session_state.get("pictures") else None)


def _seed_colour_widgets():
    """The colour widgets start at the shared ``colour`` and ``pics`` values (a link, or another visit)."""
    ss = st.session_state
    try:
        mode, concept = parse_colour_param(state.get("colour") or "concept", ws.concept_names)
    except ValueError:
        mode, concept = "concept", None
    if mode not in _colour_options():
        mode, concept = "concept", None
    if state.get("colour"):
        ss["color_by"] = mode
        if mode == "sub-label":
            ss["sub_concept"] = concept
        elif mode == "has concept":
            ss["has_concept"] = concept
    if ss.get("color_by") not in _colour_options():
        ss.pop("color_by", None)
    ss["pictures"] = bool(state.get("pics"))


# ---------------------------------------------------------------- controls
c1, c2, c3 = st.columns([1, 1, 2])
with c1:
    method = method_picker(ws, methods=ws.dictionary_methods())
with c2:
    d0 = d0_picker(ws)
with c3:
    component = st.radio("Components", list(MODES), index=list(MODES).index(MAP_DEFAULTS["component"]),
                         horizontal=True, key="component",
                         help="partial: ṽⱼ, the nearest point of concept j's cone (eq. 3); "
                              "full: vⱼ from the NNLS over all the item's labelled concepts (eq. 2)")

c1, c2, c3, c4 = st.columns([3, 1, 3, 1])  # wide enough for the three kind chips unclipped
with c1:
    kinds = st.multiselect("Show", list(KINDS), default=list(MAP_DEFAULTS["kinds"]), key="kinds",
                           format_func=lambda k: "item" if k == "embedding" else k)  # "item", as the other pages
with c2:
    splits = [s for s in ("pool", "val", "query", "train") if len(ws.index.get(s, [])) > 0]
    split = st.selectbox("Items from", splits, key="map_split",
                         index=splits.index(MAP_DEFAULTS["split"]) if MAP_DEFAULTS["split"] in splits else 0)
with c3:
    concepts = st.multiselect("Concepts (empty: all)", ws.concept_names, key="map_concepts",
                              default=[c for c in MAP_DEFAULTS["concepts"] if c in ws.concept_names])
with c4:
    n_points = st.number_input("Items (sample)", min_value=10, max_value=max_map_items(),
                               value=MAP_DEFAULTS["n_points"], step=50, key="n_points",
                               help="At most this many items are sampled; t-SNE time grows with the number "
                                    f"of points (items + their components + atoms). Maps of more than "
                                    f"{BACKGROUND_MIN_POINTS:,} points are laid out in the background and kept in "
                                    "the workspace (a revisit is instant); above 2,000 points by openTSNE.")
    if engine_note():
        st.caption(engine_note())
# the query, then its asked edits (Retrieve's, or computed here for a row query: a link with rm= / boost=)
query_vectors = current_query_vectors(ws, list(ws.concept_names), ws.model(method, d0))
query = query_vectors[0].row if query_vectors else None
c1, c2, c3 = st.columns([1, 2, 2])
with c1:
    seed = st.number_input("Seed", min_value=0, max_value=10_000, value=MAP_DEFAULTS["seed"], key="map_seed")
with c2:
    # off by default: the first view is the map prepared at build time (slics_core.explorer.arrival); marking
    # never changes the map's points (the query is placed, or its own points marked), so t-SNE never runs again
    mark_query = st.checkbox(f"Mark the current query ({query_vectors[0].label})" if query_vectors
                             else "Mark the current query (pick one on Retrieve)", value=False,
                             disabled=not query_vectors, key="mark_query",
                             help="The query (an upload, a typed phrase, an item, and its edits on Retrieve) is "
                                  "placed into the map without recomputing it (marked ✕ query): by openTSNE on "
                                  "large maps, by its nearest map points on small ones. A query item that is on "
                                  "the map has its own points marked instead (○ current query).")
with c3:
    st.button("Paper's Fig. 5 view", key="fig5", on_click=_fig5_view,
              help="The paper's Fig. 5: the animal components and atoms, coloured by sub-label")

if not kinds:
    st.info("Pick at least one kind of point to show (item, component, atom).")
    state.stop()


# ---------------------------------------------------------------- layout (cached, two steps with progress)
@st.cache_data(show_spinner=False, max_entries=24)
def _points(key, method, d0, kinds, component, n_points, concepts, split, seed, _ws):
    """The map's points: the one function the build's first view is made with (arrival.map_points_view)."""
    return map_points_view(_ws, method, d0, {"kinds": kinds, "component": component, "n_points": n_points,
                                             "concepts": concepts, "split": split, "seed": seed})


@st.cache_resource(show_spinner=False)
def _layouts():
    """Placed queries this process has shown, ``(workspace id, layout name, hash of the query vectors) ->
    ((text, x, y), ...)``: a rerun places nothing again (the layouts themselves: arrival.known_map_layout)."""
    return {"placed": {}}


def _remember(cache, key, value, keep=24):
    cache[key] = value
    for old in list(cache)[:max(0, len(cache) - keep)]:
        cache.pop(old, None)
    return value


@st.fragment(run_every=2)
def _layout_progress(run, n_points, what=None):
    """Live progress of a background layout (every tab showing this map sees the same run); reruns the page
    when it is done."""
    snap = run.snapshot()
    if snap["finished"]:
        st.rerun()
    text = (f"{what} ({n_points:,} points, {snap['elapsed']:.0f} s; the query appears by itself)" if what else
            f"Laying out {n_points:,} points in the background: {snap['stage']} ({snap['elapsed']:.0f} s; "
            "the map appears by itself, and is kept in the workspace for the next visit)")
    st.progress(min(1.0, snap["done"] / max(1, snap["total"])), text=text)


def _layout(P, seed):
    """``(xy, seconds)`` of the points ``P``: remembered, stored in the workspace, or computed here when small;
    a large layout is computed in a background run whose progress is shown, and the page stops until it is done.
    ``seconds``: how long the t-SNE took when it was computed (kept with the layout), None when not known."""
    got = known_map_layout(ws, P, seed)  # this process's, else the workspace's store (the build's first view)
    if got is not None:
        return got
    if len(P) <= BACKGROUND_MIN_POINTS:  # about 2 s at most: computed here (stored and kept by arrival)
        return map_layout_timed(ws, P, seed)
    run = JOBS.start(("map", ws_id(ws), layout_name(P, seed)), lambda: BackgroundRun(
        lambda progress: map_layout_timed(ws, P, seed, progress), total=20, name="slics-map"))
    snap = run.snapshot()
    if snap["finished"] and not snap["error"]:
        return snap["result"]
    bar.empty()
    if snap["error"]:
        st.warning(visitor_text(snap["error"], "The map's layout failed", "Rerun the page to try again."))
    else:
        _layout_progress(run, len(P))
    state.stop()


def _query_vectors_on_map(vectors, model):
    """``(Q, texts)``: the points that stand for the query vectors on this map (:func:`query_points`) and their
    labels."""
    picked = set(st.session_state.get("picked_concepts") or ())
    Qs, texts = [], []
    for qv in vectors:
        active = ws.Y[qv.row] if qv.row is not None else [n in picked for n in ws.concept_names]
        Q, what = query_points(model, qv.x, active, kinds=kinds, component=component, concepts=list(concepts) or None,
                               concept_names=ws.concept_names)
        Qs.append(Q)
        texts += [f"query ({qv.label})" if w == "embedding" else f"query ({qv.label}){COMPONENT_OF}{w}"
                  for w in what]
    return (np.vstack(Qs) if Qs else np.zeros((0, ws.X.shape[1]))), texts


def _placed_queries(P, xy, seed, Q, texts, open_tsne):
    """``((text, x, y), ...)``: the query's vectors ``Q`` placed into the map of ``P`` (not recomputed), kept per
    (map, query vectors). An openTSNE map places them by ``transform`` with its embedding object: this process's,
    else rebuilt from the stored layout (the points' neighbours: seconds for thousands of points) in a background
    run, whose progress is shown (None until then); a small map by :func:`place_near`."""
    if not len(Q):
        return ()
    key = (ws_id(ws), layout_name(P, seed), hashlib.sha1(np.ascontiguousarray(Q).tobytes()).hexdigest())
    got = _layouts()["placed"].get(key)
    if got is not None:
        return got
    if not open_tsne:
        where = place_near(P, xy, Q)
    else:
        embedding = kept_embedding(P, seed)
        if embedding is None:
            run = JOBS.start(("embedding",) + key[:2],
                             lambda: BackgroundRun(lambda progress: map_embedding(ws, P, seed),
                                                   name="slics-map-embedding"))
            snap = run.snapshot()
            if snap["error"]:
                st.warning(visitor_text(snap["error"], "The query could not be placed on the map"))
                return None
            if not snap["finished"]:
                _layout_progress(run, len(P), "Preparing the stored map to place the query")
                return None
            embedding = snap["result"]
        where = place_points(embedding, Q)
    placed = tuple((t, float(x), float(y)) for t, (x, y) in zip(texts, where))
    return _remember(_layouts()["placed"], key, placed)


base = (ws_id(ws), method, int(d0), tuple(kinds), component, int(n_points), tuple(concepts), split, int(seed))
bar = st.progress(0.0, text="Disentangling the items into components…")
try:
    P, table = _points(*base, ws)
    # the query never changes the map's points (so the layout is never computed again for it): a query item
    # that is on the map has its own points marked, everything else is placed on the map
    open_tsne = tsne_engine(len(P)) == "openTSNE"
    on_map = bool(mark_query and query is not None and (table.row.to_numpy() == query).any())
    include = (query,) if on_map else ()
    params = base + (include,)
    bar.progress(0.3, text=f"t-SNE of {len(table)} points (about a second per 500 points)…")
    xy, tsne_seconds = _layout(P, int(seed))
    to_place = [qv for qv in query_vectors if not (on_map and qv.row is not None)] if mark_query else []
    Q, q_texts = _query_vectors_on_map(to_place, ws.model(method, d0))
    placed = _placed_queries(P, xy, int(seed), Q, q_texts, open_tsne)
except ValueError as exc:
    bar.empty()
    st.warning(visitor_text(exc, "No map for these settings", "Try other settings in the sidebar."))
    state.stop()
bar.empty()
table = table.assign(x=xy[:, 0], y=xy[:, 1])
n = len(table)
shortfall = sample_words(n_points, table.row[table.row >= 0].nunique(), split, concepts)  # fewer items than asked
if shortfall:
    st.caption(shortfall)


@st.cache_resource(show_spinner=False, max_entries=24)
def _texts(params, _table, _ws):
    """Hover sentences and plain descriptions of a map's points, once per map (a Python loop over every point:
    ~0.1 s per 5 000 points, too much for every click on a large map). Read-only."""
    ids = list(_ws.ids) if _ws.ids and _ws.kind != "emoji" else None  # emoji ids ("scene-<row>") add nothing
    return point_text(_table, params[4], ids=ids), point_text(_table, params[4], ids=ids, html=False)


texts, plain = _texts(params, table, ws)


# what a click on the map does not change, kept once per map (``params``) and colouring: on a 3 000-item map
# (9 882 points) these were most of a click's server CPU (docs/performance.md, "Third pass")
@st.cache_resource(show_spinner=False, max_entries=64)
def _colours(params, color_by, concept, _table, _ws):
    """:func:`map_colours` of a map's points. Read-only."""
    return map_colours(_table, color_by, concept=concept, concept_names=_ws.concept_names, Z=_ws.Z,
                       sub_to_concept=_ws.sub_to_concept, sub_names=_ws.sub_names)


@st.cache_resource(show_spinner=False, max_entries=24)
def _point_labels(params, _table, _plain):
    """The highlight box's options (every concept and sub-label of the map) and the picked-points box's label of
    each point id. Read-only."""
    search = sorted(set(_table.concept) | {s for v in _table.sub_labels for s in v.split(", ") if s})
    # "point N": a map point's id; "#N" is an item's row everywhere in the app, as in the descriptions
    return search, {int(p): f"point {p} · {t}" for p, t in zip(_table.point, _plain)}


@st.cache_resource(show_spinner=False, max_entries=64)
def _highlighted(params, highlight, _table):
    """:func:`match_points` of a map's points. Read-only."""
    return match_points(_table, highlight)


@st.cache_resource(show_spinner=False, max_entries=24)
def _layout_csv(params, color_by, colour_concept, _table, _groups, _plain, _settings):
    """The layout's CSV download (every point with its colour group, description and the map's settings)."""
    return csv_bytes(with_settings(_table.assign(colour_group=_groups, description=_plain), **_settings))

# a new layout invalidates the picked point ids
if st.session_state.get("_tsne_params") != params:
    st.session_state["_tsne_params"] = params
    st.session_state["picked_points"] = []


# ---------------------------------------------------------------- figure
@st.cache_resource(show_spinner=False, max_entries=64)
def _figure(params, color_by, sub_concept, highlight, drag, pictures, placed, _table, _texts, _groups, _order,
            _colours, _hit, _tsne_seconds, _ws):
    """The map's figure (:func:`app_pages._map_figure.map_figure`), built once per (layout, colouring, highlight,
    mouse mode, pictures, placed query) and shared by every session (plotly validates every trace it builds:
    ~0.1 s a visit). Read-only: st.plotly_chart and the HTML export copy it. ``kind_key`` is the legend's symbol
    key."""
    _, method, d0, kinds, component, _, _, _, _, include = params  # the layout's ids (see ``params`` above)
    table, hit = _table, _hit
    kind_key = "  ".join(f"{GLYPHS[k]} {'item' if k == 'embedding' else k}" for k in KINDS if k in kinds)
    n_hit = int(hit.sum())
    store = shared(_ws)
    title = (f"{method}, d0={d0}: {int((table.kind == 'embedding').sum())} items, "
             f"{int((table.kind == 'component').sum())} components, "
             f"{int((table.kind == 'atom').sum())} atoms"
             + (f" (t-SNE {_tsne_seconds:.1f} s)" if _tsne_seconds is not None else "")
             + (f" · {n_hit} points match “{_safe.figure_text(highlight)}”" if highlight else ""))
    legend = ((f"sub-labels of {_safe.figure_text(sub_concept)}" if color_by == "sub-label"
               else f"has {_safe.figure_text(sub_concept)}?" if color_by == "has concept" else color_by)
              + f"<br><sub>{kind_key}</sub>")
    fig = map_figure(table, _texts, _groups, _order, _colours, hit, component=component, include=include,
                     placed=placed, highlight=highlight,
                     pictures=(lambda r: store.thumbnail(r, PICTURE_PX)) if pictures else None,
                     picture_px=PICTURE_PX, title=title, legend_title=legend, dragmode=DRAG[drag])
    if pictures:
        fig.update_layout(title_text=title + f" · {len(_fig_pictures(fig))} pictures")
    return fig, kind_key


def _fig_pictures(fig):
    return fig.layout.images or ()


@st.fragment
def _map_view():
    """Colour and picture controls, the map, the preview panel and the selection summary: a toggle, a colour or
    a pick reruns only this (the layout above is not touched)."""
    ss = st.session_state
    _seed_colour_widgets()
    # the chart's selection (from the previous interaction) feeds the multiselect
    sel_ids = selected_point_ids(ss.get("tsne"), n)
    if tuple(sel_ids) != ss.get("_tsne_last_sel", ()):
        ss["_tsne_last_sel"] = tuple(sel_ids)
        if sel_ids:
            ss["picked_points"] = sel_ids
    ss["picked_points"] = [p for p in ss.get("picked_points", []) if isinstance(p, (int, np.integer)) and 0 <= p < n]

    # ------------------------------------------------------------ colours, pictures, highlight
    k1, k2, k3 = st.columns([3, 2, 1])
    with k1:
        color_by = st.radio("Colour by", _colour_options(), horizontal=True, key="color_by",
                            on_change=_colour_changed,
                            help="  \n".join(f"**{m}**: {rule}" for m, rule in COLOUR_MODES.items()
                                             if m in _colour_options()))
    with k2:
        sub_concept = has = None
        options = list(concepts) or list(ws.concept_names)
        if color_by == "sub-label":
            if ss.get("sub_concept") not in options:
                ss["sub_concept"] = "animal" if "animal" in options else options[0]
            sub_concept = st.selectbox("Sub-labels of", options, key="sub_concept", on_change=_colour_changed,
                                       help="Only this concept's points are coloured by sub-label")
        elif color_by == "has concept":
            if ss.get("has_concept") not in ws.concept_names:
                ss["has_concept"] = options[0]
            has = st.selectbox("Has concept", list(ws.concept_names), key="has_concept",
                               on_change=_colour_changed,
                               help="Points whose item has this concept (and its atoms) in its colour, the rest grey")
    with k3:
        pictures = st.toggle("Pictures", key="pictures", on_change=_pictures_changed,
                             help=f"Draw up to {MAX_PICTURES} items as their {PICTURE_PX}-px images (one per cell "
                                  "of a 20 × 20 grid over the map when there are more); the rest stay dots")
    groups, order, colours = _colours(params, color_by, sub_concept or has, table, ws)
    search, _ = _point_labels(params, table, plain)
    h1, h2 = st.columns([3, 2])
    with h1:
        highlight = st.selectbox("Highlight (a label, any text, or #item)", search, index=None, key="highlight",
                                 accept_new_options=True, placeholder="e.g. horse, food, #12",
                                 help="Points whose concepts or sub-labels contain this text stay bright; "
                                      "the rest are dimmed")
    with h2:
        drag = st.radio("Mouse", list(DRAG), horizontal=True, key="drag_mode",
                        help="click · zoom / click · pan: a click picks one point, a drag zooms or pans "
                             "(double-click resets the view); box / lasso: a drag picks the points inside "
                             "(clicks do not pick in these modes). The chart's tool bar switches modes too.")
    hit = _highlighted(params, highlight, table)
    fig, kind_key = _figure(params, color_by, sub_concept or has, highlight, drag, bool(pictures), placed, table,
                            texts, groups, order, colours, hit, tsne_seconds, ws)
    _map_and_panel(fig, kind_key, groups, order, color_by, sub_concept or has)
    state.use_extras("colour", "pics")
    state.sync_url()  # a fragment's rerun does not reach app.py's write
    state.use_extras("colour", "pics")


def _map_and_panel(fig, kind_key, groups, order, color_by, colour_concept):
    """The map with its exports (left) and the picked points' preview, grid, table and concept counts (right)."""
    left, right = st.columns([3, 2])
    with left:
        st.plotly_chart(fig, on_select="rerun", selection_mode=("points", "box", "lasso"), key="tsne", width="stretch")
        counts = {g: int((groups == g).sum()) for g in order}
        st.caption(f"{len(order)} colour groups · symbol = kind ({kind_key}) · click a legend entry to hide a group, "
                   "double-click to show it alone.")
        if placed:
            st.caption("✕ " + _safe.text("; ".join(t for t, _, _ in placed)) + ": placed on the map without "
                       "recomputing it (" + ("openTSNE's transform" if open_tsne else
                                            "the cosine-weighted mean position of its nearest map points") + ").")
        settings = {"method": method, "d0": int(d0), "component_mode": component, "split": split,
                    "concepts": list(concepts) or "all", "kinds": list(kinds), "n_items": int(n_points),
                    "seed": int(seed), "colour_by": color_by if colour_concept is None
                    else f"{color_by} of {colour_concept}"}
        export = _layout_csv(params, color_by, colour_concept, table, groups, plain, settings)
        e1, e2 = st.columns(2)
        with e1:
            csv_download(export, f"subspace_map_{method}_d0{d0}.csv", "Download layout (CSV)", key="tsne_csv")
        with e2:
            st.download_button("Download figure (HTML)", data=lambda: figure_html(fig),
                               file_name=f"subspace_map_{method}_d0{d0}.html", mime="text/html", key="tsne_html",
                               help="Self-contained: plotly.js is inside the file (opens offline)")

    with right:
        _, labels = _point_labels(params, table, plain)
        # a large map offers the picked points only (64 000 labelled options would be megabytes a rerun)
        options = list(range(n)) if n <= WEBGL_MIN_POINTS else sorted(st.session_state.get("picked_points", []))
        picked = st.multiselect("Picked points (select on the map, or type ids)", options,
                                format_func=lambda p: labels.get(p, str(p)), key="picked_points")
        if not picked:
            st.info("Click a point on the map (or drag a box or lasso) to preview its image here and make it "
                    "the query.")
        else:
            sub = table.set_index("point").loc[picked]
            items = [int(p) for p in picked if table.row.iat[p] >= 0]
            if items:
                if st.session_state.get("map_focus") not in items:
                    st.session_state["map_focus"] = items[0]
                focus = items[0]
                if len(items) > 1:
                    focus = st.selectbox("Preview", items, key="map_focus", format_func=lambda p: labels[p])
                r = int(table.row.iat[focus])
                with st.container(key="map_preview"):
                    show_image(thumbnail(ws, r, 256), caption=f"#{r}", width=256)
                    st.markdown(_safe.text(plain[focus]))
                    st.caption(_safe.text(label_text(ws, r)))
                    if st.button(f"Use #{r} as the query", key="map_use_query", type="primary",
                                 help="Open Retrieve with this item as the query"):
                        st.session_state["query"] = r
                        if not _pages.switch(_pages.RETRIEVE):  # the page run on its own (not through app.py)
                            st.success(f"Item #{r} is the query now: open the Retrieve page.")
                    if not np.any(np.asarray(ws.index.get("query", [])) == r):
                        st.caption(f"#{r} is from the {split} split, not the query split.")
            shown = sub[sub.row >= 0].head(MAX_SHOWN)
            if len(shown) > 1:
                caps = [f"#{int(r)} {k}: {lab if c == 'several' and lab else c}"  # #N: the item's row
                        for r, k, c, lab in zip(shown.row, shown.kind, shown.concept, shown["labels"])]
                image_grid(ws, shown.row.tolist(), captions=caps, n_cols=4, size=128)
                if (sub.row >= 0).sum() > MAX_SHOWN:
                    st.caption(f"First {MAX_SHOWN} of {(sub.row >= 0).sum()} picked items shown.")
            atoms = sub[sub.kind == "atom"]
            if len(atoms):
                st.markdown("**Atoms picked:** " + _safe.text(", ".join(plain[p] for p in atoms.index))
                            + " — see the Atoms page for the images that use them most.")
            details = sub.reset_index()[["point", "kind", "row", "atom", "concept", "sub_label"]]
            details["description"] = [plain[p] for p in details.point]
            st.dataframe(_safe.table(details), hide_index=True, width="stretch")
            more_rows(len(details), "picked points")
            csv_download(with_settings(details, **settings), "picked_points.csv", "Download picked (CSV)",
                         key="picked_csv")
            summary = selection_summary(table, picked, ws.Y, ws.concept_names)
            if int(summary["items"].iat[0]):
                with st.container(key="pick_summary"):
                    st.markdown(f"**Concepts of the {int(summary['items'].iat[0])} picked items**")
                    st.markdown("  \n".join(_safe.text(t) for t in summary.text))
            if items:  # the previewed item's atoms (issue 38): a click on one opens it on Atoms
                item_atoms_section(ws, method, int(d0), ws.X[r], f"row:{r}", "subspaces", f"Atoms of #{r}")

    with st.expander(f"Colour groups ({len(order)})"):
        st.dataframe(_safe.table({"group": order, "points": [counts[g] for g in order]}), hide_index=True,
                     width="stretch")
        more_rows(len(order), "colour groups")


_map_view()

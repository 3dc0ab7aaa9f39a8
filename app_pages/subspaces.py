# Widget keys: "method", "d0", "component", "color_by", "sub_concept" (concept whose sub-labels colour the map),
#   "kinds", "n_points", "map_split", "map_concepts", "map_seed", "mark_query", "fig5" (button: the paper's
#   Fig. 5 view), "highlight" (label search), "drag_mode", "tsne" (plotly chart selection), "picked_points"
#   (multiselect of point ids, fed by the chart selection), "map_focus" (which picked item the preview shows),
#   "map_use_query" (button: the previewed item becomes the query), "tsne_csv", "tsne_html", "picked_csv"
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
import numpy as np
import plotly.graph_objects as go
import streamlit as st

from app_pages import _pages, _safe
from app_pages import _state as state
from app_pages._errors import visitor_text
from app_pages._images import image_grid, label_text, show_image, thumbnail
from app_pages._ui import csv_download, d0_picker, method_picker, page_intro, require_dictionaries
from app_pages._workspace import get_workspace, ws_id
from slics_core.explorer.arrival import MAP_DEFAULTS, map_layout
from slics_core.explorer.exports import figure_html, with_settings
from slics_core.explorer.maps import (
    ATOM_SUB,
    KINDS,
    NONE,
    OTHER,
    OTHER_CONCEPTS,
    SEVERAL,
    colour_groups,
    map_points,
    map_sample,
    match_points,
    point_text,
    selected_point_ids,
)
from slics_core.methods import MODES

MAX_SHOWN = 40
#: 12 well-separated colours for the named groups (by position in the concept / sub-label order, so a
#: concept keeps its colour when others are filtered out); grey shades for the catch-all groups.
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf",
           "#bcbd22", "#393b79", "#e7ba52", "#637939", "#7b4173", "#3182bd", "#ad494a"]
GREYS = {SEVERAL: "#555555", ATOM_SUB: "#222222", NONE: "#aaaaaa", OTHER: "#888888", OTHER_CONCEPTS: "#cccccc"}
SYMBOLS = {"embedding": "circle", "component": "diamond", "atom": "star"}
GLYPHS = {"embedding": "●", "component": "◆", "atom": "★"}
SIZES = {"embedding": 6, "component": 7, "atom": 14}
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


# ---------------------------------------------------------------- controls
c1, c2, c3, c4 = st.columns(4)
with c1:
    method = method_picker(ws, methods=ws.dictionary_methods())
with c2:
    d0 = d0_picker(ws)
with c3:
    component = st.radio("Components", list(MODES), index=list(MODES).index(MAP_DEFAULTS["component"]),
                         horizontal=True, key="component",
                         help="partial: ṽⱼ, the nearest point of concept j's cone (eq. 3); "
                              "full: vⱼ from the NNLS over all the item's labelled concepts (eq. 2)")
with c4:
    color_options = ["concept", "sub-label"] if ws.Z is not None else ["concept"]
    if st.session_state.get("color_by") not in color_options:
        st.session_state.pop("color_by", None)
    color_by = st.radio("Colour by", color_options, horizontal=True, key="color_by",
                        help="sub-label: the sub-labels of one concept; the other concepts are grey")

c1, c2, c3, c4 = st.columns([3, 1, 3, 1])  # wide enough for the three kind chips unclipped
with c1:
    kinds = st.multiselect("Show", list(KINDS), default=list(MAP_DEFAULTS["kinds"]), key="kinds")
with c2:
    splits = [s for s in ("pool", "val", "query", "train") if len(ws.index.get(s, [])) > 0]
    split = st.selectbox("Items from", splits, key="map_split",
                         index=splits.index(MAP_DEFAULTS["split"]) if MAP_DEFAULTS["split"] in splits else 0)
with c3:
    concepts = st.multiselect("Concepts (empty: all)", ws.concept_names, key="map_concepts",
                              default=[c for c in MAP_DEFAULTS["concepts"] if c in ws.concept_names])
with c4:
    n_points = st.number_input("Items (sample)", min_value=10, max_value=3000, value=MAP_DEFAULTS["n_points"],
                               step=50, key="n_points",
                               help="At most this many items are sampled; t-SNE time grows with the number "
                                    "of points (items + their components + atoms).")
query = st.session_state.get("query")
query = int(query) if isinstance(query, (int, np.integer)) and 0 <= int(query) < len(ws) else None
c1, c2, c3, c4 = st.columns([1, 2, 2, 2])
with c1:
    seed = st.number_input("Seed", min_value=0, max_value=10_000, value=MAP_DEFAULTS["seed"], key="map_seed")
with c2:
    # off by default: the first view is the map prepared at build time (slics_core.explorer.arrival);
    # adding the query changes the points, so t-SNE runs again
    mark_query = st.checkbox(f"Add and mark the current query (item {query})" if query is not None
                             else "Add and mark the current query (pick one on Retrieve)", value=False,
                             disabled=query is None, key="mark_query")
with c3:
    st.button("Paper's Fig. 5 view", key="fig5", on_click=_fig5_view,
              help="The paper's Fig. 5: the animal components and atoms, coloured by sub-label")
with c4:
    sub_concept = None
    if color_by == "sub-label":
        sub_options = list(concepts) or list(ws.concept_names)
        if st.session_state.get("sub_concept") not in sub_options:
            st.session_state["sub_concept"] = "animal" if "animal" in sub_options else sub_options[0]
        sub_concept = st.selectbox("Sub-labels of", sub_options, key="sub_concept",
                                   help="Only this concept's points are coloured by sub-label")
include = (query,) if (mark_query and query is not None) else ()

if not kinds:
    st.info("Pick at least one kind of point to show (embedding, component, atom).")
    state.stop()


# ---------------------------------------------------------------- layout (cached, two steps with progress)
@st.cache_data(show_spinner=False, max_entries=24)
def _points(key, method, d0, kinds, component, n_points, concepts, split, seed, include, _ws):
    rows = map_sample(_ws.Y, _ws.index[split], n_points, random_state=seed, concepts=list(concepts) or None,
                      concept_names=_ws.concept_names, include=list(include))
    return map_points(_ws.model(method, d0), _ws.X, _ws.Y, rows, kinds=list(kinds), component=component,
                      concepts=list(concepts) or None, Z=_ws.Z, sub_to_concept=_ws.sub_to_concept,
                      concept_names=_ws.concept_names, sub_names=_ws.sub_names)


@st.cache_data(show_spinner=False, max_entries=24)
def _tsne(key, params, seed, _P, _ws):
    """The layout, from the workspace's store when any process (or the build) made it already."""
    import time

    t0 = time.perf_counter()
    xy = map_layout(_ws, _P, seed)
    return xy, time.perf_counter() - t0


params = (ws_id(ws), method, int(d0), tuple(kinds), component, int(n_points), tuple(concepts), split, int(seed),
          include)
bar = st.progress(0.0, text="Disentangling the items into components…")
try:
    P, table = _points(*params, ws)
    bar.progress(0.3, text=f"t-SNE of {len(table)} points (about a second per 500 points)…")
    xy, tsne_seconds = _tsne(ws_id(ws), params, int(seed), P, ws)
except ValueError as exc:
    bar.empty()
    st.warning(visitor_text(exc, "No map for these settings", "Try other settings in the sidebar."))
    state.stop()
bar.empty()
table = table.assign(x=xy[:, 0], y=xy[:, 1])
n = len(table)
ids = list(ws.ids) if ws.ids and ws.kind != "emoji" else None  # emoji ids ("scene-<row>") add nothing
texts = point_text(table, component, ids=ids)
plain = point_text(table, component, ids=ids, html=False)

# a new layout invalidates the picked point ids
if st.session_state.get("_tsne_params") != params:
    st.session_state["_tsne_params"] = params
    st.session_state["picked_points"] = []
# the chart's selection (from the previous interaction) feeds the multiselect
sel_ids = selected_point_ids(st.session_state.get("tsne"), n)
if tuple(sel_ids) != st.session_state.get("_tsne_last_sel", ()):
    st.session_state["_tsne_last_sel"] = tuple(sel_ids)
    if sel_ids:
        st.session_state["picked_points"] = sel_ids
st.session_state["picked_points"] = [p for p in st.session_state.get("picked_points", []) if 0 <= p < n]

# ---------------------------------------------------------------- colours, highlight
if color_by == "sub-label":
    groups, order = colour_groups(table, "sub-label", concept=sub_concept, concept_names=ws.concept_names,
                                  Z=ws.Z, sub_to_concept=ws.sub_to_concept, sub_names=ws.sub_names)
    reference = [s for s, c in zip(ws.sub_names, ws.sub_to_concept) if ws.concept_names[c] == sub_concept]
else:
    groups, order = colour_groups(table, "concept", concept_names=ws.concept_names)
    reference = list(ws.concept_names)
colours = {g: GREYS[g] if g in GREYS else PALETTE[(reference.index(g) if g in reference else i) % len(PALETTE)]
           for i, g in enumerate(order)}

h1, h2 = st.columns([3, 2])
with h1:
    search = sorted(set(table.concept) | {s for v in table.sub_labels for s in v.split(", ") if s})
    highlight = st.selectbox("Highlight (a label, any text, or #item)", search, index=None, key="highlight",
                             accept_new_options=True, placeholder="e.g. horse, food, #12",
                             help="Points whose concepts or sub-labels contain this text stay bright; "
                                  "the rest are dimmed")
with h2:
    drag = st.radio("Mouse", list(DRAG), horizontal=True, key="drag_mode",
                    help="click · zoom / click · pan: a click picks one point, a drag zooms or pans "
                         "(double-click resets the view); box / lasso: a drag picks the points inside "
                         "(clicks do not pick in these modes). The chart's tool bar switches modes too.")
hit = match_points(table, highlight)

# ---------------------------------------------------------------- figure
@st.cache_resource(show_spinner=False, max_entries=64)
def _figure(params, color_by, sub_concept, highlight, drag, _table, _texts, _groups, _order, _colours, _hit,
            _tsne_seconds):
    """The map's figure, built once per (layout, colouring, highlight, mouse mode) and shared by every session
    (plotly validates every trace it builds: ~0.1 s a visit). Read-only: st.plotly_chart and the HTML export
    copy it. ``kind_key`` is the legend's symbol key."""
    _, method, d0, kinds, component, _, _, _, _, include = params  # the layout's ids (see ``params`` above)
    table, texts, groups, order, colours, hit = _table, _texts, _groups, _order, _colours, _hit
    fig = go.Figure()
    legend_shown = set()
    for g in order:
        for k in KINDS:
            idx = np.flatnonzero((groups == g) & (table.kind.to_numpy() == k))
            if not idx.size:
                continue
            if highlight:
                opacity = np.where(hit[idx], 1.0, 0.12)
                line_w = np.where(hit[idx], 1.5, 0.0 if k != "atom" else 0.5)
            else:
                opacity = np.full(idx.size, 1.0 if k == "atom" else 0.8)
                line_w = np.full(idx.size, 1.0 if k == "atom" else 0.0)
            fig.add_trace(go.Scatter(
                x=table.x.to_numpy()[idx], y=table.y.to_numpy()[idx], mode="markers", name=_safe.figure_text(g),
                legendgroup=g,
                showlegend=g not in legend_shown, customdata=[[int(p)] for p in table.point.to_numpy()[idx]],
                hovertext=[texts[i] for i in idx], hovertemplate="%{hovertext}<extra></extra>",
                marker=dict(symbol=SYMBOLS[k], size=SIZES[k], color=colours[g], opacity=opacity.tolist(),
                            line=dict(width=line_w.tolist(), color="black"))))
            legend_shown.add(g)
    marked = table[(table.row >= 0) & table.row.isin(include)]
    if len(marked):
        names = [f"x (item {r})" if k == "embedding"
                 else f"{'ṽ' if component == 'partial' else 'v'}: {_safe.figure_text(c)}"
                 for r, k, c in zip(marked.row, marked.kind, marked.concept)]
        fig.add_trace(go.Scatter(x=marked.x, y=marked.y, mode="markers+text", text=names, textposition="top center",
                                 customdata=marked[["point"]].to_numpy().tolist(), name="current query",
                                 hovertext=[texts[p] for p in marked.point],
                                 marker=dict(symbol="circle-open", size=18, color="black", line=dict(width=2)),
                                 hovertemplate="%{hovertext}<extra>current query</extra>"))
    kind_key = "  ".join(f"{GLYPHS[k]} {'item' if k == 'embedding' else k}" for k in KINDS if k in kinds)
    n_hit = int(hit.sum())
    fig.update_layout(
        title=f"{method}, d0={d0}: {int((table.kind == 'embedding').sum())} items, "
              f"{int((table.kind == 'component').sum())} components, "
              f"{int((table.kind == 'atom').sum())} atoms (t-SNE {_tsne_seconds:.1f} s)"
              + (f" · {n_hit} points match “{_safe.figure_text(highlight)}”" if highlight else ""),
        height=680, margin=dict(l=40, r=10, t=60, b=40), xaxis_title="t-SNE 1", yaxis_title="t-SNE 2",
        clickmode="event+select", dragmode=DRAG[drag], hovermode="closest",
        legend=dict(title_text=(f"sub-labels of {_safe.figure_text(sub_concept)}" if color_by == "sub-label"
                                else "concept")
                    + f"<br><sub>{kind_key}</sub>",
                    orientation="v", x=1.01, xanchor="left", y=1, yanchor="top", itemsizing="constant",
                    font=dict(size=11), tracegroupgap=0))
    return fig, kind_key


fig, kind_key = _figure(params, color_by, sub_concept, highlight, drag, table, texts, groups, order, colours,
                        hit, tsne_seconds)

left, right = st.columns([3, 2])
with left:
    st.plotly_chart(fig, on_select="rerun", selection_mode=("points", "box", "lasso"), key="tsne", width="stretch")
    counts = {g: int((groups == g).sum()) for g in order}
    st.caption(f"{len(order)} colour groups · symbol = kind ({kind_key}) · click a legend entry to hide a group, "
               "double-click to show it alone.")
    settings = {"method": method, "d0": int(d0), "component_mode": component, "split": split,
                "concepts": list(concepts) or "all", "kinds": list(kinds), "n_items": int(n_points),
                "seed": int(seed), "colour_by": color_by if sub_concept is None else f"sub-label of {sub_concept}"}
    export = with_settings(table.assign(colour_group=groups, description=plain), **settings)
    e1, e2 = st.columns(2)
    with e1:
        csv_download(export, f"subspace_map_{method}_d0{d0}.csv", "Download layout (CSV)", key="tsne_csv")
    with e2:
        st.download_button("Download figure (HTML)", data=lambda: figure_html(fig),
                           file_name=f"subspace_map_{method}_d0{d0}.html", mime="text/html", key="tsne_html",
                           help="Self-contained: plotly.js is inside the file (opens offline)")

with right:
    labels = {int(p): f"{p} · {t}" for p, t in zip(table.point, plain)}
    picked = st.multiselect("Picked points (select on the map, or type ids)", list(range(n)),
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
                if r not in set(np.asarray(ws.index.get("query", [])).tolist()):
                    st.caption(f"#{r} is from the {split} split, not the query split.")
        shown = sub[sub.row >= 0].head(MAX_SHOWN)
        if len(shown) > 1:
            caps = [f"#{p} {k}: {lab if c == 'several' and lab else c}"
                    for p, k, c, lab in zip(shown.index, shown.kind, shown.concept, shown["labels"])]
            image_grid(ws, shown.row.tolist(), captions=caps, n_cols=4, size=128)
            if (sub.row >= 0).sum() > MAX_SHOWN:
                st.caption(f"First {MAX_SHOWN} of {(sub.row >= 0).sum()} picked items shown.")
        atoms = sub[sub.kind == "atom"]
        if len(atoms):
            st.markdown("**Atoms picked:** " + _safe.text(", ".join(plain[p] for p in atoms.index))
                        + " — see the Atoms page for the images that use them most.")
        details = sub.reset_index()[["point", "kind", "row", "atom", "concept", "sub_label"]]
        details["description"] = [plain[p] for p in details.point]
        st.dataframe(details, hide_index=True, width="stretch")
        csv_download(with_settings(details, **settings), "picked_points.csv", "Download picked (CSV)",
                     key="picked_csv")

with st.expander(f"Colour groups ({len(order)})"):
    st.dataframe({"group": order, "points": [counts[g] for g in order]}, hide_index=True, width="stretch")

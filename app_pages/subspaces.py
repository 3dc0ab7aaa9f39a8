# Widget keys: "method", "d0", "component", "color_by", "kinds", "n_points", "map_split", "map_concepts",
#   "map_seed", "mark_query", "fig5" (button: the paper's Fig. 5 view), "tsne" (plotly chart selection),
#   "picked_points" (multiselect of point ids, fed by the chart selection), "tsne_csv", "tsne_html" (downloads)
"""Subspaces: t-SNE map of embeddings, their concept components and the atoms (paper Fig. 2b / Fig. 5)."""
import time

import numpy as np
import plotly.express as px
import plotly.graph_objects as go
import streamlit as st

from app_pages._ui import csv_download, d0_picker, get_workspace, image_grid, label_text, method_picker, ws_id
from slics_core.explorer.maps import KINDS, map_points, map_sample, selected_point_ids, tsne_layout

MAX_SHOWN = 40
PALETTE = px.colors.qualitative.Dark24 + px.colors.qualitative.Light24
SYMBOLS = {"embedding": "circle", "component": "diamond", "atom": "star"}
SIZES = {"embedding": 5, "component": 6, "atom": 13}

st.title("Subspaces")
st.caption("A t-SNE map of item embeddings x, their concept components (ṽⱼ: projection on concept j's cone, "
           "or vⱼ: the joint non-negative decomposition) and the atoms. Select points (click, box or lasso) "
           "to see their images.")

ws = get_workspace()


def _fig5_view():
    """The paper's Fig. 5: animal components and atoms, coloured by sub-label."""
    if "animal" in ws.concept_names:
        st.session_state["map_concepts"] = ["animal"]
    st.session_state["kinds"] = ["component", "atom"]
    st.session_state["color_by"] = "sub-label" if ws.Z is not None else "concept"


# ---------------------------------------------------------------- controls
c1, c2, c3, c4 = st.columns(4)
with c1:
    method = method_picker(ws, methods=ws.dictionary_methods())
with c2:
    d0 = d0_picker(ws)
with c3:
    component = st.radio("Components", ["partial", "full"], horizontal=True, key="component",
                         help="partial: ṽⱼ, the nearest point of concept j's cone (eq. 3); "
                              "full: vⱼ from the NNLS over all the item's labelled concepts (eq. 2)")
with c4:
    color_options = ["concept", "sub-label"] if ws.Z is not None else ["concept"]
    if st.session_state.get("color_by") not in color_options:
        st.session_state.pop("color_by", None)
    color_by = st.radio("Colour by", color_options, horizontal=True, key="color_by")

c1, c2, c3, c4 = st.columns([2, 1, 2, 1])
with c1:
    kinds = st.multiselect("Show", list(KINDS), default=list(KINDS), key="kinds")
with c2:
    splits = [s for s in ("pool", "val", "query", "train") if len(ws.index.get(s, [])) > 0]
    split = st.selectbox("Items from", splits, key="map_split")
with c3:
    concepts = st.multiselect("Concepts (empty: all)", ws.concept_names, key="map_concepts")
with c4:
    n_points = st.number_input("Items (sample)", min_value=10, max_value=3000, value=200, step=50, key="n_points",
                               help="At most this many items are sampled; t-SNE time grows with the number "
                                    "of points (items + their components + atoms).")
query = st.session_state.get("query")
query = int(query) if isinstance(query, (int, np.integer)) and 0 <= int(query) < len(ws) else None
c1, c2, c3 = st.columns([1, 2, 3])
with c1:
    seed = st.number_input("Seed", min_value=0, max_value=10_000, value=0, key="map_seed")
with c2:
    mark_query = st.checkbox(f"Mark the current query (item {query})" if query is not None
                             else "Mark the current query (pick one on Retrieve)", value=query is not None,
                             disabled=query is None, key="mark_query")
with c3:
    st.button("Paper's Fig. 5 view (animal components by sub-label)", key="fig5", on_click=_fig5_view)
include = (query,) if (mark_query and query is not None) else ()

if not kinds:
    st.info("Pick at least one kind of point to show (embedding, component, atom).")
    st.stop()


# ---------------------------------------------------------------- layout (cached, two steps with progress)
@st.cache_data(show_spinner=False, max_entries=24)
def _points(key, method, d0, kinds, component, n_points, concepts, split, seed, include, _ws):
    rows = map_sample(_ws.Y, _ws.index[split], n_points, random_state=seed, concepts=list(concepts) or None,
                      concept_names=_ws.concept_names, include=list(include))
    return map_points(_ws.model(method, d0), _ws.X, _ws.Y, rows, kinds=list(kinds), component=component,
                      concepts=list(concepts) or None, Z=_ws.Z, sub_to_concept=_ws.sub_to_concept,
                      concept_names=_ws.concept_names, sub_names=_ws.sub_names)


@st.cache_data(show_spinner=False, max_entries=24)
def _tsne(key, params, seed, _P):
    t0 = time.perf_counter()
    xy = tsne_layout(_P, random_state=seed)
    return xy, time.perf_counter() - t0


params = (ws_id(ws), method, int(d0), tuple(kinds), component, int(n_points), tuple(concepts), split, int(seed),
          include)
bar = st.progress(0.0, text="Disentangling the items into components…")
try:
    P, table = _points(*params, ws)
    bar.progress(0.3, text=f"t-SNE of {len(table)} points (about a second per 500 points)…")
    xy, tsne_seconds = _tsne(ws_id(ws), params, int(seed), P)
except ValueError as exc:
    bar.empty()
    st.warning(f"No map for these settings: {exc}")
    st.stop()
bar.empty()
table = table.assign(x=xy[:, 0], y=xy[:, 1])
n = len(table)

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

# ---------------------------------------------------------------- figure
color_col = "concept" if color_by == "concept" else "sub_label"
plot = table.assign(size=table.kind.map(SIZES), item=table.row.where(table.row >= 0, None))
fig = px.scatter(plot, x="x", y="y", color=color_col, symbol="kind", symbol_map=SYMBOLS, size="size",
                 size_max=13, custom_data=["point"], color_discrete_sequence=PALETTE,
                 hover_data={"point": True, "kind": True, "concept": True, "sub_label": True, "labels": True,
                             "item": True, "atom": True, "x": False, "y": False, "size": False},
                 title=f"{method}, d0={d0}: {int((table.kind == 'embedding').sum())} items, "
                       f"{int((table.kind == 'component').sum())} components, "
                       f"{int((table.kind == 'atom').sum())} atoms (t-SNE {tsne_seconds:.1f} s)")
fig.update_traces(marker_line_width=0)
fig.update_traces(selector=lambda t: str(t.name).endswith("atom"), marker_line_width=1, marker_line_color="black")
marked = table[(table.row >= 0) & table.row.isin(include)]
if len(marked):
    names = [f"x (item {r})" if k == "embedding" else f"{'ṽ' if component == 'partial' else 'v'}: {c}"
             for r, k, c in zip(marked.row, marked.kind, marked.concept)]
    fig.add_trace(go.Scatter(x=marked.x, y=marked.y, mode="markers+text", text=names, textposition="top center",
                             customdata=marked[["point"]].to_numpy(), name="current query",
                             marker=dict(symbol="circle-open", size=18, color="black", line=dict(width=2)),
                             hovertemplate="%{text}<extra>current query</extra>"))
fig.update_layout(height=700, legend_title_text=f"{color_by}, kind", xaxis_title="t-SNE 1", yaxis_title="t-SNE 2",
                  dragmode="lasso", legend=dict(orientation="h", yanchor="top", y=-0.1, xanchor="left", x=0))

left, right = st.columns([3, 2])
with left:
    st.plotly_chart(fig, on_select="rerun", selection_mode=("points", "box", "lasso"), key="tsne", width="stretch")
    groups = (table.groupby(color_col).size().rename("points").reset_index()
              .rename(columns={color_col: color_by}).sort_values("points", ascending=False, kind="stable"))
    with st.expander(f"Colour groups ({len(groups)})"):
        st.dataframe(groups, hide_index=True, width="stretch")
    e1, e2 = st.columns(2)
    with e1:
        csv_download(table, f"subspace_map_{method}_d0{d0}.csv", "Download layout (CSV)", key="tsne_csv")
    with e2:
        st.download_button("Download figure (HTML)", data=lambda: fig.to_html(include_plotlyjs=True),
                           file_name=f"subspace_map_{method}_d0{d0}.html", mime="text/html", key="tsne_html")

with right:
    labels = {int(p): f"{p} · {k} · {c}" for p, k, c in zip(table.point, table.kind, table.concept)}
    picked = st.multiselect("Picked points (select on the map, or type ids)", list(range(n)),
                            format_func=lambda p: labels.get(p, str(p)), key="picked_points")
    if not picked:
        st.info("Select points on the map (click, box or lasso) to see their images here.")
    else:
        sub = table.set_index("point").loc[picked]
        shown = sub[sub.row >= 0].head(MAX_SHOWN)
        if len(shown):
            caps = [f"#{p} {k}: {lab if c == 'several' and lab else c}"
                    for p, k, c, lab in zip(shown.index, shown.kind, shown.concept, shown["labels"])]
            image_grid(ws, shown.row.tolist(), captions=caps, n_cols=4, size=128)
            if (sub.row >= 0).sum() > MAX_SHOWN:
                st.caption(f"First {MAX_SHOWN} of {(sub.row >= 0).sum()} picked items shown.")
        atoms = sub[sub.kind == "atom"]
        if len(atoms):
            st.markdown("**Atoms picked:** " + ", ".join(f"atom {a} ({c})" for a, c in zip(atoms.atom, atoms.concept))
                        + " — see the Atoms page for the images that use them most.")
        details = sub.reset_index()[["point", "kind", "row", "atom", "concept", "sub_label"]]
        details["labels"] = [label_text(ws, r) if r >= 0 else "" for r in details.row]
        st.dataframe(details, hide_index=True, width="stretch")
        csv_download(details, "picked_points.csv", "Download picked (CSV)", key="picked_csv")

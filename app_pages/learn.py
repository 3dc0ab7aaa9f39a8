"""Learn: the paper's Fig. 2a made interactive (concept cones on the unit sphere).

Widget keys: "preset" (scene), "cone_seed" (seed of random cones), "randomise" (button),
"azimuth", "elevation" (the query x*), "active" (active concepts of the full decomposition),
"show_full", "show_partial", "fill_cones" (drawing options), "learn_fig" (the figure).
Geometry: slics_core.explorer.sphere; this page only draws.
"""
# keys: preset, cone_seed, randomise, azimuth, elevation, active, show_full, show_partial, fill_cones, learn_fig
import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from slics_core.explorer import sphere
from slics_core.rows import ZERO_NORM

RANDOM = "Random cones"
COLOURS = ["#2ca02c", "#d62728", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2"]
X_COLOUR = "#1f77b4"


def _randomise():
    st.session_state["cone_seed"] = int(st.session_state.get("cone_seed", 0)) + 1
    st.session_state["preset"] = RANDOM


@st.cache_data(show_spinner=False, max_entries=64)
def _scene(preset: str, seed: int):
    return sphere.random_scene(seed) if preset == RANDOM else sphere.preset_scene(preset)


@st.cache_data(show_spinner=False, max_entries=64)
def _cone_drawings(preset: str, seed: int):
    sc = _scene(preset, seed)
    out = []
    for j in range(sc.n_concepts):
        B = sc.concept_atoms(j)
        out.append((sphere.cone_boundary(B), *sphere.cone_surface(B)))
    return out


def _line(p, q, **kw):
    return go.Scatter3d(x=[p[0], q[0]], y=[p[1], q[1]], z=[p[2], q[2]], mode="lines", **kw)


def _eye(sc):
    """Camera: oblique to the cones' mean direction, so both the polygons and the arrows are visible."""
    az, el = sphere.angles_of(sc.atoms.mean(axis=0) if np.linalg.norm(sc.atoms.mean(axis=0)) > ZERO_NORM
                              else np.array([1.0, 1.0, 1.0]))
    return (1.5 * sphere.direction(az - 50, min(80.0, el + 25))).tolist()


def _figure(sc, drawings, d, show_full, show_partial, fill):
    fig = go.Figure()
    X, Y, Z = sphere.sphere_mesh()
    fig.add_trace(go.Surface(x=X, y=Y, z=Z, opacity=0.12, showscale=False, hoverinfo="skip",
                             colorscale=[[0, "#bbbbbb"], [1, "#bbbbbb"]], name="unit sphere"))
    o = np.zeros(3)
    for j, (boundary, verts, tris) in enumerate(drawings):
        col, name, grp = COLOURS[j % len(COLOURS)], sc.names[j], f"c{j}"
        if fill and len(tris):
            fig.add_trace(go.Mesh3d(x=verts[:, 0], y=verts[:, 1], z=verts[:, 2], i=tris[:, 0], j=tris[:, 1],
                                    k=tris[:, 2], color=col, opacity=0.45, legendgroup=grp, showlegend=False,
                                    hoverinfo="skip", name=f"cone {name}"))
        fig.add_trace(go.Scatter3d(x=boundary[:, 0], y=boundary[:, 1], z=boundary[:, 2],
                                   mode="lines+markers" if len(boundary) == 1 else "lines",
                                   line=dict(color=col, width=6), marker=dict(size=5, color=col),
                                   legendgroup=grp, name=f"cone of {name}", hoverinfo="name"))
        for i, b in enumerate(sc.concept_atoms(j)):
            fig.add_trace(_line(o, b, line=dict(color=col, width=2, dash="dot"), legendgroup=grp,
                                showlegend=False, name=f"atom b_{j + 1},{i + 1}", hoverinfo="name"))
        if show_full and d.active[j]:
            v = d.components[j]
            fig.add_trace(go.Scatter3d(x=[0, v[0]], y=[0, v[1]], z=[0, v[2]], mode="lines+markers",
                                       line=dict(color=col, width=7), marker=dict(size=[0, 6], color="black",
                                                                                   symbol="diamond"),
                                       legendgroup=grp, name=f"v_{j + 1} ({name}), full",
                                       hovertext=f"v_{j + 1}: |v|={np.linalg.norm(v):.3f}", hoverinfo="text"))
        if show_partial:
            t = d.projections[j]
            fig.add_trace(go.Scatter3d(x=[0, t[0]], y=[0, t[1]], z=[0, t[2]], mode="lines+markers",
                                       line=dict(color=col, width=4, dash="dash"),
                                       marker=dict(size=[0, 6], color="#17becf", symbol="circle"),
                                       legendgroup=grp, name=f"ṽ_{j + 1} ({name}), partial",
                                       hovertext=f"ṽ_{j + 1}: |ṽ|={np.linalg.norm(t):.3f}", hoverinfo="text"))
            fig.add_trace(_line(d.x, t, line=dict(color="#17becf", width=2, dash="dot"), legendgroup=grp,
                                showlegend=False, hoverinfo="skip"))
    x = d.x
    fig.add_trace(go.Scatter3d(x=[0, x[0]], y=[0, x[1]], z=[0, x[2]], mode="lines+markers+text",
                               line=dict(color=X_COLOUR, width=5), marker=dict(size=[0, 10], color=X_COLOUR),
                               text=["", "x*"], textposition="top center", textfont=dict(size=15, color=X_COLOUR),
                               name="query x*", hovertext="x*", hoverinfo="text"))
    if show_full:
        r = d.reconstruction
        fig.add_trace(go.Scatter3d(x=[r[0]], y=[r[1]], z=[r[2]], mode="markers",
                                   marker=dict(size=3, color="black", symbol="x"), name="Σ v_j (reconstruction)"))
    for e in np.eye(3):  # faint coordinate axes
        fig.add_trace(_line(-1.15 * e, 1.15 * e, line=dict(color="#999999", width=1), showlegend=False,
                            hoverinfo="skip"))
    axis = dict(range=[-1.15, 1.15], visible=False)
    fig.update_layout(height=620, margin=dict(l=0, r=0, t=0, b=0), uirevision="learn",
                      scene=dict(xaxis=axis, yaxis=axis, zaxis=axis, aspectmode="cube",
                                 camera=dict(eye=dict(zip("xyz", _eye(sc))))),
                      legend=dict(orientation="h", yanchor="top", y=0.0, x=0.0, itemsizing="constant",
                                  groupclick="toggleitem", font=dict(size=11)))
    return fig


# ---------------------------------------------------------------------- page
st.title("Learn: concept cones")
st.markdown("**What to look at:** as you move x*, the partial component ṽⱼ (its shadow on one cone) and the "
            "full component vⱼ (its share in the joint decomposition) part ways when x* sits between cones.")
st.caption("The paper's Fig. 2a in your hands: three concepts, each a cone of non-negative combinations of a "
           "few atoms, seen on the unit sphere of a 3-D embedding space.")

presets = list(sphere.PRESETS) + [RANDOM]
st.session_state.setdefault("preset", presets[0])
st.session_state.setdefault("cone_seed", 0)
with st.sidebar:
    st.selectbox("Cones", presets, key="preset")
    st.number_input("Seed", min_value=0, max_value=1_000_000, step=1, key="cone_seed")
    st.button("🎲 Randomise cones", key="randomise", on_click=_randomise, width="stretch")
    st.slider("Query azimuth (°)", -180, 180, 35, key="azimuth")
    st.slider("Query elevation (°)", -90, 90, 30, key="elevation")

preset, seed = st.session_state["preset"], int(st.session_state["cone_seed"])
sc = _scene(preset, seed)
with st.sidebar:
    if st.session_state.get("_active_scene") != (preset, seed) or not set(
            st.session_state.get("active", [])) <= set(sc.names):
        st.session_state["active"] = list(sc.names)  # a new scene: every concept active
    st.session_state["_active_scene"] = (preset, seed)
    active_names = st.multiselect("Active concepts J (full decomposition)", sc.names, key="active")
    show_full = st.checkbox("Show full components v_j", value=True, key="show_full")
    show_partial = st.checkbox("Show partial projections ṽ_j", value=True, key="show_partial")
    fill = st.checkbox("Fill the spherical polygons", value=True, key="fill_cones")

x = sphere.direction(st.session_state["azimuth"], st.session_state["elevation"])
d = sphere.decompose(sc, x, active=[n in active_names for n in sc.names])

left, right = st.columns([3, 2])
with left:
    st.plotly_chart(_figure(sc, _cone_drawings(preset, seed), d, show_full, show_partial, fill),
                    key="learn_fig", width="stretch")
    st.caption(sc.description + " Drag to rotate the view; move x* with the sliders in the sidebar.")
with right:
    m1, m2 = st.columns(2)
    m1.metric("Reconstruction error", f"{d.error:.3f}", help="‖x* − Σ v_j‖")
    best = int(np.nanargmax(np.nan_to_num(d.projection_cosines, nan=-2.0)))
    m2.metric("Closest cone", sc.names[best], help="The cone with the largest cos(ṽ_j, x*)")
    table = pd.DataFrame(d.table(sc.names))
    st.dataframe(table[["concept", "active", "||v_j||", "||ṽ_j||", "cos(ṽ_j, x*)", "cos(v_j, x*)",
                        "||ṽ_j − v_j||"]], hide_index=True, width="stretch",
                 column_config={c: st.column_config.NumberColumn(format="%.3f")
                                for c in ("||v_j||", "||ṽ_j||", "cos(ṽ_j, x*)", "cos(v_j, x*)", "||ṽ_j − v_j||")})
    st.caption("Blank cosines: the component is zero (x* is 90° or more from that cone, or the concept is "
               "inactive).")
    with st.expander("What is a concept cone?", expanded=True):
        st.markdown(
            "Each concept *j* owns a few unit **atoms** (dotted rays). Its **cone** is every non-negative "
            "combination of them, **B_j a** with **a ≥ 0**. On the unit sphere the cone is a **spherical "
            "polygon** whose corners are the atoms and whose edges are great-circle arcs (two atoms give "
            "an arc, one atom a single point). An embedding inside a polygon is explained by that "
            "concept alone; one between polygons needs several concepts.")
    with st.expander("Full vs partial disentanglement"):
        st.markdown(
            "**Full** (eq. 2, solid arrows, black diamonds): one non-negative least-squares fit of x* with the "
            "atoms of *all* active concepts; the parts **v_j** belonging to each concept add up to the "
            "reconstruction (black ×).\n\n"
            "**Partial** (eq. 3, dashed arrows, cyan dots): for one concept alone, the nearest point **ṽ_j** "
            "of its cone to x*. When the cones are orthogonal both agree (try *Orthogonal cones*); otherwise "
            "ṽ_j lies closer to x* and keeps more of it, which is why the paper retrieves with ṽ_j.\n\n"
            "With more than three atoms in 3-D the full fit is not unique; the solver returns one sparse "
            "optimum.")
    with st.expander("Why non-negative coefficients?"):
        st.markdown(
            "CLIP-like embeddings are compared by cosine: pointing the opposite way means *dissimilar*, not "
            "*the same concept negated*. With **a ≥ 0** a concept can only add its own directions, so a "
            "component is either zero (the concept is absent) or points into the concept's own cone: it is "
            "concept-specific. Without the constraint the cones would be whole planes or all of space and "
            "any concept could explain anything.")

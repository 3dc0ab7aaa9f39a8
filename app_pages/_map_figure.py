"""The Subspaces page's map figure (plotly), built from a map's table: no Streamlit here, so a test can measure it.

Small maps (at most :data:`WEBGL_MIN_POINTS` points) are SVG ``go.Scatter`` traces with one hover sentence per
point (:func:`slics_core.explorer.maps.point_text`). Larger ones are built to stay under Streamlit's 8 MB message
at 20 000 items and their components (docs/performance.md, "t-SNE for large maps"): WebGL ``go.Scattergl``
traces, float32 coordinates and int32 ``customdata`` (point id, item row) sent as typed arrays, and a compact
hover: one ``hovertemplate`` per trace (its kind and colour group) with the item's number from ``customdata``
instead of one sentence per point (the sentences were most of the bytes); a click shows the item's full
description in the preview panel.
"""
import numpy as np
import plotly.graph_objects as go

from app_pages import _safe
from slics_core.explorer.maps import KINDS, MAX_PICTURES, picture_points

#: Maps of more points than this are drawn as WebGL traces with the compact hover.
WEBGL_MIN_POINTS = 2_000
SYMBOLS = {"embedding": "circle", "component": "diamond", "atom": "star"}
GLYPHS = {"embedding": "●", "component": "◆", "atom": "★"}
SIZES = {"embedding": 6, "component": 7, "atom": 14}
#: Name of the trace of the query placed on a stored map (no point of the map).
QUERY_TRACE = "query"


#: How a placed query's component is named after the query (``"query (item 3) · component of animal"``).
COMPONENT_OF = " · component of "


def one_label_each(texts, owners, first=None):
    """The texts written on the map: one per owner (a query, or one edit of it), the rest ``""`` (in the hover
    only), so that a query's item and components, drawn close together, do not write labels over each other.
    The owner's label is its point where ``first`` is true (its item), else its first point."""
    first = [False] * len(texts) if first is None else list(first)
    out, seen = [""] * len(texts), set()
    for pick in (True, False):  # an owner's flagged point first, else its first point
        for i, (t, o) in enumerate(zip(texts, owners)):
            if o not in seen and (first[i] or not pick):
                out[i] = t
                seen.add(o)
    return out


def _kind_word(kind, component):
    return {"embedding": "item", "component": f"component {'ṽ' if component == 'partial' else 'v'}",
            "atom": "atom"}[kind]


def map_figure(table, texts, groups, order, colours, hit, *, component, include=(), placed=None, highlight=None,
               pictures=None, picture_px=32, title="", legend_title="", dragmode="zoom"):
    """The map: one trace per (colour group, kind), the marked query points, the placed query, the pictures.

    Parameters
    ----------
    table : DataFrame
        A map's table with ``x``, ``y``.
    texts : list of str
        Hover sentences (used for maps of at most :data:`WEBGL_MIN_POINTS` points).
    groups, order, colours
        :func:`slics_core.explorer.map_colours.map_colours`.
    hit : ndarray of bool
        Highlighted points (used when ``highlight``).
    include : tuple of int
        Item rows whose points are marked as the current query.
    placed : sequence of (text, x, y), optional
        The query's points placed on the map without being among its points (one trace, :data:`QUERY_TRACE`).
    pictures : callable, optional
        ``pictures(row) -> data URL``: draw :func:`picture_points` as images, each in a frame of its point's
        colour (a layout shape), so the colouring stays readable under the pictures.

    Returns
    -------
    fig : go.Figure
    """
    n = len(table)
    large = n > WEBGL_MIN_POINTS
    trace = go.Scattergl if large else go.Scatter
    coord = np.float32 if large else np.float64  # float32: 4 bytes a coordinate in the typed array
    xs = table.x.to_numpy(dtype=coord)
    ys = table.y.to_numpy(dtype=coord)
    kinds = table.kind.to_numpy()
    point = table.point.to_numpy(dtype=np.int32)
    row = table.row.to_numpy(dtype=np.int32)
    fig = go.Figure()
    legend_shown = set()
    for g in order:
        for k in KINDS:
            idx = np.flatnonzero((groups == g) & (kinds == k))
            if not idx.size:
                continue
            if highlight:
                opacity = np.where(hit[idx], 1.0, 0.12).astype(coord)
                line_w = np.where(hit[idx], 1.5, 0.0 if k != "atom" else 0.5).astype(coord)
            else:  # one value per trace
                opacity = 1.0 if k == "atom" else 0.8
                line_w = 1.0 if k == "atom" else 0.0
            if large:
                item = " · item #%{customdata[1]}" if k != "atom" else ""
                hover = dict(customdata=np.column_stack([point[idx], row[idx]]),
                             hovertemplate=f"{_kind_word(k, component)} · {_safe.figure_text(g)}{item}<extra></extra>")
            else:
                hover = dict(customdata=[[int(p)] for p in point[idx]], hovertext=[texts[i] for i in idx],
                             hovertemplate="%{hovertext}<extra></extra>")
                opacity = opacity.tolist() if isinstance(opacity, np.ndarray) else opacity
                line_w = line_w.tolist() if isinstance(line_w, np.ndarray) else line_w
            fig.add_trace(trace(
                x=xs[idx], y=ys[idx], mode="markers", name=_safe.figure_text(g), legendgroup=g,
                showlegend=g not in legend_shown, **hover,
                marker=dict(symbol=SYMBOLS[k], size=SIZES[k], color=colours[g], opacity=opacity,
                            line=dict(width=line_w, color="black"))))
            legend_shown.add(g)
    marked = table[(table.row >= 0) & table.row.isin(include)]
    if len(marked):
        names = [f"x (item {r})" if k == "embedding"
                 else f"{'ṽ' if component == 'partial' else 'v'}: {_safe.figure_text(c)}"
                 for r, k, c in zip(marked.row, marked.kind, marked.concept)]
        fig.add_trace(go.Scatter(x=marked.x, y=marked.y, mode="markers+text", text=one_label_each(names, [
                                     f"item {r}" for r in marked.row], first=[k == "embedding" for k in marked.kind]),
                                 textposition="top center",
                                 customdata=marked[["point"]].to_numpy().tolist(), name="current query",
                                 hovertext=[texts[p] for p in marked.point],
                                 marker=dict(symbol="circle-open", size=18, color="black", line=dict(width=2)),
                                 hovertemplate="%{hovertext}<extra>current query</extra>"))
    if placed:
        shown = [_safe.figure_text(t) for t, _, _ in placed]
        whose = [t.split(COMPONENT_OF)[0] for t, _, _ in placed]  # the query (or edit) a vector stands for
        labels = one_label_each(shown, whose, first=[COMPONENT_OF not in t for t, _, _ in placed])
        fig.add_trace(go.Scatter(x=[float(p[1]) for p in placed], y=[float(p[2]) for p in placed],
                                 mode="markers+text", text=labels,
                                 textposition="top center", name=QUERY_TRACE,
                                 marker=dict(symbol="x-thin-open", size=20, color="black", line=dict(width=3)),
                                 hovertext=shown, hovertemplate="%{hovertext}, placed on the map<extra></extra>"))
    if pictures is not None:
        shown = picture_points(table, MAX_PICTURES)
        # a picture's size in data units: picture_px of the plot's ~600 px (the axes span the layout)
        sx = float(xs.max() - xs.min() or 1.0) * picture_px / 600
        sy = float(ys.max() - ys.min() or 1.0) * picture_px / 600
        fig.update_layout(images=[
            dict(source=pictures(int(table.row.iat[p])), xref="x", yref="y", x=float(xs[p]), y=float(ys[p]),
                 sizex=sx, sizey=sy, xanchor="center", yanchor="middle", sizing="contain", layer="above",
                 opacity=1.0 if not highlight or hit[p] else 0.25)
            for p in shown])
        # a picture hides its dot: a frame in the dot's colour keeps the colouring (concept, has concept,
        # sub-label...) readable around it
        fig.update_layout(shapes=[
            dict(type="rect", xref="x", yref="y", x0=float(xs[p]) - 0.6 * sx, x1=float(xs[p]) + 0.6 * sx,
                 y0=float(ys[p]) - 0.6 * sy, y1=float(ys[p]) + 0.6 * sy, layer="above",
                 line=dict(color=colours[groups[p]], width=3), fillcolor="rgba(0,0,0,0)",
                 opacity=1.0 if not highlight or hit[p] else 0.25)
            for p in shown])
    fig.update_layout(
        title=title, height=680, margin=dict(l=40, r=10, t=60, b=40), xaxis_title="t-SNE 1", yaxis_title="t-SNE 2",
        clickmode="event+select", dragmode=dragmode, hovermode="closest",
        legend=dict(title_text=legend_title, orientation="v", x=1.01, xanchor="left", y=1, yanchor="top",
                    itemsizing="constant", font=dict(size=11), tracegroupgap=0))
    return fig

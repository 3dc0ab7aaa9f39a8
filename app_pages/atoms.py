# Widget keys: "method", "d0", "n_nonzero" (OMP atoms per item), "cooc_map", "cos_map" (heatmap selections),
#   "atom_<method>_d0<d0>" (atom selectbox, one per dictionary so its labels are never those of another
#   dictionary; fed by clicks on either heatmap and by the other pages through the shared "atom",
#   app_pages/_state.py), "atom_k" (images shown), "cooc_csv", "cos_csv",
#   "atom_items_csv", "atom_words_csv" (downloads), "health_hist" (log10-frequency histogram), "health_table",
#   "health_csv" (dictionary health), "profile_label" (the label of the "Label profile" tab), "profile_fig",
#   "profile_table", "profile_csv", "activation_hist" (the picked atom's coefficients), "atom_item" (whose atoms are
#   listed), "open_atom_atoms_<atom>" (pick that atom: app_pages/_inspect.py)
"""Atoms: co-occurrence and cosine matrices of the dictionary (paper Fig. 6); what each atom stands for; the
dictionary's health (one row per atom: how often it fires, its nearest atoms, its flags); the concepts one label
carries (tab "Label profile": the pool's items decomposed without their labels)."""
import numpy as np
import plotly.graph_objects as go
import streamlit as st

from app_pages import _html, _inspect, _safe
from app_pages import _state as state
from app_pages._errors import visitor_text
from app_pages._images import image_gallery, image_grid, label_text, remote_hosts_caption
from app_pages._inspect import item_atoms_section
from app_pages._ui import csv_download, d0_picker, method_picker, more_rows, page_intro, require_dictionaries
from app_pages._workspace import get_workspace, workspace_words, ws_id
from slics_core.analysis import FIRE_RTOL, FIRE_RULE, HEALTH_FLAGS, HEALTH_RULES
from slics_core.explorer.arrival import atom_matrices, health_table, label_energy, pool_top_items
from slics_core.explorer.atom_tables import (
    atom_labels,
    atom_top_words,
    concept_words,
    default_sparsity,
    group_layout,
    health_counts,
    health_histogram,
    health_note,
    label_options,
    matrix_table,
    misplaced_threshold_words,
    profile_table,
    top_items_table,
)
from slics_core.explorer.exports import with_settings
from slics_core.explorer.inspection import ACTIVITY_CODES, LEVEL_WORDS, activation_sentence, atom_activation_view
from slics_core.explorer.maps import selected_point_ids
from slics_core.explorer.narration import atom_sentences, missing
from slics_core.explorer.page_settings import atoms_split, profile_split
from slics_core.uncertainty import N_SUBSETS

st.title("Atoms")
look_at = st.empty()  # the page's one sentence, written from the matrices' own numbers (below)
st.caption("Every concept owns a group of atoms (rows and columns ordered by concept, lines between groups). "
           "First: how often atoms are active together (non-negative OMP codes of the validation items, no "
           "labels used; each row divided by its diagonal). Second: cosine similarity of the atoms. Click a "
           "cell (or pick below) to see the images that use its row's atom most and the words closest to it.")

ws = get_workspace()
require_dictionaries(ws)

c1, c2, c3 = st.columns(3)
with c1:
    method = method_picker(ws, methods=ws.dictionary_methods())
with c2:
    d0 = d0_picker(ws)
model = ws.model(method, d0)
M = int(model.atoms_.shape[0])
with c3:
    default_nz = default_sparsity(model)
    if not 1 <= int(st.session_state.get("n_nonzero", default_nz)) <= M:
        st.session_state.pop("n_nonzero", None)
    n_nonzero = st.slider("OMP atoms per item (co-occurrence)", 1, min(M, 4 * default_nz), default_nz,
                          key="n_nonzero", help="Sparsity of the label-free non-negative OMP codes "
                                               "(the paper is silent; default d0).")

code_split = atoms_split(ws)


# both from the workspace's store when the build or another process made them (slics_core.explorer.arrival)
@st.cache_data(show_spinner=False, max_entries=16)
def _matrices(key, method, d0, n_nonzero, split, _ws):
    return atom_matrices(_ws, method, d0, n_nonzero, split)


@st.cache_data(show_spinner=False, max_entries=16)
def _health(key, method, d0, _ws):
    """The dictionary's health table: stored at build (slics_core.explorer.arrival.health_table, the route
    Evaluate's health line takes too), else computed once and stored."""
    return health_table(_ws, method, d0)


@st.cache_data(show_spinner=False, max_entries=16)
def _pool_top(key, method, d0, _ws):
    return pool_top_items(_ws, method, d0)


with st.spinner("Sparse coding the validation items…"):
    mats = _matrices(ws_id(ws), method, int(d0), int(n_nonzero), code_split, ws)

HEATMAP_PX = 820
ACTIVATION_EXAMPLES = 6  # images per activation level
lay = group_layout(model.groups_)
order = lay["order"]
names = ws.concept_names
atom_label = dict(enumerate(atom_labels(model.groups_, names)))


PICK_COLUMNS = 10  # invisible click targets per heatmap row (below)


def pick_columns(M):
    """Columns of a heatmap's click targets: at most PICK_COLUMNS per row, evenly spaced, the same on every row,
    and the most cells between a cell and its row's nearest target (``reach``)."""
    step = -(-M // PICK_COLUMNS)
    return np.arange(step // 2, M, step, dtype=np.int16), step - step // 2


@st.cache_resource(show_spinner=False, max_entries=16)
def _heatmap_figure(ids: tuple, title, zmin, zmax, colorscale, _Z, _order, _lay, _names, _labels):
    """The figure of one matrix, built once per (workspace, dictionary, codes, matrix) and process: building it
    took ~0.7 s of CPU per heatmap and run (docs/performance.md); st.plotly_chart only reads it."""
    Z, order, lay, names, M = _Z, _order, _lay, _names, _Z.shape[0]
    Zo = Z[np.ix_(order, order)]
    fig = go.Figure(go.Heatmap(z=Zo.astype(np.float32), zmin=zmin, zmax=zmax, colorscale=colorscale,
                               x=np.arange(M), y=np.arange(M), hoverinfo="skip"))
    # Heatmap traces emit no selection events, so invisible markers make the cells clickable: on every row the
    # same few columns (pick_columns), so the marker nearest a click ("closest" hover, within ``hoverdistance``)
    # is always one of the clicked row's, and a click anywhere on a row picks its atom. A few hundred SVG markers,
    # not one WebGL marker per cell: in a browser without a GPU the Scattergl overlay of 3 600 cells cost 1-3 s
    # of CPU per figure drawn (docs/performance.md, "Clicks a presenter does not wait for").
    cols, reach = pick_columns(M)
    ii, jj = np.meshgrid(np.arange(M, dtype=np.int16), cols, indexing="ij")
    ii, jj = ii.ravel(), jj.ravel()
    rows = order[ii].astype(np.int16)
    fig.add_trace(go.Scatter(x=jj, y=ii, mode="markers", marker=dict(size=6, opacity=0), customdata=rows,
                             hovertext=[_safe.figure_text(_labels[int(a)]) for a in rows], showlegend=False,
                             hovertemplate="row atom %{customdata}: %{hovertext}<br>click to see it below"
                                           "<extra></extra>",
                             selected=dict(marker=dict(opacity=0)), unselected=dict(marker=dict(opacity=0))))
    # the nearest target is at most ``reach`` cells away along the row (a cell is about HEATMAP_PX / M px)
    fig.update_layout(hoverdistance=int(np.ceil((reach + 1) * HEATMAP_PX / M)))
    line = dict(color="black", width=1)
    shapes = []  # group boundaries, in data coordinates so they stop at the matrix edge (set at once: add_shape
    for b in lay["boundaries"]:  # one at a time validates every shape again, quadratic in their number)
        shapes += [dict(type="line", x0=-0.5, x1=M - 0.5, y0=b, y1=b, line=line),
                   dict(type="line", x0=b, x1=b, y0=-0.5, y1=M - 0.5, line=line)]
    fig.update_layout(shapes=shapes)
    tick_names = [_safe.figure_text(names[c], 40) for c in lay["concepts"]]
    ticks = dict(tickmode="array", tickvals=lay["centres"], ticktext=tick_names,
                 showgrid=False, zeroline=False, constrain="domain", tickfont=dict(size=16))
    # one matrix per row of the page, square and large enough to read on a projector; margins wide enough for
    # the tick labels (16 px, about 10 px a character) and the colour bar, so that plotly's automatic margins
    # need not grow them and draw the figure a second time (a third of its drawing time in a browser)
    label_px = 10 * max(len(t) for t in tick_names)
    fig.update_layout(title=dict(text=title, font=dict(size=20)), height=HEATMAP_PX,
                      margin=dict(l=20 + label_px, r=120, t=50, b=30 + int(0.72 * label_px)),
                      clickmode="event+select", hovermode="closest",
                      xaxis=dict(**ticks, tickangle=-45, range=[-0.5, M - 0.5]),
                      yaxis=dict(**ticks, range=[M - 0.5, -0.5], scaleanchor="x"), font=dict(size=15))
    return fig


def heatmap(Z, title, zmin, zmax, colorscale, key):
    ids = (ws_id(ws), method, d0, mats["n_nonzero"], code_split, key)
    fig = _heatmap_figure(ids, title, zmin, zmax, colorscale, Z, order, lay, names, atom_label)
    return st.plotly_chart(fig, on_select="rerun", selection_mode=("points",), key=key, width="stretch")


C, cos, summ = mats["cooccurrence"], mats["cosine"], mats["summary"]
said = atom_sentences(summ)
with look_at.container():
    page_intro(said["look_at"])


@st.fragment
def atom_view():
    """The two heatmaps and the picked atom's images and words: a fragment, so that a click on a heatmap (or
    another atom in the picker) reruns this only, not the page's controls, matrices, health and label profile
    (docs/performance.md, "Third pass")."""
    # heatmap clicks (from the previous interaction) feed the atom picker: the clicked cell's row atom
    for key in ("cooc_map", "cos_map"):
        ids = selected_point_ids(st.session_state.get(key))
        sig = tuple(ids)
        if sig != st.session_state.get(f"_{key}_last", ()):
            st.session_state[f"_{key}_last"] = sig
            if ids and 0 <= ids[0] < M:
                state.put("atom", int(ids[0]))
    if state.get("atom") not in range(M):
        state.put("atom", int(order[0]))

    heatmap(np.nan_to_num(C, nan=0.0), f"Co-occurrence ({len(ws.index[code_split])} {code_split} items, "
            f"{mats['n_nonzero']} atoms each)", 0.0, 1.0, "Blues", "cooc_map")
    st.markdown(said["cooccurrence"])
    st.caption(f"{int(np.sum(mats['usage'] == 0))} atoms unused by OMP.")
    csv_download(matrix_table(C, [atom_label[a] for a in range(M)]), f"cooccurrence_{method}_d0{d0}.csv",
                 "Download co-occurrence (CSV)", key="cooc_csv")
    heatmap(cos, "Cosine similarity of the atoms", -1.0, 1.0, "RdBu_r", "cos_map")
    st.markdown(said["cosine"])
    csv_download(matrix_table(cos, [atom_label[a] for a in range(M)]), f"atom_cosine_{method}_d0{d0}.csv",
                 "Download cosines (CSV)", key="cos_csv")

    # ---------------------------------------------------------------- one atom
    st.subheader("One atom")
    a1, a2 = st.columns([3, 1])
    with a1:
        atom_key = f"atom_{method}_d0{d0}"
        st.session_state[atom_key] = state.get("atom")
        atom = st.selectbox("Atom", [int(a) for a in order],
                            format_func=lambda a: _safe.plain(f"{atom_label[int(a)]} (atom {int(a)})"),
                            key=atom_key,
                            on_change=state.copy_widget, args=(atom_key, "atom"))
    with a2:
        k = st.number_input("Images", min_value=1, max_value=60, value=12, key="atom_k")
    atom = int(atom)
    st.caption(f"Concept **{_safe.text(names[model.groups_[atom]])}**; used by {mats['usage'][atom]:.1%} "
               f"of the {code_split} items in the OMP codes.")

    img_col, word_col = st.columns([3, 1])
    with img_col:
        st.markdown("**Pool images that use it most** (NNLS coefficients on each image's labelled concepts)")
        # the best MAX_TOP_ITEMS per atom (slics_core.explorer.arrival.pool_top_items: a pool with labels coded on
        # each image's labelled concepts, shards on every concept), as hits of the workspace's pool
        with st.spinner("Coding the pool…"):
            top = top_items_table(*_pool_top(ws_id(ws), method, int(d0), ws), atom, k=int(k))
        hits = ws.pool.hits(top.row, top.coefficient)
        if not len(hits):
            st.info("No pool image uses this atom.")
        elif hits.labels is None:  # shard rows: no labels to show
            image_grid(ws, hits, captions=[f"{c:.2f}" for c in hits.scores], n_cols=6, size=112)
            remote_hosts_caption(ws)
        else:
            image_grid(ws, hits, captions=[f"{c:.2f} · {label_text(ws, r)}" for r, c in
                                           zip(hits.rows, hits.scores)], n_cols=6, size=112)
            rows = top.assign(row=hits.rows)
            csv_download(rows.assign(labels=[label_text(ws, r) for r in hits.rows]), f"atom{atom}_images.csv",
                         "Download images (CSV)", key="atom_items_csv")
    with word_col:
        st.markdown("**Top words** (cosine with the atom; same order as one-atom NNLS)")
        try:
            with st.spinner("Embedding the vocabulary (first time only)…"):
                words, Wp, _ = workspace_words(ws)
        except (FileNotFoundError, ImportError, ValueError) as exc:
            st.warning(visitor_text(exc, "No word vocabulary for this workspace"))
        else:
            tw = atom_top_words(model.atoms_[atom], Wp, words, k=10)
            st.dataframe(_safe.table(tw[["word", "cosine"]]), hide_index=True, width="stretch")
            csv_download(tw, f"atom{atom}_words.csv", "Download words (CSV)", key="atom_words_csv")
    shown_rows = [] if hits.rows is None else [int(r) for r in hits.rows]
    activation_section(atom, shown_rows)
    state.use_extras("atom")
    state.sync_url()  # a fragment's rerun does not reach app.py's write
    state.use_extras("atom")


@st.cache_data(show_spinner=False, max_entries=256)
def _activation(key, method, d0, atom, k, _ws):
    """One atom's activation statistics over the label-free codes of the profile items (computed once per
    dictionary and stored: app_pages/_inspect.codes); a pick of an atom reads them."""
    split = profile_split(_ws)
    model = _ws.model(method, d0)
    return atom_activation_view(_inspect.codes(_ws, method, d0), atom, _ws.index[split], _ws.Y,
                                int(model.groups_[atom]), k=k)


def activation_section(atom, shown_rows):
    """The picked atom's activations (histogram, firing with and without its concept, images at three levels)
    and the atoms of one of the items shown (issue 38's inspector views; drawn inside :func:`atom_view`)."""
    split = profile_split(ws)
    label = atom_label[atom]
    concept = names[model.groups_[atom]]
    st.markdown(f"**How strongly {_safe.text(label)} fires** ({ACTIVITY_CODES}, the {split} items)")
    with st.spinner("Coding the items without labels (once per dictionary)…"):
        view = _activation(ws_id(ws), method, int(d0), atom, ACTIVATION_EXAMPLES, ws)
    st.markdown(activation_sentence(view, _safe.text(concept), split))
    if not view["fires"]:
        return
    e = view["edges"]
    mid, width = (e[:-1] + e[1:]) / 2, np.diff(e)
    if "counts_with" in view:  # stacked: items with the atom's concept, then those without it
        fig = go.Figure([
            go.Bar(x=mid, y=view["counts_with"], width=width, name=f"with {_safe.figure_text(concept)}",
                   marker_color="#1f77b4", hovertemplate="coefficient %{x:.3f}<br>%{y} items<extra></extra>"),
            go.Bar(x=mid, y=view["counts_without"], width=width, name=f"without {_safe.figure_text(concept)}",
                   marker_color="#ff7f0e", hovertemplate="coefficient %{x:.3f}<br>%{y} items<extra></extra>")])
        fig.update_layout(barmode="stack", legend=dict(orientation="h", y=1.02, x=1, xanchor="right",
                                                       yanchor="bottom", font=dict(size=15)))
    else:
        fig = go.Figure(go.Bar(x=mid, y=view["counts"], width=width,
                               hovertemplate="coefficient %{x:.3f}<br>%{y} items<extra></extra>"))
    fig.update_layout(title=f"Non-zero coefficients of {_safe.figure_text(label)} ({view['fires']} of "
                            f"{view['n_items']} {split} items)", height=420, bargap=0.05, font=dict(size=15),
                      xaxis=dict(title="coefficient", tickfont=dict(size=16)),
                      yaxis=dict(title="items", tickfont=dict(size=16)), margin=dict(l=10, r=10, t=50, b=10))
    st.plotly_chart(fig, key="activation_hist", width="stretch")
    examples = []
    for level, (rows, coefs) in view["examples"].items():
        q = view["quantiles"][level]
        head = (f'<p style="margin:0 0 0.5rem 0"><strong>{_html.text(level.capitalize())}</strong> '
                f'{_html.text(f"(nearest {q:.3f}, {LEVEL_WORDS[level]})")}</p>')
        image_gallery(ws, rows.tolist(), captions=[f"#{int(r)} · {c:.3f}" for r, c in zip(rows, coefs)],
                      n_cols=ACTIVATION_EXAMPLES, size=96, head=head)
        examples += [int(r) for r in rows]
    options = list(dict.fromkeys(shown_rows + examples))
    if not options:
        return
    if st.session_state.get("atom_item") not in options:
        st.session_state["atom_item"] = options[0]
    r = st.selectbox("An item's atoms (the images above)", options, key="atom_item",
                     format_func=lambda i: f"#{int(i)} · {label_text(ws, int(i))}")
    item_atoms_section(ws, method, int(d0), ws.X[int(r)], f"row:{int(r)}", "atoms", f"Atoms of #{int(r)}")


atom_view()

# ---------------------------------------------------------------- health
def health_section():
    st.subheader("Dictionary health")
    n_train = len(ws.index.get("train", []))
    if not n_train:
        st.info("This workspace has no training items, so the atoms' health cannot be measured.")
        return
    st.caption(f"Every number here comes from the NNLS codes of the {n_train} training items on their labelled "
               f"concepts (the codes the dictionary is fitted with), not from the label-free OMP codes of the "
               f"matrices above; {FIRE_RULE}. Frequency: share of the training items on which the atom fires; mean "
               f"coefficient: over those items; nearest own / other: largest signed cos with another atom of its "
               f"concept / of any other concept (atoms are used with non-negative coefficients: an atom and its "
               f"negative point opposite ways); p (other): chance that, in random dictionaries drawn from a "
               f"Gaussian fitted to these {M} atoms ({ws.X.shape[1]} dimensions), an atom's nearest of as many "
               f"others comes as near; concept share: share of its concept's items it fires on, "
               f"with its one-sided 95 % lower bound.")
    with st.spinner("Coding the training items…"):
        health = _health(ws_id(ws), method, int(d0), ws)
    counts = health_counts(health)
    st.markdown(" · ".join(f"**{counts[f]}** {f}" for f in HEALTH_FLAGS) + f" (of {M} atoms)")
    st.caption("; ".join(f"*{f}*: {HEALTH_RULES[f]}" for f in HEALTH_FLAGS) + ". "
               + misplaced_threshold_words(model.groups_, health["nearest_other_cut"]))
    note = health_note(counts, M)
    if note:
        st.caption(note)
    hist = health_histogram(health["frequency"])
    if len(hist["counts"]):
        e = hist["edges"]
        fig = go.Figure(go.Bar(x=(e[:-1] + e[1:]) / 2, y=hist["counts"], width=np.diff(e),
                               hovertemplate="log10 frequency %{x:.2f}<br>%{y} atoms<extra></extra>"))
        fig.update_layout(title=f"Firing frequency of the atoms (log10, {n_train} training items)"
                                + (f"; {hist['n_dead']} dead atoms not drawn" if hist["n_dead"] else ""),
                          xaxis=dict(title="log10(frequency)", tickfont=dict(size=16)),
                          yaxis=dict(title="atoms", tickfont=dict(size=16)), height=420, bargap=0.05,
                          margin=dict(l=10, r=10, t=50, b=10), font=dict(size=15))
        st.plotly_chart(fig, key="health_hist", width="stretch")
    shown = health[["label", "frequency", "mean_coefficient", "nearest_own", "nearest_other", "nearest_other_label",
                    "nearest_other_p", "concept_share", "concept_share_low", "flags"]].assign(
        flags=[", ".join(f) for f in health["flags"]])
    for c in ("mean_coefficient", "nearest_own", "nearest_other", "concept_share", "concept_share_low"):
        shown[c] = [missing(v) for v in shown[c]]  # "—" where absent, never a None cell
    shown["nearest_other_p"] = [missing(v, "{:.1e}") for v in shown["nearest_other_p"]]
    st.dataframe(_safe.table(shown), hide_index=True, width="stretch", key="health_table",
                 column_config={"label": "atom", "mean_coefficient": "mean coefficient", "nearest_own": "nearest own",
                                "nearest_other": "nearest other", "nearest_other_label": "nearest other atom",
                                "nearest_other_p": "p (other)", "concept_share": "concept share",
                                "concept_share_low": "share ≥ (95 %)"})
    more_rows(len(shown), "atoms")
    table = with_settings(health.assign(flags=[";".join(f) for f in health["flags"]]), workspace=ws.name,
                          method=method, d0=int(d0), split="train", codes="NNLS on the labelled concepts",
                          fire_rtol=FIRE_RTOL)
    csv_download(table, f"atom_health_{method}_d0{d0}.csv", "Download health (CSV)", key="health_csv")


# ---------------------------------------------------------------- label profile
PROFILE_WORDS = 3  # words per concept under each bar (the caption rule, as the Captions page)
PROFILE_BLUE, PROFILE_GREY = "#1f77b4", "#b0b0b0"  # a lift outside / inside the random subsets' band


@st.cache_data(show_spinner=False, max_entries=16)
def _energy(key, method, d0, _ws):
    """‖v_j‖²/‖x̂‖² of every pool item, decomposed without labels: from the workspace's store, else computed
    once and stored (slics_core.explorer.arrival)."""
    return label_energy(_ws, method, d0)


@st.cache_data(show_spinner=False, max_entries=16)
def _concept_words(key, method, d0, _ws):
    words, Wp, _ = workspace_words(_ws)
    return concept_words(_ws.model(method, d0), words, Wp, k=PROFILE_WORDS)


@st.fragment
def profile_section():
    """One label's concepts (a fragment: picking another label reruns this tab only)."""
    split = profile_split(ws)
    pool = ws.index[split]
    st.caption(f"The {split} items that carry the label, decomposed **without** their labels (NNLS over every "
               "concept's atoms). Each bar is a concept's **lift**: the items' mean share ‖vⱼ‖²/Σₖ‖vₖ‖² over the "
               f"mean share of every {split} item (1 = as usual; the table and the hover add the raw "
               "‖vⱼ‖²/‖x̂‖²: components cancel, so a concept loud on every item would top every raw profile). "
               "A concept lifted well above 1 with a low P(concept | label) is carried by the items without "
               f"being labelled: a spurious concept. Words: the concept's top {PROFILE_WORDS} by the caption rule. "
               f"The light band: the lift of {N_SUBSETS} random {split} subsets of the label's size (2.5–97.5 %, "
               "seed 0); a bar inside it is drawn grey: a random subset that size lifts the concept as much.")
    options = label_options(names, ws.sub_names if ws.Z is not None else None, ws.sub_to_concept)
    if st.session_state.get("profile_label") not in range(len(options)):
        st.session_state.pop("profile_label", None)
    pick = st.selectbox("Label", range(len(options)), key="profile_label",
                        format_func=lambda i: f"{'concept' if options[i][0] == 'concept' else 'sub-label'}: "
                                              f"{options[i][2]}")
    kind, column, label_name = options[int(pick)]
    with st.spinner("Decomposing the pool without labels…"):
        energy = _energy(ws_id(ws), method, int(d0), ws)
    try:
        per_concept = _concept_words(ws_id(ws), method, int(d0), ws)
    except (FileNotFoundError, ImportError, ValueError) as exc:
        st.caption(visitor_text(exc, "No words for the bars"))
        per_concept = None
    L = ws.Y[pool] if kind == "concept" else ws.Z[pool]
    table = profile_table(energy, L, column, ws.Y[pool], names, per_concept)
    n = int(table.n_items.iloc[0])
    if not n:
        st.info(f"No {split} item carries {_safe.text(label_name)}.")
        return
    chart, side = st.columns([3, 2])
    with chart:
        # bars stand on the line lift = 1 (as usual), up for concepts the label's items carry more than usual
        colours = [PROFILE_GREY if inside else PROFILE_BLUE for inside in table.in_band]
        xs = [_safe.figure_text(c, 60) for c in table.concept]  # the bars' and the band's categories
        fig = go.Figure(go.Bar(x=xs, y=table.lift - 1.0, base=1.0,
                               marker_color=colours,
                               name="lift", showlegend=False,
                               customdata=np.column_stack([table.p_concept, table.energy, table.share, table.lift,
                                                           table.lift_lo, table.lift_hi]),
                               hovertext=[_safe.figure_text(w) for w in table.words] if per_concept is not None
                               else None,
                               hovertemplate="%{x}: lift %{customdata[3]:.2f} (random subsets "
                                             "%{customdata[4]:.2f}–%{customdata[5]:.2f})<br>mean ‖v‖²/‖x̂‖² "
                                             "%{customdata[1]:.3f} · share %{customdata[2]:.3f}"
                                             "<br>P(concept | label) %{customdata[0]:.2f}"
                                             + ("<br>words: %{hovertext}" if per_concept is not None else "")
                                             + "<extra></extra>"))
        fig.add_trace(go.Bar(x=xs, y=table.lift_hi - table.lift_lo, base=table.lift_lo, width=0.9,
                             marker=dict(color="rgba(120,120,120,0.22)", line=dict(width=0)), hoverinfo="skip",
                             name=f"lift of random subsets of {n} items (95 %)"))
        fig.add_hline(y=1.0, line_dash="dot", line_color="grey")
        fig.update_layout(title=f"Concepts of {_safe.figure_text(label_name, 60)} ({n} {split} items)", height=460,
                          font=dict(size=15),
                          barmode="overlay", legend=dict(orientation="h", yanchor="bottom", y=1.0, x=1.0,
                                                         xanchor="right", font=dict(size=12)),
                          xaxis=dict(tickfont=dict(size=16)), margin=dict(l=10, r=10, t=50, b=10),
                          yaxis=dict(title=f"lift of the share ‖vⱼ‖²/Σₖ‖vₖ‖² over every {split} item",
                                     tickfont=dict(size=16)))
        st.plotly_chart(fig, key="profile_fig", width="stretch")
    with side:
        shown = table.drop(columns=["n_items", "in_band"]).rename(columns={
            "energy": "‖v‖²/‖x̂‖²", "share": "share", "p_concept": "P(concept | label)",
            "lift_lo": "random lift 2.5 %", "lift_hi": "random lift 97.5 %"})
        st.dataframe(_safe.table(shown), hide_index=True, width="stretch", key="profile_table")
    csv = with_settings(table, workspace=ws.name, method=method, d0=int(d0), split=split,
                        label_kind="concept" if kind == "concept" else "sub-label", label=label_name,
                        codes="NNLS over every concept (no labels)")
    csv_download(csv, f"label_profile_{method}_d0{d0}.csv", "Download profile (CSV)", key="profile_csv")


health_tab, profile_tab = st.tabs(["Dictionary health", "Label profile"])
with health_tab:
    health_section()
with profile_tab:
    profile_section()

"""Evaluate: the methods table (mAP@k), the d0 sweep (Fig. 7) and ṽ_j vs v_j (Fig. 8).

Widget keys: "eval_k" (k of mAP@k), "eval_split" (query split for the table and Fig. 8: "query"/"val"),
"eval_d0" (d0 of the table), "eval_norm" (AP normalisation),
"eval_csv" / "eval_sweep_csv" (CSV downloads), "eval_sweep_html" / "eval_modes_html" (figure downloads),
"eval_sweep_fig" / "eval_modes_fig" (charts), "eval_table" (the methods table); stability section: "stab_seeds",
"stab_batch", "stab_iter", "stab_n_active" (settings), "stab_run" (starts it), "stab_table" / "stab_n_active_table",
"stab_csv" / "stab_n_active_csv", "stab_atoms_table" / "stab_atoms_csv" (one row per atom across seeds),
"stab_pairs_table", "stab_methods_table" / "stab_methods_csv" (across methods).
Stability: slics_core.explorer.stability_runs (seed stability and U-SLiCS at S̃ through slics_core.stability) in a
background thread per (workspace, settings), held process-wide (slics_core.explorer.background.JOBS) so every tab
sees its progress, and stored in the workspace's store, so a revisit shows the table at once.
Dictionary health: one line per dictionary method at the table's d0 (slics_core.explorer.arrival.health_numbers:
the counts of the stored health table Atoms shows, the one health route; st.cache_data keyed by ws_id, method, d0).
Uncertainty: each methods-table score is shown with its 95 % bootstrap interval over queries ("0.990 [0.988, 0.992]",
scoring.run_job(intervals=True), slics_core.uncertainty) and each Recall@k column names its ceiling; the CSV has the
bounds and ceilings as columns (<column> lo / hi / ceiling).
Computation: slics_core.explorer.scoring over every method fitted in the workspace (the registry,
slics_core.methods). Each job is ranked once (st.cache_resource keyed by ws_id, method, d0, mode,
split and the ranking depth, shared by every session); mAP@k for any k <= depth is computed from the
stored ranking (st.cache_data keyed by the same ids plus k and the normalisation), so a new k never
re-ranks. Exports: CSVs carry their settings as leading columns (workspace, split, k, normalization,
table d0), charts download as self-contained HTML (plotly.js inside, opens offline).
A workspace whose pool carries no labels (shards): every score ranks its labelled pool (ws.eval_pool, the rows
slics_core.explorer.pool.labelled_rows chooses), said in one line (scoring.eval_pool_words), with the on-disk index's
recall measured at build (scoring.pool_index_words).
"""
# keys: eval_k, eval_split, eval_d0, eval_norm, eval_table, eval_csv, eval_sweep_csv,
#       eval_sweep_fig, eval_modes_fig, eval_sweep_html, eval_modes_html
import math

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from app_pages import _safe
from app_pages import _state as state
from app_pages._errors import operator_sees_details, visitor_text
from app_pages._ui import csv_download, more_rows, page_intro
from app_pages._workspace import background_progress, get_workspace, wait_for_prepared_views, ws_id
from slics_core.analysis import HEALTH_FLAGS
from slics_core.evaluation import (
    RECALL_KS,
    SWEEP_BY,
    SWEEP_METHOD,
    SWEEP_MODE,
    choose_d0,
    d0_rule_words,
    fallback_d0,
    recall_keys,
)
from slics_core.explorer import scoring
from slics_core.explorer.arrival import health_numbers, job_rankings, job_scores
from slics_core.explorer.atom_tables import health_note
from slics_core.explorer.background import JOBS
from slics_core.explorer.exports import figure_html, with_settings
from slics_core.explorer.narration import EVALUATE_LOOK_AT_FIRST, MISSING, evaluate_look_at, missing
from slics_core.explorer.page_settings import atoms_split, sweep_splits
from slics_core.explorer.stability_runs import (
    N_ACTIVE_DEFAULT,
    StabilityRun,
    StabilitySettings,
    atom_frame,
    n_active_frame,
    pairs_frame,
    stability_frame,
    stored_result,
)
from slics_core.methods import MODE_SYMBOL, ORACLE_FSPLICE
from slics_core.stability import COMPARE_METHODS, N_ACTIVE_METHOD, SHARED_BETWEEN_SEEDS
from slics_core.uncertainty import CONFIDENCE, N_RESAMPLES

SPLIT_LABELS = {"query": "Query set (test)", "val": "Validation set"}
NORM_LABELS = {"retrieved": "relevant retrieved (default)", "min": "min(k, relevant in pool)"}
LABEL_COLOURS = {"general": "#1f77b4", "sub": "#d62728"}


@st.cache_resource(show_spinner=False, max_entries=64)  # a sweep and two tables; the rest is on disk
def _rankings(key: str, method: str, d0, mode, split: str, depth: int, _ws):
    """Top-``depth`` rankings of one job (read-only, shared): from the workspace's store, where the build or
    any process put them, else ranked once and stored (slics_core.explorer.arrival)."""
    idx = job_rankings(_ws, scoring.Job(method, d0, mode, split), depth, index=lambda: _ws.eval_pool.index)
    idx.setflags(write=False)
    return idx


@st.cache_data(show_spinner=False, max_entries=2048)
def _job(key: str, method: str, d0, mode, split: str, k: int, normalization: str, _ws, intervals: bool = False):
    """One job's scores: from the workspace's store (the build prepares the first view's), else computed on its
    rankings (``_rankings``, shared) and stored (slics_core.explorer.arrival.job_scores)."""
    job = scoring.Job(method, d0, mode, split)
    depth = scoring.stored_depth(k)
    return job_scores(_ws, job, k, normalization, intervals=intervals,
                      rankings=lambda: _rankings(key, method, d0, mode, split, depth, _ws))


def _run(ws, jobs, k, norm, title, intervals=False):
    """Run (or fetch from the cache) every job, with a progress bar; ``intervals``: with each score's bootstrap
    interval over queries (the methods table; the sweep's curves go without)."""
    bar = st.progress(0.0, text=title)
    out = []
    for i, job in enumerate(jobs):
        bar.progress(i / max(1, len(jobs)), text=f"{title}: {job.label()}")
        out.append(_job(ws_id(ws), job.method, job.d0, job.mode, job.split, k, norm, ws, intervals))
    bar.empty()
    return out


def _sweep_figure(records, chosen, k, mode=SWEEP_MODE, on_validation=True):
    fig = go.Figure()
    for split, dash in (("val", "solid"), ("query", "dash")):
        for lab in ("general", "sub"):
            rs = sorted((r for r in records if r["split"] == split and r["mode"] == mode), key=lambda r: r["d0"])
            if not rs or all(math.isnan(r[lab]) for r in rs):
                continue
            fig.add_trace(go.Scatter(x=[r["d0"] for r in rs], y=[r[lab] for r in rs], mode="lines+markers",
                                     line=dict(color=LABEL_COLOURS[lab], dash=dash),
                                     name=f"{'Gen.' if lab == 'general' else 'Sub.'} · {SPLIT_LABELS[split]}"))
    fig.add_vline(x=chosen, line=dict(color="grey", dash="dot"),
                  annotation_text=f"chosen d0 = {chosen}" if on_validation else f"fallback d0 = {chosen}")
    fig.update_layout(title=f"{SWEEP_METHOD} mAP@{k} vs d0 ({MODE_SYMBOL[mode]})",
                      xaxis_title="d0 (atoms per concept)",
                      yaxis_title=f"mAP@{k}", height=460, margin=dict(t=50, b=40),
                      legend=dict(orientation="h", yanchor="top", y=-0.2, x=0))
    return fig


def _modes_figure(records, chosen, k, split, on_validation=True):
    fig = go.Figure()
    for mode, dash, sym in (("partial", "solid", "circle"), ("full", "dash", "diamond")):
        for lab in ("general", "sub"):
            rs = sorted((r for r in records if r["split"] == split and r["mode"] == mode), key=lambda r: r["d0"])
            if not rs or all(math.isnan(r[lab]) for r in rs):
                continue
            fig.add_trace(go.Scatter(x=[r["d0"] for r in rs], y=[r[lab] for r in rs], mode="lines+markers",
                                     line=dict(color=LABEL_COLOURS[lab], dash=dash), marker=dict(symbol=sym),
                                     name=f"{'Gen.' if lab == 'general' else 'Sub.'} · "
                                          f"{MODE_SYMBOL[mode]} ({mode})"))
    fig.add_vline(x=chosen, line=dict(color="grey", dash="dot"),
                  annotation_text=f"chosen d0 = {chosen}" if on_validation else f"fallback d0 = {chosen}")
    modes = f"{MODE_SYMBOL['partial']} vs {MODE_SYMBOL['full']}"
    fig.update_layout(title=f"{modes}: {SWEEP_METHOD} mAP@{k} on the {SPLIT_LABELS[split].lower()}",
                      xaxis_title="d0 (atoms per concept)", yaxis_title=f"mAP@{k}", height=460,
                      margin=dict(t=50, b=40), legend=dict(orientation="h", yanchor="top", y=-0.2, x=0))
    return fig


@st.cache_resource(show_spinner=False, max_entries=64)
def _figures(key: str, k: int, norm: str, split: str, chosen: int, on_validation: bool, _sweep):
    """Fig. 7 and Fig. 8 of one (workspace, k, normalisation, split), built once and shared by every session
    (the sweep records are a function of those ids). Read-only: st.plotly_chart and the HTML export copy them."""
    return (_sweep_figure(_sweep, chosen, k, on_validation=on_validation),
            _modes_figure(_sweep, chosen, k, split, on_validation))


@st.cache_data(show_spinner=False, max_entries=64)
def _health(key: str, method: str, d0: int, split: str, _ws):
    """Health line numbers of one dictionary: flags on the training split, active atoms and cos(x, x̂) on
    ``split``, NNLS codes on the labelled concepts throughout."""
    return health_numbers(_ws, method, d0, split)


def health_line(method, d0, h, split):
    """The one line of a dictionary: flag counts, active atoms per item and mean cos(x, x̂)."""
    flags = ", ".join(f"{h['counts'][f]} {f}" for f in HEALTH_FLAGS)
    return (f"**{_safe.text(method)}** (d0 = {d0}, {h['n_atoms']} atoms): {flags}; "
            f"{h['active_per_item']:.2f} active atoms per item, mean cos(x, x̂) {h['mean_cos']:.3f} "
            f"on the {'validation' if split == 'val' else 'training'} split.")


#: Suffixes of a score's bootstrap interval columns in the table frame (and the CSV).
LO, HI = " lo", " hi"


def _table_frame(rows, k):
    """The methods table as numbers: a column per score, its interval's bounds (``<column> lo`` / ``hi``) and
    each Recall@k's ceiling (``<column> ceiling``), as the CSV carries them."""
    df = pd.DataFrame(rows)
    scores = {"general": f"Gen. mAP@{k}", "sub": f"Sub. mAP@{k}", "general_full": f"Gen. mAP@{k} (v_j)",
              "sub_full": f"Sub. mAP@{k} (v_j)"}
    for rk in RECALL_KS:  # Recall@20 and Recall@100 beside mAP@k (of the same ranking as Gen./Sub.)
        gkey, skey = recall_keys(rk)
        scores.update({gkey: f"Gen. Recall@{rk}", skey: f"Sub. Recall@{rk}"})
    names = {"method": "Method", "split": "Queries", **scores}
    order = ["Method", "d0"]
    for key, col in scores.items():
        order.append(col)
        for b, suffix in (("lo", LO), ("hi", HI)):
            names[f"{key}_{b}"] = col + suffix
            if f"{key}_{b}" not in df:
                df[f"{key}_{b}"] = math.nan
            order.append(col + suffix)
        if key.startswith("recall"):
            names[f"{key}_ceiling"] = col + " ceiling"
            order.append(col + " ceiling")
    df = df.rename(columns=names)
    df["d0"] = df["d0"].astype("Int64")
    return df[[*order, "Queries", "k"]]


def _ceiling(df, col):
    """The ceiling of a Recall@k column (the same for every row: it depends on the queries' labels only)."""
    c = df.get(col + " ceiling")
    vals = [] if c is None else [v for v in c if v == v]
    return vals[0] if vals else math.nan


def _shown(df):
    """The table as displayed: each score with its interval, ``0.660 [0.620, 0.700]``, a Recall@k column's
    header with its ceiling; "—" where a method has no d0 or no full component (never None / <NA>: a
    Styler's ``na_rep`` is not honoured by st.dataframe, which prints None)."""
    out = df.copy()
    rename = {}
    for c in df.columns:
        if c.startswith(("Gen.", "Sub.")) and not c.endswith((LO, HI, " ceiling")):
            out[c] = [missing(v) if missing(lo) == MISSING else f"{missing(v)} [{lo:.3f}, {hi:.3f}]"
                      for v, lo, hi in zip(df[c], df[c + LO], df[c + HI])]
            if "Recall@" in c and missing(_ceiling(df, c)) != MISSING:
                rename[c] = f"{c} (ceiling {_ceiling(df, c):.3f})"
    out = out.drop(columns=[c for c in df.columns if c.endswith((LO, HI, " ceiling"))])
    out["d0"] = [missing(v, "{:d}") for v in out["d0"]]
    return out.rename(columns=rename)


def _csv_frame(df, ws, split, k, norm, d0):
    """The methods table with the settings that produced it (leading columns; missing values empty)."""
    out = df.rename(columns={"Queries": "split"})
    return with_settings(out, workspace=ws.name, split=split, k=k, normalization=norm, table_d0=d0)


def _html_download(fig, file_name, key):
    """A download button whose file (a self-contained HTML page, ~4.6 MB) is made only when clicked."""
    st.download_button("Download chart (HTML)", lambda: figure_html(fig), file_name=file_name, mime="text/html",
                       key=key, on_click="ignore")


# ---------------------------------------------------------------------- page
st.title("Evaluate")
look_at = st.empty()  # the page's one sentence, written from the table once it is computed
with look_at.container():  # until then, and where the page stops before it: what it scores
    page_intro(EVALUATE_LOOK_AT_FIRST)
ws = get_workspace()
st.caption("Concept-filtered retrieval scored as in the paper (sec. 4.4): for every query and every concept it "
           "contains, the candidate pool is ranked by that concept's component of the query and the top k are "
           "judged relevant if they share the concept (Gen.) or also one of its sub-labels (Sub.). Scores use "
           "the models already fitted in this workspace; nothing is refitted.")
if not ws.pool.labelled:  # the shards carry no labels: the scores rank the labelled rows (ws.eval_pool)
    st.info(scoring.eval_pool_words(ws))
    st.caption(scoring.pool_index_words(ws, ws.pool.index))

if getattr(ws, "building", None) is not None:
    st.info(f"Evaluate needs every method at every d0: they are being built in the background "
            f"({ws.building.percent():.0f} %). This page fills in by itself when the build is done.")
    state.stop()
if wait_for_prepared_views(ws):  # a store from an earlier release, being prepared: not computed twice
    state.stop()
if not ws.d0_values or SWEEP_METHOD not in ws.methods:
    st.info(f"This workspace has no fitted {SWEEP_METHOD} models to evaluate."
            + (" Build one with `slics workspace`." if operator_sees_details() else ""))
    state.stop()
splits_here = sweep_splits(ws)  # the query and validation splits that have items
if "query" not in splits_here:
    st.info("This workspace has no query items, so there is nothing to evaluate.")
    state.stop()
on_validation = "val" in splits_here  # else d0 is the fallback rule's (slics_core.evaluation.fallback_d0)
if ws.Z is None:
    st.caption("This workspace has no sub-labels: only general-label scores are shown"
               + (", and d0 is chosen by general-label mAP." if on_validation else "."))
if not on_validation:
    st.caption(f"This workspace has no validation split: d0 is not chosen on validation but is "
               f"{d0_rule_words(False)}, and the d0 curve shows the query set only.")

c1, c2, c3 = st.columns([1, 2, 2])
st.session_state["eval_k"] = int(state.get("k"))  # the shared k (app_pages/_state.py)
k = int(c1.number_input("k (mAP@k)", min_value=1, max_value=200, step=1, key="eval_k",
                        on_change=state.copy_widget, args=("eval_k", "k")))
if st.session_state.get("eval_split") not in splits_here:
    st.session_state.pop("eval_split", None)
split = c2.radio("Queries", [s for s in SPLIT_LABELS if s in splits_here], format_func=SPLIT_LABELS.get,
                 horizontal=True, key="eval_split")
norm = c3.radio("AP normalisation", list(NORM_LABELS), format_func=NORM_LABELS.get, key="eval_norm")

try:
    sweep = _run(ws, scoring.sweep_jobs(ws, SWEEP_METHOD, splits=splits_here), k, norm, "d0 sweep")
except ValueError as exc:
    st.error(visitor_text(exc, "Cannot evaluate this workspace"))
    state.stop()
chosen = (choose_d0(sweep, mode=SWEEP_MODE, by=SWEEP_BY) if on_validation
          else fallback_d0(r["d0"] for r in sweep))

d0_options = list(ws.d0_values)
if st.session_state.get("eval_d0") not in d0_options:
    st.session_state["eval_d0"] = chosen
d0 = st.select_slider("d0 of the dictionary methods in the table", options=d0_options, key="eval_d0",
                      format_func=lambda v: f"{v} ({'chosen' if on_validation else 'fallback'})" if v == chosen
                      else str(v),
                      help=f"The paper uses the d0 with {d0_rule_words(True)}.")

table_records = _run(ws, scoring.table_jobs(ws, d0, split=split), k, norm, "Methods table", intervals=True)

st.subheader(f"Methods (mAP@{k}, {SPLIT_LABELS[split].lower()}, d0 = {d0})")
summary = scoring.summary_rows(table_records)
with look_at.container():
    page_intro(evaluate_look_at(summary, chosen, k, ws.Z is not None, on_validation))
df = _table_frame(summary, k)
st.dataframe(_safe.table(_shown(df)), hide_index=True, width="stretch", key="eval_table")
st.caption("Gen./Sub.: ranked by the partial component ṽ_j (eq. 3) for the dictionary methods, by the whole "
           "query for UF, by the word-group component for F-SpLiCE. (v_j): ranked by the full component "
           "(eq. 2; U-SLiCS uses the query's zero-shot concepts). "
           f"{table_records[0]['n_pairs_general']} (query, concept) pairs. —: methods without atoms have no d0, "
           "and methods with one kind of component have no separate v_j column. "
           f"[lo, hi]: the {CONFIDENCE:.0%} bootstrap interval over queries ({N_RESAMPLES} resamples of the "
           "queries, seed 0, percentile): two methods whose intervals overlap much are not told apart by these "
           "queries. Recall@k's ceiling: the best Recall@k any ranking reaches on these queries (a query with R "
           "relevant items recalls at most min(k, R)/R), so read a Recall@k against it.")
for m, why in ws.skipped.items():
    st.caption(f"{_safe.text(m)} is not in this workspace: {_safe.text(why)}.")
if ORACLE_FSPLICE in ws.methods:
    st.caption(f"{ORACLE_FSPLICE} is an oracle: its vocabulary is exactly the label names (the category and "
               "supercategory names), which the paper's F-SpLiCE never has; it is shown for reference and never "
               "ranked. F-SpLiCE and SpLiCE decompose over general English words, as in the paper.")
csv_download(_csv_frame(df, ws, split, k, norm, d0), f"slics_methods_{split}_k{k}_d0{d0}.csv", key="eval_csv")
st.caption("CSV exports start with the settings that produced them: workspace, split, k, normalization and "
           "the table's d0 (empty cells where a method has no value).")

if len(ws.index.get("train", [])):
    st.markdown("**Dictionary health** (the Atoms page has the table): flags from the NNLS codes of the training "
                "items on their labelled concepts; active atoms per item and cos(x, x̂), x̂ reconstructed from "
                "the same kind of codes, on the split named.")
    health_split = atoms_split(ws)  # validation, else training
    with st.spinner("Coding the items for the dictionary health…"):
        notes = []
        for m in ws.dictionary_methods():
            h = _health(ws_id(ws), m, int(d0), health_split, ws)
            st.markdown(health_line(m, d0, h, health_split))
            notes.append(health_note(h["counts"], h["n_atoms"]))
        if notes and all(notes) and len(set(notes)) == 1:
            st.caption(notes[0])

st.subheader("Dictionary size d0")
if on_validation:
    st.markdown(f"Chosen **d0 = {chosen}**: {d0_rule_words(True, k, ws.Z is not None)}.")
else:
    st.markdown(f"**d0 = {chosen}**, not chosen on validation (this workspace has no validation split): "
                f"{d0_rule_words(False)}.")
left, right = st.columns(2)
fig7, fig8 = _figures(ws_id(ws), k, norm, split, chosen, on_validation, sweep)
with left:
    st.plotly_chart(fig7, key="eval_sweep_fig", width="stretch")
    _html_download(fig7, "d0_sweep.html", "eval_sweep_html")
with right:
    st.plotly_chart(fig8, key="eval_modes_fig", width="stretch")
    _html_download(fig8, "partial_vs_full.html", "eval_modes_html")
sweep_df = pd.DataFrame(sweep)[["method", "d0", "mode", "split", "k", "normalization", "general", "sub",
                                "n_pairs_general", "n_pairs_sub"]]
with st.expander("Sweep numbers"):
    st.dataframe(sweep_df.assign(**{c: [missing(v) for v in sweep_df[c]] for c in ("general", "sub")}),
                 hide_index=True, width="stretch")
    more_rows(len(sweep_df))
    csv_download(with_settings(sweep_df, workspace=ws.name), f"slics_d0_sweep_k{k}.csv", key="eval_sweep_csv")


# ---------------------------------------------------------------------- stability
def _stability_words(snap) -> str:
    return (f"Stability in the background: {snap['stage']} ({snap['done']}/{snap['total']} fits, "
            f"{snap['elapsed']:.0f} s; this section fills in by itself)")


def stability_section():
    st.subheader("Stability over seeds and S̃")
    n_train = len(ws.index.get("train", []))
    if SWEEP_METHOD not in ws.dictionary_methods() or not n_train:
        st.info(f"Stability refits {SWEEP_METHOD} on the training items; this workspace has none to refit.")
        return
    st.caption(f"Do the atoms come back? {SWEEP_METHOD} is refitted at d0 = {d0} with mini-batches, once per seed; "
               "each seed's atoms are matched one to one to the first seed's within their concept (Hungarian on "
               "the signed cos: atoms are used with non-negative coefficients, so an atom and its negative are "
               f"opposite) and scored on the query set (mAP@{k} mean ± std over the seeds). What the seeds share: "
               f"{SHARED_BETWEEN_SEEDS}. {' and '.join(COMPARE_METHODS)} at the same d0 (first seed, same batches) "
               f"are matched to the first seed's fit the same way. {N_ACTIVE_METHOD} is refitted once per S̃ "
               "(concepts per image of its zero-shot pseudo-labels). Runs in the background; the result is kept in "
               "the workspace, so the same settings show at once next time.")
    c1, c2, c3, c4 = st.columns(4)
    n_seeds = c1.number_input("Seeds", min_value=2, max_value=10, value=3, key="stab_seeds")
    batch = c2.number_input("Mini-batch size", min_value=1, max_value=n_train, value=max(1, min(n_train, 256)),
                            key="stab_batch")
    n_iter = c3.number_input("Epochs", min_value=1, max_value=50, value=10, key="stab_iter")
    options = list(range(1, ws.n_concepts + 1)) if N_ACTIVE_METHOD in ws.methods else []
    n_active = c4.multiselect(f"S̃ of {N_ACTIVE_METHOD}", options, default=[v for v in N_ACTIVE_DEFAULT if v in options],
                              key="stab_n_active", disabled=not options)
    settings = StabilitySettings(int(n_seeds), int(d0), int(batch), int(n_iter), int(k), norm, tuple(sorted(n_active)))
    key = (ws_id(ws), settings)
    result = stored_result(ws, settings)
    if result is None:
        run = JOBS.get(key)
        snap = None if run is None else run.snapshot()
        if snap is not None and snap["finished"] and not snap["error"]:
            result = snap["result"]
        else:
            if snap is not None and snap["error"]:
                st.warning(visitor_text(snap["error"], "The stability run failed"))
            if snap is None or snap["error"]:
                if not st.button("Run stability in the background", key="stab_run"):
                    st.caption(f"Not run yet with these settings ({settings.steps()} fits).")
                    return
                run = JOBS.start(key, lambda: StabilityRun(ws, settings))
            background_progress(run, _stability_words)
            return
    summ = result["summary"]
    st.markdown(f"Mean matched cos over every atom: **{missing(summ['matched_cos'])}**; mAP@{summ['k']} over "
                f"{len(summ['seeds'])} seeds: Gen. {missing(summ['general_mean'])} ± {missing(summ['general_std'])}, "
                f"Sub. {missing(summ['sub_mean'])} ± {missing(summ['sub_std'])}.")
    frame = stability_frame(result)
    st.dataframe(_safe.table(frame.assign(**{c: [missing(v) for v in frame[c]] for c in frame.columns[1:]})),
                 hide_index=True, width="stretch", key="stab_table")
    settings_cols = dict(workspace=ws.name, method=summ["method"], d0=int(d0), seeds=int(n_seeds),
                         batch_size=int(batch), epochs=int(n_iter), k=int(k), normalization=norm)
    csv_download(with_settings(frame, **settings_cols), f"slics_stability_d0{d0}_seeds{n_seeds}.csv",
                 "Download stability (CSV)", key="stab_csv")
    _atom_tables(result, settings_cols, d0, n_seeds)
    if result["n_active"]:
        na = n_active_frame(result, k)
        st.dataframe(_safe.table(na.assign(**{c: [missing(v) for v in na[c]] for c in na.columns[2:]})),
                     hide_index=True, width="stretch", key="stab_n_active_table")
        csv_download(with_settings(na, workspace=ws.name, d0=int(d0), epochs=int(n_iter), k=int(k),
                                   normalization=norm), f"slics_n_active_d0{d0}.csv", "Download S̃ rows (CSV)",
                     key="stab_n_active_csv")


def _shown(frame):
    """Cosines as text with three decimals ("—" where absent); other columns as they are."""
    return frame.assign(**{c: [missing(v) for v in frame[c]] for c in frame.columns if c.endswith("cos")})


def _atom_tables(result, settings_cols, d0, n_seeds):
    """Per atom: its match in every other seed; per pair of dictionaries and per atom: across methods."""
    seeds = atom_frame(result, "seeds")
    st.markdown(f"**Atoms across seeds**: one row per atom of seed {result['summary']['seeds'][0]}'s fit, its matched "
                f"atom (#k: rank in the same concept) and signed cos in every other seed, then the mean and the "
                f"minimum over the seeds ({len(seeds)} atoms).")
    st.dataframe(_safe.table(_shown(seeds)), hide_index=True, width="stretch", key="stab_atoms_table")
    csv_download(with_settings(seeds, **settings_cols), f"slics_stability_atoms_d0{d0}_seeds{n_seeds}.csv",
                 "Download atoms across seeds (CSV)", key="stab_atoms_csv")
    pairs, methods = pairs_frame(result), atom_frame(result, "methods")
    skipped = result["summary"].get("skipped", {})
    if not len(pairs):
        st.caption("No other method's dictionary to compare: " + "; ".join(f"{m} {why}" for m, why in skipped.items()))
        return
    st.markdown(f"**Across methods** (d0 = {d0}, seed {result['summary']['seeds'][0]}, the same batches): mean and "
                "smallest matched cos of every pair of dictionaries, then one row per atom of the first seed's "
                f"{result['summary']['method']} fit with its match in each other method's dictionary. S-SVD is "
                "where every S-SLiCS fit starts, so that pair shows how far the atoms moved.")
    st.dataframe(_safe.table(_shown(pairs)), hide_index=True, width="stretch", key="stab_pairs_table")
    st.dataframe(_safe.table(_shown(methods)), hide_index=True, width="stretch", key="stab_methods_table")
    csv_download(with_settings(methods, **settings_cols), f"slics_stability_methods_d0{d0}.csv",
                 "Download atoms across methods (CSV)", key="stab_methods_csv")
    if skipped:
        st.caption("Not compared: " + "; ".join(f"{m} {why}" for m, why in skipped.items()))


stability_section()

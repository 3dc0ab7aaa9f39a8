"""Mix concepts: one concept's component from the current query plus another concept's from a second query.

Widget keys: query_pick, query_upload, query_text, query_strip_prev, query_strip_next, query_thumb_<i>,
query_use_upload (app_pages/_query.py); method; d0; component; k; mix_c1 (concept from the query);
mix_q2 (second query); mix_c2 (concept from the second query); mix_pick (the clickable result gallery: a click
makes that image the query); mix_csv (download); mix_draw (button), seed, steps, gen_size
(app_pages/_generation.py), mix_png (download) when the workspace's generator is a diffusion pipeline.
Shared state and URL: ``q`` (first query), ``q2``, ``c1``, ``c2``, method, d0, mode, k (app_pages/_state.py).
"""
import numpy as np
import pandas as pd
import streamlit as st

from app_pages import _generation as drawing
from app_pages import _safe
from app_pages import _state as state
from app_pages._errors import visitor_text
from app_pages._images import image_gallery, label_text, png_bytes, remote_hosts_caption, shared
from app_pages._query import query_picker, row_query, show_query
from app_pages._ui import (
    component_picker,
    csv_download,
    d0_picker,
    k_picker,
    method_picker,
    page_intro,
    query_rows,
)
from app_pages._workspace import get_workspace, workspace_generator, ws_id
from slics_core.explorer.exports import with_settings
from slics_core.explorer.queries import concept_scores, hits_relevance, mix_components, norms_and_cosine
from slics_core.explorer.readings import prompt_text
from slics_core.methods import get_method


def _seed(key, value, options):
    st.session_state[key] = value if value in options else options[0]


def _query_option(labels, r, recent) -> str:
    """A second-query option: ``#r · its concepts``, with ``(recent)`` for a query of this session. The
    sub-labels are left out (they are shown under the picked query's picture), so the option fits its box."""
    concepts = labels.label(r).partition(" — ")[0]  # _Shared.label writes "concepts — sub-labels"
    return _safe.plain(f"#{r} · {concepts}") + (" (recent)" if recent else "")


def _ranked_concepts(model, x) -> list:
    """Names of the concepts along which ``x`` has a non-zero component, best score first."""
    scores = concept_scores(model, x)
    return [names[j] for j in np.argsort(-scores, kind="stable") if scores[j] > 0]


st.title("🧪 Mix concepts across queries")
ws = get_workspace()
state.use_extras()
page_intro("Look at whether the mixed gallery shows the first query's concept *and* the second query's "
           "concept together, in the kinds each query has.",
           "“This query's animal with that query's background”: the component of one concept from the query "
           "plus the component of another concept from a second query is a new embedding; it retrieves pool "
           "images (and, where the workspace has a generator, is drawn).")

q = query_picker(ws, required=True)
names = list(ws.concept_names)

with st.sidebar:
    st.subheader("Mixing settings")
    method = method_picker(ws, methods=[m for m in ws.methods if get_method(m).filtered])
    d0 = d0_picker(ws, method=method)
    mode = component_picker(method=method)
    k = k_picker()
model = ws.model(method, d0)
gen, gen_error = None, None
try:
    gen = workspace_generator(ws)
except (FileNotFoundError, ValueError) as exc:
    gen_error = exc
if gen is not None and not gen.deterministic:
    with st.sidebar:
        st.subheader("Drawing settings")
        opts = drawing.settings(gen)

# ---------------------------------------------------------------- the two parts
order_a = _ranked_concepts(model, q.x)
if not order_a:
    st.info("This query has no non-zero concept component; pick another query.")
    state.stop()

candidates = [h for h in state.history() if isinstance(h, int) and h != q.row] + \
    [int(r) for r in query_rows(ws) if int(r) != q.row]
candidates = list(dict.fromkeys(candidates))
if not candidates:
    st.info("The workspace has no other item to mix with.")
    state.stop()
q2_default = state.get("q2")
if q2_default not in candidates:  # default: a query whose best concept differs from the first query's
    best_a = names.index(order_a[0])
    q2_default = next((r for r in candidates if int(np.argmax(concept_scores(model, ws.X[r]))) != best_a),
                      candidates[0])

left, mid, right = st.columns([2, 3, 3])  # the middle one holds the second query's picker (its options' text)
with left:
    st.markdown("**From this query**")
    show_query(ws, q, width=160)
    _seed("mix_c1", state.get("c1"), order_a)
    c1 = st.selectbox("take the component of", order_a, key="mix_c1", on_change=state.copy_widget,
                      args=("mix_c1", "c1"), format_func=_safe.plain)
with mid:
    st.markdown("**…plus, from this query**")
    _seed("mix_q2", q2_default, candidates)
    labels = shared(ws)  # one store lookup, not one per listed row
    recent = set(state.history())
    r2 = st.selectbox("second query", candidates, key="mix_q2", on_change=state.copy_widget, args=("mix_q2", "q2"),
                      format_func=lambda r: _query_option(labels, r, r in recent))
    q2 = row_query(ws, int(r2))
    show_query(ws, q2, width=160)
    order_b = _ranked_concepts(model, q2.x)
    if not order_b:
        st.info("The second query has no non-zero concept component; pick another.")
        state.stop()
    default_c2 = state.get("c2")
    if default_c2 not in order_b:
        default_c2 = next((c for c in order_b if c != c1), order_b[0])
    _seed("mix_c2", default_c2, order_b)
    c2 = st.selectbox("the component of", order_b, key="mix_c2", on_change=state.copy_widget, args=("mix_c2", "c2"),
                      format_func=_safe.plain)
j1, j2 = names.index(c1), names.index(c2)
state.put("q2", int(r2))
state.put("c1", c1)
state.put("c2", c2)

try:
    mixed, parts = mix_components(model, [(q.x, j1, None if q.Y is None else np.flatnonzero(q.Y)),
                                          (q2.x, j2, np.flatnonzero(q2.Y))], mode=mode)
except ValueError as exc:
    st.error(visitor_text(exc, "These concepts cannot be mixed"))
    state.stop()

with right:
    st.markdown(f"**= {_safe.text(c1)} of the first + {_safe.text(c2)} of the second**")
    n1, n2, cos = norms_and_cosine(parts[0], parts[1])
    st.caption(f"Component norms: {_safe.text(c1)} {n1:.2f}, {_safe.text(c2)} {n2:.2f}; cosine between them "
               f"{cos:.2f}.")
    if gen is not None and gen.deterministic:
        drawn = np.stack([parts[0], parts[1], mixed])
        imgs = gen.generate(drawn, seed=0)
        read = gen.describe(drawn)
        cols = st.columns(3)
        for i, (col, im, t) in enumerate(zip(cols, imgs, (c1, c2, "mix"))):
            col.image(im.resize((128, 128), resample=0) if im.width < 128 else im, caption=_safe.text(t),
                      width="stretch")
            if read is not None and read[i]:
                col.caption(f"read: {prompt_text(read[i])}")
        st.download_button("Download the mix image (PNG)", lambda: png_bytes(imgs[2]), file_name=f"mix-{c1}-{c2}.png",
                           mime="image/png", key="mix_png", on_click="ignore")
    elif gen is not None:
        st.caption(drawing.describe_generator(gen))
        note = drawing.estimate_note(gen, 3, opts)
        key = ("mix", ws_id(ws), q.key, int(r2), c1, c2, method, d0, mode, tuple(sorted(opts.items())))
        if st.button("Draw the mix", key="mix_draw", help=note) or st.session_state.get("_mix_last") == key:
            st.session_state["_mix_last"] = key
            imgs = drawing.draw(gen, np.stack([parts[0], parts[1], mixed]), [c1, c2, "mix"], opts, key)
            if imgs:
                cols = st.columns(3)
                for col, im, t in zip(cols, imgs, (c1, c2, "mix")):
                    col.image(im, caption=_safe.text(t), width="stretch")  # t: a concept name from the data
                st.download_button("Download the mix image (PNG)", lambda: png_bytes(imgs[2]),
                                   file_name=f"mix-{c1}-{c2}.png", mime="image/png", key="mix_png",
                                   on_click="ignore")
        elif note:
            st.caption(note)
    else:
        st.caption(visitor_text(gen_error, "No generator for this workspace"))

# ---------------------------------------------------------------- retrieval by the mix
# the workspace's pool: rows in memory with labels, or shards on disk searched through its index, without labels
hits = ws.pool.search(mixed, k)
sc = hits.scores
st.divider()
st.subheader(f"Pool images closest to the mix ({method}{'' if d0 is None else f', d0 = {d0}'})")
if hits.labels is None:
    st.caption(f"The pool is {ws.n_pool:,} images in shards on disk, searched through the workspace's index; shard "
               "rows carry no labels, so the gallery has no borders and no P@k, and its images cannot be made "
               "the query.")
    image_gallery(ws, hits, captions=[f"#{i + 1} · {s:.2f}" for i, s in enumerate(sc)], n_cols=5, size=96)
    remote_hosts_caption(ws)
    df = pd.DataFrame({"rank": np.arange(1, len(hits) + 1), "row": hits.positions, "score": np.round(sc, 4)})
    df.insert(2, "id", hits.ids)
    csv_download(with_settings(df, workspace=ws.name, query=q.key, concept_1=c1, query_2=f"row:{int(r2)}",
                               concept_2=c2, method=method, d0=d0, component=mode, k=k, pool="shards"),
                 f"mix-{c1}-{c2}-{method}-k{k}.csv", label="Download the mixed gallery (CSV)", key="mix_csv")
    state.stop()
rows = hits.rows
g1, g2 = hits_relevance(hits, j1)[0], hits_relevance(hits, j2)[0]  # the hits that have each concept
both = g1 & g2
m = st.columns(3)
m[0].metric(f"P@{len(rows)} · has {_safe.text(c1)} and {_safe.text(c2)}", f"{100 * both.mean():.0f}%")
m[1].metric(f"has {_safe.text(c1)}", f"{100 * g1.mean():.0f}%")
m[2].metric(f"has {_safe.text(c2)}", f"{100 * g2.mean():.0f}%")
borders = ["#2e9d4f" if a and b else ("#e69500" if a or b else "#d0342c") for a, b in zip(g1, g2)]
st.caption("Border: green has both concepts, orange one of them, red neither. Click an image to make it the query.")
image_gallery(ws, hits, captions=[f"#{i + 1} · {s:.2f}" for i, s in enumerate(sc)], n_cols=5, size=96,
              borders=borders, pick_key="mix_pick")
df = pd.DataFrame({"rank": np.arange(1, len(rows) + 1), "row": rows, "score": np.round(sc, 4),
                   "labels": [label_text(ws, int(r)) for r in rows]})
if ws.ids:
    df.insert(2, "id", hits.ids)
csv_download(with_settings(df, workspace=ws.name, query=q.key, concept_1=c1, query_2=f"row:{int(r2)}",
                           concept_2=c2, method=method, d0=d0, component=mode, k=k), f"mix-{c1}-{c2}-{method}-k{k}.csv",
             label="Download the mixed gallery (CSV)", key="mix_csv")

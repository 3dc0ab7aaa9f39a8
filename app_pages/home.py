# Widget keys: "ws_select" (workspace switch), "home_example" (example query row)
import numpy as np
import pandas as pd
import streamlit as st

from app_pages import _safe
from app_pages._errors import operator_sees_details
from app_pages._images import show_image, thumbnail
from app_pages._workspace import current_choice, get_workspace, workspace_choices, ws_id
from slics_core.explorer.narration import d0_choice, example_caption, page_readiness
from slics_core.methods import dictionary_method_words, get_method, preferred_method
from slics_core.retrieval import ConceptRetriever

st.title("SLiCS Explorer")
st.markdown("**What to look at:** the picture below: each concept's part of one query finds images sharing "
            "*that* concept, the whole embedding finds look-alikes of the whole scene.")
st.markdown(
    """
**Sparse Linear Concept Subspaces** split an image embedding (CLIP, DINOv2, TiTok…) into
per-concept parts. From multi-label data SLiCS learns one group of *atoms* per concept, so that every
embedding is a sparse non-negative sum of concept components x ≈ v₁ + v₂ + … with each vⱼ in
concept j's cone. Projecting a query onto one concept's cone gives concept-filtered retrieval
(*find images with an animal like this one's, ignore the food*), word captions of every subspace,
and images generated from a single component.
"""
)

# ---------------------------------------------------------------- workspace switch
choices = workspace_choices()
labels = list(choices)
current = current_choice()
idx = next((i for i, lab in enumerate(labels) if choices[lab] == current), 0)
picked = st.selectbox("Workspace", labels, index=idx, key="ws_select",
                      help="Dataset workspaces are built with `slics embed` then `slics workspace` "
                           "and are listed from $SLICS_WORKSPACES (default ~/.cache/slics/workspaces).")
if current in choices.values() and choices[picked] != current:  # a user's switch (a bad link is reported below)
    st.session_state["ws_choice"] = choices[picked]
    for key in ("query", "picked_concepts", "concepts_for", "_s_history", "_s_q2", "_s_c1", "_s_c2", "_s_rm",
                "_s_boost", "_s_colour", "_link"):
        st.session_state.pop(key, None)  # rows and concept names of the old workspace mean nothing here
    st.rerun()

ws = get_workspace()


# ---------------------------------------------------------------- one picture
SHOWN = 4  # components drawn in the row (a query with more concepts says which are left out)


@st.cache_data(show_spinner=False, max_entries=8)
def _example(key: str, row: int, method: str, _ws):
    """Top-4 pool images (a 2 × 2 block) by each of the query's labelled concepts (at most SHOWN), and unfiltered."""
    model = _ws.model(method)
    x = _ws.X[[row]]
    concepts = np.flatnonzero(_ws.Y[row])[:SHOWN]
    pool = _ws.index["pool"]
    r = ConceptRetriever(model, _ws.X[pool])
    res = r.search(x, k=4, concepts=concepts)
    uf, _ = r.search_unfiltered(x, k=4)
    return [(int(c), pool[res.indices[0, i]].tolist()) for i, c in enumerate(res.concepts)], pool[uf[0]].tolist()


q = ws.index["query"]
multi = q[ws.Y[q].sum(1) >= 2]
dictionaries = ws.dictionary_methods()
if len(multi) and dictionaries:
    row = int(st.session_state.get("home_example", int(multi[0])))
    if row not in set(multi.tolist()):
        row = int(multi[0])
    per_concept, uf = _example(ws_id(ws), row, preferred_method(dictionaries), ws)
    st.subheader("In one picture")
    cols = st.columns([1, 0.2] + [1] * len(per_concept) + [0.2, 1])
    with cols[0]:
        show_image(thumbnail(ws, row, 160), caption="query", width="stretch")
    with cols[1]:
        st.markdown("### ≈")
    more = len(per_concept) < int(ws.Y[row].sum())  # concepts beyond SHOWN: "+ …" ends the sum
    for k, (c, rows) in enumerate(per_concept):
        with cols[2 + k]:
            tail = " + …" if more and k == len(per_concept) - 1 else ""
            st.markdown(f"**{'+ ' if k else ''}v({_safe.text(ws.concept_names[c])}){tail}** retrieves")
            show_image([thumbnail(ws, r, 96) for r in rows], width=72)
    with cols[-1]:
        st.markdown("**whole x** retrieves")
        show_image([thumbnail(ws, r, 96) for r in uf], width=72)
    st.caption(example_caption([ws.concept_names[c] for c, _ in per_concept], ws.labels_of(row)["concepts"])
               + " Pick another example:")
    st.selectbox("Example query", multi[:50].tolist(), index=0, key="home_example",
                 format_func=lambda r: _safe.plain(f"#{r}: " + ", ".join(ws.labels_of(r)["concepts"])))

# ---------------------------------------------------------------- readiness
st.subheader("Current workspace")
s = ws.summary()
c1, c2, c3, c4 = st.columns(4)
c1.metric("Items", s["n_items"])
c2.metric("Embedding dim", s["dim"])
c3.metric("Concepts", s["n_concepts"])
c4.metric("Sub-labels", s["n_sub_labels"])
# the folder is the server's own path: shown only where error details are (a laptop), never to a classroom
where = f", stored in {_safe.code(s['path'])}" if operator_sees_details() else ""
st.write(f"**{_safe.text(s['name'])}** ({s['kind']}), encoder {_safe.code(s['encoder'])}{where}")
st.dataframe(pd.DataFrame([{"split": k, "items": v} for k, v in s["splits"].items()]), hide_index=True)
fitted = pd.DataFrame([{"method": m, "d0": d, "atoms": f"{int(mod.atoms_.shape[0])} atoms, {int(mod.n_iter_)} epochs"}
                       for (m, d), mod in ws.models.items() if d is not None])
if len(fitted):
    fitted = fitted.pivot(index="method", columns="d0", values="atoms").reindex(ws.dictionary_methods())
    fitted.columns = [f"d0 = {d}" for d in fitted.columns]
    st.markdown(f"Fitted dictionaries (default {d0_choice(ws)})")
    st.dataframe(fitted)
else:
    st.markdown(f"No dictionaries fitted in this workspace ({dictionary_method_words()}): the pages marked ⛔ "
                "below need one.")
others = [m for m in ws.methods if m not in ws.dictionary_methods()]
st.caption("Baselines fitted too: " + (", ".join(f"{m} ({get_method(m).description})" for m in others) if others
                                       else "none")
           + "".join(f" · {_safe.text(m)} left out: {_safe.text(why)}" for m, why in ws.skipped.items()))
ready = page_readiness(ws, operator=operator_sees_details())
missing_pages = [r["page"] for r in ready if not r["ready"]]
if missing_pages:
    st.warning(f"Ready except {', '.join(missing_pages)}; see below. Start with **Retrieve** in the sidebar.")
else:
    st.success("Ready: every page works on this workspace. Start with **Retrieve** in the sidebar.")
st.markdown("\n".join(f"- {'✅' if r['ready'] else '⛔'} **{r['page']}**: {r['note']}" for r in ready))

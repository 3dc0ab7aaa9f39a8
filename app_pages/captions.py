# Widget keys: "d0", "n_words", "caption_methods", "captions_csv" (download)
"""Captions: the words of every concept subspace, supervised beside unsupervised (paper Table 1, sec. 3.7)."""
import streamlit as st

from app_pages import _safe
from app_pages import _state as state
from app_pages._errors import visitor_text
from app_pages._ui import csv_download, d0_picker, page_intro
from app_pages._workspace import get_workspace, workspace_words, ws_id
from slics_core.explorer.atom_tables import caption_table
from slics_core.explorer.narration import text_tower_check

st.title("Captions")
ws = get_workspace()
unsupervised = "U-SLiCS" in ws.dictionary_methods()  # not in the emoji world's preview, nor every workspace
page_intro("Look at whether each concept's words name that concept (and its kinds)"
           + (", and where the unsupervised U-SLiCS words drift from the supervised ones." if unsupervised else "."))
st.caption("For every concept j, the vocabulary words whose prepared text embedding (unit-normalised, "
           "mean-centred, re-normalised) has the smallest non-negative reconstruction error with the concept's "
           "atoms B_j (sec. 3.7). Words are ordered by ascending error. S-SLiCS learns from the labels"
           + ("; U-SLiCS from zero-shot pseudo-labels." if unsupervised else "."))


@st.cache_data(show_spinner=False, max_entries=32)
def _captions(key, methods, d0, n_words, _ws, _words, _Wp):
    return caption_table({m: _ws.model(m, d0) for m in methods}, _ws.concept_names, _words, _Wp,
                         n_words=n_words, prepared=True)


c1, c2, c3 = st.columns(3)
with c1:
    d0 = d0_picker(ws)
with c2:
    n_words = st.slider("Words per concept", 1, 15, 5, key="n_words")
with c3:
    available = ws.dictionary_methods()
    default = [m for m in ("S-SLiCS", "U-SLiCS") if m in available] or available[:1]
    methods = st.multiselect("Methods", available, default=default, key="caption_methods")

try:
    with st.status("Loading the word vocabulary (embedded once, then cached on disk)…", expanded=False) as status:
        words, Wp, seconds = workspace_words(ws)
        status.update(label=f"Vocabulary: {len(words)} words (loaded in {seconds:.1f} s)", state="complete")
except (FileNotFoundError, ImportError, ValueError) as exc:
    st.warning(visitor_text(exc, "No word vocabulary for this workspace, so no captions"))
    state.stop()

if not methods:
    st.info("Pick at least one method.")
    state.stop()

with st.spinner("Captioning the subspaces…"):
    table = _captions(ws_id(ws), tuple(methods), int(d0), int(n_words), ws, words, Wp)

st.subheader(f"Subspace captions, d0 = {d0}")
check = text_tower_check(ws)  # can this encoder read words at all? (its zero-shot accuracy on the concept names)
if check is None:
    st.caption("Text tower check: this workspace has no text embeddings of its concept names, so how well its "
               "encoder reads words is unknown.")
elif check["level"] == "reads":
    st.caption(check["text"])
else:
    st.warning(check["text"])
st.dataframe(_safe.table(table), hide_index=True, width="stretch", height=35 * (len(table) + 1) + 3,
             column_config={"concept": st.column_config.TextColumn("Subspace (concept)")})
csv_download(table, f"captions_d0{d0}.csv", "Download captions (CSV)", key="captions_csv")
if ws.kind == "emoji":
    st.caption("Emoji world vocabulary: the 71 category and 12 supercategory names its text encoder was "
               "trained on, embedded with the emoji encoder's text tower. Dataset workspaces use the 10 000 "
               "most frequent English words.")

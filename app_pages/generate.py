"""Generate: images from the query's concept components, and the atom-interpolation strip (Fig. 3).

Widget keys: query_pick, query_upload, query_strip_prev, query_strip_next, query_thumb_<i>,
query_use_upload (app_pages/_query.py); concepts; method; d0; component; seed; steps; generate (button,
shown only for stochastic generators); gen_size (app_pages/_generation.py); gen_png_<i>, gen_strip_png
(downloads); interp_concept, atom_a, atom_b, interp_n, interp_png.

The query edits set on Retrieve (``rm`` / ``boost`` in the URL) are drawn after the components: one more
picture, "without j" (x − vⱼ) or "more of j" (x + λṽⱼ).
"""
import numpy as np
import streamlit as st

from app_pages import _generation as drawing
from app_pages import _safe
from app_pages import _state as state
from app_pages._errors import visitor_text
from app_pages._images import png_bytes
from app_pages._query import concept_picker, preselection, query_picker, show_query
from app_pages._ui import component_picker, d0_picker, method_picker, page_intro
from app_pages._workspace import get_workspace, workspace_generator, ws_id
from slics_core.explorer.edits import edit_query, edit_title
from slics_core.explorer.queries import components_of_row, concept_scores, generation_rows, image_strip
from slics_core.explorer.readings import prompt_text, strip_change
from slics_core.generators import concept_atoms, interpolate_atoms
from slics_core.rows import ZERO_NORM


def _show_images(images, titles, key_prefix, n_cols=6, prompts=None):
    cols = st.columns(min(n_cols, len(images)))
    for i, (im, title) in enumerate(zip(images, titles)):
        with cols[i % len(cols)]:
            st.image(im.resize((192, 192), resample=0) if im.width < 192 else im, caption=_safe.text(title), width=192)
            if prompts and prompts[i]:
                st.caption(f"read: {prompt_text(prompts[i])}")
            st.download_button("PNG", lambda im=im: png_bytes(im),  # encoded only when clicked
                               file_name=f"{key_prefix}-{i}-{title}.png".replace(" ", "_"), mime="image/png",
                               key=f"{key_prefix}_png_{i}", on_click="ignore")


st.title("🎨 Generate from concept components")
ws = get_workspace()
page_intro("Look at whether each component's picture shows its concept of the query and nothing else, next "
           "to the picture of the whole query (on a workspace with a generator; otherwise the page says what it "
           "needs).",
           "Each concept component of the query is mapped into the generator's conditioning space (orthogonal "
           "Procrustes alignment fitted on paired embeddings, image-to-prompt) and drawn; the query's own "
           "embedding is drawn first for comparison.")

q = query_picker(ws, required=True)

with st.sidebar:
    st.subheader("Generation settings")
    method = method_picker(ws, methods=ws.dictionary_methods())
    d0 = d0_picker(ws, method=method)
    mode = component_picker(method=method)

gen, gen_error = None, None
try:
    gen = workspace_generator(ws)
except (FileNotFoundError, ValueError) as exc:
    gen_error = exc

with st.sidebar:
    opts = drawing.settings(gen)

model = ws.model(method, d0)
names = list(ws.concept_names)
scores = concept_scores(model, q.x)
preselect, _ = preselection(ws, q, model, method, d0, scores)

left, right = st.columns([1, 3])
with left:
    show_query(ws, q, width=180)
with right:
    picked = concept_picker(ws, q, preselect, label="Concepts to draw")
    if gen is not None:
        st.caption(drawing.describe_generator(gen))

if gen is None:
    st.warning(visitor_text(gen_error, "No generator for this workspace",
                            "The other pages work without one."))
    state.stop()

# ---------------------------------------------------------------- components
st.subheader("Concept components of the query")
if not picked:
    st.info("Pick concepts to draw their components; only the query itself is drawn now.")
try:
    V = components_of_row(model, q.x, mode=mode, active=picked if mode == "full" else None) if picked \
        else np.zeros((len(names), q.x.shape[0]))
except ValueError as exc:
    st.error(visitor_text(exc, "The components cannot be computed"))
    state.stop()
rows, titles, skipped = generation_rows(q.x, V, picked, names)
if skipped:
    st.caption("Nothing to draw for " + _safe.text(", ".join(skipped)) + ": the query's component there is zero.")
edits = tuple(state.edits(names))  # Retrieve's "without j" / "more of j", drawn after the components
if edits:
    query_concepts = [names.index(n) for n in preselect]
    edit_titles, empty = [], []
    for edit, name, lam in edits:
        e = edit_query(model, q.x, names.index(name), edit, strength=lam, active=query_concepts)[0]
        if np.linalg.norm(e) > ZERO_NORM:
            rows = np.vstack([rows, e])
            edit_titles.append(edit_title(edit, name, lam))
        else:
            empty.append(edit_title(edit, name, lam))
    titles = titles + edit_titles
    st.caption("After the components: the query edited as on Retrieve (without j is x − vⱼ over the query's "
               "concepts, more of j is x + λṽⱼ)."
               + (" Nothing is left to draw for " + _safe.text(", ".join(empty)) + "." if empty else ""))
run = True
settings_key = tuple(sorted(opts.items()))
if not gen.deterministic:
    note = drawing.estimate_note(gen, len(rows), opts)
    if note:
        st.caption(note)
    run = st.button("Generate", key="generate", type="primary") or \
        st.session_state.get("_gen_last") == (q.key, method, d0, mode, tuple(picked), edits, settings_key)
if run:
    key = ("components", ws_id(ws), q.key, method, d0, mode, tuple(picked), edits, settings_key)
    st.session_state["_gen_last"] = key[2:]
    images = drawing.draw(gen, rows, titles, opts, key)
    if images:
        prompts = gen.describe(rows)
        _show_images(images, titles, "gen", prompts=prompts)
        if prompts is not None:
            st.caption("Under each image: what the generator read in the vector (its decoded prompt: the most "
                       "likely objects with their probabilities); a faint object is an unsure reading.")
        st.download_button("Download all as one PNG strip", lambda: png_bytes(image_strip(images)),
                           file_name=f"components-{q.key.replace(':', '-')}.png", mime="image/png",
                           key="gen_strip_png", on_click="ignore")

# ---------------------------------------------------------------- interpolation
st.divider()
st.subheader("Between two atoms of a concept (Fig. 3)")
st.caption("Images along a·b₁ + (1−a)·b₂ for two atoms b₁, b₂ of one concept's subspace, same seed: what "
           "varies inside a concept.")
c1, c2, c3, c4 = st.columns(4)
default_c = picked[0] if picked else int(np.argmax(scores))
if st.session_state.get("interp_concept") not in names:
    st.session_state["interp_concept"] = names[default_c]
cname = c1.selectbox("Concept", names, key="interp_concept", format_func=_safe.plain)
atoms = concept_atoms(model, names.index(cname))
n_atoms = atoms.shape[0]
if n_atoms < 2:
    st.info(f"{_safe.text(cname)} has fewer than two atoms in this model.")
    state.stop()
a_idx = c2.selectbox("Atom b₁", list(range(n_atoms)), index=0, key="atom_a")
b_idx = c3.selectbox("Atom b₂", list(range(n_atoms)), index=1, key="atom_b")
n_steps = c4.slider("Images", 3, 9, 5, key="interp_n")
if a_idx == b_idx:
    st.info("Pick two different atoms.")
    state.stop()
alphas = np.linspace(0.0, 1.0, n_steps)
R = interpolate_atoms(atoms[a_idx], atoms[b_idx], alphas)
R_titles = [f"a={a:.2f}" for a in alphas]
key = ("interp", ws_id(ws), method, d0, cname, a_idx, b_idx, n_steps, settings_key)
if not gen.deterministic:
    note = drawing.estimate_note(gen, len(R), opts)
    if note:
        st.caption(note)
run_i = gen.deterministic or st.button("Generate the strip", key="generate_interp") or \
    st.session_state.get("_interp_last") == key
if run_i:
    st.session_state["_interp_last"] = key
    strip = drawing.draw(gen, R, R_titles, opts, key)
    if strip:
        read = gen.describe(R)
        change = strip_change(read) if read is not None else None
        cols = st.columns(len(strip))
        for i, (col, im, t) in enumerate(zip(cols, strip, R_titles)):
            col.image(im.resize((192, 192), resample=0) if im.width < 192 else im, caption=t, width="stretch")
            if read is not None and read[i]:
                col.caption(("**changes here:** " if change == i else "") + prompt_text(read[i][:2]))
        if read is not None:
            first = read[0][0][0] if read[0] else "nothing"
            st.caption(f"The top object changes from {first} to {read[change][0][0] if read[change] else 'nothing'} "
                       f"at a = {alphas[change]:.2f}." if change is not None
                       else f"The top object stays {first} along the whole strip.")
        st.download_button("Download the strip (PNG)", lambda: png_bytes(image_strip(strip)),
                           file_name=f"interpolation-{cname}-{a_idx}-{b_idx}.png".replace(" ", "_"),
                           mime="image/png", key="interp_png", on_click="ignore")

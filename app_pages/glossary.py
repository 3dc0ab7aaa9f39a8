"""Glossary: the words the explorer uses, in one place (linked from every page's sidebar).

Widget keys: "glossary_search".
"""
import streamlit as st

from app_pages import _safe
from slics_core.evaluation import d0_rule_words

TERMS = {
    "Embedding (x)": "The vector an encoder (CLIP, DINOv2, TiTok…) gives an image. Here it is prepared as in the "
                     "paper (sec. 4.1): unit length, minus the mean of the training images, unit length again.",
    "Concept": "A general label such as *animal* or *food* (COCO's supercategories). An image can have several.",
    "Sub-label": "A finer label inside a concept (*dog*, *horse* inside *animal*). Used to score retrieval "
                 "that keeps the *kind* of animal, not just any animal.",
    "Atom": "One learned direction of the embedding space. SLiCS learns d0 atoms per concept; together they are "
            "the dictionary.",
    "Dictionary": "All atoms of all concepts, grouped by concept (B = [B₁, …, B_S]).",
    "d0": "Atoms per concept. Small d0: coarse subspaces; large d0: subspaces that also catch other concepts. "
          f"The workspace picks the d0 with {d0_rule_words(True)}, as in the paper; without a validation split, "
          f"{d0_rule_words(False)}.",
    "Cone (concept cone)": "All non-negative combinations of one concept's atoms. An image's part that belongs "
                           "to the concept is a point of this cone.",
    "Component": "The part of an embedding that belongs to one concept: a point of that concept's cone. An "
                 "embedding is approximately the sum of its components, x ≈ v₁ + v₂ + ….",
    "vⱼ (full component)": "Concept j's part from one joint decomposition of x over the atoms of all the "
                           "concepts it has (eq. 2). The vⱼ of a query add up to its reconstruction.",
    "ṽⱼ (partial component)": "The nearest point of concept j's cone to x, ignoring the other concepts (eq. 3). "
                              "It needs no labels for the query, so it is what retrieval uses by default.",
    "NNLS": "Non-negative least squares: the best approximation of x by atoms with coefficients ≥ 0. Every "
            "component is an NNLS solution; non-negativity keeps the parts additive.",
    "S-SVD": "The initialisation of SLiCS: per concept, the top singular vectors of its images' embeddings "
             "(no joint fitting).",
    "S-SLiCS": "Supervised SLiCS: atoms learned with the images' concept labels (Algorithm 1).",
    "U-SLiCS": "Unsupervised SLiCS: the same, with labels guessed zero-shot from the concept names by the "
               "encoder's text tower instead of human labels (sec. 3.4).",
    "UF (unfiltered)": "Retrieval with the whole query embedding: the baseline every concept gallery is "
                       "compared with.",
    "SpLiCE": "A sparse non-negative decomposition of an image embedding over word embeddings (Bhalla et al.); "
              "a baseline with words instead of learned atoms.",
    "F-SpLiCE": "Filtered SpLiCE (sec. 4.3): each vocabulary word is assigned to the concept whose centred name "
                "embedding it is closest to; a concept's component is the part of the SpLiCE reconstruction made "
                "of its words.",
    "Pool / query / validation / training split": "Training items fit the atoms, validation items choose d0, "
                                                   "query items are the questions, pool items are what "
                                                   "retrieval searches.",
    "mAP@20": "Mean average precision of the top 20 retrieved pool items, over every (query, concept) pair; "
              "*general*: relevant when it has the concept; *sub-label*: when it also shares the query's "
              "sub-label of that concept (sec. 4.4).",
    "P@k": "Precision at k: the fraction of the top k retrieved items that are relevant (Retrieve page).",
    "Zero-shot score": "Cosine between the image and a text prompt of the concept name (\"a photo of a "
                       "{concept}\"), through the encoder's text tower.",
    "Text query": "A phrase embedded by the text tower and centred on the mean of text embeddings (not images), "
                  "so that it can be split into concept components like an image.",
    "Concept mixing": "The sum of one concept's component from one query and another concept's from a second "
                      "query: “this query's animal with that query's background”.",
    "t-SNE map": "A 2-D picture of high-dimensional points that keeps near neighbours near (Subspaces page); "
                 "distances between far clusters mean little.",
    "Procrustes alignment": "The rotation that maps the encoder's space onto the generator's conditioning space "
                            "(fitted on paired embeddings), used to draw a component as an image.",
}

st.title("📖 Glossary")
st.markdown("**What to look at:** the words the pages use, each in two or three sentences; the paper's "
            "section is given where it defines the term.")
query = st.text_input("Find a term", key="glossary_search", placeholder="e.g. cone, d0, mAP")
shown = {t: d for t, d in TERMS.items() if not query or query.lower() in (t + " " + d).lower()}
if not shown:
    st.info(f"No term mentions “{_safe.text(query)}”.")
for term, text in shown.items():
    st.markdown(f"**{term}** — {text}")

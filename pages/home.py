import streamlit as st

st.title("SLiCS Explorer")
st.markdown(
    """
**Sparse Linear Concept Subspaces** split an image embedding (CLIP, DINOv2, TiTok…) into
per-concept components. From multi-label data SLiCS learns one group of *atoms* per concept,
so that every embedding is a sparse non-negative sum of per-concept components
x ≈ v₁ + v₂ + … with vⱼ in concept j's cone. Projecting a query onto one concept's cone
gives concept-filtered retrieval: *find images with a dog like this one's, ignore the sofa*.
"""
)
st.info(
    "This build ships the SLiCS algorithm (`slics_core.SLiCS`) and a demo on planted data "
    "(**Planted cones** in the sidebar). The emoji-world workspace, retrieval galleries, "
    "captions and generation pages are being added."
)
st.code(
    "from slics_core import SLiCS\n"
    "model = SLiCS(n_atoms=5, n_iter=10).fit(X, Y)   # X: (n, d) embeddings, Y: (n, S) 0/1 labels\n"
    "v_dog = model.project(x_query, concept=3)       # nearest point of concept 3's cone",
    language="python",
)

"""SLiCS Explorer: Streamlit front end (``streamlit run app.py``).

Pages only arrange and draw; all computation is in :mod:`slics_core`.
"""
import streamlit as st

st.set_page_config(page_title="SLiCS Explorer", page_icon="🧩", layout="wide")

pages = {
    "Explore": [
        st.Page("app_pages/home.py", title="Home", icon="🏠", default=True),
        st.Page("app_pages/retrieve.py", title="Retrieve", icon="🔎", url_path="retrieve"),
        st.Page("app_pages/subspaces.py", title="Subspaces", icon="🗺️", url_path="subspaces"),
        st.Page("app_pages/atoms.py", title="Atoms", icon="🧱", url_path="atoms"),
        st.Page("app_pages/captions.py", title="Captions", icon="🏷️", url_path="captions"),
        st.Page("app_pages/generate.py", title="Generate", icon="🎨", url_path="generate"),
        st.Page("app_pages/evaluate.py", title="Evaluate", icon="📊", url_path="evaluate"),
    ],
    "Learn": [
        st.Page("app_pages/learn.py", title="Learn: concept cones", icon="🎓", url_path="learn"),
        st.Page("app_pages/cones.py", title="Planted cones", icon="📐", url_path="cones"),
    ],
}
st.navigation(pages).run()

"""SLiCS Explorer: Streamlit front end (``streamlit run app.py``).

This file is the frame: page navigation (the Glossary is in every page's sidebar), the shared state
(app_pages/_state.py) read from the URL on a session's first run and written back to it after
every run, and the current workspace: opened once per run, with its sidebar note, before a page that
explores it (app_pages/_workspace.py; the Learn pages open none). Pages only arrange and draw; all
computation is in :mod:`slics_core`.
"""
import streamlit as st

from app_pages import _state as state
from app_pages import _workspace
from app_pages._images import PILLS_WRAP

st.set_page_config(page_title="SLiCS Explorer", page_icon="🧩", layout="wide")
st.html(PILLS_WRAP)

pages = {
    "Explore": [
        st.Page("app_pages/home.py", title="Home", icon="🏠", default=True),
        st.Page("app_pages/retrieve.py", title="Retrieve", icon="🔎", url_path="retrieve"),
        st.Page("app_pages/mix.py", title="Mix concepts", icon="🧪", url_path="mix"),
        st.Page("app_pages/subspaces.py", title="Subspaces", icon="🗺️", url_path="subspaces"),
        st.Page("app_pages/atoms.py", title="Atoms", icon="🧱", url_path="atoms"),
        st.Page("app_pages/captions.py", title="Captions", icon="🏷️", url_path="captions"),
        st.Page("app_pages/generate.py", title="Generate", icon="🎨", url_path="generate"),
        st.Page("app_pages/evaluate.py", title="Evaluate", icon="📊", url_path="evaluate"),
    ],
    "Learn": [
        st.Page("app_pages/learn.py", title="Learn: concept cones", icon="🎓", url_path="learn"),
        st.Page("app_pages/cones.py", title="Planted cones", icon="📐", url_path="cones"),
        st.Page("app_pages/glossary.py", title="Glossary", icon="📖", url_path="glossary"),
    ],
}
page = st.navigation(pages)
state.capture_link()
try:
    if page.url_path in {p.url_path for p in pages["Explore"]}:
        _workspace.open_for_run()
    page.run()
finally:
    _workspace.end_run()
    state.sync_url()

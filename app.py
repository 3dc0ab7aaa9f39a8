"""SLiCS Explorer: Streamlit front end (``streamlit run app.py``).

This file is the frame: page navigation (the pages are listed in app_pages/_pages.py; the Glossary
is in every page's sidebar), the shared state (app_pages/_state.py) read from the URL on a session's
first run and written back to it after every run, and the current workspace: opened once per run,
with its sidebar note, before a page that explores it (app_pages/_workspace.py; the Learn pages open
none). Pages only arrange and draw; all computation is in :mod:`slics_core`.
"""
import streamlit as st

from app_pages import _pages, _workspace
from app_pages import _state as state

st.set_page_config(page_title="SLiCS Explorer", page_icon="🧩", layout="wide")

entry, page = _pages.navigation()
state.capture_link()
try:
    if entry in _pages.EXPLORE:
        _workspace.open_for_run()
    page.run()
finally:
    _workspace.end_run()
    state.sync_url()

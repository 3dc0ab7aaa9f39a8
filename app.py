"""SLiCS Explorer: Streamlit front end (``streamlit run app.py``).

This file is the frame: page navigation (the pages are listed in app_pages/_pages.py; the Glossary
is in every page's sidebar), the shared state (app_pages/_state.py) read from the URL on a session's
first run and written back to it after every run, and the current workspace: opened once per run,
with its sidebar note, before a page that explores it (app_pages/_workspace.py; the Learn pages open
none). Pages only arrange and draw; all computation is in :mod:`slics_core`.
"""
import streamlit as st

st.set_page_config(page_title="SLiCS Explorer", page_icon="🧩", layout="wide")
# a server's first run imports the pages and the library (seconds on a busy laptop): say so instead of a blank page
_starting = st.empty()
_starting.caption("Starting SLiCS Explorer: loading its pages and library (a few seconds on the server's first visit)…")

from app_pages import _pages, _workspace  # noqa: E402  (after the line above, which the browser shows at once)
from app_pages import _state as state  # noqa: E402

_starting.empty()

entry, page = _pages.navigation()
state.capture_link()
try:
    if entry in _pages.EXPLORE:
        _workspace.open_for_run()
    page.run()
finally:
    _workspace.end_run()
    state.sync_url()

"""SLiCS Explorer: Streamlit front end (``streamlit run app.py``).

Pages only arrange and draw; all computation is in :mod:`slics_core`.
"""
import streamlit as st

st.set_page_config(page_title="SLiCS Explorer", page_icon="🧩", layout="wide")

pages = [
    st.Page("pages/home.py", title="Home", icon="🏠", default=True),
    st.Page("pages/cones.py", title="Planted cones", icon="📐"),
]
st.navigation(pages).run()

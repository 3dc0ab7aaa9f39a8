"""The app's pages: the one table of their files, titles, icons and URL paths, and the ``st.Page``
objects made from it.

The frame (``app.py``) navigates with :func:`navigation`, which makes this run's ``st.Page`` objects and
keeps them in the session; a page links to or switches to another through :func:`link` and
:func:`switch`, naming it by its entry here (``_pages.RETRIEVE``), never by a file path
(``tests/test_app.py`` checks that no page file name is typed anywhere else).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import streamlit as st

_HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class PageEntry:
    """One page of the app: its file in ``app_pages/``, sidebar title and icon, and URL path (None: the
    default page, at the app's root)."""

    file: str
    title: str
    icon: str
    url_path: str | None

    @property
    def path(self) -> Path:
        """The page's file (absolute, so a page run on its own finds it too)."""
        return _HERE / self.file


HOME = PageEntry("home.py", "Home", "🏠", None)
RETRIEVE = PageEntry("retrieve.py", "Retrieve", "🔎", "retrieve")
MIX = PageEntry("mix.py", "Mix concepts", "🧪", "mix")
SUBSPACES = PageEntry("subspaces.py", "Subspaces", "🗺️", "subspaces")
ATOMS = PageEntry("atoms.py", "Atoms", "🧱", "atoms")
CAPTIONS = PageEntry("captions.py", "Captions", "🏷️", "captions")
GENERATE = PageEntry("generate.py", "Generate", "🎨", "generate")
EVALUATE = PageEntry("evaluate.py", "Evaluate", "📊", "evaluate")
LEARN = PageEntry("learn.py", "Learn: concept cones", "🎓", "learn")
CONES = PageEntry("cones.py", "Planted cones", "📐", "cones")
GLOSSARY = PageEntry("glossary.py", "Glossary", "📖", "glossary")

#: The sidebar's sections. The Explore pages explore a workspace (the frame opens it before them).
SECTIONS = {
    "Explore": (HOME, RETRIEVE, MIX, SUBSPACES, ATOMS, CAPTIONS, GENERATE, EVALUATE),
    "Learn": (LEARN, CONES, GLOSSARY),
}
EXPLORE = SECTIONS["Explore"]

#: ``st.session_state`` key of this run's ``{entry: st.Page}`` (set by :func:`navigation`).
_MADE = "_pages"


def navigation():
    """The frame's call: this run's ``st.Page`` objects, registered with ``st.navigation``; returns
    ``(entry, page)`` of the page to run."""
    made = {e: st.Page(e.path, title=e.title, icon=e.icon, url_path=e.url_path, default=e is HOME)
            for section in SECTIONS.values() for e in section}
    st.session_state[_MADE] = made
    page = st.navigation({name: [made[e] for e in section] for name, section in SECTIONS.items()})
    entry = next(e for e, p in made.items() if p.url_path == page.url_path)
    return entry, page


def page_of(entry: PageEntry):
    """This run's ``st.Page`` of ``entry``; None when the page runs on its own (not through app.py, e.g. in
    a unit test of one page file), where there is no navigation to go through."""
    return (st.session_state.get(_MADE) or {}).get(entry)


def link(entry: PageEntry, label: str, icon: str | None = None) -> None:
    """A link to another page of the app (nothing when the page runs on its own)."""
    page = page_of(entry)
    if page is not None:
        st.page_link(page, label=label, icon=icon)


def switch(entry: PageEntry) -> bool:
    """Switch to another page of the app; False (and nothing done) when the page runs on its own."""
    page = page_of(entry)
    if page is None:
        return False
    st.switch_page(page)
    return True

"""Issue 38: tables show 10 of 60 rows without saying so. A table longer than st.dataframe's view says how many rows
it has and that it scrolls (app_pages._ui.rows_note)."""
from pathlib import Path

from streamlit.testing.v1 import AppTest

from app_pages._ui import DATAFRAME_ROWS, rows_note

ROOT = Path(__file__).resolve().parent.parent


def test_rows_note_only_for_tables_longer_than_the_view():
    assert rows_note(DATAFRAME_ROWS) is None
    assert rows_note(60, "atoms").startswith("60 atoms: the table shows 10 at a time, scroll")


def test_the_atoms_health_table_says_it_has_more_rows_than_it_shows(ws):
    at = AppTest.from_file(str(ROOT / "app_pages" / "atoms.py"), default_timeout=180).run()
    assert not at.exception, at.exception
    n_atoms = ws.model(at.session_state["method"], at.session_state["d0"]).atoms_.shape[0]
    assert n_atoms > DATAFRAME_ROWS
    assert any(c.value == rows_note(n_atoms, "atoms") for c in at.caption)

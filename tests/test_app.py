from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parent.parent


def test_home_page_renders():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    assert not at.exception
    assert at.title[0].value == "SLiCS Explorer"


def test_cones_page_fits_and_reacts_to_widgets():
    at = AppTest.from_file(str(ROOT / "app_pages" / "cones.py"), default_timeout=120).run()
    assert not at.exception
    first = at.metric[0].value
    assert float(first) > 0.5
    at.slider(key="cones_T").set_value(0).run()
    assert not at.exception
    # with zero epochs the learned atoms are the S-SVD initialisation
    assert at.metric[0].value == at.metric[1].value


def test_home_shows_workspace_and_example_reacts(ws):
    ws_labels = lambda r: ws.labels_of(r)["concepts"]  # noqa: E731
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300).run()
    assert not at.exception and not at.error
    from slics_core.emoji.world import config_from_env

    cfg = config_from_env()
    n = cfg.n_train + cfg.n_val + cfg.n_query + cfg.n_pool
    assert [m.value for m in at.metric] == [str(n), "64", "12", "71"]
    before = [(im.value, im.captions) for im in at.get("image")]
    row = at.selectbox(key="home_example").value
    shown = min(4, len(ws_labels(row)))  # the query, one list per concept (at most 4), the whole embedding
    sel = at.selectbox(key="home_example")
    assert sel.value != sel.options[3]
    sel.select_index(3).run()
    assert not at.exception
    after = [(im.value, im.captions) for im in at.get("image")]
    assert len(before) == 2 + shown and before != after  # another example query: other pictures
    assert at.selectbox(key="ws_select").options == ["Emoji world (offline demo)"]


def test_pages_are_named_by_their_entries_not_by_file_paths():
    """app_pages/_pages.py is the one home of the pages' files: no other code of the app types a page's file
    name (in st.Page, st.switch_page, st.page_link or elsewhere); docstrings and comments may."""
    import ast

    from app_pages import _pages

    files = {e.file for section in _pages.SECTIONS.values() for e in section}
    assert files == {p.name for p in (ROOT / "app_pages").glob("[a-z]*.py")}  # every page is in the table
    typed = []
    for path in [ROOT / "app.py", *sorted((ROOT / "app_pages").glob("*.py"))]:
        if path.name == "_pages.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and n.body
                      and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                typed += [f"{path.name}:{node.lineno}: {f}" for f in files if f in node.value]
    assert not typed, typed

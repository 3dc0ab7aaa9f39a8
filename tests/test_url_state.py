"""Every page writes the whole shared state to the URL on every run (issue 24, item 3).

The app runs on a dataset workspace (built with `slics workspace`, toy encoder, no generator): Generate
stops early there (no Stable Diffusion), Retrieve stops early when every concept is cleared, and a reload
(a new session opened on the address the last run sent) must reopen the same view.

What the browser's address bar shows is the last query string the server *sent* (AppTest's
``query_params`` is the server's own copy, which it keeps even when the message never leaves, as after
``st.stop()``), so :func:`sent` records the messages that were handed to the browser; a page switch in the
browser starts from the bare page address, which :func:`_switch` imitates.
"""
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest
from streamlit_private import record_sent_query_params
from test_cli_data import toy  # noqa: F401  (fixture)
from test_shared_state import _ok, _params
from test_workspace import dataset_ws  # noqa: F401  (fixture)

from slics_core.explorer.workspace_files import load_workspace

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")
PAGES = ("home", "retrieve", "mix", "subspaces", "atoms", "captions", "generate", "evaluate", "learn", "cones",
         "glossary")


@pytest.fixture
def sent(monkeypatch):
    """Query strings the server handed to the browser (a message that raised, e.g. after a stop, is not)."""
    return record_sent_query_params(monkeypatch)


def _open(params, page=None):
    """A new session opened on ``params`` (what a reload of that address does)."""
    at = AppTest.from_file(APP, default_timeout=300)
    for k, v in params.items():
        at.query_params[k] = str(v)
    if page is not None:
        at.switch_page(f"app_pages/{page}.py")
    return _ok(at.run())


def _switch(at, page, sent):
    """Click ``page`` in the sidebar: the browser opens the bare page address, the run writes it; returns the
    address bar's parameters after the run."""
    at.query_params.clear()
    del sent[:]
    _ok(at.switch_page(f"app_pages/{page}.py").run())
    return sent[-1] if sent else {}


def test_every_page_writes_the_whole_state_and_a_reload_reopens_it(dataset_ws, sent):  # noqa: F811
    _, folder = dataset_ws
    ws = load_workspace(folder)
    q = int(ws.index["query"][0])
    c = ws.labels_of(q)["concepts"][:1]
    d0 = ws.d0_values[-1]
    names = list(ws.concept_names)
    want = {"ws": folder.name, "q": str(q), "c": ",".join(c), "method": "S-SVD", "d0": str(d0), "mode": "full",
            "k": "7", "rm": names[0], "boost": f"{names[-1]}:1.5"}
    at = _open(want)
    assert _params(at) == want
    for page in PAGES:
        got = _switch(at, page, sent)
        if page == "mix":  # the Mix page adds its own choices (second query, its two concepts)
            assert set(got) - set(want) == {"q2", "c1", "c2"}, got
        assert {k: v for k, v in got.items() if k in want} == want, (page, got)
        if page == "generate":  # no generator here: the page stops early, the URL is written all the same
            assert any("Stable Diffusion" in w.value for w in at.warning)
        # a reload of this address reopens the same workspace, query and choices
        again = _open(got, page)
        assert again.session_state["ws_choice"] == folder.name, page
        assert _params(again) == got, (page, _params(again))


def test_clearing_concepts_leaves_the_url(dataset_ws, sent):  # noqa: F811
    """Retrieve with every concept cleared stops early (nothing to show): ``c`` leaves the address, the rest
    stays; a reload opens the same workspace and query (with the query's own concepts pre-selected again)."""
    _, folder = dataset_ws
    ws = load_workspace(folder)
    q = int(next(r for r in ws.index["query"] if len(ws.labels_of(int(r))["concepts"]) >= 2))
    at = _open({"ws": folder.name, "q": q})
    got = _switch(at, "retrieve", sent)
    assert got["c"] == ",".join(ws.labels_of(q)["concepts"])
    del sent[:]
    at.multiselect(key="concepts").set_value([])
    _ok(at.run())
    assert any("concept" in i.value for i in at.info), [i.value for i in at.info]  # the page says what to do
    assert sent and sent[-1] == {"ws": folder.name, "q": str(q)}, sent
    again = _open(sent[-1], "retrieve")
    assert again.session_state["ws_choice"] == folder.name and again.session_state["query"] == q


def test_link_to_a_page_without_a_workspace_survives_the_next_click(dataset_ws, sent):  # noqa: F811
    """``/learn?ws=…&q=…`` opens no workspace, so the link is not applied yet; a click on Glossary (bare
    address) must still carry it, and the next workspace page applies it."""
    _, folder = dataset_ws
    at = _open({"ws": folder.name, "q": "3", "method": "S-SVD"}, "learn")
    assert _switch(at, "glossary", sent) == {"ws": folder.name, "q": "3", "method": "S-SVD"}
    got = _switch(at, "retrieve", sent)
    assert (got["ws"], got["q"], got["method"]) == (folder.name, "3", "S-SVD")


def test_pages_stop_through_the_state_helper():
    """``st.stop()`` sends nothing after it, so a page that called it directly would leave the URL stale."""
    offenders = [p.name for p in (ROOT / "app_pages").glob("*.py")
                 if p.name != "_state.py" and "st.stop()" in p.read_text()]
    assert not offenders, f"call app_pages._state.stop() instead of st.stop() in {offenders}"


def test_concept_edits_stay_in_the_url(dataset_ws, sent):  # noqa: F811
    """``?rm=`` and ``?boost=`` open Retrieve's edited galleries at once and stay in the address across reruns
    (another click) and page switches; clearing one in its control takes it out of the address."""
    _, folder = dataset_ws
    ws = load_workspace(folder)
    q = int(ws.index["query"][0])
    names = list(ws.concept_names)
    link = {"ws": folder.name, "q": str(q), "rm": names[0], "boost": f"{names[1]}:1.5"}
    at = _open(link, "retrieve")
    lines = [m.value for m in at.markdown]
    k = at.slider(key="k").value
    assert any(m.startswith(f"lacks {names[0]}: P@{k} ") for m in lines), lines
    assert any(m.startswith(f"has {names[1]}: P@{k} ") for m in lines), lines
    assert {key: _params(at)[key] for key in link} == link
    del sent[:]
    at.slider(key="k").set_value(5)  # another click: a rerun
    _ok(at.run())
    assert sent and {key: sent[-1].get(key) for key in link} == link, sent
    assert any(m.startswith(f"lacks {names[0]}: P@5 ") for m in at.markdown.values)
    got = _switch(at, "atoms", sent)
    assert (got.get("rm"), got.get("boost")) == (link["rm"], link["boost"]), got
    got = _switch(at, "retrieve", sent)
    assert (got.get("rm"), got.get("boost")) == (link["rm"], link["boost"]), got
    del sent[:]
    at.selectbox(key="boost_concept").set_value("—")
    _ok(at.run())
    assert sent and sent[-1].get("rm") == names[0] and "boost" not in sent[-1], sent


def test_map_colour_and_pictures_travel_in_the_url(dataset_ws, sent):  # noqa: F811
    """``?colour=has concept:<c>&pics=1`` opens Subspaces coloured by that concept with pictures on; both stay in
    the address while the page is open, leave it on another page, and a bad value is named in one warning."""
    _, folder = dataset_ws
    ws = load_workspace(folder)
    names = list(ws.concept_names)
    link = {"ws": folder.name, "colour": f"has concept:{names[1]}", "pics": "1"}
    at = _open(link, "subspaces")
    assert at.radio(key="color_by").value == "has concept" and at.selectbox(key="has_concept").value == names[1]
    assert at.toggle(key="pictures").value
    assert {key: _params(at).get(key) for key in link} == link
    del sent[:]
    at.radio(key="color_by").set_value("first label")
    _ok(at.run())
    assert sent and sent[-1].get("colour") == "first label" and sent[-1].get("pics") == "1", sent
    got = _switch(at, "atoms", sent)
    assert "colour" not in got and "pics" not in got, got
    got = _switch(at, "subspaces", sent)
    assert (got.get("colour"), got.get("pics")) == ("first label", "1"), got
    at.toggle(key="pictures").set_value(False)
    del sent[:]
    _ok(at.run())
    assert sent and "pics" not in sent[-1], sent
    bad = _open({"ws": folder.name, "colour": "rainbow"}, "subspaces")
    assert any("colour" in w.value and "rainbow" in w.value for w in bad.warning), [w.value for w in bad.warning]
    assert bad.radio(key="color_by").value == "concept"

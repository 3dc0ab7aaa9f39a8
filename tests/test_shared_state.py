"""The explorer's one shared state (app_pages/_state.py): URL in, URL out, across page switches.

Every test runs the whole app (app.py: navigation + URL sync), on the small emoji world.
"""
from pathlib import Path

import numpy as np
from gallery_helpers import click_gallery, gallery_srcs
from streamlit.testing.v1 import AppTest

from slics_core.explorer.atom_tables import atom_labels, group_layout
from slics_core.explorer.queries import concept_scores, mix_components

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")


def _ok(at):
    assert not at.exception, [e.value for e in at.exception]
    return at


def _params(at):
    return {k: at.query_params[k][0] if isinstance(at.query_params[k], list) else at.query_params[k]
            for k in at.query_params}


def _app(**params):
    at = AppTest.from_file(APP, default_timeout=300)
    for k, v in params.items():
        at.query_params[k] = str(v)
    return _ok(at.run())


def _table(at):
    return at.dataframe[-1].value


def test_link_sets_every_shared_value_and_is_written_back(ws, multi_row):
    labels = ws.labels_of(multi_row)["concepts"]
    d0 = [d for d in ws.d0_values if d != ws.default_d0][0]
    at = _app(q=multi_row, c=labels[0], method="S-SVD", d0=d0, mode="full", k=7)
    _ok(at.switch_page("app_pages/retrieve.py").run())
    assert not at.warning
    assert at.selectbox(key="query_pick").value == multi_row
    assert at.multiselect(key="concepts").value == [labels[0]]
    assert at.selectbox(key="method").value == "S-SVD"
    assert at.select_slider(key="d0").value == d0
    assert at.radio(key="component").value == "full"
    assert at.slider(key="k").value == 7
    assert len(_table(at)) == 2 * 7
    assert _params(at) == {"q": str(multi_row), "c": labels[0], "method": "S-SVD", "d0": str(d0), "mode": "full",
                           "k": "7"}


def test_choices_survive_page_switches(ws, multi_row):
    at = _app(q=multi_row)
    _ok(at.switch_page("app_pages/retrieve.py").run())
    d0 = [d for d in ws.d0_values if d != ws.default_d0][-1]
    at.selectbox(key="method").set_value("U-SLiCS")
    _ok(at.run())
    at.select_slider(key="d0").set_value(d0)
    _ok(at.run())
    at.slider(key="k").set_value(5)
    _ok(at.run())
    for page in ("app_pages/atoms.py", "app_pages/captions.py", "app_pages/home.py", "app_pages/retrieve.py"):
        _ok(at.switch_page(page).run())
        p = _params(at)
        assert (p["method"], p["d0"], p["k"], p["q"]) == ("U-SLiCS", str(d0), "5", str(multi_row)), page
    assert at.selectbox(key="method").value == "U-SLiCS"
    assert at.select_slider(key="d0").value == d0
    assert at.slider(key="k").value == 5
    # a page offering only dictionary methods shows S-SLiCS for UF without changing the shared choice
    at.selectbox(key="method").set_value("UF")
    _ok(at.run())
    assert at.select_slider(key="d0_fixed").disabled  # UF has no atoms
    _ok(at.switch_page("app_pages/atoms.py").run())
    assert at.selectbox(key="method").value == "S-SLiCS"
    assert _params(at)["method"] == "UF"


def test_bad_link_values_are_named_and_left_out(ws, multi_row):
    at = _app(q=10**7, d0=77, method="Nope", mode="sideways", k=0, c="animal,not-a-concept")
    _ok(at.switch_page("app_pages/retrieve.py").run())
    # the warning is shown once, on the page that opened the link
    at2 = _app(q=10**7, d0=77, method="Nope", mode="sideways", k=0, c="animal,not-a-concept")
    text = " ".join(w.value for w in at2.warning)
    for culprit in ("q=", "d0=", "`Nope`", "mode=", "k=", "not-a-concept"):
        assert culprit in text, culprit
    # what could not be honoured falls back to the defaults
    assert at.selectbox(key="method").value == "S-SLiCS"
    assert at.select_slider(key="d0").value == ws.default_d0
    assert at.slider(key="k").value == 20


def test_gallery_image_becomes_the_query(ws, multi_row):
    at = _app(q=multi_row)
    _ok(at.switch_page("app_pages/retrieve.py").run())
    df = _table(at)
    first = df[df.gallery == "concept"].iloc[2]
    target = int(first["row"])
    # a click on the gallery's third image
    _ok(click_gallery(at, f"pick_{ws.concept_names.index(first['concept'])}", 2))
    assert at.session_state["query"] == target
    assert _params(at)["q"] == str(target)
    assert at.selectbox(key="query_pick").value == target  # offered even if it is a pool item
    # the concepts are the new query's labels, and its galleries are shown
    assert at.multiselect(key="concepts").value == ws.labels_of(target)["concepts"]
    assert set(_table(at)["concept"]) == set(ws.labels_of(target)["concepts"])


def test_text_query_ranks_concepts_and_retrieves(ws):
    at = _app()
    _ok(at.switch_page("app_pages/retrieve.py").run())
    at.text_input(key="query_text").input("a dog").run()
    _ok(at)
    assert at.session_state["query"] == "text:a dog"
    assert _params(at)["q"] == "text:a dog"
    ranked = next(d.value for d in at.dataframe if "cos(ṽⱼ, x)" in d.value.columns)  # the query's concepts
    assert "known label" not in ranked.columns
    # the page's ranking is the library's on the text embedding
    from slics_core.explorer.encoding import embed_text_query, load_query_encoder

    raw, x = embed_text_query(ws, load_query_encoder(ws), "a dog")
    model = ws.model("S-SLiCS", ws.default_d0)
    scores = concept_scores(model, x)
    assert ranked["concept"].iloc[0] == ws.concept_names[int(np.argmax(scores))]
    assert at.multiselect(key="concepts").value == [ws.concept_names[int(np.argmax(scores))]]
    assert len(_table(at)) > 0
    # the link reopens the text query
    at2 = _app(q="text:a dog")
    _ok(at2.switch_page("app_pages/retrieve.py").run())
    assert at2.session_state["query"] == "text:a dog"


def test_mix_page_retrieves_by_the_sum_of_two_components(ws, multi_row):
    names = list(ws.concept_names)
    a = ws.labels_of(multi_row)["concepts"][0]
    q = ws.index["query"]
    r2 = next(int(r) for r in q if int(r) != multi_row and a not in ws.labels_of(int(r))["concepts"]
              and ws.labels_of(int(r))["concepts"])
    b = ws.labels_of(r2)["concepts"][0]
    at = _app(q=multi_row, q2=r2, c1=a, c2=b, k=6)
    _ok(at.switch_page("app_pages/mix.py").run())
    assert at.selectbox(key="mix_c1").value == a
    assert at.selectbox(key="mix_q2").value == r2
    assert at.selectbox(key="mix_c2").value == b
    model = ws.model("S-SLiCS", ws.default_d0)
    mixed, _ = mix_components(model, [(ws.X[multi_row], names.index(a), None), (ws.X[r2], names.index(b), None)])
    rows = ws.pool.search(mixed, 6).rows
    p = _params(at)
    assert (p["q2"], p["c1"], p["c2"]) == (str(r2), a, b)
    # the mixed gallery's images are the pool rows of the recomputed ranking: a click on the sixth makes it the query
    assert len(gallery_srcs(at)[0]) == 6  # six results
    _ok(click_gallery(at, "mix_pick", 5))
    assert at.session_state["query"] == int(rows[5])


def test_atom_picker_labels_follow_the_dictionary(ws):
    at = _app()
    _ok(at.switch_page("app_pages/atoms.py").run())
    for d0 in (ws.d0_values[0], ws.d0_values[-1]):
        at.select_slider(key="d0").set_value(d0)
        _ok(at.run())
        model = ws.model("S-SLiCS", d0)
        box = at.selectbox(key=f"atom_S-SLiCS_d0{d0}")
        labels = dict(enumerate(atom_labels(model.groups_, ws.concept_names)))
        order = group_layout(model.groups_)["order"]
        assert box.options == [f"{labels[int(a)]} (atom {int(a)})" for a in order]


def test_link_with_concepts_but_no_query_keeps_them(ws):
    """``/retrieve?c=animal``: the picks hold for the query the page starts with."""
    at = _app(c="animal")
    _ok(at.switch_page("app_pages/retrieve.py").run())
    assert at.multiselect(key="concepts").value == ["animal"]
    assert set(_table(at)["concept"]) == {"animal"}
    assert _params(at)["c"] == "animal"

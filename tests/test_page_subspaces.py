"""AppTest of the Subspaces page (t-SNE map of embeddings, components and atoms) on the small emoji world."""
import base64
import json
from pathlib import Path

import numpy as np
from streamlit.testing.v1 import AppTest

from slics_core.explorer.maps import map_points, map_sample

ROOT = Path(__file__).resolve().parent.parent
PAGE = str(ROOT / "app_pages" / "subspaces.py")


def _page(n_points=40, query=None):
    at = AppTest.from_file(PAGE, default_timeout=180)
    at.session_state["n_points"] = n_points
    if query is not None:
        at.session_state["query"] = query
    return at.run()


def _ids(customdata):
    """Point ids from a trace's customdata (a list, or plotly's base64 typed array)."""
    if isinstance(customdata, dict) and "bdata" in customdata:
        a = np.frombuffer(base64.b64decode(customdata["bdata"]), dtype=np.dtype(customdata["dtype"]))
        return sorted(int(v) for v in a)  # one column: the point id
    return sorted(int(c[0]) for c in customdata)


def _groups(at):
    """The colour groups listed under the map (name -> points)."""
    df = at.dataframe[0].value
    return dict(zip(df.iloc[:, 0], df["points"]))


def _title(at):
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    return spec["layout"]["title"]["text"], spec


def _expected_table(ws, at):
    s = at.session_state
    concepts = list(s["map_concepts"]) or None
    include = [s["query"]] if "query" in s and s["mark_query"] else None
    rows = map_sample(ws.Y, ws.index[s["map_split"]], int(s["n_points"]), random_state=int(s["map_seed"]),
                      concepts=concepts, concept_names=ws.concept_names, include=include)
    return map_points(ws.model(s["method"], s["d0"]), ws.X, ws.Y, rows, kinds=s["kinds"],
                      component=s["component"], concepts=concepts, Z=ws.Z, sub_to_concept=ws.sub_to_concept,
                      concept_names=ws.concept_names, sub_names=ws.sub_names)[1]


def test_map_renders_and_colour_by_changes_the_groups(ws):
    at = _page()
    assert not at.exception
    title, spec = _title(at)
    exp = _expected_table(ws, at)
    assert f"d0={at.session_state['d0']}" in title
    assert f"{(exp.kind == 'embedding').sum()} items" in title and f"{(exp.kind == 'atom').sum()} atoms" in title
    by_concept = _groups(at)
    assert by_concept == exp.groupby("concept").size().to_dict()
    assert set(by_concept) <= set(ws.concept_names) | {"several", "none"}
    # one trace per (colour group, kind) with the point ids as customdata (what a selection returns)
    ids = sorted(i for t in spec["data"] for i in _ids(t["customdata"]))
    assert ids == list(range(len(exp)))
    at.radio(key="color_by").set_value("sub-label").run()
    assert not at.exception
    by_sub = _groups(at)
    assert by_sub == exp.groupby("sub_label").size().to_dict()
    assert "(atom)" in by_sub and not set(by_sub) & (set(ws.concept_names) - set(ws.sub_names))


def test_picked_points_show_their_images(ws):
    at = _page()
    assert not at.exception
    assert not at.get("image")  # nothing picked: empty state
    exp = _expected_table(ws, at)
    emb = exp.point[exp.kind == "embedding"].tolist()[:2]
    comp = exp.point[exp.kind == "component"].tolist()[:1]
    atom = exp.point[exp.kind == "atom"].tolist()[:1]
    picked = emb + comp + atom
    at.multiselect(key="picked_points").set_value(picked).run()
    assert not at.exception
    assert len(at.get("image")) == 3  # two embeddings and one component are images; the atom is not
    details = at.dataframe[1].value
    assert details.point.tolist() == picked
    assert details.row.tolist() == exp.set_index("point").loc[picked, "row"].tolist()
    assert set(details.row[:3]) <= set(ws.index["pool"].tolist())
    assert any("atom" in m.value for m in at.markdown)


def test_d0_kinds_and_fig5_view_change_the_map(ws):
    at = _page(n_points=30)
    other = [d for d in ws.d0_values if d != at.session_state["d0"]][0]
    at.select_slider(key="d0").set_value(other).run()
    assert not at.exception
    assert f"d0={other}" in _title(at)[0]
    assert f"{ws.n_concepts * other} atoms" in _title(at)[0]
    at.multiselect(key="kinds").set_value(["atom"]).run()
    assert not at.exception
    assert sum(_groups(at).values()) == ws.n_concepts * other
    at.button(key="fig5").click().run()
    assert not at.exception
    assert at.session_state["map_concepts"] == ["animal"]
    groups = _groups(at)
    animal = ws.concept_names.index("animal")
    animal_subs = {n for n, c in zip(ws.sub_names, ws.sub_to_concept) if c == animal}
    assert set(groups) <= animal_subs | {"(atom)", "several", "none"}
    assert groups["(atom)"] == other
    at.multiselect(key="kinds").set_value([]).run()
    assert not at.exception and at.info


def test_current_query_is_marked_with_its_components(ws):
    q = int(ws.index["query"][np.flatnonzero(ws.Y[ws.index["query"]].sum(1) >= 2)[0]])
    at = _page(query=q)
    assert not at.exception
    exp = _expected_table(ws, at)
    spec = _title(at)[1]
    marked = [t for t in spec["data"] if t.get("name") == "current query"]
    assert len(marked) == 1
    ids = _ids(marked[0]["customdata"])
    assert ids == exp.point[exp.row == q].tolist()
    assert len(ids) == 1 + ws.Y[q].sum()  # the embedding and one component per labelled concept
    at.checkbox(key="mark_query").uncheck().run()
    assert not at.exception
    assert not [t for t in _title(at)[1]["data"] if t.get("name") == "current query"]

"""AppTest of the Subspaces page (t-SNE map of embeddings, components and atoms) on the small emoji world."""
import base64
import io
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
from streamlit.testing.v1 import AppTest
from streamlit_private import download_data

from slics_core.explorer.map_colours import ATOM_SUB, OTHER_CONCEPTS, SEVERAL, colour_groups
from slics_core.explorer.maps import (
    KINDS,
    map_points,
    map_sample,
    match_points,
    point_text,
)

ROOT = Path(__file__).resolve().parent.parent
PAGE = str(ROOT / "app_pages" / "subspaces.py")
SYMBOLS = {"circle": "embedding", "diamond": "component", "star": "atom"}


def _page(n_points=40, query=None, **state):
    at = AppTest.from_file(PAGE, default_timeout=240)
    at.session_state["n_points"] = n_points
    if query is not None:
        at.session_state["query"] = query
    for k, v in state.items():
        at.session_state[k] = v
    return _settled(at.run())


def _settled(at):
    """``at`` once a large map's background layout is done (the page shows its progress until then)."""
    from slics_core.explorer.background import JOBS

    if not at.exception and not at.get("plotly_chart") and at.get("progress"):
        JOBS.wait(240)
        at.run()
    return at


def _ids(customdata):
    """Point ids from a trace's customdata, in trace order (a list of rows, or plotly's base64 typed array)."""
    if isinstance(customdata, dict) and "bdata" in customdata:
        a = np.frombuffer(base64.b64decode(customdata["bdata"]), dtype=np.dtype(customdata["dtype"]))
        return [int(v) for v in a]  # one column: the point id
    return [int(c[0]) for c in customdata]


def _spec(at):
    return json.loads(at.get("plotly_chart")[0].spec)


def _map_traces(spec):
    return [t for t in spec["data"] if t.get("name") != "current query"]


def _legend(spec):
    return [t["name"] for t in _map_traces(spec) if t.get("showlegend", True)]


def _groups(at):
    """The colour groups listed under the map (name -> points): the last table of the page."""
    df = at.dataframe[-1].value
    return dict(zip(df["group"], df["points"]))


def _expected_points(ws, at):
    """``(P, table)`` of the map the page shows (a marked query never changes its points)."""
    s = at.session_state
    concepts = list(s["map_concepts"]) or None
    rows = map_sample(ws.Y, ws.index[s["map_split"]], int(s["n_points"]), random_state=int(s["map_seed"]),
                      concepts=concepts, concept_names=ws.concept_names)
    return map_points(ws.model(s["method"], s["d0"]), ws.X, ws.Y, rows, kinds=s["kinds"],
                      component=s["component"], concepts=concepts, Z=ws.Z, sub_to_concept=ws.sub_to_concept,
                      concept_names=ws.concept_names, sub_names=ws.sub_names)


def _expected_table(ws, at):
    return _expected_points(ws, at)[1]


def test_map_renders_with_readable_hover_texts_and_a_compact_legend(ws):
    at = _page()
    assert not at.exception
    spec = _spec(at)
    exp = _expected_table(ws, at)
    title = spec["layout"]["title"]["text"]
    assert f"d0={at.session_state['d0']}" in title
    assert f"{(exp.kind == 'embedding').sum()} items" in title and f"{(exp.kind == 'atom').sum()} atoms" in title
    # clicks select (Streamlit keeps click selection only outside box/lasso drag modes)
    assert spec["layout"]["clickmode"] == "event+select" and spec["layout"]["dragmode"] in ("zoom", "pan")
    traces = _map_traces(spec)
    ids = [i for t in traces for i in _ids(t["customdata"])]
    assert sorted(ids) == list(range(len(exp)))  # every point once, identified by its id
    kinds = exp.set_index("point").kind
    concept = exp.set_index("point").concept
    for t in traces:
        pts = _ids(t["customdata"])
        # one symbol per kind, one colour per concept
        assert {kinds[p] for p in pts} == {SYMBOLS[t["marker"]["symbol"]]}
        assert {concept[p] for p in pts} == {t["name"]}
        # hover: a sentence per point, no raw "key=value" dump
        want = point_text(exp.set_index("point").loc[pts].reset_index(), at.session_state["component"])
        assert t["hovertext"] == want
        assert all("=" not in h and "atom=-1" not in h for h in t["hovertext"])
    comp = exp[exp.kind == "component"].iloc[0]
    text = next(h for t in traces for p, h in zip(_ids(t["customdata"]), t["hovertext"]) if p == comp.point)
    assert text.startswith(f"component ṽ of <i>{comp.concept}</i> · item #{comp.row}")
    # compact legend: colour by concept, at most 15 entries, one per colour group
    legend = _legend(spec)
    assert len(legend) <= 15 and len(legend) == len(set(legend))
    assert legend == colour_groups(exp, "concept", concept_names=ws.concept_names)[1]
    assert set(legend) <= set(ws.concept_names) | {SEVERAL, "none"}
    assert _groups(at) == exp.groupby("concept").size().to_dict()


def test_sub_label_colours_are_limited_to_one_concept(ws):
    at = _page(n_points=80)
    assert not at.exception
    at.radio(key="color_by").set_value("sub-label").run()
    assert not at.exception
    at.selectbox(key="sub_concept").set_value("food").run()
    assert not at.exception
    spec = _spec(at)
    exp = _expected_table(ws, at).set_index("point")
    food = ws.concept_names.index("food")
    food_subs = [s for s, c in zip(ws.sub_names, ws.sub_to_concept) if c == food]
    legend = _legend(spec)
    assert len(legend) <= 15
    assert set(legend) <= set(food_subs) | {ATOM_SUB, SEVERAL, OTHER_CONCEPTS}
    assert set(legend) & set(food_subs), legend
    grey = None
    for t in _map_traces(spec):
        for p in _ids(t["customdata"]):
            row, kind = exp.row[p], exp.kind[p]
            if kind == "embedding":
                own = [ws.sub_names[k] for k in np.flatnonzero(ws.Z[row]) if ws.sub_to_concept[k] == food]
                is_food = bool(own)
            else:
                is_food = exp.concept[p] == "food"
            assert (t["name"] != OTHER_CONCEPTS) == is_food, (p, t["name"])
            if kind == "component" and is_food:
                assert t["name"] == exp.sub_label[p]
        if t["name"] == OTHER_CONCEPTS:
            grey = t["marker"]["color"]
    assert grey is not None and grey.startswith("#") and len(set(grey[1:3] + grey[3:5] + grey[5:7])) == 1
    # the legend title says which concept's sub-labels these are
    assert "food" in spec["layout"]["legend"]["title"]["text"]


def test_highlight_keeps_matches_bright_and_dims_the_rest(ws):
    at = _page()
    exp = _expected_table(ws, at)
    word = exp.sub_labels[exp.kind == "component"].iloc[0].split(", ")[0]
    at.selectbox(key="highlight").set_value(word).run()
    assert not at.exception
    spec = _spec(at)
    hit = match_points(exp, word)
    assert 0 < hit.sum() < len(exp)
    for t in _map_traces(spec):
        for p, o in zip(_ids(t["customdata"]), t["marker"]["opacity"]):
            assert o == (1.0 if hit[p] else 0.12), (p, o)
    assert f"{int(hit.sum())} points match “{word}”" in spec["layout"]["title"]["text"]
    # "#<row>" (free text: not an option, so typed through the session state) highlights one item's
    # embedding and its components
    r = int(exp.row[exp.kind == "embedding"].iloc[0])
    at = _page(highlight=f"#{r}")
    assert not at.exception
    bright = {p for t in _map_traces(_spec(at)) for p, o in zip(_ids(t["customdata"]), t["marker"]["opacity"])
              if o == 1.0}
    assert bright == set(exp.point[exp.row == r]) and len(bright) == 1 + ws.Y[r].sum()




def _download(at, stores, key):
    return download_data(stores, next(b for b in at.get("download_button") if key in b.id))


def test_csv_export_carries_the_settings(ws, media):
    at = _page(n_points=30, map_split="val", map_concepts=["animal", "food"], component="full")
    assert not at.exception
    exp = _expected_table(ws, at)
    df = pd.read_csv(io.BytesIO(_download(at, media, "tsne_csv")), keep_default_na=False)
    s = at.session_state
    settings = ["method", "d0", "component_mode", "split", "concepts", "kinds", "n_items", "seed", "colour_by"]
    assert list(df.columns[:len(settings)]) == settings
    assert len(df) == len(exp)
    first = df.iloc[0]
    assert (first.method, int(first.d0), first.component_mode, first.split) == (s["method"], s["d0"], "full", "val")
    assert first.concepts == "animal;food" and first.kinds == ";".join(s["kinds"])
    assert int(first.n_items) == 30 and int(first.seed) == s["map_seed"] and first.colour_by == "concept"
    assert (df.nunique()[settings] == 1).all()
    assert df.point.tolist() == exp.point.tolist() and df.row.tolist() == exp.row.tolist()
    assert df.description.tolist() == point_text(exp, "full", html=False)
    assert {"x", "y", "colour_group"} <= set(df.columns)


def test_picked_points_show_a_preview_and_their_images(ws):
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
    # the preview (first picked item) and a grid of the three picked items (the atom has no image)
    assert len(at.get("image")) == 4
    r0 = int(exp.row[emb[0]])
    # "#N" in the grid's captions is the item's row (as everywhere else), never the map's point id
    caps = [img.captions[0] for img in at.get("image")[1:]]
    rows = exp.set_index("point").loc[emb + comp, "row"].tolist()
    assert [c.split(" ")[0].lstrip("\\") for c in caps] == [f"#{int(r)}" for r in rows]  # "\\#": Markdown-escaped
    assert at.button(key="map_use_query").label == f"Use #{r0} as the query"
    details = at.dataframe[0].value
    assert details.point.tolist() == picked
    assert details.row.tolist() == exp.set_index("point").loc[picked, "row"].tolist()
    assert set(details.row[:3]) <= set(ws.index["pool"].tolist())
    assert details.description.tolist() == [point_text(exp, "partial", html=False)[p] for p in picked]
    assert any("Atoms picked" in m.value for m in at.markdown)
    # the preview can switch to another picked item
    at.selectbox(key="map_focus").set_value(comp[0]).run()
    assert not at.exception
    assert at.button(key="map_use_query").label == f"Use #{int(exp.row[comp[0]])} as the query"


def test_use_as_query_opens_retrieve_with_that_query(ws):
    q_rows = ws.index["query"]
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=240)
    at.session_state["n_points"] = 30
    at.session_state["map_split"] = "query"
    at.run()
    at.switch_page("app_pages/subspaces.py").run()
    assert not at.exception
    exp = _expected_table(ws, at)
    p = int(exp.point[exp.kind == "component"].iloc[-1])
    r = int(exp.row[p])
    assert r in set(q_rows.tolist())
    at.multiselect(key="picked_points").set_value([p]).run()
    at.button(key="map_use_query").click().run()
    assert not at.exception
    assert at.session_state["query"] == r
    assert at.selectbox(key="query_pick").value == r  # Retrieve is open, on that query
    # an item outside the query split: the page sets it and nothing breaks
    at.switch_page("app_pages/subspaces.py")
    at.session_state["map_split"] = "pool"
    at.run()
    exp = _expected_table(ws, at)
    p = int(exp.point[exp.kind == "embedding"].iloc[0])
    at.multiselect(key="picked_points").set_value([p]).run()
    assert any("not the query split" in c.value for c in at.caption)
    at.button(key="map_use_query").click().run()
    assert not at.exception


def test_d0_kinds_and_fig5_view_change_the_map(ws):
    at = _page(n_points=30)
    other = [d for d in ws.d0_values if d != at.session_state["d0"]][0]
    at.select_slider(key="d0").set_value(other).run()
    assert not at.exception
    assert f"d0={other}" in _spec(at)["layout"]["title"]["text"]
    assert f"{ws.n_concepts * other} atoms" in _spec(at)["layout"]["title"]["text"]
    at.multiselect(key="kinds").set_value(["atom"]).run()
    assert not at.exception
    assert sum(_groups(at).values()) == ws.n_concepts * other
    at.button(key="fig5").click().run()
    assert not at.exception
    assert at.session_state["map_concepts"] == ["animal"] and at.session_state["sub_concept"] == "animal"
    groups = _groups(at)
    animal = ws.concept_names.index("animal")
    animal_subs = {n for n, c in zip(ws.sub_names, ws.sub_to_concept) if c == animal}
    assert set(groups) <= animal_subs | {ATOM_SUB, SEVERAL}
    assert groups[ATOM_SUB] == other
    assert at.multiselect(key="kinds").options == ["item", "component", "atom"]  # "item", as the other pages say
    at.multiselect(key="kinds").set_value([]).run()
    assert not at.exception and at.info
    assert any("(item, component, atom)" in i.value for i in at.info) and not any("embedding" in i.value
                                                                                   for i in at.info)


def test_current_query_is_marked_with_its_components(ws, monkeypatch):
    """A query item that is on the map: its own points (embedding and components) are marked, the map is not laid
    out again (issue 38: it was, and its labels overlapped), and one label is written (the rest in the hover)."""
    from slics_core.explorer import arrival

    at = _page()
    exp = _expected_table(ws, at)
    on_map = exp.row[(exp.kind == "embedding")].tolist()
    q = int(next(r for r in on_map if ws.Y[r].sum() >= 2))
    before = _xy_of(_spec(at))
    at.session_state["query"] = q
    at.run()
    assert not at.exception
    # off at first (the first view is the map prepared at build time)
    assert not at.checkbox(key="mark_query").value
    assert not [t for t in _spec(at)["data"] if t.get("name") == "current query"]

    def refuse(*a, **k):
        raise AssertionError("t-SNE ran again")

    monkeypatch.setattr(arrival, "tsne_fit", refuse)
    at.checkbox(key="mark_query").check().run()
    assert not at.exception, at.exception
    spec = _spec(at)
    assert _xy_of(spec) == before  # the same map
    marked = [t for t in spec["data"] if t.get("name") == "current query"]
    assert len(marked) == 1
    ids = _ids(marked[0]["customdata"])
    assert ids == exp.point[exp.row == q].tolist()
    assert len(ids) == 1 + ws.Y[q].sum()  # the embedding and one component per labelled concept
    assert [t for t in marked[0]["text"] if t] == [f"x (item {q})"]  # one label on the map
    assert _placed_trace(spec) is None
    at.checkbox(key="mark_query").uncheck().run()
    assert not at.exception
    assert not [t for t in _spec(at)["data"] if t.get("name") == "current query"]


def test_every_map_widget_starts_at_map_defaults(ws, monkeypatch):
    """The page's first view is MAP_DEFAULTS, the view the build prepares: change every default and each
    widget follows, and the map drawn is the prepared one (arrival.default_map_points)."""
    from slics_core.explorer import arrival, page_settings

    changed = {"kinds": ("component", "atom"), "component": "full", "n_points": 60,
               "concepts": (ws.concept_names[1],), "split": "query", "seed": 7}
    assert set(changed) == set(page_settings.MAP_DEFAULTS)
    assert all(changed[k] != v for k, v in page_settings.MAP_DEFAULTS.items())  # each default is changed
    for k, v in changed.items():
        monkeypatch.setitem(page_settings.MAP_DEFAULTS, k, v)
    at = AppTest.from_file(PAGE, default_timeout=240).run()
    assert not at.exception, at.exception
    s = at.session_state
    assert (list(s["kinds"]), s["component"], s["n_points"], list(s["map_concepts"]), s["map_split"],
            s["map_seed"]) == (["component", "atom"], "full", 60, [ws.concept_names[1]], "query", 7)
    assert not s["mark_query"]
    prepared = arrival.default_map_points(ws, s["method"], s["d0"])[1]
    pd.testing.assert_frame_equal(_expected_table(ws, at), prepared)


def _values(v):
    """A trace's numbers: a list, or plotly's base64 typed array."""
    if isinstance(v, dict) and "bdata" in v:
        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"])).tolist()
    return list(v)


def _positions(spec):
    """Point id -> (x, y) as drawn."""
    return {p: (x, y) for t in _map_traces(spec)
            for p, x, y in zip(_ids(t["customdata"]), _values(t["x"]), _values(t["y"]))}


def test_pictures_toggle_draws_thumbnails_of_grid_chosen_items(ws):
    from PIL import Image

    from slics_core.explorer.maps import picture_points

    at = _page(n_points=450)
    assert not at.exception
    assert not _spec(at)["layout"].get("images")  # off at first
    at.toggle(key="pictures").set_value(True).run()
    assert not at.exception
    spec = _spec(at)
    images = spec["layout"]["images"]
    exp = _expected_table(ws, at)
    pos = _positions(spec)
    drawn = exp.assign(x=[pos[p][0] for p in exp.point], y=[pos[p][1] for p in exp.point])
    chosen = picture_points(drawn, 400)
    assert (exp.kind == "embedding").sum() > 400 and len(images) == len(chosen) <= 400
    assert sorted((im["x"], im["y"]) for im in images) == sorted(pos[p] for p in chosen)
    rows = {pos[p]: int(exp.row[p]) for p in chosen}
    for im in images[:20]:
        assert im["source"].startswith("data:image/jpeg;base64,") and im["xref"] == "x"
        got = Image.open(io.BytesIO(base64.b64decode(im["source"].split(",", 1)[1])))
        want = ws.thumbnail(rows[(im["x"], im["y"])], 32)
        assert got.size == want.size and max(got.size) == 32
    assert f"{len(images)} pictures" in spec["layout"]["title"]["text"]
    at.toggle(key="pictures").set_value(False).run()
    assert not _spec(at)["layout"].get("images")


def test_colour_by_presence_of_one_concept_and_by_first_label(ws):
    at = _page()
    at.radio(key="color_by").set_value("has concept").run()
    assert not at.exception
    at.selectbox(key="has_concept").set_value("food").run()
    assert not at.exception
    exp = _expected_table(ws, at).set_index("point")
    food = ws.concept_names.index("food")
    names = set()
    for t in _map_traces(_spec(at)):
        names.add(t["name"])
        for p in _ids(t["customdata"]):
            has = exp.concept[p] == "food" if exp.kind[p] == "atom" else bool(ws.Y[exp.row[p], food])
            assert t["name"] == ("has food" if has else "lacks food"), (p, t["name"])
    assert names == {"has food", "lacks food"}
    at.radio(key="color_by").set_value("first label").run()
    assert not at.exception
    seen_several = False
    for t in _map_traces(_spec(at)):
        for p in _ids(t["customdata"]):
            if exp.kind[p] == "embedding":
                seen_several |= exp.concept[p] == SEVERAL
                assert t["name"] == ws.concept_names[int(np.flatnonzero(ws.Y[exp.row[p]])[0])]
            else:
                assert t["name"] == exp.concept[p]
    assert seen_several  # the first-label rule changed something


def test_picked_items_show_how_many_have_each_concept(ws):
    at = _page()
    exp = _expected_table(ws, at)
    picked = exp.point[exp.kind != "atom"].tolist()[:25] + exp.point[exp.kind == "atom"].tolist()[:2]
    at.multiselect(key="picked_points").set_value(picked).run()
    assert not at.exception
    import re

    lines = [m.value for m in at.markdown]
    head = next(i for i, v in enumerate(lines) if v.startswith("**Concepts of the "))
    assert lines[head] == f"**Concepts of the {len(set(exp.row[p] for p in picked if exp.row[p] >= 0))} picked items**"
    shown = [re.sub(r"\\(.)", r"\1", v) for v in lines[head + 1].split("  \n")]  # Markdown escapes undone
    items = sorted({int(exp.row[p]) for p in picked if exp.row[p] >= 0})
    want = sorted(((int(ws.Y[items, j].sum()), c) for j, c in enumerate(ws.concept_names)),
                  key=lambda hc: -hc[0])
    assert shown == [f"{h} / {len(items)} have {c}" for h, c in want]


# ---------------------------------------------------------------------- large maps
def _synthetic_map(n_items=20_000, n_concepts=12, seed=0):
    """A map's table of the COCO training split's shape: 20 000 items, ~2.2 labelled concepts each (one component
    per concept), 12 concepts x 8 atoms, sub-labels, t-SNE-like coordinates."""
    rng = np.random.default_rng(seed)
    names = [f"concept{j:02d}" for j in range(n_concepts)]
    subs = [f"{c}-sub{k}" for c in names for k in range(6)]
    n_lab = np.clip(rng.poisson(1.2, n_items) + 1, 1, 5)
    recs = []
    for i in range(n_items):
        cs = sorted(rng.choice(n_concepts, n_lab[i], replace=False))
        labels = ", ".join(names[j] for j in cs)
        sl = [f"{names[j]}-sub{rng.integers(6)}" for j in cs]
        recs.append(("embedding", i, -1, names[cs[0]] if len(cs) == 1 else SEVERAL,
                     sl[0] if len(cs) == 1 else SEVERAL, labels, ", ".join(sl)))
        for j, s in zip(cs, sl):
            recs.append(("component", i, -1, names[j], s, labels, s))
    for k in range(n_concepts * 8):
        recs.append(("atom", -1, k, names[k // 8], ATOM_SUB, names[k // 8], ""))
    table = pd.DataFrame(recs, columns=["kind", "row", "atom", "concept", "sub_label", "labels", "sub_labels"])
    table.insert(0, "point", np.arange(len(table)))
    xy = rng.standard_normal((len(table), 2)) * 40
    return table.assign(x=xy[:, 0], y=xy[:, 1]), names, subs


def test_a_20000_item_map_is_a_message_under_8_mb():
    """The figure of 20 000 items with their components (~64 000 points) as Streamlit sends it (plotly JSON), with a
    highlight (per-point opacity) and with 400 pictures of 2 KB each, stays under 8 MB."""
    from app_pages._map_figure import map_figure
    from slics_core.explorer.map_colours import map_colours

    table, names, _ = _synthetic_map()
    assert len(table) > 60_000
    texts = point_text(table, "partial")
    picture = "data:image/jpeg;base64," + "A" * 2000
    for colour_by, highlight, pictures in (("concept", None, None), ("first label", "concept03", None),
                                           ("concept", None, lambda r: picture)):
        groups, order, colours = map_colours(table, colour_by, concept_names=names)
        hit = match_points(table, highlight)
        fig = map_figure(table, texts, groups, order, colours, hit, component="partial", highlight=highlight,
                         pictures=pictures, title="t", legend_title="l")
        size = len(fig.to_json().encode())
        assert size < 8 * 2**20, (colour_by, highlight, size / 2**20)
        # every point is drawn once, its id and item row in customdata
        ids = np.concatenate([np.asarray(t.customdata) for t in fig.data])
        assert sorted(ids[:, 0].tolist()) == list(range(len(table)))
        np.testing.assert_array_equal(table.row.to_numpy()[ids[:, 0]], ids[:, 1])
        assert {t.type for t in fig.data} == {"scattergl"}
        assert all(t.x.dtype == np.float32 for t in fig.data)
        assert all(t.hovertext is None for t in fig.data)  # no per-point sentence


def _xy_of(spec):
    out = {}
    for t in _map_traces(spec):
        if t.get("name") == "query":
            continue
        for p, x, y in zip(_ids(t["customdata"]), _values(t["x"]), _values(t["y"])):
            out[p] = (x, y)
    return out


def test_query_is_placed_on_an_open_tsne_map_without_recomputing_it(ws, monkeypatch):
    """Above the openTSNE threshold, marking the query places it into the stored map (its points unchanged, no
    t-SNE run): planted truth, a query that is an item of the map lands beside that item's own point."""
    from slics_core.explorer import arrival, layouts
    from slics_core.explorer.background import JOBS
    from slics_core.methods import preferred_method

    monkeypatch.setattr(layouts, "OPENTSNE_MIN_POINTS", 10)
    monkeypatch.setattr(layouts, "OPENTSNE_GRADIENT", "bh")
    rows = map_sample(ws.Y, ws.index["pool"], 60, random_state=11, concept_names=ws.concept_names)
    P, _ = map_points(ws.model(preferred_method(ws.dictionary_methods()), ws.default_d0), ws.X, ws.Y, rows,
                      kinds=KINDS, component="partial", Z=ws.Z, sub_to_concept=ws.sub_to_concept,
                      concept_names=ws.concept_names, sub_names=ws.sub_names)
    (ws.path / arrival.STORE / arrival.layout_name(P, 11, ws)).unlink(missing_ok=True)  # laid out in this process
    at = _page(n_points=60, map_seed=11)
    assert not at.exception, at.exception
    exp = _expected_table(ws, at)
    before = _xy_of(_spec(at))
    q = int(exp.row[exp.kind == "embedding"].iloc[5])
    own = int(exp.point[(exp.kind == "embedding") & (exp.row == q)].iloc[0])

    def refuse(*a, **k):
        raise AssertionError("t-SNE ran again")

    monkeypatch.setattr(arrival, "tsne_fit", refuse)
    # an upload whose embedding is item q's (a map item itself would have its own points marked)
    from app_pages._workspace import ws_id

    at.session_state["upload_query"] = {"sha": "f00d", "name": "same.png", "image": None,
                                        "raw": np.asarray(ws.raw[q]), "x": np.asarray(ws.X[q]), "ws": ws_id(ws)}
    at.session_state["query"] = "upload"
    at.run()
    at.checkbox(key="mark_query").check().run()
    assert not at.exception, at.exception
    spec = _spec(at)
    assert _xy_of(spec) == before  # the same map
    assert not [t for t in spec["data"] if t.get("name") == "current query"]
    placed = [t for t in spec["data"] if t.get("name") == "query"]
    assert len(placed) == 1 and placed[0]["text"] == ["query (upload: same.png)"]
    qx, qy = _values(placed[0]["x"])[0], _values(placed[0]["y"])[0]
    xy = np.array(list(before.values()))
    span = np.ptp(xy, axis=0).max()
    assert np.hypot(qx - before[own][0], qy - before[own][1]) < 0.05 * span
    # another process (no embedding in memory): rebuilt from the stored layout in the background, same place
    import streamlit as st

    monkeypatch.setattr(arrival, "_EMBEDDINGS", type(arrival._EMBEDDINGS)())
    st.cache_resource.clear()
    at.run()
    assert not at.exception, at.exception
    JOBS.wait(240)
    at.run()
    spec = _spec(at)
    assert _xy_of(spec) == before
    again = [t for t in spec["data"] if t.get("name") == "query"]
    assert len(again) == 1
    assert np.hypot(_values(again[0]["x"])[0] - qx, _values(again[0]["y"])[0] - qy) < 0.02 * span


def test_a_large_layout_runs_in_the_background_and_is_stored(ws, monkeypatch):
    """Above BACKGROUND_MIN_POINTS the page shows the layout's progress and stops; when the run is done the map is
    the stored layout (a revisit reads it)."""
    import time

    from slics_core.explorer import arrival, layouts

    monkeypatch.setattr(layouts, "BACKGROUND_MIN_POINTS", 10)
    from slics_core.methods import preferred_method

    seed = 4321
    rows = map_sample(ws.Y, ws.index["pool"], 50, random_state=seed, concept_names=ws.concept_names)
    P, _ = map_points(ws.model(preferred_method(ws.dictionary_methods()), ws.default_d0), ws.X, ws.Y, rows,
                      kinds=KINDS, component="partial", Z=ws.Z, sub_to_concept=ws.sub_to_concept,
                      concept_names=ws.concept_names, sub_names=ws.sub_names)
    (ws.path / arrival.STORE / arrival.layout_name(P, seed, ws)).unlink(missing_ok=True)  # a fresh workspace store
    at = AppTest.from_file(PAGE, default_timeout=240)
    at.session_state["n_points"] = 50
    at.session_state["map_seed"] = seed
    at.run()
    assert not at.exception, at.exception
    assert not at.get("plotly_chart")  # not yet: the layout's progress is shown instead
    assert "in the background" in at.get("progress")[-1].text
    for _ in range(240):
        if arrival.stored_map_layout(ws, P, seed) is not None:
            break
        time.sleep(0.5)
    at.run()
    assert not at.exception, at.exception
    stored = arrival.stored_map_layout(ws, P, seed)
    assert stored is not None
    got = _xy_of(_spec(at))
    np.testing.assert_allclose([got[p] for p in range(len(P))], stored)


def _captions(at):
    """The captions as read (Markdown escapes of data values removed)."""
    return [re.sub(r"\\(.)", r"\1", c.value) for c in at.caption]


def _placed_trace(spec):
    got = [t for t in spec["data"] if t.get("name") == "query"]
    assert len(got) <= 1
    return got[0] if got else None


def test_an_uploaded_query_is_placed_on_a_small_map_by_its_nearest_points(ws, monkeypatch):
    """An upload (not a row of the map) is placed on a scikit-learn map without laying it out again: at the
    cosine-weighted mean of its nearest map points (layouts.place_near, checked against an independent kNN in
    tests/test_map_query.py), drawn as the "query" trace with its file name, and named in a caption."""
    from app_pages._workspace import ws_id
    from slics_core.explorer import arrival
    from slics_core.explorer.layouts import place_near

    r = int(ws.index["val"][3])
    upload = {"sha": "f00d", "name": "cat.png", "image": None, "raw": np.asarray(ws.raw[r]),
              "x": np.asarray(ws.X[r]) + 0.01, "ws": ws_id(ws)}
    at = _page(query="upload", upload_query=upload)
    assert not at.exception, at.exception
    assert _placed_trace(_spec(at)) is None  # not marked yet
    assert at.checkbox(key="mark_query").label == "Mark the current query (upload: cat.png)"
    before = _xy_of(_spec(at))

    def refuse(*a, **k):
        raise AssertionError("t-SNE ran again")

    monkeypatch.setattr(arrival, "tsne_fit", refuse)
    at.checkbox(key="mark_query").check().run()
    assert not at.exception, at.exception
    spec = _spec(at)
    assert _xy_of(spec) == before  # the same map
    assert not [t for t in spec["data"] if t.get("name") == "current query"]
    placed = _placed_trace(spec)
    assert placed is not None and placed["text"] == ["query (upload: cat.png)"]
    P, table = _expected_points(ws, at)
    xy = np.array([before[p] for p in range(len(P))])
    want = place_near(P, xy, upload["x"])[0]
    np.testing.assert_allclose([_values(placed["x"])[0], _values(placed["y"])[0]], want, rtol=1e-9)
    assert any("upload: cat.png" in c and "without recomputing" in c for c in _captions(at))


def test_a_phrase_query_and_its_edit_from_retrieve_are_placed_with_their_labels(ws):
    """A typed phrase (its embedding kept by the query picker) and its "without j" edit (kept by Retrieve) are
    both placed; the edit is placed where its own edited embedding goes (not the phrase's)."""
    from app_pages._query import KEPT_QUERY
    from app_pages._workspace import ws_id
    from slics_core.explorer.current_query import edit_key
    from slics_core.explorer.layouts import place_near

    names = list(ws.concept_names)
    j = 0
    x = np.asarray(ws.X[int(ws.index["val"][5])], dtype=np.float64)
    edited = np.asarray(ws.X[int(ws.index["val"][9])], dtype=np.float64)  # any other vector stands for x - v_j
    kept = {"ws": ws_id(ws), "key": "text:a red car", "x": x, "edits": {edit_key("remove", names[j]): edited}}
    at = _page(query="text:a red car", **{KEPT_QUERY: kept, "_s_rm": names[j], "mark_query": True})
    assert not at.exception, at.exception
    spec = _spec(at)
    placed = _placed_trace(spec)
    assert placed is not None
    assert placed["text"] == ["query (phrase: a red car)", f"query (phrase: a red car without {names[j]})"]
    P, _ = _expected_points(ws, at)
    before = _xy_of(spec)
    xy = np.array([before[p] for p in range(len(P))])
    got = np.column_stack([_values(placed["x"]), _values(placed["y"])])
    np.testing.assert_allclose(got, place_near(P, xy, np.vstack([x, edited])), rtol=1e-9)
    assert any(f"phrase: a red car without {names[j]}" in c for c in _captions(at))
    # a phrase the picker has not embedded (another phrase kept): nothing to mark
    at = _page(query="text:a blue car", **{KEPT_QUERY: kept})
    assert not at.exception, at.exception
    assert at.checkbox(key="mark_query").disabled
    assert _placed_trace(_spec(at)) is None


def test_retrieves_edited_query_is_kept_and_placed_on_the_map(ws, multi_row):
    """Retrieve keeps the query and its "without j" embedding (the library's x − vⱼ, over the query's labelled
    concepts); Subspaces, given that session, marks the query item and places the edited query beside it."""
    from app_pages._query import KEPT_QUERY
    from slics_core.explorer.current_query import edit_key
    from slics_core.explorer.edits import edit_query
    from slics_core.explorer.layouts import place_near

    labels = ws.labels_of(multi_row)["concepts"]
    rt = AppTest.from_file(str(ROOT / "app_pages" / "retrieve.py"), default_timeout=240)
    rt.query_params["q"] = str(multi_row)
    rt.query_params["rm"] = labels[0]
    rt.run()
    assert not rt.exception, rt.exception
    kept = rt.session_state[KEPT_QUERY]
    assert kept["key"] == f"row:{multi_row}"
    np.testing.assert_array_equal(kept["x"], ws.X[multi_row])
    model = ws.model(rt.selectbox(key="method").value, rt.select_slider(key="d0").value)
    want, _ = edit_query(model, ws.X[multi_row], ws.concept_names.index(labels[0]), "remove",
                         active=[ws.concept_names.index(n) for n in labels])
    np.testing.assert_allclose(kept["edits"][edit_key("remove", labels[0])], want)

    at = _page(query=multi_row, **{KEPT_QUERY: kept, "_s_rm": labels[0], "mark_query": True})
    assert not at.exception, at.exception
    spec = _spec(at)
    P, table = _expected_points(ws, at)
    assert multi_row not in set(table.row)  # not one of the map's items: placed, with its edit
    assert not [t for t in spec["data"] if t.get("name") == "current query"]
    placed = _placed_trace(spec)
    assert placed is not None
    assert [t for t in placed["text"] if t] == [f"query (item {multi_row})",
                                                f"query (item {multi_row} without {labels[0]})"]
    drawn = _xy_of(spec)
    xy = np.array([drawn[p] for p in range(len(P))])
    got = np.column_stack([_values(placed["x"]), _values(placed["y"])])
    # the query's own vectors first (its embedding), then the edit: the edit is the last placed point
    np.testing.assert_allclose(got[-1], place_near(P, xy, want)[0], rtol=1e-9)


def test_a_click_does_not_colour_or_export_the_map_again(ws, monkeypatch, media):
    """What a pick does not change (the points' colour groups, the layout's CSV) is made once per map and colouring:
    across the first view and two picks, once each; the CSV still holds every point and its colour group."""
    from slics_core.explorer import exports
    from slics_core.explorer import map_colours as colour_rules

    calls = {"colours": 0, "export": 0}
    real_colours, real_settings = colour_rules.map_colours, exports.with_settings

    def colours(*a, **k):
        calls["colours"] += 1
        return real_colours(*a, **k)

    def settings(df, **k):
        calls["export"] += "colour_group" in df.columns
        return real_settings(df, **k)

    monkeypatch.setattr(colour_rules, "map_colours", colours)
    monkeypatch.setattr(exports, "with_settings", settings)
    at = _page(n_points=37, map_seed=977)  # a map no other test draws (the caches live as long as the process)
    assert not at.exception
    exp = _expected_table(ws, at)
    items = exp.point[exp.kind == "embedding"].tolist()
    for picked in ([items[0]], [items[1], items[2]]):
        at.multiselect(key="picked_points").set_value(picked).run()
        assert not at.exception
        assert at.dataframe[0].value.point.tolist() == picked
    assert calls == {"colours": 1, "export": 1}
    df = pd.read_csv(io.BytesIO(_download(at, media, "tsne_csv")), keep_default_na=False)
    assert df.point.tolist() == exp.point.tolist()
    groups, _, _ = real_colours(exp, "concept", concept_names=ws.concept_names)
    assert df.colour_group.tolist() == list(groups)


def test_a_map_asked_for_more_items_than_the_split_has_says_so(ws):
    """Issue 38: "Items (sample)" accepted more items than the split holds and the map stopped short without a
    word."""
    n_pool = len(ws.index["pool"])
    at = _page(n_points=n_pool + 500, kinds=["embedding"])
    assert not at.exception, at.exception
    assert any(f"{n_pool:,} items on the map, not the {n_pool + 500:,} asked for" in c.value for c in at.caption)
    at = _page(n_points=40)
    assert not any("asked for" in c.value for c in at.caption)


def test_pictures_keep_the_colouring_in_a_frame_of_each_point_colour():
    """Issue 38: with "Pictures" on, a picture hid its dot and the has-concept / sub-label colours were gone. Each
    picture now sits in a frame of its point's colour group's colour."""
    from app_pages._map_figure import map_figure
    from slics_core.explorer.map_colours import map_colours
    from slics_core.explorer.maps import picture_points

    table, names, _ = _synthetic_map(n_items=150)
    texts = point_text(table, "partial")
    groups, order, colours = map_colours(table, "has concept", concept="concept03", concept_names=names)
    assert len(order) == 2
    fig = map_figure(table, texts, groups, order, colours, np.ones(len(table), bool), component="partial",
                     pictures=lambda r: "data:image/png;base64,AAAA", title="t", legend_title="l")
    shown = picture_points(table)
    assert len(fig.layout.images) == len(shown) == len(fig.layout.shapes)
    got = [s.line.color for s in fig.layout.shapes]
    assert got == [colours[groups[p]] for p in shown]
    assert len(set(got)) == 2  # both groups, not one colour for every picture
    for s, img in zip(fig.layout.shapes, fig.layout.images):  # the frame is around its picture
        assert s.x0 < img.x < s.x1 and s.y0 < img.y < s.y1


def test_a_link_with_rm_marks_the_edited_query_without_visiting_retrieve(ws, multi_row):
    """Issue 38: a Subspaces link with ``rm=`` marked nothing unless Retrieve had run in the session (the edited
    embedding was only Retrieve's). A row query's edit is now computed here, as Retrieve computes it (the library's
    x − vⱼ over the row's labelled concepts), and placed beside the item."""
    from slics_core.explorer.edits import edit_query
    from slics_core.explorer.layouts import place_near

    labels = ws.labels_of(multi_row)["concepts"]
    at = _page(query=multi_row, _s_rm=labels[0], mark_query=True)  # no kept query: Retrieve never ran
    assert not at.exception, at.exception
    spec = _spec(at)
    placed = _placed_trace(spec)
    assert placed is not None and f"query (item {multi_row} without {labels[0]})" in placed["text"]
    model = ws.model(at.session_state["method"], at.session_state["d0"])
    want, _ = edit_query(model, ws.X[multi_row], ws.concept_names.index(labels[0]), "remove",
                         active=[ws.concept_names.index(n) for n in labels])
    P, _ = _expected_points(ws, at)
    drawn = _xy_of(spec)
    xy = np.array([drawn[p] for p in range(len(P))])
    np.testing.assert_allclose([_values(placed["x"])[-1], _values(placed["y"])[-1]], place_near(P, xy, want)[0],
                               rtol=1e-9)


def test_one_label_each_writes_one_label_per_query():
    from app_pages._map_figure import one_label_each

    texts = ["q · c1", "q", "q · c2", "e · c1", "e · c2"]
    owners = ["q", "q", "q", "e", "e"]
    # the owner's flagged point (its item) carries the label, else its first point; the rest are blank
    assert one_label_each(texts, owners, first=[False, True, False, False, False]) == ["", "q", "", "e · c1", ""]
    assert one_label_each(["a", "b"], ["x", "y"]) == ["a", "b"]

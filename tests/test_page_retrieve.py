"""AppTest of the Retrieve page on the (small) emoji world."""
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
from gallery_helpers import click_gallery, clickable, gallery_bodies, gallery_srcs
from streamlit.testing.v1 import AppTest
from streamlit_private import button_kind, download_data

from slics_core.explorer.edits import edited_gallery
from slics_core.explorer.pool import memory_pool
from slics_core.explorer.queries import components_of_row, concept_galleries

ROOT = Path(__file__).resolve().parent.parent
PAGE = str(ROOT / "app_pages" / "retrieve.py")


def _pool(ws):
    """The workspace's pool made again, apart from ``ws.pool``: its rows, labels and ids, exact search of its own."""
    return memory_pool(ws.X, ws.index["pool"], Y=ws.Y, Z=ws.Z, ids=ws.ids)


def _table(at):
    """The galleries table (the last dataframe on the page)."""
    return at.dataframe[-1].value


def _run(at):
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _png(im):
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


def test_renders_and_widgets_change_galleries(ws, multi_row):
    at = AppTest.from_file(PAGE, default_timeout=180)
    at.query_params["q"] = str(multi_row)  # deep link
    _run(at)
    labels = ws.labels_of(multi_row)["concepts"]
    assert at.selectbox(key="query_pick").value == multi_row
    # pre-selection: the query's known labels
    assert at.multiselect(key="concepts").value == labels
    df = _table(at)
    assert set(df["concept"]) == set(labels)
    assert set(df["gallery"]) == {"concept", "unfiltered"}
    k = at.slider(key="k").value
    assert len(df) == 2 * k * len(labels)
    # the page's galleries are the library's (independently tested) computation
    model = ws.model(at.selectbox(key="method").value, at.select_slider(key="d0").value)
    V = components_of_row(model, ws.X[multi_row])
    j = ws.concept_names.index(labels[0])
    (cg, uf), = concept_galleries(V, ws.X[multi_row], _pool(ws), [j], k)
    shown = df[(df.concept == labels[0]) & (df.gallery == "concept")]
    assert shown["row"].tolist() == cg.rows.tolist()
    assert df[(df.concept == labels[0]) & (df.gallery == "unfiltered")]["row"].tolist() == uf.rows.tolist()
    # precision boxes shown = fraction of relevant rows in the table (the value shown and the one the box carries)
    boxes = _precision_boxes(at)[labels[0]]
    unf = df[(df.concept == labels[0]) & (df.gallery == "unfiltered")]
    for gallery, rows in (("concept", shown), ("unfiltered", unf)):
        for kind, col in (("general", "relevant_general"), ("sub-label", "relevant_sub")):
            label, value, precision = boxes[gallery, kind]
            want = rows[col].astype(float).mean()
            assert label == f"P@{k} {kind} · {labels[0] if gallery == 'concept' else 'unfiltered'}"
            assert abs(precision - want) < 1e-12 and value == f"{100 * want:.0f}%", (gallery, kind, value, want)
    assert len(_precision_boxes(at)) == len(labels)

    # concepts
    at.multiselect(key="concepts").set_value([labels[1]])
    _run(at)
    assert set(_table(at)["concept"]) == {labels[1]}
    # k
    at.slider(key="k").set_value(4)
    _run(at)
    assert len(_table(at)) == 8
    before = _table(at)["row"].tolist()
    # method
    at.selectbox(key="method").set_value("S-SVD")
    _run(at)
    after_svd = _table(at)
    assert after_svd["row"].tolist() != before or not np.allclose(after_svd["score"], 0)
    # component: full disentanglement with the picked concepts active
    at.selectbox(key="method").set_value("S-SLiCS")
    at.multiselect(key="concepts").set_value(labels)
    _run(at)
    partial = _table(at)
    at.radio(key="component").set_value("full")
    _run(at)
    full = _table(at)
    conc = full.gallery == "concept"
    assert not np.allclose(partial[conc]["score"].to_numpy(), full[conc]["score"].to_numpy())
    # the unfiltered gallery does not depend on the component
    assert partial[~conc]["row"].tolist() == full[~conc]["row"].tolist()
    assert at.get("download_button")  # CSV export


def test_upload_goes_through_and_bad_upload_keeps_the_page(ws, multi_row):
    at = AppTest.from_file(PAGE, default_timeout=180)
    at.query_params["q"] = str(multi_row)
    _run(at)
    row_unfiltered = _table(at).query("gallery == 'unfiltered'")["row"].tolist()[: at.slider(key="k").value]

    # a real PNG: the query's own image -> same embedding -> same unfiltered gallery
    at.file_uploader(key="query_upload").set_value(("mine.png", _png(ws.image(multi_row)), "image/png"))
    _run(at)
    assert not at.error
    assert any("mine.png" in c.replace("\\", "") for im in at.image for c in im.captions)  # (shown as text)
    assert at.session_state["query"] == "upload"
    ranked = next(d.value for d in at.dataframe if "cos(ṽⱼ, x)" in d.value.columns)  # the query's concepts
    assert "known label" not in ranked.columns  # labels unknown for uploads
    picked = at.multiselect(key="concepts").value
    assert picked  # pre-selected by the threshold rule
    df = _table(at)
    uf = df[(df.concept == picked[0]) & (df.gallery == "unfiltered")]["row"].tolist()
    assert uf == row_unfiltered
    assert df["relevant_sub"].isna().all() and df["relevant_general"].notna().all()

    # a bad upload: the message, the previous (uploaded) query and its galleries stay
    at.file_uploader(key="query_upload").set_value(("notes.png", b"%PDF-1.4\n%%EOF\n", "image/png"))
    _run(at)
    assert len(at.error) == 1 and "PDF" in at.error[0].value and "notes.png" in at.error[0].value.replace("\\", "")
    assert at.session_state["query"] == "upload"
    assert _table(at)[lambda d: d.gallery == "unfiltered"]["row"].tolist()[: len(uf)] == uf

    # back to a query-set item; a truncated upload is refused and the item stays the query
    at.selectbox(key="query_pick").set_value(multi_row)
    at.button(key="query_thumb_0").click()
    _run(at)
    first = int(ws.index["query"][0])
    assert at.session_state["query"] == first
    # the strip's buttons all say "Use", a word short enough for their columns (the current query's said "●"),
    # and the current query's is highlighted
    strip = [b for b in at.button if b.key.startswith("query_thumb_")]
    assert [b.label for b in strip] == ["Use"] * len(strip) and len(strip) > 1
    assert [button_kind(b) for b in strip] == ["primary"] + ["secondary"] * (len(strip) - 1)
    good = _png(ws.image(first))
    at.file_uploader(key="query_upload").set_value(("cut.png", good[: len(good) // 2], "image/png"))
    _run(at)
    assert at.error and "truncated or corrupt" in at.error[0].value
    assert at.session_state["query"] == first
    assert len(_table(at)) > 0
    # the earlier good upload can be used again
    at.button(key="query_use_upload").click()
    _run(at)
    assert at.session_state["query"] == "upload"


def test_fsplice_method(ws, multi_row):
    at = AppTest.from_file(PAGE, default_timeout=180)
    at.query_params["q"] = str(multi_row)
    _run(at)
    slics = _table(at)
    at.selectbox(key="method").set_value("F-SpLiCE")
    _run(at)
    fs = _table(at)
    assert set(fs["concept"]) == set(slics["concept"])
    assert (fs.gallery == "concept").any()  # F-SpLiCE components exist for at least one concept
    assert fs[fs.gallery == "concept"]["row"].tolist() != slics[slics.gallery == "concept"]["row"].tolist()
    # the unfiltered gallery is the same whatever the method
    unfiltered = slics[slics.gallery == "unfiltered"]["row"].tolist()[:10]
    assert fs[fs.gallery == "unfiltered"]["row"].tolist()[:10] == unfiltered


def test_deep_link_concepts(ws, multi_row):
    at = AppTest.from_file(PAGE, default_timeout=180)
    other = [n for n in ws.concept_names if n not in ws.labels_of(multi_row)["concepts"]][0]
    at.query_params["q"] = str(multi_row)
    at.query_params["c"] = f"{other.upper()},not-a-concept"
    _run(at)
    assert at.multiselect(key="concepts").value == [other]
    assert set(_table(at)["concept"]) == {other}


def _lines(at):
    return [m.value for m in at.markdown]


def _edited_link(ws, row):
    """Retrieve opened (and run) on ``?q=row&rm=<its first concept>&boost=<its second>:1.5``; and the concepts."""
    labels = ws.labels_of(row)["concepts"]
    at = AppTest.from_file(PAGE, default_timeout=180)
    at.query_params["q"] = str(row)
    at.query_params["rm"] = labels[0]
    at.query_params["boost"] = f"{labels[1]}:1.5"
    _run(at)
    return at, labels


def test_removal_and_boost_from_the_link(ws, multi_row):
    """``?rm=`` and ``?boost=`` open the edited galleries at once, with the library's precision lines."""
    at, labels = _edited_link(ws, multi_row)
    assert not at.warning
    assert at.selectbox(key="rm_concept").value == labels[0]
    assert at.selectbox(key="boost_concept").value == labels[1]
    assert at.slider(key="boost_lambda").value == 1.5
    k = at.slider(key="k").value
    model = ws.model(at.selectbox(key="method").value, at.select_slider(key="d0").value)
    active = [ws.concept_names.index(n) for n in labels]
    lines = _lines(at)
    for edit, name, lam, word in (("remove", labels[0], 1.0, "lacks"), ("boost", labels[1], 1.5, "has")):
        j = ws.concept_names.index(name)
        eq = edited_gallery(model, ws.X[multi_row], _pool(ws), j, k, edit=edit, strength=lam, active=active)
        want = f"{word} {name}: P@{k} {eq.gallery.precision_general:.2f}"
        assert want in lines, (want, lines)
        assert f"Unfiltered · {word} {name}: P@{k} {eq.unfiltered.precision_general:.2f}" in lines
    assert st_state(at, "rm") == labels[0] and st_state(at, "boost") == f"{labels[1]}:1.5"
    # a click on the "without" gallery's fourth image (its section is a fragment) makes that image the query
    j = ws.concept_names.index(labels[0])
    eq = edited_gallery(model, ws.X[multi_row], _pool(ws), j, k, edit="remove", active=active)
    click_gallery(at, "pick_remove", 3)
    assert not at.exception, at.exception
    assert at.session_state["query"] == int(eq.gallery.rows[3])

    # the controls: clearing the removal drops it, a new λ is kept
    at.selectbox(key="rm_concept").set_value("—")
    at.slider(key="boost_lambda").set_value(0.5)
    _run(at)
    assert st_state(at, "rm") is None and st_state(at, "boost") == f"{labels[1]}:0.5"
    assert not [m for m in _lines(at) if m.startswith("lacks ")]
    assert [m for m in _lines(at) if m.startswith(f"has {labels[1]}: P@{k} ")]


def st_state(at, name):
    return at.session_state[f"_s_{name}"] if f"_s_{name}" in at.session_state else None


def test_bad_edit_links_are_ignored_with_a_note(ws, multi_row):
    at = AppTest.from_file(PAGE, default_timeout=180)
    at.query_params["q"] = str(multi_row)
    at.query_params["rm"] = "not-a-concept"
    at.query_params["boost"] = f"{ws.concept_names[0]}:2.5"
    _run(at)
    assert len(at.warning) == 1
    note = at.warning[0].value.replace("\\", "")
    assert "rm=" in note and "not-a-concept" in note and "lambda must be a number from 0 to 2" in note
    assert at.selectbox(key="rm_concept").value == "—" and at.selectbox(key="boost_concept").value == "—"
    assert not [m for m in _lines(at) if m.startswith(("lacks ", "has "))]
    assert len(_table(at)) > 0  # the rest of the page is there


def _precision_boxes(at) -> dict:
    """Per concept heading: {(gallery, "general" | "sub-label"): (label, value shown, data-precision)} of the P@k
    boxes drawn under it (app_pages/_html.metric, one st.html element per concept)."""
    import html
    import re

    out = {}
    for h in at.get("html"):
        body = h.value
        if "slics-metric" not in body:
            continue
        name = html.unescape(re.search(r"<h3[^>]*>(.*?)</h3>", body).group(1))
        boxes = re.findall(r'<div class="slics-metric" data-gallery="(\w+)" data-precision-of="([\w-]+)" '
                           r'data-precision="([^"]*)"[^>]*><div[^>]*>([^<]*)</div><div[^>]*>([^<]*)</div>', body)
        out[name] = {(g, kind): (html.unescape(label), html.unescape(value), float(p) if p else float("nan"))
                     for g, kind, p, label, value in boxes}
        assert len(out[name]) == 4, body
    return out


def test_query_pick_updates_galleries_and_url(ws, multi_row):
    from app_pages._images import _Shared

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)  # the frame writes the URL
    at.query_params["q"] = str(multi_row)
    at.switch_page("app_pages/retrieve.py")
    _run(at)
    before = gallery_srcs(at)
    other = next(int(r) for r in ws.index["query"] if r != multi_row and np.count_nonzero(ws.Y[r]) >= 1)
    at.selectbox(key="query_pick").set_value(other)
    _run(at)
    assert at.query_params["q"] == str(other)
    labels = ws.labels_of(other)["concepts"]
    assert at.multiselect(key="concepts").value == labels
    k = at.slider(key="k").value
    model = ws.model(at.selectbox(key="method").value, at.select_slider(key="d0").value)
    j = ws.concept_names.index(labels[0])
    (cg, uf), = concept_galleries(components_of_row(model, ws.X[other]), ws.X[other], _pool(ws), [j], k)
    store = _Shared(ws)  # a store of its own: the same encoding, made again
    shown = gallery_srcs(at)
    assert shown[0] == [store.thumbnail(r, 96) for r in cg.rows]
    assert shown[1] == [store.thumbnail(r, 96) for r in uf.rows]
    assert shown != before


def test_galleries_are_one_element_each(ws, multi_row):
    """A gallery is one HTML element, not an st.image (and a column) per picture: the page's st.image elements are
    the query strip and the query, whatever k (they were 2·k per picked concept more: the browser built ~130 of
    them again on every query pick)."""
    at = AppTest.from_file(PAGE, default_timeout=180)
    at.query_params["q"] = str(multi_row)
    counts = {}
    for k in (5, 20):
        at.query_params["k"] = str(k)
        _run(at)
        at.slider(key="k").set_value(k)
        _run(at)
        counts[k] = len(at.get("image"))
        assert [len(s) for s in gallery_srcs(at)] == [k] * (2 * len(ws.labels_of(multi_row)["concepts"]))
    assert counts[5] == counts[20] <= 7


def test_a_concepts_heading_and_precision_are_one_element(ws, multi_row):
    """Per picked concept, its heading and four P@k boxes are one HTML element and each gallery's title is in the
    gallery's element: no st.metric, subheader or title Markdown is left to build again on a query pick (they were
    ~13 React elements per concept)."""
    at = AppTest.from_file(PAGE, default_timeout=180)
    at.query_params["q"] = str(multi_row)
    _run(at)
    labels = ws.labels_of(multi_row)["concepts"]
    assert not at.metric
    assert sorted(s.value for s in at.subheader) == ["Retrieval settings", "Without a concept, or more of it"]
    assert list(_precision_boxes(at)) == labels
    titles = [t for t in _lines(at) if t.startswith(("**By the", "**Unfiltered"))]
    assert not titles
    galleries = gallery_bodies(at)
    assert [("By the" in g, "<strong>Unfiltered</strong> (whole query)" in g) for g in galleries] == \
        [(True, False), (False, True)] * len(labels)


def test_gallery_captions_say_yes_or_no_in_words(multi_row):
    """Whether an image shares the concept: "gen yes, sub no", never a glyph that reads as the letter X."""
    import re

    at = AppTest.from_file(PAGE, default_timeout=180)
    at.query_params["q"] = str(multi_row)
    _run(at)
    text = " ".join(gallery_bodies(at))
    assert "✗" not in text and "✓" not in text
    marks = re.findall(r"gen (yes|no)(?:, sub (yes|no))?", text)
    assert marks and {m[0] for m in marks} <= {"yes", "no"}, text[:500]


def test_html_parts_escape_what_they_show():
    from app_pages import _html

    bad = "<img src=x onerror=alert(1)> \" ' & \u202e"
    for out in (_html.heading(bad), _html.metric(bad, bad, bad, note=bad), _html.caption(bad), _html.text(bad)):
        assert "<img" not in out and "\u202e" not in out and "&lt;img" in out, out
    assert 'data-note="&lt;img src=x onerror=alert(1)&gt; &quot;' in _html.metric("a", "b", note=bad)
    assert _html.number_attr(float("nan")) == "" and _html.number_attr(None) == "" and _html.number_attr(0.25) == "0.25"


def test_a_click_on_a_gallery_image_makes_it_the_query(ws, multi_row):
    """Every gallery of a row query is clickable (its images are buttons, ``data-i`` their positions); a click on
    the third image of a concept gallery makes that image's row the query; what the browser sends that names no
    image (out of range, not an integer) changes nothing."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.query_params["q"] = str(multi_row)
    at.switch_page("app_pages/retrieve.py")
    _run(at)
    labels = ws.labels_of(multi_row)["concepts"]
    keys = [f"pick_{ws.concept_names.index(n)}" for n in labels]
    for key in keys + [f"pick_uf_{ws.concept_names.index(n)}" for n in labels]:
        body = json.loads(clickable(at, key).json)["html"]
        k = at.slider(key="k").value
        assert re.findall(r'<button type="button" data-i="(\d+)"', body) == [str(i) for i in range(k)]
    assert not at.get("button_group")  # no "#1 … #k" pills under the galleries any more
    target = int(_table(at).query("gallery == 'concept' and concept == @labels[0]")["row"].iloc[2])
    for bad in (99, -1, 1.5, True, "2"):
        click_gallery(at, keys[0], bad)
        assert not at.exception, at.exception
        assert at.session_state["query"] == multi_row, bad
    click_gallery(at, keys[0], 2)
    assert not at.exception, at.exception
    assert at.session_state["query"] == target
    assert at.query_params["q"] == str(target)
    assert at.multiselect(key="concepts").value == ws.labels_of(target)["concepts"]


def test_the_galleries_csv_holds_the_edited_galleries_their_p_at_k_and_the_edits(ws, multi_row, media):
    """Issue 38: Retrieve's CSV left out the edited galleries, their P@k and the rm / boost settings."""
    import pandas as pd

    at, labels = _edited_link(ws, multi_row)
    k = at.slider(key="k").value
    model = ws.model(at.selectbox(key="method").value, at.select_slider(key="d0").value)
    active = [ws.concept_names.index(n) for n in labels]
    button = next(b for b in at.get("download_button") if "retrieve_csv" in b.id)
    csv = pd.read_csv(io.BytesIO(download_data(media, button)),
                      keep_default_na=False)
    assert (csv["rm"] == labels[0]).all() and (csv["boost"] == f"{labels[1]}:1.5").all()
    for edit, name, lam, title in (("remove", labels[0], 1.0, f"without {labels[0]}"),
                                   ("boost", labels[1], 1.5, f"more of {labels[1]} (λ=1.5)")):
        eq = edited_gallery(model, ws.X[multi_row], _pool(ws), ws.concept_names.index(name), k,
                            edit=edit, strength=lam, active=active)
        rows = csv[(csv["edit"] == title) & (csv["gallery"] == "edited")]
        assert rows["row"].tolist() == eq.gallery.rows.tolist()
        assert rows["precision_general"].iloc[0] == pytest.approx(eq.gallery.precision_general)
        uf = csv[(csv["edit"] == title) & (csv["gallery"] == "unfiltered")]
        assert uf["precision_general"].iloc[0] == pytest.approx(eq.unfiltered.precision_general)
    concept_rows = csv[csv["gallery"] == "concept"]
    assert len(concept_rows) and (concept_rows["edit"] == "").all()

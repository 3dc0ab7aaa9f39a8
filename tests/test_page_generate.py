"""AppTest of the Generate page on the (small) emoji world."""
import io
from pathlib import Path

import numpy as np
import streamlit as st
from streamlit.testing.v1 import AppTest


ROOT = Path(__file__).resolve().parent.parent
PAGE = str(ROOT / "app_pages" / "generate.py")


def _run(at):
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    # a stochastic generator waits for its buttons; the emoji decoder (deterministic) draws at once
    clicked = False
    for key in ("generate", "generate_interp"):
        if any(b.key == key for b in at.button):
            at.button(key=key).click()
            clicked = True
    if clicked:
        at.run()
        assert not at.exception, [e.value for e in at.exception]
    return at


def _deterministic(at):
    return not any(b.key == "generate" for b in at.button)


def _images(at):
    """caption -> media URL (a content hash) of every image on the page."""
    return {c: u for im in at.image for c, u in zip(im.captions, im.value)}


def test_generates_components_and_reacts_to_concepts(ws, multi_row):
    at = AppTest.from_file(PAGE, default_timeout=180)
    at.query_params["q"] = str(multi_row)
    _run(at)
    labels = ws.labels_of(multi_row)["concepts"]
    assert at.multiselect(key="concepts").value == labels
    imgs = _images(at)
    for name in ["query"] + labels:
        assert name in imgs, imgs.keys()
    # one image per concept and the query: all different pictures
    assert len({imgs[n] for n in ["query"] + labels}) == len(labels) + 1
    if _deterministic(at):  # the page says so and disables seed/steps
        assert at.number_input(key="seed").disabled and at.number_input(key="steps").disabled
        assert any("no effect" in c.value for c in at.sidebar.caption)
    else:
        assert not at.number_input(key="seed").disabled
    assert at.get("download_button")  # PNG downloads

    other = [n for n in ws.concept_names if n not in labels][0]
    at.multiselect(key="concepts").set_value([labels[0], other])
    _run(at)
    imgs2 = _images(at)
    assert imgs2["query"] == imgs["query"] and imgs2[labels[0]] == imgs[labels[0]]
    assert other in imgs2 and labels[1] not in imgs2
    assert imgs2[other] not in {imgs[n] for n in labels}

    # the full components (picked concepts active) are other pictures than the partial ones
    at.radio(key="component").set_value("full")
    _run(at)
    imgs3 = _images(at)
    assert imgs3["query"] == imgs["query"]
    assert imgs3[labels[0]] != imgs2[labels[0]] or imgs3[other] != imgs2[other]


def test_atom_interpolation_strip(ws, multi_row):
    at = AppTest.from_file(PAGE, default_timeout=180)
    at.query_params["q"] = str(multi_row)
    _run(at)
    at.slider(key="interp_n").set_value(5)
    _run(at)
    strip = _images(at)
    alphas = [f"a={a:.2f}" for a in np.linspace(0, 1, 5)]
    assert all(a in strip for a in alphas)
    assert len({strip[a] for a in alphas}) == 5
    at.selectbox(key="atom_b").set_value(2)
    _run(at)
    strip2 = _images(at)
    # a = 1 is atom b1 alone: unchanged; a = 0 is the new b2: changed
    assert strip2["a=1.00"] == strip["a=1.00"] and strip2["a=0.00"] != strip["a=0.00"]
    at.selectbox(key="atom_b").set_value(at.selectbox(key="atom_a").value)
    _run(at)
    assert any("two different atoms" in i.value for i in at.info)


def test_missing_generator_keeps_the_page(monkeypatch, multi_row):
    import app_pages._ui as ui  # the pages load the generator through app_pages._ui.workspace_generator

    def missing(ws):
        raise FileNotFoundError("no generator here (test)")

    monkeypatch.setattr(ui, "load_workspace_generator", missing)
    st.cache_resource.clear()
    try:
        at = AppTest.from_file(PAGE, default_timeout=180)
        at.query_params["q"] = str(multi_row)
        _run(at)
        assert any("no generator here (test)" in w.value.replace("\\", "") for w in at.warning)  # (shown as text)
        assert at.multiselect(key="concepts").value  # the rest of the page is there
        assert at.selectbox(key="query_pick").value == multi_row
    finally:
        st.cache_resource.clear()


def test_upload_then_generate(ws, multi_row):
    buf = io.BytesIO()
    ws.image(multi_row).save(buf, format="PNG")
    at = AppTest.from_file(PAGE, default_timeout=180)
    at.query_params["q"] = str(multi_row)
    _run(at)
    query_img = _images(at)["query"]
    at.file_uploader(key="query_upload").set_value(("q.png", buf.getvalue(), "image/png"))
    _run(at)
    assert at.session_state["query"] == "upload"
    assert at.multiselect(key="concepts").value
    # same picture uploaded -> same embedding -> the same generated query image
    assert _images(at)["query"] == query_img


def test_query_and_concepts_carry_over_from_retrieve(ws, multi_row):
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    _run(at)
    at.switch_page("app_pages/retrieve.py")
    _run(at)
    at.selectbox(key="query_pick").set_value(multi_row)
    _run(at)
    label = ws.labels_of(multi_row)["concepts"][-1]
    at.multiselect(key="concepts").set_value([label])
    _run(at)
    at.switch_page("app_pages/generate.py")
    _run(at)
    assert at.selectbox(key="query_pick").value == multi_row
    assert at.multiselect(key="concepts").value == [label]
    assert label in _images(at)

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
    # a stochastic generator waits for its buttons; the emoji generator (deterministic) draws at once
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


def _same_pattern(urls, images):
    """Pairs of strip cells show the same picture exactly when the independently drawn pixels are equal."""
    n = len(images)
    for i in range(n):
        for j in range(i + 1, n):
            assert (urls[i] == urls[j]) == np.array_equal(np.asarray(images[i]), np.asarray(images[j])), (i, j)


def test_atom_interpolation_strip(ws, multi_row):
    from slics_core.explorer.generation import load_workspace_generator
    from slics_core.generators import concept_atoms, interpolate_atoms

    at = AppTest.from_file(PAGE, default_timeout=180)
    at.query_params["q"] = str(multi_row)
    _run(at)
    at.slider(key="interp_n").set_value(5)
    _run(at)
    strip = _images(at)
    alphas = [f"a={a:.2f}" for a in np.linspace(0, 1, 5)]
    assert all(a in strip for a in alphas)
    # the strip is the generator's pictures of a*b1 + (1-a)*b2 (the emoji generator draws what it reads,
    # so neighbouring points read alike can give the same picture)
    gen = load_workspace_generator(ws)
    atoms = concept_atoms(ws.model("S-SLiCS", ws.default_d0), list(ws.concept_names).index(
        at.selectbox(key="interp_concept").value))
    _same_pattern([strip[a] for a in alphas], gen.generate(interpolate_atoms(atoms[0], atoms[1], np.linspace(0, 1, 5))))
    at.selectbox(key="atom_b").set_value(2)
    _run(at)
    strip2 = _images(at)
    # a = 1 is atom b1 alone: unchanged; the rest is drawn from the new b2
    assert strip2["a=1.00"] == strip["a=1.00"]
    _same_pattern([strip2[a] for a in alphas] + [strip[alphas[0]]],
                  gen.generate(interpolate_atoms(atoms[0], atoms[2], np.linspace(0, 1, 5))) + [
                      gen.generate(atoms[1][None])[0]])
    at.selectbox(key="atom_b").set_value(at.selectbox(key="atom_a").value)
    _run(at)
    assert any("two different atoms" in i.value for i in at.info)


def test_missing_generator_keeps_the_page(monkeypatch, multi_row):
    import app_pages._workspace as ui  # the pages load the generator through app_pages._workspace.workspace_generator

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


def _expected_prompts(ws, row, concepts):
    """What the emoji generator reads in the query and in each concept's partial component (computed here)."""
    from slics_core.explorer.generation import load_workspace_generator
    from slics_core.explorer.queries import components_of_row
    from slics_core.explorer.readings import prompt_text

    gen = load_workspace_generator(ws)
    names = list(ws.concept_names)
    V = components_of_row(ws.model("S-SLiCS", ws.default_d0), ws.X[row], mode="partial")
    rows = np.vstack([ws.X[row], *(V[names.index(c)] for c in concepts)])
    return gen, ["read: " + prompt_text(d) for d in gen.describe(rows)]


def test_prompt_under_each_image_is_what_the_generator_read(ws, multi_row):
    at = AppTest.from_file(PAGE, default_timeout=180)
    at.query_params["q"] = str(multi_row)
    _run(at)
    labels = ws.labels_of(multi_row)["concepts"]
    _, expected = _expected_prompts(ws, multi_row, labels)
    shown = [c.value for c in at.main.caption if c.value.startswith("read: ")]
    assert shown == expected  # one per image, in the images' order: the query, then each concept
    assert all(len(t) > len("read: ") for t in shown)
    assert any("decoded prompt" in c.value for c in at.main.caption)


def test_strip_marks_where_the_top_object_changes(ws, multi_row):
    from slics_core.explorer.readings import strip_change
    from slics_core.generators import concept_atoms, interpolate_atoms

    at = AppTest.from_file(PAGE, default_timeout=180)
    at.query_params["q"] = str(multi_row)
    _run(at)
    gen, _ = _expected_prompts(ws, multi_row, [])
    model = ws.model("S-SLiCS", ws.default_d0)
    found = []
    for name in ws.concept_names:  # every concept's first two atoms: the page's sentence is the reading's
        atoms = concept_atoms(model, list(ws.concept_names).index(name))
        if atoms.shape[0] < 2:
            continue
        at.selectbox(key="interp_concept").set_value(name)
        _run(at)
        alphas = np.linspace(0, 1, at.slider(key="interp_n").value)
        read = gen.describe(interpolate_atoms(atoms[0], atoms[1], alphas))
        k = strip_change(read)
        texts = [c.value for c in at.main.caption]
        if k is None:
            assert f"The top object stays {read[0][0][0]} along the whole strip." in texts
        else:
            assert (f"The top object changes from {read[0][0][0]} to {read[k][0][0]} at a = {alphas[k]:.2f}."
                    in texts)
            assert sum(t.startswith("**changes here:**") for t in texts) == 1
        found.append(k is not None)
        if len(found) == 4:
            break
    assert found


def test_mix_page_draws_the_mix_and_says_what_it_read(ws, multi_row):
    from slics_core.explorer.generation import load_workspace_generator
    from slics_core.explorer.queries import mix_components
    from slics_core.explorer.readings import prompt_text

    at = AppTest.from_file(str(ROOT / "app_pages" / "mix.py"), default_timeout=180)
    at.query_params["q"] = str(multi_row)
    _run(at)
    names = list(ws.concept_names)
    c1, r2, c2 = at.selectbox(key="mix_c1").value, at.selectbox(key="mix_q2").value, at.selectbox(key="mix_c2").value
    model = ws.model("S-SLiCS", ws.default_d0)
    mixed, parts = mix_components(model, [(ws.X[multi_row], names.index(c1), None), (ws.X[r2], names.index(c2), None)])
    read = load_workspace_generator(ws).describe(np.stack([parts[0], parts[1], mixed]))
    shown = [c.value for c in at.main.caption if c.value.startswith("read: ")]
    assert shown == ["read: " + prompt_text(d) for d in read]
    assert {"mix", c1} <= {c for im in at.image for c in im.captions}


def test_generator_names_are_the_presets_descriptions(tmp_path):
    """The page names a preset generator by its weights preset's description (slics_core.weights), not by a
    second table of names; a local pipeline by its folder's name, not the server's path."""
    import json

    from slics_core.explorer.generation import _display_name
    from slics_core.generators import parse_generator_spec
    from slics_core.weights import PRESETS

    for text in ("sd-1.5", "unclip", "lcm"):
        assert _display_name(text) == PRESETS[parse_generator_spec(text).preset].description
    assert len({_display_name(t) for t in ("sd-1.5", "unclip", "lcm")}) == 3
    folder = tmp_path / "my-pipe"
    folder.mkdir()
    (folder / "model_index.json").write_text(json.dumps({"_class_name": "StableUnCLIPImg2ImgPipeline"}))
    name = _display_name(f"local:{folder}")
    assert "'my-pipe'" in name and str(tmp_path) not in name and "image-embedding conditioning" in name


def test_edited_query_from_the_link_is_drawn(ws, multi_row):
    """``?rm=`` / ``?boost=`` (Retrieve's edits) add "without j" / "more of j" pictures of x − vⱼ and x + λṽⱼ."""
    from slics_core.explorer.queries import components_of_row
    from slics_core.explorer.readings import prompt_text

    labels = ws.labels_of(multi_row)["concepts"]
    at = AppTest.from_file(PAGE, default_timeout=180)
    at.query_params["q"] = str(multi_row)
    at.query_params["rm"] = labels[0]
    at.query_params["boost"] = f"{labels[1]}:1.5"
    _run(at)
    imgs = {c.replace("\\", ""): u for c, u in _images(at).items()}  # (captions are escaped Markdown)
    drawn = ["query", *labels, f"without {labels[0]}", f"more of {labels[1]} (λ=1.5)"]
    assert all(t in imgs for t in drawn), imgs.keys()
    assert len({imgs[t] for t in drawn}) == len(drawn)  # every picture differs
    # what the generator read in the last two pictures: x − v_j (full, over the query's labels) and x + 1.5 ṽ_j
    gen, expected = _expected_prompts(ws, multi_row, labels)
    names = list(ws.concept_names)
    model, x = ws.model("S-SLiCS", ws.default_d0), ws.X[multi_row]
    full = components_of_row(model, x, "full", active=[names.index(n) for n in labels])
    partial = components_of_row(model, x, "partial")
    edited = np.vstack([x - full[names.index(labels[0])], x + 1.5 * partial[names.index(labels[1])]])
    expected += ["read: " + prompt_text(d) for d in gen.describe(edited)]
    assert [c.value for c in at.main.caption if c.value.startswith("read: ")] == expected

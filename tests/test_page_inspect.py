"""AppTest of the inspector's views (issue 38): the query's atoms on Retrieve, a picked item's atoms on Subspaces and
Atoms, the link that opens an atom on Atoms, and the picked atom's activation statistics. The numbers are checked
against the model's own NNLS codes, computed here (not read from the page's store)."""
import json
import re
from pathlib import Path

import numpy as np
from gallery_helpers import gallery_bodies
from streamlit.testing.v1 import AppTest

from slics_core.analysis import ACTIVATION_LEVELS, firing, item_atoms
from slics_core.captions import prepare_text_embeddings
from slics_core.explorer.atom_tables import atom_labels, atom_top_words
from slics_core.explorer.encoding import workspace_vocabulary

ROOT = Path(__file__).resolve().parent.parent


def _ok(at):
    assert not at.exception, [e.value for e in at.exception]
    return at


def _atom_table(at):
    return next(d.value for d in at.dataframe if "fires_on" in d.value.columns)


def _pool_codes(ws, model):
    """Label-free NNLS codes of the pool, computed here."""
    return model.transform(ws.X[ws.index["pool"]], None)


def test_retrieve_shows_the_query_atoms_and_a_click_opens_the_atom_on_atoms(ws, multi_row):
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.session_state["query"] = multi_row
    _ok(at.run())
    _ok(at.switch_page("app_pages/retrieve.py").run())
    d0 = at.session_state["d0"]
    method = at.session_state["method"]
    model = ws.model(method, d0)
    table = _atom_table(at)
    want = item_atoms(model, ws.X[multi_row])  # every concept, no labels
    labels = atom_labels(model.groups_, ws.concept_names)
    assert table.label.tolist() == [labels[a] for a in want.atom]
    np.testing.assert_allclose(table.share, want.share, atol=1e-9)
    np.testing.assert_allclose(table.coefficient, want.coefficient, atol=1e-9)
    freq = firing(_pool_codes(ws, model)).mean(axis=0)
    np.testing.assert_allclose(table.fires_on, freq[want.atom], atol=1e-9)
    words, W = workspace_vocabulary(ws)  # each atom's 3 closest words, as the Atoms page ranks them
    Wp = prepare_text_embeddings(W)[0]
    for a, shown in list(zip(want.atom, table.words))[:5]:
        assert shown == ", ".join(atom_top_words(model.atoms_[a], Wp, words, k=3).word)
    assert any("Atoms that fire on the query" in m.value.replace(chr(92), "") for m in at.markdown)
    buttons = [b for b in at.button if b.key.startswith("open_atom_retrieve_")]
    assert [int(b.key.rsplit("_", 1)[1]) for b in buttons] == list(want.atom[:6])  # one row, top first
    # over the picked concepts: the decomposition of the galleries (NNLS on those concepts' atoms alone)
    picked = [ws.concept_names.index(n) for n in at.multiselect(key="concepts").value]
    _ok(at.radio(key="retrieve_atoms_over").set_value("the picked concepts (as the galleries)").run())
    y = np.zeros(len(ws.concept_names))
    y[picked] = 1
    on_picked = item_atoms(model, ws.X[multi_row], y)
    shown = _atom_table(at)
    assert shown.label.tolist() == [labels[a] for a in on_picked.atom]
    assert set(model.groups_[on_picked.atom]) <= set(picked)
    np.testing.assert_allclose(shown.coefficient, on_picked.coefficient, atol=1e-9)
    _ok(at.radio(key="retrieve_atoms_over").set_value("every concept (no labels)").run())
    buttons = [b for b in at.button if b.key.startswith("open_atom_retrieve_")]
    second = int(want.atom.iloc[1])
    _ok(next(b for b in buttons if b.key == f"open_atom_retrieve_{second}").click().run())
    # Atoms is open, on that atom of that dictionary, and the URL names it
    assert at.selectbox(key=f"atom_{method}_d0{d0}").value == second
    assert at.query_params["atom"] == str(second)
    assert any(m.value.startswith(f"**How strongly {labels[second].replace('#', chr(92) + '#')} fires**")
               for m in at.markdown)


def test_a_link_with_an_atom_opens_atoms_on_it(ws):
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.query_params["atom"] = "7"
    _ok(at.run())
    _ok(at.switch_page("app_pages/atoms.py").run())
    assert at.selectbox(key=f"atom_{at.session_state['method']}_d0{at.session_state['d0']}").value == 7
    bad = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    bad.query_params["atom"] = "-2"
    _ok(bad.run())
    assert any("atom=" in w.value for w in bad.warning)


def test_atoms_shows_the_picked_atoms_activations(ws):
    at = _ok(AppTest.from_file(str(ROOT / "app_pages" / "atoms.py"), default_timeout=300).run())
    method, d0 = at.session_state["method"], at.session_state["d0"]
    model = ws.model(method, d0)
    pool = ws.index["pool"]
    codes = _pool_codes(ws, model)
    fire = firing(codes)
    labels = atom_labels(model.groups_, ws.concept_names)
    # an atom that fires on some items but not on all (a histogram and three levels worth reading), if there is one
    counts = fire.sum(axis=0)
    atom = int(np.argmin(np.where(counts > 0, counts, np.inf)))
    _ok(at.selectbox(key=f"atom_{method}_d0{d0}").set_value(atom).run())
    hist = next(json.loads(c.spec) for c in at.get("plotly_chart")
                if "Non-zero coefficients" in json.loads(c.spec)["layout"]["title"]["text"])
    from test_page_atoms import _arr
    # two stacked traces over the same bins: the items with the atom's concept, then those without it
    assert len(hist["data"]) == 2 and hist["layout"]["barmode"] == "stack"
    assert sum(_arr(t["y"]).sum() for t in hist["data"]) == fire[:, atom].sum()
    has = ws.Y[pool, model.groups_[atom]] > 0
    line = next(m.value for m in at.markdown if m.value.startswith("Fires on"))
    n_with, n_without = int(has.sum()), int((~has).sum())
    assert f"**{100 * fire[has, atom].sum() / n_with:.1f} %** of the {n_with} with" in line
    assert f"**{100 * fire[~has, atom].sum() / n_without:.1f} %** of the {n_without} without" in line
    # the three activation levels, each a gallery of pool items whose coefficient is the one shown
    bodies = [b for b in gallery_bodies(at) if re.search(r"<strong>(Top|Median|Low)</strong>", b)]
    assert len(bodies) == len(ACTIVATION_LEVELS)
    values = codes[fire[:, atom], atom]
    for body, (level, q) in zip(bodies, ACTIVATION_LEVELS.items()):
        assert f"<strong>{level.capitalize()}</strong>" in body
        # each caption's text (its parts' markup taken off): "#row · coefficient"
        texts = [re.sub(r"<[^>]+>", "", t) for t in re.findall(r"<figcaption[^>]*>(.*?)</figcaption>", body)]
        caps = [re.fullmatch(r"#(\d+) · ([0-9.]+)", t).groups() for t in texts]
        assert caps
        target = np.quantile(values, q)
        nearest = np.sort(np.abs(values - target))[:len(caps)]
        for r, c in caps:
            i = int(np.flatnonzero(pool == int(r))[0])
            assert abs(float(c) - codes[i, atom]) < 1e-3
            assert abs(codes[i, atom] - target) <= nearest[-1] + 1e-12
    # an item's atoms: its buttons pick another atom on this page
    table = _atom_table(at)
    assert len(table) and any(m.value.startswith("**Atoms of \\#") for m in at.markdown)
    other = next(b for b in at.button if b.key.startswith("open_atom_atoms_") and not b.key.endswith(f"_{atom}"))
    picked = int(other.key.rsplit("_", 1)[1])
    _ok(other.click().run())
    assert at.selectbox(key=f"atom_{method}_d0{d0}").value == picked
    assert any(m.value.startswith(f"**How strongly {labels[picked].replace('#', chr(92) + '#')} fires**")
               for m in at.markdown)


def test_subspaces_lists_the_previewed_items_atoms(ws):
    from test_page_subspaces import _expected_table, _page

    at = _ok(_page(n_points=30))
    assert not [d for d in at.dataframe if "fires_on" in d.value.columns]  # nothing picked: no table
    model = ws.model(at.session_state["method"], at.session_state["d0"])
    exp = _expected_table(ws, at)
    p = int(exp.point[exp.kind == "embedding"].iloc[0])
    r = int(exp.row[p])
    _ok(at.multiselect(key="picked_points").set_value([p]).run())
    assert any(m.value == f"**Atoms of \\#{r}**" for m in at.markdown)
    want = item_atoms(model, ws.X[r])
    assert _atom_table(at).label.tolist() == [atom_labels(model.groups_, ws.concept_names)[a] for a in want.atom]
    assert {f"open_atom_subspaces_{a}" for a in want.atom[:6]} == {b.key for b in at.button
                                                                   if b.key.startswith("open_atom_subspaces_")}
    a = int(want.atom.iloc[0])
    _ok(at.button(key=f"open_atom_subspaces_{a}").click().run())  # the page on its own: no Atoms to switch to
    assert at.session_state["_s_atom"] == a
    assert any(f"Atom {a} is picked" in m.value for m in at.success)

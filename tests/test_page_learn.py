"""AppTest of the Learn page (concept cones on the sphere)."""
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def at():
    at = AppTest.from_file(str(ROOT / "app_pages" / "learn.py"), default_timeout=60).run()
    assert not at.exception
    return at


def table(at):
    return at.dataframe[0].value.set_index("concept")


def test_renders_with_figure_table_and_explanations(at):
    assert at.title[0].value.startswith("Learn")
    t = table(at)
    assert list(t.index) == ["animal", "person", "vehicle"]
    assert (t["cos(ṽ_j, x*)"].dropna().between(-1, 1)).all()
    assert len(at.expander) >= 3
    assert at.session_state["preset"] == "Paper Fig. 2a (4, 2, 4 atoms)"


def test_sliders_move_the_query_and_change_the_numbers(at):
    before = table(at).copy()
    at.slider(key="azimuth").set_value(130).run()
    assert not at.exception
    after = table(at)
    assert not np.allclose(before["||ṽ_j||"].to_numpy(), after["||ṽ_j||"].to_numpy())
    at.slider(key="elevation").set_value(-40).run()
    assert not np.allclose(after["||ṽ_j||"].to_numpy(), table(at)["||ṽ_j||"].to_numpy())


def test_orthogonal_preset_matches_closed_form(at):
    at.selectbox(key="preset").set_value("Orthogonal cones (axes)").run()
    at.slider(key="azimuth").set_value(30).run()
    at.slider(key="elevation").set_value(40).run()
    assert not at.exception
    t = table(at)
    assert list(t.index) == ["x", "y", "z"]
    az, el = np.radians(30), np.radians(40)
    x = np.array([np.cos(el) * np.cos(az), np.cos(el) * np.sin(az), np.sin(el)])
    np.testing.assert_allclose(t["||v_j||"].to_numpy(), x, atol=1e-9)  # v_j = x_j e_j
    np.testing.assert_allclose(t["||ṽ_j − v_j||"].to_numpy(), 0, atol=1e-9)  # full = partial
    np.testing.assert_allclose(t["cos(ṽ_j, x*)"].to_numpy(), x, atol=1e-9)
    assert float(at.metric[0].value) == pytest.approx(0, abs=1e-3)  # inside the octant: exact


def test_randomise_changes_the_cones_and_active_set_matters(at):
    before = table(at).copy()
    at.button(key="randomise").click().run()
    assert not at.exception
    assert at.session_state["preset"] == "Random cones" and at.session_state["cone_seed"] == 1
    t1 = table(at)
    assert list(t1.index) != list(before.index)
    at.button(key="randomise").click().run()
    t2 = table(at)
    assert at.session_state["cone_seed"] == 2
    assert not np.allclose(t1["||ṽ_j||"].to_numpy(), t2["||ṽ_j||"].to_numpy())
    first = t2.index[0]
    at.multiselect(key="active").unselect(first).run()
    assert not at.exception
    t3 = table(at)
    assert t3.loc[first, "||v_j||"] == 0 and not t3.loc[first, "active"]
    np.testing.assert_allclose(t3["||ṽ_j||"].to_numpy(), t2["||ṽ_j||"].to_numpy())  # partial ignores J

from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parent.parent


def test_home_page_renders():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    assert not at.exception
    assert at.title[0].value == "SLiCS Explorer"


def test_cones_page_fits_and_reacts_to_widgets():
    at = AppTest.from_file(str(ROOT / "pages" / "cones.py"), default_timeout=120).run()
    assert not at.exception
    first = at.metric[0].value
    assert float(first) > 0.5
    at.slider(key="T").set_value(0).run()
    assert not at.exception
    # with zero epochs the learned atoms are the S-SVD initialisation
    assert at.metric[0].value == at.metric[1].value

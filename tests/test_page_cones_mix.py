"""Words and widths a presenter must not have to explain: the Planted cones heatmap's title fits its half-width
chart, and the Mix page's second-query options fit their box (concepts only; the sub-labels are under the picture)."""
import json
from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parent.parent

#: A half-width chart's title of at most this many characters is drawn whole on a 1400-px screen (measured on the
#: screenshot: the 63-character title was cut after 57; docs/app.md's screenshots are 1400 px wide).
TITLE_FITS = 40
#: The Mix page's middle column (3 of 8) on a 1400-px screen shows about 50 characters of a select box.
OPTION_FITS = 50


def test_planted_cones_titles_fit_and_the_axes_say_rows_and_columns():
    at = AppTest.from_file(str(ROOT / "app_pages" / "cones.py"), default_timeout=300).run()
    assert not at.exception
    specs = [json.loads(c.spec) for c in at.get("plotly_chart")]
    titles = [s["layout"]["title"]["text"] for s in specs]
    assert len(titles) == 2 and all(len(t) <= TITLE_FITS for t in titles), titles
    heat = next(s for s in specs if s["data"][0]["type"] == "heatmap")
    title, x, y = (heat["layout"][k]["text"] if k == "title" else heat["layout"][k]["title"]["text"]
                   for k in ("title", "xaxis", "yaxis"))
    assert "planted" in title and "learned" in title
    assert "planted" in y and "rows" in y and "columns" in x and "matched" in x


def test_mix_second_query_options_name_the_concepts_and_fit(ws, multi_row):
    at = AppTest.from_file(str(ROOT / "app_pages" / "mix.py"), default_timeout=180)
    at.query_params["q"] = str(multi_row)
    at.run()
    assert not at.exception
    box = at.selectbox(key="mix_q2")
    assert box.options
    for option in box.options:
        row = int(option.split(" · ")[0].removeprefix("#"))
        concepts = ", ".join(ws.labels_of(row)["concepts"])
        assert option.removesuffix(" (recent)") == f"#{row} · {concepts}"  # no sub-labels
        assert len(option) <= OPTION_FITS, option  # the emoji world's concept names are short words

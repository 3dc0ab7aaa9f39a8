"""Hostile-input catalogue, class 3 (unit level): the Markdown helpers (slics_core/explorer/safe_text.py,
imported by the pages as app_pages._safe).

The browser test (tests/e2e/test_injection.py) is the proof on every page; these check the helpers'
output without a browser.
"""
import re

import pytest

from app_pages import _safe

PAYLOADS = [
    "[click](https://evil.example/x)", "https://evil.example/bare", "![i](https://evil.example/i.png)",
    "<a href='https://evil.example'>x</a>", "`` ` ``](https://evil.example/t)", "www.evil.example",
    "mail@evil.example", ":red[x] $x$ **b**\n\n# head", "a\x00b\u2028c", "", "`", "``x``",
]


@pytest.mark.parametrize("value", PAYLOADS)
def test_code_is_one_code_span_holding_the_value(value):
    out = _safe.code(value)
    assert "\n" not in out
    fence = re.match(r"`+", out).group(0)
    assert out.endswith(fence)
    inner = out[len(fence):-len(fence)]
    # no run of backticks inside is as long as the fence, so the span cannot end early
    assert all(len(r) < len(fence) for r in re.findall(r"`+", inner))
    shown = inner[1:-1] if inner.startswith(" ") and inner.endswith(" ") and inner.strip() else inner
    assert shown.strip() == " ".join(re.sub(r"[\x00-\x1f\u2028]", " ", value).split()) or not value.strip()


@pytest.mark.parametrize("value", PAYLOADS)
def test_text_escapes_every_mark_and_breaks_autolinks(value):
    out = _safe.text(value)
    assert "\n" not in out
    # every ASCII punctuation mark is escaped
    unescaped = re.sub(r"\\[!-/:-@\[-`{-~]", "", out)
    assert not re.search(r"[!-/:-@\[-`{-~]", unescaped), out
    plain = re.sub(r"\\(.)", r"\1", out)
    assert "://" not in plain and not re.search(r"(?i)www\.", plain) and not re.search(r"@\w", plain)


def test_long_values_are_cut():
    assert len(_safe.code("x" * 1000)) < 210 and len(_safe.text("y" * 1000, limit=50)) <= 50
    assert _safe.figure_text("z" * 100_000) == "z" * 199 + "…" and _safe.figure_text("<b>", 2) == "&lt;…"


def test_table_cuts_text_cells_and_keeps_numbers():
    import pandas as pd

    frame = pd.DataFrame({"id": ["a\u202eb", "q" * 1000, None], "score": [0.5, 1.0, 2.0], "n": [1, 2, 3]})
    out = _safe.table(frame)
    assert list(out["id"][:2]) == ["a\\u202eb", "q" * 199 + "…"] and pd.isna(out["id"][2])
    assert out["score"].tolist() == [0.5, 1.0, 2.0] and out["n"].dtype == frame["n"].dtype
    assert frame["id"][1] == "q" * 1000  # the caller's table (what a CSV download writes) is untouched


def test_figure_text_escapes_html():
    assert _safe.figure_text("<a href='https://e'>x</a>") == "&lt;a href='https://e'&gt;x&lt;/a&gt;"


def shown(markdown: str) -> str:
    """What the reader sees of ``_safe.text`` output: escapes resolved, word joiners dropped."""
    return re.sub(r"\\(.)", r"\1", markdown).replace("\u2060", "")


def test_hostile_upload_name_and_text_query_are_shown_as_text(ws):
    """An upload's file name and a text query reach the page only through the helpers (AppTest)."""
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    page = str(Path(__file__).resolve().parents[1] / "app_pages" / "retrieve.py")
    at = AppTest.from_file(page, default_timeout=180)
    at.run()
    name = "[x](https://evil.example/u) ![i](https://evil.example/i.png).png"
    at.file_uploader(key="query_upload").set_value((name, b"%PDF-1.4\n%%EOF\n", "image/png"))
    at.run()
    assert len(at.error) == 1
    raw = at.error[0].value
    assert "https://" not in raw and "](" not in raw, raw  # no link or image syntax survives
    assert name in shown(raw)  # the reader still sees the whole name
    phrase = "a cat https://evil.example/t [x](https://evil.example/q)"
    at.text_input(key="query_text").set_value(phrase).run()
    texts = [m.value for m in at.markdown] + [w.value for w in at.warning]
    assert any(phrase in shown(t) for t in texts), texts  # the phrase is shown (as the query's title)
    assert not any("https://" in t or "](" in t for t in texts), texts


def test_sentences_written_below_the_pages_quote_workspace_names_as_code(ws):
    """Home's readiness list and the Captions text-tower check name the workspace's encoder and generator,
    which come from its (untrusted) workspace.json: a backtick cannot end the code span."""
    import copy

    from slics_core.explorer.narration import page_readiness, text_tower_check

    hostile = "x` [link](https://evil.example) ![i](https://evil.example/i.png) `"
    bad = copy.copy(ws)
    bad.encoder, bad.generator = hostile, hostile
    notes = " ".join(r["note"] for r in page_readiness(bad))
    check = text_tower_check(bad)["text"]
    for out in (notes, check):
        assert _safe.code(hostile) in out
        assert "](https://" not in out.replace(_safe.code(hostile), "")


# ----------------------------------------------------------------------------- bidi controls, Home's names
BIDI = "abc\u202egpj.exe"  # a right-to-left override: shown raw it reads "abcexe.jpg"


def test_bidi_controls_are_shown_as_escapes():
    """Each bidi control is written as its escape (``\\u202e``), in every helper; other text is untouched."""
    controls = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
    for out in (_safe.code(BIDI), shown(_safe.text(BIDI)), _safe.plain(BIDI), _safe.figure_text(BIDI)):
        assert "abc\\u202egpj.exe" in out, out
    for c in controls:
        for out in (_safe.code(c), shown(_safe.text(c)), _safe.plain(c), _safe.figure_text(c)):
            assert c not in out and f"\\u{ord(c):04x}" in out, (hex(ord(c)), out)
    assert _safe.plain("café ☕ 👩\u200d🔬") == "café ☕ 👩\u200d🔬"  # a zero-width joiner is not a bidi control


HOME_NAMES = ["mail me@evil.example", "www.evil.example/w", "$\\frac{1}{0}$", BIDI,
              "[x](https://evil.example/c)", "plain"]


def test_home_shows_hostile_concept_names_as_text(tmp_path, monkeypatch, ws):
    """Home's one-picture row and its caption name the query's concepts from the workspace's labels: no
    link, maths or reordered text (a workspace whose concept names are payloads; AppTest)."""
    from pathlib import Path

    import numpy as np
    from streamlit.testing.v1 import AppTest

    from slics_core.data import LabelledEmbeddings
    from slics_core.explorer.build import build_workspace
    from slics_core.labels import Labels

    rng = np.random.default_rng(0)
    n, d, m = 72, 10, len(HOME_NAMES)
    Y = np.ones((n, m), dtype=bool)
    Y[np.arange(n), np.arange(n) % m] = False  # five concepts per item: the row shows 4 and leaves one out
    raw = (Y @ rng.standard_normal((m, d)) + 0.3 * rng.standard_normal((n, d))).astype(np.float32)
    data = LabelledEmbeddings(raw=raw, ids=[f"i{i}" for i in range(n)], labels=Labels(Y, HOME_NAMES))
    build_workspace(data, tmp_path / "hostile-home", methods=["S-SLiCS", "UF"], d0_values=(1,), n_iter=2)
    monkeypatch.setenv("SLICS_WORKSPACES", str(tmp_path))
    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app.py"), default_timeout=300)
    at.query_params["ws"] = "hostile-home"
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    texts = [e.value for kind in ("markdown", "caption", "warning", "info", "success") for e in at.get(kind)]
    caption = next(t for t in texts if "leaves out" in t)
    options = at.selectbox(key="home_example").options
    for name in HOME_NAMES[:-1]:
        assert name not in " ".join(texts), name
    assert BIDI not in " ".join(options)  # options are plain text (no Markdown), the override escaped too
    for t in texts:
        bare = re.sub(r"\\(.)", r"\1", t)  # escapes resolved; the word joiners that break autolinks kept
        assert not re.search(r"(?i)www\.|@\w|://", bare), t  # no autolink
        assert not re.search(r"(?<!\\)\$", t), t  # no maths
        assert "\u202e" not in t, t
    assert any(name in shown(caption) for name in HOME_NAMES)  # the caption names what the row leaves out
    visible = " ".join(shown(t) for t in texts) + " ".join(options)
    assert "abc\\u202egpj.exe" in visible  # the override is shown as its escape


# ----------------------------------------------------------------------------- table cells
def test_tables_show_bidi_controls_as_escapes_and_long_values_cut(tmp_path, monkeypatch):
    """Retrieve's and Atoms' tables: a concept named with a right-to-left override and a 10⁵-character id are
    shown as the override's escape and cut (``_safe.table``); a CSV download keeps them whole (AppTest)."""
    from pathlib import Path

    import numpy as np
    from streamlit.testing.v1 import AppTest

    from slics_core.data import LabelledEmbeddings
    from slics_core.explorer.build import build_workspace
    from slics_core.labels import Labels

    names = [BIDI, "plain", "other"]
    rng = np.random.default_rng(0)
    n, d = 60, 8
    Y = rng.random((n, len(names))) < 0.5
    Y[np.arange(n), np.arange(n) % len(names)] = True
    raw = (Y @ rng.standard_normal((len(names), d)) + 0.3 * rng.standard_normal((n, d))).astype(np.float32)
    ids = [f"i{i}" for i in range(n)]
    ids[: n // 2] = [f"{i}-" + "x" * 100_000 for i in range(n // 2)]  # every query's galleries hold some
    data = LabelledEmbeddings(raw=raw, ids=ids, labels=Labels(Y, names))
    build_workspace(data, tmp_path / "hostile-tables", methods=["S-SLiCS"], d0_values=(1,), n_iter=2)
    monkeypatch.setenv("SLICS_WORKSPACES", str(tmp_path))
    for page, want in (("retrieve.py", 2), ("atoms.py", 1)):
        at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app_pages" / page), default_timeout=300)
        at.query_params["ws"] = "hostile-tables"
        at.run()
        assert not at.exception and not at.error, (page, [e.value for e in at.error])
        frames = [f.value for f in at.dataframe]
        assert len(frames) >= want, (page, len(frames))
        cells = [str(v) for f in frames for c in f.columns for v in f[c]] + [str(c) for f in frames for c in f.columns]
        assert not any("\u202e" in v for v in cells), page
        assert max(len(v) for v in cells) <= 200, page
        assert any("abc\\u202egpj.exe" in v for v in cells), page  # the name is there, its override visible

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

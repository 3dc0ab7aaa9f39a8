"""Showing values the app does not control (link parameters, workspace and concept names, text
queries, upload file names, dataset captions, error messages quoting them) in Streamlit Markdown.

Every ``st.markdown`` / ``st.caption`` / alert / image caption renders Markdown, and Streamlit's
Markdown turns a bare ``https://…``, ``www.…`` or ``name@host.tld`` into a live link even when every
punctuation mark is backslash-escaped (measured: the autolink pass runs on the parsed text). So:

:func:`code`
    the value as an inline code span: nothing inside is a link, an image, HTML or a directive.
    For values quoted in a sentence (a link parameter, a name, a path, a query).
:func:`figure_text`
    the value HTML-escaped and cut to ``limit`` characters, for plotly figure text (titles, legends,
    labels): plotly draws ``<a href>``, ``<b>``... found in text as markup.
:func:`text`
    the value as plain text: every ASCII punctuation mark backslash-escaped (no emphasis,
    links, images, HTML, ``:colour[…]`` directives or ``$maths$``), and the three autolink
    triggers (``://``, ``www.``, ``@``) broken by an invisible WORD JOINER (U+2060). For
    names shown as prose (concept names in headings, labels in captions, error messages).

All three make the value one line (a payload cannot start a new block), show the invisible
characters that reorder text (bidi controls: a right-to-left override makes ``abc\\u202egpj.exe`` read
as "abcexe.jpg") as their escapes (``\\u202e``), and :func:`code` and :func:`text` cut it to ``limit``
characters. :func:`plain` does only that, for widget options, which Streamlit does not render as
Markdown; :func:`table` applies it to every text cell and column name of a table for ``st.dataframe``
(whose cells are not Markdown either, but show a right-to-left override raw and a 10⁵-character id whole).
``tests/e2e/test_injection.py`` checks every page in a browser.

The pages use these through :mod:`app_pages._safe`; sentences written below the pages
(:mod:`slics_core.explorer.narration`) quote workspace-provided names with :func:`code` too.
"""
from __future__ import annotations

import re
from html import escape

import pandas as pd

__all__ = ["code", "text", "figure_text", "plain", "table"]

_WJ = "\u2060"
_PUNCT = re.compile(r"([!-/:-@\[-`{-~])")
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]+")
#: The Unicode bidirectional controls (embeddings, overrides, isolates, marks): shown as escapes.
_BIDI = re.compile(r"[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _visible(value) -> str:
    """``value`` as a string with each bidi control written as its escape (``\\u202e``)."""
    return _BIDI.sub(lambda m: f"\\u{ord(m.group(0)):04x}", str(value))


def _one_line(value, limit: int) -> str:
    s = " ".join(_CONTROL.sub(" ", _visible(value)).split(" "))
    s = re.sub(r"\s+", " ", s).strip()
    return s if len(s) <= limit else s[: limit - 1] + "…"


def code(value, limit: int = 200) -> str:
    """``value`` as a Markdown inline code span (shown literally; never a link or an image)."""
    s = _one_line(value, limit)
    if not s:
        return "` `"
    fence = "`" * (max((len(r) for r in re.findall(r"`+", s)), default=0) + 1)
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def text(value, limit: int = 500) -> str:
    """``value`` as Markdown that shows its characters as they are, with no link, image or markup."""
    s = _PUNCT.sub(r"\\\1", _one_line(value, limit))
    s = s.replace("\\:\\/\\/", "\\:" + _WJ + "\\/\\/")
    s = re.sub(r"(?i)(www)(\\\.)", r"\1" + _WJ + r"\2", s)
    return s.replace("\\@", "\\@" + _WJ)


def figure_text(value, limit: int = 200) -> str:
    """``value`` for plotly figure text: HTML-escaped, so no ``<a href>`` in it becomes a link; bidi controls
    shown as escapes; cut to ``limit`` characters (a 10⁵-character label would widen a chart's margins)."""
    s = _visible(value)
    return escape(s if len(s) <= limit else s[: limit - 1] + "…", quote=False)


def plain(value, limit: int = 200) -> str:
    """``value`` as one line of plain text (bidi controls shown as escapes), for what Streamlit shows
    without Markdown: the options of a select box or multiselect."""
    return _one_line(value, limit)


def table(frame, limit: int = 200):
    """A copy of ``frame`` (a :class:`pandas.DataFrame`, or what builds one) to show with ``st.dataframe``:
    each text cell and column name through :func:`plain` (one line, bidi controls as escapes, at most
    ``limit`` characters); numbers and other values as they are. The table a CSV download writes keeps
    the values whole."""
    out = pd.DataFrame(frame).copy()
    for c in out.columns:
        if out[c].dtype == object or pd.api.types.is_string_dtype(out[c].dtype):
            out[c] = [plain(v, limit) if isinstance(v, str) else v for v in out[c]]
    out.columns = [plain(c, limit) if isinstance(c, str) else c for c in out.columns]
    return out

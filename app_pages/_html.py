"""Page parts written as HTML for ``st.html``: escaped text, a heading, a row of metric boxes.

A page that redraws many small elements on every click (Retrieve: per picked concept a heading, four
``st.metric`` and their columns) pays the browser for each React component it builds again; the same
information as one ``st.html`` element is one component (docs/performance.md, "Third pass"). Every value from
outside (concept names, captions, notes) goes through :func:`text`: one line, bidi controls shown as escapes
(:func:`app_pages._safe.plain`), then HTML-escaped, quotes included, so it is safe in text and in attributes.
"""
from __future__ import annotations

import html
import math

from app_pages import _safe

#: st.metric's look: label 0.875rem, value 2.25rem; delta 0.875rem, green up / red down (a leading "-" is down)
UP, DOWN = "#09ab3b", "#ff2b2b"


def text(value, limit: int = 500) -> str:
    """``value`` as one line of HTML text (or attribute value): nothing in it becomes markup."""
    return html.escape(_safe.plain(value, limit), quote=True)


def heading(value) -> str:
    """An ``<h3>`` (st.subheader's level) of the plain text ``value``."""
    return (f'<h3 style="font-size:1.75rem;font-weight:600;line-height:1.2;margin:0;padding:0.5rem 0 0.25rem 0">'
            f'{text(value)}</h3>')


def caption(value) -> str:
    """st.caption's look (0.875rem, faded) for one line of plain text ``value``."""
    return f'<p style="font-size:0.875rem;opacity:0.6;margin:0">{text(value)}</p>'


def number_attr(v) -> str:
    """A float as a ``data-`` attribute value (``""`` for None or NaN), for tests and scripts that read the page."""
    return "" if v is None or math.isnan(float(v)) else repr(float(v))


def metric(label, value, delta=None, **data) -> str:
    """One metric box (st.metric's label, value and delta); ``data``: its ``data-<name>`` attributes (escaped
    as :func:`text`)."""
    attrs = "".join(f' data-{k.replace("_", "-")}="{text(v)}"' for k, v in data.items())
    out = (f'<div class="slics-metric"{attrs} style="flex:1 1 0;min-width:8rem">'
           f'<div style="font-size:0.875rem;line-height:1.6">{text(label)}</div>'
           f'<div class="slics-metric-value" style="font-size:2.25rem;line-height:1.3">{text(value)}</div>')
    if delta:
        down = str(delta).startswith("-")
        out += (f'<div class="slics-metric-delta" style="font-size:0.875rem;color:{DOWN if down else UP}">'
                f'{"↓" if down else "↑"} {text(delta)}</div>')
    return out + "</div>"


def metric_row(boxes) -> str:
    """Metric boxes (:func:`metric`) side by side in equal widths, wrapping on narrow screens."""
    return f'<div class="slics-metrics" style="display:flex;flex-wrap:wrap;gap:1rem">{"".join(boxes)}</div>'

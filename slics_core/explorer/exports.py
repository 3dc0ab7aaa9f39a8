"""Exports of the app's results: self-contained chart files and CSVs that say how they were made.

* :func:`figure_html` - a plotly figure as one HTML file with plotly.js inside (it opens offline,
  no CDN).
* :func:`with_settings` - a table with the settings that produced it as leading columns (the
  choice made for CSV exports: columns survive every CSV reader, header comments do not).
"""
from __future__ import annotations

import pandas as pd

__all__ = ["figure_html", "with_settings"]


def figure_html(fig) -> str:
    """``fig`` (a plotly figure) as a complete HTML page with plotly.js embedded (about 4.6 MB)."""
    return fig.to_html(include_plotlyjs=True, full_html=True)


def with_settings(df: pd.DataFrame, **settings) -> pd.DataFrame:
    """A copy of ``df`` with one constant column per setting (in the given order) before its own columns.

    A setting whose name is already a column of ``df`` must agree with it on every row (it is not
    repeated); ``None`` values are written as empty cells, lists and tuples joined with ``";"``.

    Raises
    ------
    ValueError
        A setting clashes with (disagrees with) the column of the same name.
    """
    out = df.copy()
    lead = []
    for name, value in settings.items():
        if isinstance(value, (list, tuple)):
            value = ";".join(map(str, value))
        if name in out.columns:
            col = out[name]
            if not (col.isna() & (value is None) | (col.astype(object) == value)).all():
                raise ValueError(f"setting {name}={value!r} clashes with the table's column {name!r}: it disagrees")
        else:
            out.insert(len(lead), name, "" if value is None else value)
        lead.append(name)
    return out[lead + [c for c in out.columns if c not in lead]]

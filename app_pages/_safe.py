"""Showing values the app does not control in Streamlit Markdown: the helpers of
:mod:`slics_core.explorer.safe_text` (one home), under the name the pages import."""
from slics_core.explorer.safe_text import code, figure_text, plain, table, text

__all__ = ["code", "text", "figure_text", "plain", "table"]

"""What a visitor of the app is told when something fails, what whoever runs it is told, and what the
server's log keeps.

An error raised by the library carries its audiences as data (:class:`slics_core.errors.Audiences`):
what failed (names, never a server folder or a shell command), what a visitor can do, and what the
operator runs (``slics download sd-1.5``, ``slics align --workspace …``). :func:`visitor_text` is the
one place that turns an exception (or a message) into what a page shows: the page's own ``what``,
what failed, what the visitor can do; and the operator's part when Streamlit's
``client.showErrorDetails`` is "full" (:func:`operator_sees_details`: a presenter's own laptop, where
the visitor is the operator; the classroom recipe sets it to "none"). The whole message always goes
to the server's log (``logging``, logger ``slics.app``).

A message without audiences (a build's failure sent as text from another process, an error raised
outside the library) is cut for a visitor by :func:`for_visitor`: its first line, absolute paths cut
to their last name, and the clauses that give advice for a shell or for the server's files left out.
"""
from __future__ import annotations

import logging
import re

import streamlit as st

from app_pages import _safe
from slics_core.errors import audiences, short_words, user_message

__all__ = ["visitor_text", "for_visitor", "operator_sees_details", "LOG"]

LOG = logging.getLogger("slics.app")

#: An absolute path (``/srv/slics/workspaces/toys``, ``~/.cache/…``): quoted (may hold spaces) or bare; a quoted
#: separator alone (``'/'``) names a character, not a path.
_QUOTED_PATH = re.compile(r"""(['"])(?![/\\]\1)(?:~|[A-Za-z]:)?[/\\](?:[^'"\n]*[/\\])?([^'"/\\\n]*)\1""")
_BARE_PATH = re.compile(r"(?<![\w.:/~\\])(?:~|[A-Za-z]:)?[/\\](?:[^\s/\\`'\"]+[/\\])+([^\s/\\`'\",;)]*)")
#: Advice for a shell: a command in backticks, an option, the ``slics`` command, an environment variable.
_SHELL = re.compile(r"`|(?<![\w-])--[a-z]|\bslics [a-z]|\$[A-Z_]{3,}|\bpip install\b|save_pretrained")
#: Advice for whoever runs the server: what to do with its files and downloads.
_OPERATOR = re.compile(r"\b(delete|restore|rebuild|re-?create|re-?fit|run (it )?again|download|free some space|"
                       r"choose (another|a writable)|check (its|the) permissions|restart|load a file)\b", re.I)
#: Parentheses holding no other parentheses.
_PARENS = re.compile(r"\s*\(([^()]*)\)")


def _cut_paths(text: str) -> str:
    text = _QUOTED_PATH.sub(lambda m: f"{m.group(1)}{m.group(2) or '…'}{m.group(1)}", text)
    return _BARE_PATH.sub(lambda m: m.group(1) or "…", text)


def _for_a_shell(text: str) -> bool:
    return bool(_SHELL.search(text) or _OPERATOR.search(text))


def for_visitor(message) -> str:
    """``message`` (an exception or a string) as a visitor may read it (plain text, not yet Markdown):
    its first line, absolute paths cut to their last name, and the clauses and parentheses that give
    advice for a shell or for whoever runs the server left out."""
    text = user_message(message) if isinstance(message, BaseException) else str(message)
    text = (text.strip().splitlines() or [""])[0]
    text = _cut_paths(text)
    text = _PARENS.sub(lambda m: "" if _for_a_shell(m.group(1)) else m.group(0), text)
    clauses = re.split(r"; |(?<=[^.\s]{2})\. (?=[A-Z])", text)
    kept = [clauses[0]] + [c for c in clauses[1:] if not _for_a_shell(c)]
    first = kept[0]
    shell = _SHELL.search(first) or _OPERATOR.search(first)
    if shell:  # "X has no generator: give it one with `slics align …` (what it needs)": keep X and the (…)
        cut = max(first.rfind(": ", 0, shell.start()), first.rfind(", ", 0, shell.start()))
        notes = "".join(m.group(0) for m in _PARENS.finditer(first, shell.start()))
        kept[0] = first[:cut] + notes if cut > 0 and not _for_a_shell(first[:cut]) else ""
    return "; ".join(c for c in kept if c.strip()).strip().rstrip(".;:,")


def operator_sees_details() -> bool:
    """Whether the page may show what only whoever runs the app should read (server folders, shell
    commands): Streamlit's ``client.showErrorDetails`` is "full" (its default; ``True``, deprecated, means
    the same) — the level at which Streamlit itself shows whole exception messages in the browser."""
    return st.get_option("client.showErrorDetails") in ("full", True)


def _plain(part: str) -> str:
    """``part`` of a sentence as plain-text Markdown, its spaces next to a code span kept."""
    return (" " if part[:1].isspace() else "") + _safe.text(part) + (" " if part[-1:].isspace() else "")


def _with_code(text: str) -> str:
    """``text`` as Markdown with its backticked parts (shell commands) as code spans, the rest as plain text."""
    parts = text.split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick: all plain
        return _safe.text(text)
    return "".join(_safe.code(p) if i % 2 else _plain(p) for i, p in enumerate(parts) if p)


def _sentence(text: str) -> str:
    text = text.strip().rstrip(".;:, ")
    return f"{text[:1].upper()}{text[1:]}." if text else ""


def visitor_text(error, what: str, then: str = "", log: bool = True) -> str:
    """The Markdown a page shows for ``error`` (an exception or a message): ``what`` (the page's own
    Markdown, e.g. "Could not open workspace `toys`"), what failed, what the visitor can do (the error's
    :class:`~slics_core.errors.Audiences`, else :func:`for_visitor`'s cut of its message), then ``then``
    (the page's own advice), and, when :func:`operator_sees_details`, what the operator runs (else the
    whole message, when it says more than the visitor read). The whole message is logged for whoever runs
    the server (``log=False``: it was already, e.g. by an earlier poll of a build)."""
    full = user_message(error) if isinstance(error, BaseException) else short_words(str(error))
    if log:
        LOG.warning("%s: %s", what, full)
    told = audiences(error) if isinstance(error, BaseException) else None
    if told is not None:
        detail, fix, operator = told.failed, told.visitor_fix, told.operator_fix
    else:
        detail, fix = for_visitor(full), ""
        operator = full if full.strip().rstrip(".") != detail else ""
    text = f"{what}: {_safe.text(detail)}." if detail else f"{what}."
    parts = [text, _safe.text(_sentence(fix)) if fix else "", then]
    shown = " ".join(p for p in parts if p).strip()
    if operator and operator_sees_details():
        shown += "  \n**For whoever runs the app:** " + _with_code(_sentence(operator))
    return shown

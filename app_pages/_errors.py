"""What a visitor of the app is told when something fails, and what the server's log keeps.

The library's messages are written for the command line: they name the server's folders and say which
``slics`` command or option repairs things. A visitor of the app has no shell, and the server's folders
are none of their business. :func:`visitor_text` is the one place that turns an exception (or a
message) into the visitor's sentence: the whole message goes to the server's log (``logging``, logger
``slics.app``); the visitor reads what failed, with each absolute path cut to its last name (a workspace
is named by its name) and without the advice meant for a shell, followed by what the visitor can do.
"""
from __future__ import annotations

import logging
import re

from app_pages import _safe
from slics_core.errors import user_message

__all__ = ["visitor_text", "for_visitor", "LOG"]

LOG = logging.getLogger("slics.app")

#: An absolute path (``/srv/slics/workspaces/toys``, ``~/.cache/…``): quoted (may hold spaces) or bare.
_QUOTED_PATH = re.compile(r"""(['"])(?:~|[A-Za-z]:)?[/\\](?:[^'"\n]*[/\\])?([^'"/\\\n]*)\1""")
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


def visitor_text(error, what: str, then: str = "", log: bool = True) -> str:
    """The Markdown a page shows for ``error`` (an exception or a message): ``what`` (the page's own
    Markdown, e.g. "Could not open workspace `toys`"), the visitor's part of the message
    (:func:`for_visitor`, as plain text), and ``then``: what the visitor can do. The whole message is
    logged for whoever runs the server (``log=False``: it was already, e.g. by an earlier poll of a build)."""
    if log:
        LOG.warning("%s: %s", what, user_message(error) if isinstance(error, BaseException) else error)
    detail = for_visitor(error)
    text = f"{what}: {_safe.text(detail)}." if detail else f"{what}."
    return f"{text} {then}".strip()

"""What a generator read in a vector, as the pages show it: the decoded "prompt" and where a strip changes.

A generator that can say what it read (:meth:`slics_core.explorer.generation.WorkspaceGenerator.describe`)
gives, per row, ``(label, probability)`` pairs, most likely first; these helpers turn them into
the text under an image and find where an atom-interpolation strip's top object changes.
"""
from __future__ import annotations

__all__ = ["prompt_text", "strip_change"]


def prompt_text(pairs, digits: int = 2) -> str:
    """``"dog 0.81 · cat 0.12"`` for ``[("dog", 0.81), ("cat", 0.12)]``; ``""`` for None or no pairs."""
    if not pairs:
        return ""
    return " · ".join(f"{label} {float(p):.{int(digits)}f}" for label, p in pairs)


def strip_change(descriptions) -> int | None:
    """Index of the first image whose top object differs from the first image's, or None.

    ``descriptions``: one list of ``(label, probability)`` pairs per image of the strip, in
    strip order (None, or an empty list for an image, counts as "nothing read").
    """
    tops = [d[0][0] if d else None for d in (descriptions or [])]
    for i, t in enumerate(tops[1:], start=1):
        if t != tops[0]:
            return i
    return None

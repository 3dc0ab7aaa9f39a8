"""Tests read only the repository: no path built from a test file's location climbs above the checkout.

A clone with nothing beside it must pass README's test command, so data a test needs is kept in the
repository (e.g. ``tests/data/coco_categories.json`` with its licence note in ``tests/data/NOTICE``).
"""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: ``Path(__file__)`` followed by ``.resolve()``, ``.parent`` and ``.parents[k]`` steps.
_FROM_FILE = re.compile(r"Path\(__file__\)((?:\.resolve\(\)|\.absolute\(\)|\.parent\b|\.parents\[\d+\])+)")
_STEP = re.compile(r"\.parent\b|\.parents\[(\d+)\]")
#: ``/ ".."`` or ``os.path.join(..., "..")``: a step up written as a path segment.
_UP_SEGMENT = re.compile(r"""/\s*["']\.\.["']|join\([^)]*["']\.\.["']""")


def _levels_up(chain: str) -> int:
    return sum(1 if m.group(1) is None else int(m.group(1)) + 1 for m in _STEP.finditer(chain))


def _test_sources():
    return sorted(p for p in (ROOT / "tests").rglob("*.py") if "__pycache__" not in p.parts)


def test_levels_up_reads_the_chains():
    assert _levels_up(".resolve().parent") == 1
    assert _levels_up(".resolve().parents[1]") == 2
    assert _levels_up(".resolve().parents[1].parent") == 3


def test_no_test_path_climbs_out_of_the_repository():
    outside = []
    for path in _test_sources():
        if path == Path(__file__).resolve():
            continue  # this file names the patterns it looks for
        depth = len(path.relative_to(ROOT).parts)  # a file right in tests/: 2 steps up reach the checkout's root
        text = path.read_text(encoding="utf-8")
        for m in _FROM_FILE.finditer(text):
            if _levels_up(m.group(1)) > depth:
                outside.append(f"{path.relative_to(ROOT)}: {m.group(0)}")
        outside += [f"{path.relative_to(ROOT)}: {m.group(0)}" for m in _UP_SEGMENT.finditer(text)]
    assert not outside, outside


def test_coco_categories_are_in_the_repository_with_their_licence():
    data = ROOT / "tests" / "data"
    assert (data / "coco_categories.json").is_file()
    notice = (data / "NOTICE").read_text()
    assert "coco_categories.json" in notice and "CC BY 4.0" in notice and "COCO Consortium" in notice

"""Tests use Streamlit's public API; the private access left lives in tests/streamlit_private.py alone, each
function behind a version check (issue 40, item 4)."""
import re
from pathlib import Path

import pytest
import streamlit
import streamlit_private

TESTS = Path(__file__).resolve().parent
HOME = TESTS / "streamlit_private.py"

#: What a test file may not touch: AppTest's private tree and runner, an element's raw message (``.proto``),
#: Streamlit's own underscore names, modules outside the public ``streamlit``, ``streamlit.testing.v1`` and
#: ``streamlit.components.v1`` / ``v2``, and the internals tests once patched.
PRIVATE = re.compile(
    r"\._tree\b|\._runner\b|\.proto\b"
    r"|\b(?:st|streamlit)\._\w"
    r"|\b(?:from|import)\s+streamlit\.(?!(?:testing\.v1|components\.v[12])(?:\s|$))\w"
    r"|\b(?:_make_trigger_id|_pil_to_bytes|QueryParams|MemoryMediaFileStorage|ForwardMsg|WidgetState)\b")


def violations(text: str) -> list:
    """``(line number, line)`` of each line of ``text`` touching a private Streamlit name."""
    return [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1) if PRIVATE.search(line)]


def test_no_test_file_but_the_helper_touches_private_streamlit_api():
    found = {str(p.relative_to(TESTS)): v for p in sorted(TESTS.rglob("*.py"))
             if p not in (HOME, Path(__file__).resolve()) and (v := violations(p.read_text(encoding="utf-8")))}
    assert not found, f"private Streamlit access outside tests/streamlit_private.py: {found}"
    assert violations(HOME.read_text(encoding="utf-8"))  # the pattern does see what the helper holds


@pytest.mark.parametrize("line", [
    "states = at._tree.get_widget_states()", "at._tree._runner._run(states)", "body = h.proto.body",
    "spec = json.loads(next(c for c in charts).proto.spec)", "from streamlit.proto.ForwardMsg_pb2 import x",
    "from streamlit.runtime.state.query_params import QueryParams",
    "from streamlit.elements.lib.image_utils import _pil_to_bytes", "import streamlit.runtime.scriptrunner",
    "from streamlit.url_util import is_url", "x = st._main", "from streamlit.components.v2.bidi_component import y",
])
def test_the_pattern_sees_private_access(line):
    assert violations(line)


@pytest.mark.parametrize("line", [
    "from streamlit.testing.v1 import AppTest", "import streamlit as st", "import streamlit.components.v2 as c",
    "body = h.value", "spec = json.loads(ch.spec)", "def test_every_module_and_path_named_in_the_tree_exists():",
    "at.query_params['q'] = '3'", "with run_streamlit(root, log) as base:", "self._proto_cache = 1",
])
def test_the_pattern_passes_public_access(line):
    assert not violations(line)


def test_the_version_check_admits_the_verified_range_only(monkeypatch):
    assert streamlit_private.supported("1.66.0") and streamlit_private.supported("1.67.2")
    for v in ("1.65.9", "1.68.0", "2.0.0", "0.89.0", "nonsense"):
        assert not streamlit_private.supported(v), v
    monkeypatch.setattr(streamlit, "__version__", "1.99.0")
    with pytest.raises(pytest.skip.Exception, match=r"Streamlit 1\.99\.0 is installed"):
        streamlit_private.button_kind(None)

"""The one home of the tests' private Streamlit access (issue 40, item 4).

Tests drive the app through AppTest's public API (``at.get``, typed element lists, each element's ``value``,
``key``, ``label``, ``id`` and the element's parameters it exposes as attributes, ``at.query_params``,
``at.session_state``, ``at.switch_page``) and click what AppTest cannot in a real browser (tests/e2e). What is
left here has no public equivalent:

- :func:`trigger` sends a ``st.components.v2`` component's trigger (a gallery click) as the next run's widget
  state: AppTest draws no components and cannot click them (tests/e2e clicks the galleries in a browser).
- :func:`record_media_stores` / :func:`download_data`: the bytes a ``st.download_button`` offers (AppTest
  exposes the button, not its file).
- :func:`button_kind`: a button's ``type`` ("primary" / "secondary"), shadowed by the element's own ``type``.
- :func:`styler_display_values`: the display values a ``pandas`` Styler sends with a dataframe.
- :func:`record_sent_query_params`: the query strings the server hands to the browser (AppTest's
  ``query_params`` is the server's copy, kept even when the message never leaves).
- :func:`script_runs`: the script runs in the websocket frames a real browser received (tests/e2e).

Each is checked on the Streamlit versions in :data:`VERIFIED`; on any other version the test using it is
skipped with a reason naming the installed version (the internals may have moved). ``test_streamlit_private``
checks that no other test file touches a private Streamlit name.
"""
from __future__ import annotations

import json

import pytest
import streamlit

#: (major, minor) range, both ends included, on which every function here was run and checked.
VERIFIED = ((1, 66), (1, 67))


def _minor(version: str) -> tuple:
    parts = version.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return ()


def supported(version: str | None = None) -> bool:
    """Whether ``version`` (default: the installed Streamlit's) lies in :data:`VERIFIED`."""
    v = _minor(version or streamlit.__version__)
    return bool(v) and VERIFIED[0] <= v <= VERIFIED[1]


def _require(what: str) -> None:
    if not supported():
        lo, hi = (".".join(map(str, v)) for v in VERIFIED)
        pytest.skip(f"{what} uses Streamlit internals verified on {lo}–{hi}.x; Streamlit {streamlit.__version__} "
                    "is installed (check tests/streamlit_private.py against it and widen VERIFIED)")


def trigger(at, element, event: str, value, timeout: float = 180):
    """Run ``at`` as after ``element`` (a ``st.components.v2`` component, an AppTest element) set its trigger
    ``event`` to ``value`` in the browser (``setTriggerValue(event, value)``); returns ``at``."""
    _require("a component trigger")
    from streamlit.components.v2.bidi_component.main import _make_trigger_id
    from streamlit.proto.WidgetStates_pb2 import WidgetState

    states = at._tree.get_widget_states()
    states.widgets.append(WidgetState(id=_make_trigger_id(element.id, "events"),  # every event: one trigger
                                      json_trigger_value=json.dumps([{"event": event, "value": value}])))
    at._tree._runner._run(states, timeout=timeout)
    return at


def record_media_stores(monkeypatch) -> list:
    """The in-memory media stores AppTest creates from now on (download buttons' data lives there)."""
    _require("reading a download button's data")
    from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage

    stores = []
    real_init = MemoryMediaFileStorage.__init__

    def init(self, *a, **k):
        real_init(self, *a, **k)
        stores.append(self)

    monkeypatch.setattr(MemoryMediaFileStorage, "__init__", init)
    return stores


def download_data(stores: list, button) -> bytes:
    """The bytes ``button`` (an AppTest download button) offers, from the last store of
    :func:`record_media_stores`."""
    return stores[-1].get_file(button.url.rsplit("/", 1)[-1]).content


def button_kind(button) -> str:
    """A button's ``type`` argument ("primary", "secondary", "tertiary")."""
    _require("a button's type")
    return button.proto.type


def styler_display_values(dataframe) -> bytes:
    """The display values a Styler sent with ``dataframe`` (an AppTest dataframe); empty without a Styler."""
    _require("a dataframe's Styler")
    return dataframe.proto.arrow_data.styler.display_values


def record_sent_query_params(monkeypatch) -> list:
    """The query strings (dicts, one value per name) the server hands to the browser from now on, in order; a
    message that raised (e.g. after ``st.stop()``) is not recorded."""
    _require("the query strings sent to the browser")
    from urllib.parse import parse_qsl, urlencode

    from streamlit.runtime.state.query_params import QueryParams

    log = []
    original = QueryParams._send_query_param_msg

    def record(self):
        original(self)
        log.append(dict(parse_qsl(urlencode(self.to_dict()))))

    monkeypatch.setattr(QueryParams, "_send_query_param_msg", record)
    return log


def script_runs(frames: list) -> list:
    """``(status, element ids)`` of each script run in the websocket frames (bytes) a browser received: the
    status of its ``script_finished`` message (a ``ForwardMsg.ScriptFinishedStatus`` name) and the ids of the
    elements it sent (ids end with their key)."""
    _require("decoding the websocket frames")
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    runs, ids = [], []
    for frame in frames:
        msg = ForwardMsg.FromString(frame)
        kind = msg.WhichOneof("type")
        if kind == "delta" and msg.delta.WhichOneof("type") == "new_element":
            el = msg.delta.new_element
            inner = getattr(el, el.WhichOneof("type"))
            ids.append(getattr(inner, "id", ""))
        elif kind == "script_finished":
            runs.append((ForwardMsg.ScriptFinishedStatus.Name(msg.script_finished), ids))
            ids = []
    return runs

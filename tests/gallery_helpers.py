"""AppTest helpers for the app's galleries (app_pages/_images.image_gallery): read what they draw, and click one.

A gallery is an ``st.html`` element or, where a click on an image makes it the query, a ``st.components.v2``
component (key ``pick_key``) whose data carries the same HTML. AppTest draws no components and cannot click
them, so :func:`click_gallery` sends the event the browser sends (the trigger ``picked``: the image's position) as
the next run's widget state; tests/e2e clicks the images in a real browser.
"""
from __future__ import annotations

import json
import re


def _bodies(node):
    """Gallery HTML bodies under ``node``, in page order."""
    proto = getattr(node, "proto", None)
    kind = getattr(node, "type", None)
    if kind == "html" and "slics-gallery" in proto.body:
        yield proto.body
    elif kind == "bidi_component" and proto.component_name == "slics_gallery":
        yield json.loads(proto.json)["html"]
    for child in getattr(node, "children", {}).values():
        yield from _bodies(child)


def gallery_bodies(at) -> list:
    """The HTML of every gallery on the page (both kinds), in page order."""
    return list(_bodies(at._tree))


def gallery_srcs(at) -> list:
    """The image ``src`` of every gallery, in page order."""
    return [re.findall(r'<img src="([^"]+)"', b) for b in gallery_bodies(at)]


def clickable(at, key: str):
    """The clickable gallery with widget key ``key`` (an AppTest UnknownElement)."""
    found = [e for e in at.get("bidi_component") if e.key == key]
    assert len(found) == 1, f"no clickable gallery {key!r} on the page"
    return found[0]


def click_gallery(at, key: str, position, timeout: float = 180):
    """Run ``at`` as after a click on image ``position`` (0 = first) of gallery ``key``; returns ``at``."""
    from streamlit.components.v2.bidi_component.main import _make_trigger_id
    from streamlit.proto.WidgetStates_pb2 import WidgetState

    gallery = clickable(at, key)
    states = at._tree.get_widget_states()
    states.widgets.append(WidgetState(id=_make_trigger_id(gallery.proto.id, "events"),
                                      json_trigger_value=json.dumps([{"event": "picked", "value": position}])))
    at._tree._runner._run(states, timeout=timeout)
    return at

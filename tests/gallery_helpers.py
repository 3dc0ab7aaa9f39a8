"""AppTest helpers for the app's galleries (app_pages/_images.image_gallery): read what they draw, and click one.

A gallery is an ``st.html`` element or, where a click on an image makes it the query, a ``st.components.v2``
component (key ``pick_key``) whose data carries the same HTML. AppTest draws no components and cannot click
them, so :func:`click_gallery` sends the event the browser sends (the trigger ``picked``: the image's position) as
the next run's widget state (:func:`streamlit_private.trigger`, the one private access); tests/e2e clicks the
images in a real browser.
"""
from __future__ import annotations

import json
import re

from streamlit_private import trigger


def gallery_bodies(at) -> list:
    """The HTML of every gallery on the page (both kinds), in page order."""
    out = []
    for node in at:  # every element and block, in page order
        if node.type == "html" and "slics-gallery" in node.value:
            out.append(node.value)
        elif node.type == "bidi_component" and node.component_name == "slics_gallery":
            out.append(json.loads(node.json)["html"])
    return out


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
    return trigger(at, clickable(at, key), "picked", position, timeout=timeout)

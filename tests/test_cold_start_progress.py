"""What a presenter's first start says while the emoji world is built (issue 40: the page showed one line stuck
at "1 %", the whole build's percentage, and not which stage it was in nor what was already usable).

:class:`slics_core.explorer.emoji_build.BuildProgress` knows the step of the build (the preview's or the whole
world's), :func:`~slics_core.explorer.emoji_build.progress_words` says it with the step's own progress, and
the pages' banner (``app_pages/_workspace.py``) shows it on a bar that moves with the step.
"""
import copy
from pathlib import Path

import pytest

from slics_core.explorer.emoji_build import BuildProgress, progress_words, step_fraction

ROOT = Path(__file__).resolve().parents[1]


def _world_fit(handle):
    """Planted reports: the preview's steps, then the whole world's up to its fits (model 5 of 22, 40 % of the
    fitting's batches)."""
    handle.phase("preview")
    for stage, done, total in [("load the emoji-small encoder", 0, 1), ("render scenes", 512, 512),
                               ("embed with emoji-small", 512, 512), ("fit: model 1 of 2, S-SLiCS d0=5", 2, 2)]:
        handle(stage, done, total)
    handle.phase("")
    for stage, done, total in [("load the emoji-small encoder", 0, 1), ("render scenes", 0, 1500),
                               ("render scenes", 1500, 1500), ("embed with emoji-small", 1500, 1500),
                               ("fit: model 5 of 22, S-SLiCS d0=10", 40, 100)]:
        handle(stage, done, total)


def test_the_snapshot_names_the_part_and_step_of_the_build():
    handle = BuildProgress()
    snap = handle.snapshot()
    assert (snap["part"], snap["step"], snap["n_steps"]) == ("preview", 1, 4)
    assert progress_words(snap).startswith("Preview, step 1 of 4: start the build process · ")
    handle.phase("preview")
    handle("embed with emoji-small", 256, 512)
    snap = handle.snapshot()
    assert (snap["part"], snap["step"]) == ("preview", 3)
    assert progress_words(snap).startswith("Preview, step 3 of 4: embed with emoji-small, 256 of 512 · 50 % of "
                                           "this step, about ")
    _world_fit(handle)
    snap = handle.snapshot()
    assert (snap["part"], snap["step"], snap["n_steps"]) == ("world", 6, 9)
    words = progress_words(snap)
    assert words.startswith("Whole world, step 6 of 9: fit: model 5 of 22, S-SLiCS d0=10 · 40 % of this step, "
                            "about "), words
    assert f"whole build {snap['percent']:.0f} % after " in words
    assert step_fraction(snap) == pytest.approx(0.4)  # the bar moves with the step, not with the whole build


def test_time_left_is_the_steps_rate_so_far():
    """A planted step: 25 % of it done in 20 s leaves about 60 s (the whole build: 20 % in 40 s, 160 s); a step
    without counts says its seconds."""
    snap = {"stage": "render scenes", "done": 375, "total": 1500, "part": "world", "step": 2, "n_steps": 9,
            "step_elapsed": 20.0, "elapsed": 40.0, "percent": 20.0}
    assert progress_words(snap) == ("Whole world, step 2 of 9: render scenes, 375 of 1500 · 25 % of this step, "
                                    "about 60 s left · whole build 20 % after 40 s, about 3 min left")
    snap.update(stage="load the emoji-small encoder", done=0, total=1, step=1, step_elapsed=3.2, percent=2.0)
    assert progress_words(snap) == ("Whole world, step 1 of 9: load the emoji-small encoder · 3 s in this step · "
                                    "whole build 2 % after 40 s")


def test_the_preview_banner_names_the_step_and_what_is_usable(ws, monkeypatch):
    """Home on the preview while the whole world is fitted: the bar's text names the step (fit, model 5 of 22) and
    the bar stands at that step's own 40 %, and one line says what is usable now."""
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    from app_pages import _workspace

    st.cache_resource.clear()
    handle = BuildProgress()
    preview = copy.copy(ws)
    preview.building = handle
    handle.publish(preview)
    _world_fit(handle)
    monkeypatch.setattr(_workspace, "_open_workspace", lambda choice: handle)
    at = AppTest.from_file(str(ROOT / "app_pages" / "home.py"), default_timeout=120)
    at.run()
    assert not at.exception
    bars = [(p.value, p.text) for p in at.progress]
    assert len(bars) == 1 and bars[0][0] == 40, bars
    assert bars[0][1].startswith("Whole world, step 6 of 9: fit: model 5 of 22, S-SLiCS d0=10 · 40 % of this step"), \
        bars
    usable = [c.value for c in at.caption if c.value.startswith("**Usable now:**")]
    assert len(usable) == 1 and f"the first {len(ws):,} scenes of the emoji world" in usable[0], usable
    assert "Building the whole world in the background" in usable[0]

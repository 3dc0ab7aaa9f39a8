"""What a generator read: WorkspaceGenerator.describe, the prompt text and the strip's change point."""
import numpy as np
import pytest

from slics_core.alignment import ProcrustesAlignment
from slics_core.explorer.generation import WorkspaceGenerator
from slics_core.explorer.readings import prompt_text, strip_change


def _aligned(d_in=3, d_out=4):
    """A fitted alignment that maps e_i to e_i (planted: paired unit rows)."""
    X = np.eye(d_in)
    Y = np.eye(d_out)[:d_in]
    return ProcrustesAlignment().fit(np.vstack([X, X]), np.vstack([Y, Y]))


def test_describe_goes_through_the_alignment_and_is_none_without_a_describer():
    seen = []

    def describe(C):
        seen.append(C)
        return [[("dog", float(c[0])), ("cat", float(c[1]))] for c in C]

    gen = WorkspaceGenerator("g", _aligned(), lambda C, seed, steps: [], True, describe_fn=describe)
    out = gen.describe(np.array([[0.5, 0.25, 0.0], [0.0, 0.0, 0.0]]))
    assert out == [[("dog", 0.5), ("cat", 0.25)], [("dog", 0.0), ("cat", 0.0)]]
    np.testing.assert_allclose(seen[0], [[0.5, 0.25, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]], atol=1e-12)
    assert gen.describe(np.array([1.0, 0.0, 0.0]))[0][0] == ("dog", pytest.approx(1.0))  # one vector
    with pytest.raises(ValueError):
        gen.describe(np.ones((1, 5)))
    plain = WorkspaceGenerator("g", _aligned(), lambda C, seed, steps: [], True)
    assert plain.describe(np.ones((2, 3))) is None


def test_prompt_text():
    assert prompt_text([("dog", 0.8149), ("hot dog", 0.05)]) == "dog 0.81 · hot dog 0.05"
    assert prompt_text([("dog", 0.8149)], digits=3) == "dog 0.815"
    assert prompt_text(None) == "" and prompt_text([]) == ""


def test_strip_change():
    d = lambda *tops: [[(t, 0.9)] if t else [] for t in tops]  # noqa: E731
    assert strip_change(d("dog", "dog", "cat", "dog")) == 2
    assert strip_change(d("dog", "dog", "dog")) is None
    assert strip_change(d("dog", None, "dog")) == 1  # nothing read counts as a change
    assert strip_change(d(None, None, "cat")) == 2
    assert strip_change([]) is None and strip_change(None) is None

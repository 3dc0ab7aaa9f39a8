"""The registry's small rules: the method shown when none is chosen, and the dictionary methods in words."""
from slics_core.methods import DEFAULT_METHOD, REGISTRY, dictionary_method_words, preferred_method


def test_preferred_method_is_the_default_when_offered_else_the_first():
    assert DEFAULT_METHOD in REGISTRY and REGISTRY[DEFAULT_METHOD].dictionary
    assert preferred_method(["UF", DEFAULT_METHOD, "S-SVD"]) == DEFAULT_METHOD
    assert preferred_method(["UF", "S-SVD"]) == "UF"
    assert preferred_method(iter(["S-SVD"])) == "S-SVD"
    assert preferred_method([]) is None


def test_dictionary_method_words_follow_the_registry():
    names = [m.name for m in REGISTRY.values() if m.dictionary]
    words = dictionary_method_words()
    assert words.endswith(" or " + names[-1]) and all(n in words for n in names)
    assert not any(m.name in words.split(", ") for m in REGISTRY.values() if not m.dictionary)


def test_uses_active_only_for_full_components():
    import pytest

    from slics_core import SLiCS
    from slics_core.methods import uses_active

    for m in REGISTRY.values():
        assert uses_active(m.name, "partial") is False
        assert uses_active(m.name, "full") is ("full" in m.modes)
    assert uses_active("S-SLiCS", "full") and not uses_active("UF", "full")
    assert uses_active(SLiCS(n_atoms=2), "full")  # a model without a modes attribute has both
    with pytest.raises(ValueError, match="component mode must be one of"):
        uses_active("S-SLiCS", "half")

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

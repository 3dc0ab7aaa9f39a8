"""Word captions on a planted dictionary, vocabularies."""
import numpy as np
import pytest

from slics_core.captions import (
    NSFW_BLOCKLIST,
    default_vocabulary,
    download_laion_vocabulary,
    filter_words,
    load_laion_vocabulary,
    prepare_text_embeddings,
    word_captions,
)


def _unit(A):
    return A / np.linalg.norm(A, axis=-1, keepdims=True)


def test_captions_recover_planted_words():
    rng = np.random.default_rng(0)
    d, S, d0, V = 48, 4, 3, 400
    atoms = _unit(rng.standard_normal((S * d0, d)))
    groups = np.repeat(np.arange(S), d0)
    W = rng.standard_normal((V, d))
    words = [f"noise{i}" for i in range(V)]
    planted = {}
    for j in range(S):
        for r in range(5):
            i = j * 5 + r
            coef = rng.uniform(0.2, 1.0, d0)
            W[i] = coef @ atoms[groups == j] + 0.01 * rng.standard_normal(d)
            words[i] = f"c{j}w{r}"
        planted[j] = {f"c{j}w{r}" for r in range(5)}
    Wn = _unit(W)  # words near a cone, unit norm like text embeddings
    caps, errs = word_captions(atoms, groups, Wn, words, top_k=5, return_errors=True)
    for j in range(S):
        assert set(caps[j]) == planted[j]
        assert np.all(np.diff(errs[j]) >= 0)
    # the error is the NNLS residual: check one word against scipy
    from scipy.optimize import nnls

    B = atoms[groups == 0]
    i = words.index(caps[0][0])
    assert errs[0][0] == pytest.approx(nnls(B.T, Wn[i])[1] ** 2, abs=1e-8)


def test_prepare_text_embeddings_centres_and_normalises():
    rng = np.random.default_rng(1)
    W = rng.standard_normal((50, 8)) + 3
    P, mu = prepare_text_embeddings(W)
    U = W / np.linalg.norm(W, axis=1, keepdims=True)
    np.testing.assert_allclose(mu, U.mean(0))
    np.testing.assert_allclose(P, _unit(U - U.mean(0)))
    with pytest.raises(ValueError):
        prepare_text_embeddings(W, mean=np.zeros(3))


def test_laion_vocabulary_takes_last_lines_and_download(tmp_path):
    f = tmp_path / "laion.txt"
    f.write_text("\n".join(f"word{i}" for i in range(30)) + "\n\n")
    words = load_laion_vocabulary(f, top_n=10)
    assert words == [f"word{i}" for i in range(29, 19, -1)]
    dest = download_laion_vocabulary(tmp_path / "dl" / "v.txt", url=f.as_uri())
    assert load_laion_vocabulary(dest, 10) == words
    with pytest.raises(FileNotFoundError):
        load_laion_vocabulary(tmp_path / "missing.txt")
    with pytest.raises(ValueError):
        download_laion_vocabulary(tmp_path / "x.txt", url=(tmp_path / "nope.txt").as_uri())


def test_filter_words_and_default_vocabulary():
    out = filter_words(["The", "dog", "dog", "porn", "ab", "x-ray", "kitchen", "and", "3d"])
    assert out == ["dog", "kitchen"]
    pytest.importorskip("wordfreq")
    v = default_vocabulary(500)
    assert len(v) == 500 and len(set(v)) == 500
    assert not set(v) & NSFW_BLOCKLIST
    assert "the" not in v and "and" not in v
    assert all(w.isalpha() and w.islower() and len(w) >= 3 for w in v)
    assert "dog" in default_vocabulary(5000)


def test_word_captions_never_returns_blank_words():
    """A blank entry placed exactly on a concept's cone (the best word there) is skipped, not returned."""
    rng = np.random.default_rng(1)
    d, S, d0 = 16, 2, 2
    atoms = _unit(rng.standard_normal((S * d0, d)))
    groups = np.repeat(np.arange(S), d0)
    W = _unit(rng.standard_normal((6, d)))
    W[0] = _unit(atoms[0] + atoms[1])  # zero error for concept 0
    W[1] = _unit(atoms[2] + 0.5 * atoms[3])  # zero error for concept 1
    W[2] = _unit(atoms[0] + 0.3 * atoms[1] + 0.05 * rng.standard_normal(d))  # near concept 0
    words = ["", "  ", "near0", "a", "b", "c"]
    caps, errs = word_captions(atoms, groups, W, words, top_k=10, return_errors=True)
    assert all(w.strip() for c in caps for w in c)
    assert caps[0][0] == "near0"
    assert [len(c) for c in caps] == [4, 4]  # top_k larger than the 4 non-blank words
    # the same words without the blank rows give the same captions and errors
    caps2, errs2 = word_captions(atoms, groups, W[2:], words[2:], top_k=10, return_errors=True)
    assert caps == caps2
    for e, e2 in zip(errs, errs2):
        np.testing.assert_allclose(e, e2)
    with pytest.raises(ValueError, match="no non-blank words"):
        word_captions(atoms, groups, W[:2], ["", " "])
    with pytest.raises(ValueError, match="entry 1"):
        word_captions(atoms, groups, W[:2], ["ok", None])


def test_one_vocabulary_grammar(tmp_path):
    """``get_words`` is the one reader of a vocabulary spec: None is the default, "none" no vocabulary."""
    from slics_core.captions import NO_VOCABULARY, get_words

    f = tmp_path / "v.txt"
    f.write_text("rare\nmiddle\ncommon\n")
    assert get_words(NO_VOCABULARY) is None and get_words("none") is None
    assert get_words(None, 300) == get_words("wordfreq", 300) == default_vocabulary(300)
    assert get_words(str(f), 2) == ["common", "middle"] == get_words(f, 2)  # a path, str or PathLike
    assert get_words(["dog", 7]) == ["dog", "7"] and get_words(("a",)) == ["a"]
    with pytest.raises(ValueError, match="vocabulary must be 'wordfreq'.*'none'.*a list of words; got 3.5"):
        get_words(3.5)
    with pytest.raises(FileNotFoundError, match="no vocabulary file"):
        get_words(str(tmp_path / "missing.txt"))


def test_word_captions_names_a_concept_out_of_range():
    """Concept 7 of a 4-concept dictionary is out of range (valid 0..3), not a concept "with no atoms"."""
    rng = np.random.default_rng(0)
    atoms = _unit(rng.standard_normal((8, 6)))
    groups = np.repeat(np.arange(4), 2)
    W = _unit(rng.standard_normal((5, 6)))
    with pytest.raises(ValueError, match=r"concept 7 is out of range: this model has 4 concepts \(0\.\.3\)"):
        word_captions(atoms, groups, W, list("abcde"), concepts=[7])
    with pytest.raises(ValueError, match="out of range"):
        word_captions(atoms, groups, W, list("abcde"), concepts=[-1])
    assert len(word_captions(atoms, groups, W, list("abcde"), top_k=2, concepts=[3])) == 1

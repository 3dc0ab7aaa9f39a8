"""Word captions of concept subspaces (sec. 3.7).

For every concept ``j`` the words whose (prepared) text embedding has the
smallest non-negative reconstruction error with the concept dictionary
``B_j`` are its caption. All words of all concepts are solved in batches with
:func:`slics_core.nnls.nnls_shared`.

Vocabularies
------------
* :func:`load_laion_vocabulary` - the SpLiCE LAION word list (a text file,
  one word per line, sorted by increasing frequency: its most frequent
  ``top_n`` words are the *last* ``top_n`` lines);
  :func:`download_laion_vocabulary` fetches it on request.
* :func:`default_vocabulary` - offline default from the ``wordfreq`` package:
  the most frequent English words, alphabetic, at least 3 letters, without
  scikit-learn's English stop-words and without :data:`NSFW_BLOCKLIST`.
* :func:`get_words` - the one vocabulary grammar (``"wordfreq"``, ``"none"``, ``"laion-download"``, a
  word-list file, a list of words; None means the default), read by every command and the workspace
  builder.
"""
from __future__ import annotations

import os
import re
import urllib.request

import numpy as np
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

from slics_core._validation import check_concept, check_embeddings, check_k
from slics_core.extras import require
from slics_core.formats import atomic_write_bytes
from slics_core.nnls import nnls_shared
from slics_core.preprocessing import EmbeddingNormalizer
from slics_core.vocabulary_names import DEFAULT_VOCABULARY, LAION_DOWNLOAD, NO_VOCABULARY, VOCABULARY_SPECS

__all__ = [
    "LAION_VOCAB_URL",
    "NSFW_BLOCKLIST",
    "prepare_text_embeddings",
    "word_captions",
    "atom_word_ranking",
    "load_laion_vocabulary",
    "download_laion_vocabulary",
    "default_vocabulary",
    "filter_words",
    "get_words",
    "DEFAULT_VOCABULARY",
    "NO_VOCABULARY",
    "VOCABULARY_SPECS",
]

#: Where SpLiCE publishes its LAION vocabulary (used only on explicit request).
LAION_VOCAB_URL = "https://raw.githubusercontent.com/AI4LIFE-GROUP/SpLiCE/main/data/vocab/laion.txt"

#: The vocabulary spec of the offline default (:func:`get_words`), and the one of no vocabulary.
# the grammar's names (DEFAULT_VOCABULARY, NO_VOCABULARY, LAION_DOWNLOAD, VOCABULARY_SPECS) live in
# slics_core.vocabulary_names, light enough for the command line's --help

#: Words removed from the default vocabulary (sexual / explicit terms).
NSFW_BLOCKLIST = frozenset("""
anal anus arse arsehole asshole bastard bdsm bitch bitches blowjob bollocks boob boobs booty breast breasts
butt butthole cock cocks cum cumshot cunt dick dicks dildo ejaculation erotic erotica escort escorts fetish
fuck fucked fucker fucking fucks genital genitals handjob hentai horny incest jizz kinky lingerie masturbate
masturbation milf naked nipple nipples nude nudes nudity orgasm orgy penis porn porno pornography prostitute
pussy rape raped rapist scrotum semen sex sexual sexy shit shitty slut sluts stripper strippers testicles
threesome tit tits titties topless twat vagina vibrator whore whores xxx
""".split())

def prepare_text_embeddings(W, mean=None):
    """Unit-normalise, subtract the mean, re-normalise (sec. 3.7).

    Parameters
    ----------
    W : array-like of shape (n, d)
    mean : array-like of shape (d,), optional
        Mean to subtract (of the unit-normalised rows); default: their mean.

    Returns
    -------
    W_prepared : ndarray of shape (n, d)
    mean : ndarray of shape (d,)
    """

    normalizer = EmbeddingNormalizer(center=True, mean=mean).fit(W)
    return normalizer.transform(W), normalizer.mean_

def word_captions(atoms, groups, word_embeddings, words, top_k=5, *, concepts=None, ridge=0.0,
                  return_errors=False):
    """Top-``k`` words of every concept subspace by NNLS reconstruction error.

    Parameters
    ----------
    atoms : array-like of shape (M, d)
        Dictionary (``SLiCS.atoms_``).
    groups : array-like of int, shape (M,)
        Concept of each atom (``SLiCS.groups_``).
    word_embeddings : array-like of shape (V, d)
        Prepared word embeddings (:func:`prepare_text_embeddings`).
    words : sequence of str, length V
        Blank entries (``""``, spaces) are never chosen: they name nothing.
    top_k : int
    concepts : sequence of int, optional
        Concepts to caption (default: all).
    ridge : float
    return_errors : bool
        Also return the errors of the chosen words.

    Returns
    -------
    captions : list of list of str
        ``captions[i]`` are the words of ``concepts[i]``, best first
        (fewer than ``top_k`` when the vocabulary has fewer non-blank words).
    errors : list of ndarray (only with ``return_errors``)
    """

    B = check_embeddings(atoms, name="atoms", allow_zero_rows=True)
    groups = np.asarray(groups, dtype=int).reshape(-1)
    if groups.shape[0] != B.shape[0]:
        raise ValueError(f"groups has {groups.shape[0]} entries for {B.shape[0]} atoms.")
    W = check_embeddings(word_embeddings, n_features=B.shape[1], name="word_embeddings", allow_zero_rows=True)
    words = list(words)
    if len(words) != W.shape[0]:
        raise ValueError(f"{len(words)} words for {W.shape[0]} word embeddings.")
    bad = next((i for i, w in enumerate(words) if not isinstance(w, str)), None)
    if bad is not None:
        raise ValueError(f"words must be strings; entry {bad} is {words[bad]!r}.")
    keep = np.flatnonzero([bool(w.strip()) for w in words])
    if keep.size == 0:
        raise ValueError("the vocabulary has no non-blank words.")
    if keep.size < len(words):  # blank words are never captions
        W, words = W[keep], [words[i] for i in keep]
    top_k = check_k(top_k, "top_k")
    if concepts is None:
        concepts = np.unique(groups)
    captions, errs = [], []
    n_concepts = int(groups.max()) + 1
    for j in concepts:
        j = check_concept(j, n_concepts)
        Bj = B[groups == j]
        if Bj.shape[0] == 0:
            raise ValueError(f"concept {j} has no atoms.")
        coef = nnls_shared(Bj, W, ridge=ridge)
        R = W - coef @ Bj
        err = np.einsum("ij,ij->i", R, R)
        order = np.lexsort((np.arange(err.size), err))[:top_k]
        captions.append([words[i] for i in order])
        errs.append(err[order])
    return (captions, errs) if return_errors else captions

def atom_word_ranking(atoms, word_embeddings, k=10):
    """The ``k`` words closest to each atom by cosine, best first (ties by vocabulary order).

    For unit prepared word embeddings ``w`` and an atom ``b`` the one-atom NNLS error of the unit word is
    ``1 - max(0, cos(w, b))^2``, so this is the caption rule (:func:`word_captions`) applied to one atom, for
    every word with a positive cosine. A zero word embedding has cosine 0.

    Parameters
    ----------
    atoms : array-like of shape (m, d) or (d,)
    word_embeddings : array-like of shape (V, d)
        Prepared word embeddings (:func:`prepare_text_embeddings`).
    k : int

    Returns
    -------
    index : ndarray of int, shape (m, min(k, V))
        Vocabulary positions, best first.
    cosine : ndarray of shape (m, min(k, V))
    """
    B = np.asarray(atoms, dtype=np.float64)
    B = B.reshape(1, -1) if B.ndim == 1 else B
    if B.ndim != 2:
        raise ValueError(f"atoms must be 1-D or 2-D (one atom per row); got shape {B.shape}.")
    W = check_embeddings(word_embeddings, n_features=B.shape[1], name="word_embeddings", allow_zero_rows=True)
    nb = np.linalg.norm(B, axis=1)
    if not np.all(np.isfinite(nb)) or np.any(nb <= 0):
        raise ValueError("the atom is zero or not finite (every atom must be a non-zero, finite vector).")
    k = check_k(k)
    nw = np.linalg.norm(W, axis=1)
    cos = (B @ W.T) / nb[:, None] / np.where(nw > 0, nw, np.inf)[None, :]
    index = np.argsort(-cos, axis=1, kind="stable")[:, :k]
    return index, np.take_along_axis(cos, index, axis=1)


def _clean_lines(lines):
    return [w.strip() for w in lines if w.strip()]

def load_laion_vocabulary(path, top_n=10_000):
    """Read the SpLiCE LAION vocabulary: the last ``top_n`` non-empty lines.

    Returns the words most frequent first.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no vocabulary file at {path!r}")
    try:
        with open(path, encoding="utf-8") as fh:
            words = _clean_lines(fh.read().splitlines())
    except UnicodeDecodeError:
        raise ValueError(f"{path!r} is not a UTF-8 text file with one word per line.") from None
    if not words:
        raise ValueError(f"{path!r} contains no words.")
    words = words[-top_n:][::-1]
    return list(dict.fromkeys(words))

def download_laion_vocabulary(dest, url=LAION_VOCAB_URL, timeout=60):
    """Download the SpLiCE LAION word list to ``dest`` (atomically) and return ``dest``."""

    dest = os.fspath(dest)
    folder = os.path.dirname(os.path.abspath(dest))
    os.makedirs(folder, exist_ok=True)
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            data = resp.read()
    except OSError as exc:
        raise ValueError(f"could not download the LAION vocabulary from {url}: {exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{url} did not return a UTF-8 word list.") from None
    if not _clean_lines(text.splitlines()):
        raise ValueError(f"{url} returned an empty word list.")
    atomic_write_bytes(dest, data)
    return dest

def filter_words(words, *, min_length=3, blocklist=NSFW_BLOCKLIST, stop_words=None):
    """Keep lower-case alphabetic words of ``min_length``+ letters, no stop-words, nothing blocked.

    ``stop_words`` defaults to scikit-learn's ``ENGLISH_STOP_WORDS``.
    """
    if stop_words is None:
        stop_words = ENGLISH_STOP_WORDS
    pattern = re.compile(rf"^[a-z]{{{int(min_length)},}}$")
    out, seen = [], set()
    for w in words:
        w = str(w).strip().lower()
        if not pattern.match(w) or w in stop_words or w in blocklist or w in seen:
            continue
        seen.add(w)
        out.append(w)
    return out

def default_vocabulary(n_words=10_000, *, language="en"):
    """Offline default vocabulary: ``n_words`` frequent words from ``wordfreq`` (filtered).

    Raises
    ------
    ImportError
        With installation advice, if ``wordfreq`` is not installed.
    """
    try:
        wordfreq = require("wordfreq")
    except ImportError:
        raise ImportError("the default vocabulary needs the 'wordfreq' package (pip install wordfreq), "
                          "or give a word list file (e.g. SpLiCE's laion.txt).") from None
    pool = wordfreq.top_n_list(language, max(3 * n_words, 1000))
    words = filter_words(pool)
    return words[:n_words]


def get_words(spec, n_words=10_000, download_to=None):
    """The words a vocabulary spec names, or None for no vocabulary: the one vocabulary grammar, read by
    ``--vocab`` of every command and by ``vocabulary=`` of
    :func:`slics_core.explorer.build.build_workspace` and ``build_workspace_from_cache``.

    ``spec``:

    * ``"wordfreq"`` (or ``"default"``): the offline default, ``n_words`` frequent English words
      (:func:`default_vocabulary`);
    * None: not given, so the default: the same as ``"wordfreq"`` (a caller with a default of its own,
      e.g. the emoji world's words, applies it before calling);
    * ``"none"`` (:data:`NO_VOCABULARY`): no vocabulary: returns None;
    * ``"laion-download"``: SpLiCE's LAION list, fetched to ``download_to`` (default ``laion.txt``), then read;
    * a path: a word-list file, one word per line (:func:`load_laion_vocabulary`: its last ``n_words`` lines);
    * a list or tuple: these words (each made a ``str``).

    Raises
    ------
    ValueError
        A spec of another type (with the forms allowed).
    FileNotFoundError
        A path that is not a file.
    """
    if isinstance(spec, (list, tuple)):
        return [str(w) for w in spec]
    if spec is not None and not isinstance(spec, (str, os.PathLike)):
        raise ValueError(f"vocabulary must be {VOCABULARY_SPECS}, or a list of words; got {spec!r}")
    if spec in (None, DEFAULT_VOCABULARY, "default"):
        return default_vocabulary(n_words)
    if spec == NO_VOCABULARY:
        return None
    if spec == LAION_DOWNLOAD:
        dest = download_to or "laion.txt"
        download_laion_vocabulary(dest)
        spec = dest
    return load_laion_vocabulary(spec, n_words)

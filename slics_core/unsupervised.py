"""Unsupervised SLiCS: pseudo-labels from zero-shot concept classification (sec. 3.4).

The cosine similarity between an image embedding and the text embedding of
each concept word (e.g. "This is a picture of {word}.") ranks the concepts;
the top ``S~`` are taken as the image's labels, and the supervised algorithm
runs on these pseudo-labels. ``S~`` is given, or estimated as the rounded
mean number of labels per sample of a labelled reference set (the paper uses
2 for COCO and MIRFlickr, from 2.303 and 2.467).

Empty or tiny concepts (the paper is silent): with real data, the top-``S~``
rule can leave a concept with no pseudo-positive at all (a concept word that
is never among an image's two closest, e.g. "night" on MIRFlickr), and a
concept without examples cannot get atoms. Rule: every concept keeps at least
``min_positives`` (default 10, at most the number of images) pseudo-positives,
its best-scoring images by cosine with its prompt, added on top of the
top-``S~`` labels; a ``RuntimeWarning`` names the concepts that needed it.
"""
from __future__ import annotations

import warnings

import numpy as np

from slics_core._validation import check_embeddings, check_labels
from slics_core.rows import unit_rows


def estimate_n_active(Y):
    """Rounded mean number of positive labels per sample (at least 1)."""
    Y = check_labels(Y, np.shape(Y)[0])
    return max(1, int(np.round(Y.sum(axis=1).mean())))


#: Pseudo-positives every concept keeps (see the module docstring).
MIN_POSITIVES = 10


def zero_shot_labels(X_img, W_text, n_active=None, Y_ref=None, *, min_positives=MIN_POSITIVES,
                     concept_names=None):
    """Binary pseudo-labels: the ``n_active`` concepts most similar to each image.

    Parameters
    ----------
    X_img : array-like of shape (n, d)
        Image embeddings (the encoder's original embeddings, as in the paper).
    W_text : array-like of shape (S, d)
        One text embedding per concept.
    n_active : int, optional
        ``S~``, concepts per image.
    Y_ref : array-like of shape (m, S), optional
        Labels used to estimate ``S~`` when ``n_active`` is not given.
    min_positives : int, default=10
        Every concept keeps at least this many pseudo-positives (its best-scoring
        images are added); ``0`` applies the top-``S~`` rule alone.
    concept_names : sequence of str, optional
        Names used in the warning.

    Returns
    -------
    Y : ndarray of bool, shape (n, S)
    """
    X = check_embeddings(X_img, name="X_img")
    W = check_embeddings(W_text, n_features=X.shape[1], name="W_text")
    S = W.shape[0]
    if n_active is None:
        if Y_ref is None:
            raise ValueError("give n_active, or labels Y_ref to estimate it from.")
        n_active = estimate_n_active(Y_ref)
    if not 1 <= int(n_active) <= S:
        raise ValueError(f"n_active must be between 1 and the number of concepts ({S}); got {n_active}.")
    sims = unit_rows(X, name="X") @ unit_rows(W, name="concept text embeddings").T
    top = np.argsort(-sims, axis=1, kind="stable")[:, : int(n_active)]
    Y = np.zeros((X.shape[0], S), dtype=bool)
    np.put_along_axis(Y, top, True, axis=1)
    if isinstance(min_positives, bool) or not isinstance(min_positives, (int, np.integer)) or min_positives < 0:
        raise ValueError(f"min_positives must be a non-negative int; got {min_positives!r}.")
    need = min(int(min_positives), X.shape[0])
    short = np.flatnonzero(Y.sum(axis=0) < need)
    for j in short:
        Y[np.argsort(-sims[:, j], kind="stable")[:need], j] = True
    if short.size:
        names = [str(concept_names[j]) if concept_names is not None else f"concept {j}" for j in short]
        warnings.warn(f"zero-shot pseudo-labels: {', '.join(names)} had fewer than {need} images among their "
                      f"top-{int(n_active)}; each keeps its {need} best-scoring images as positives",
                      RuntimeWarning, stacklevel=2)
    return Y

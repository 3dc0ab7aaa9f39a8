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

The rule lives in :class:`ZeroShotLabeller`, which makes the pseudo-labels of
a collection read in batches in one pass (streaming fits): the top-``S~``
rule is row by row, and for the minimum-positives rule it keeps, per concept,
the counts of its top-``S~`` positives and its ``min_positives`` best-scoring
rows seen so far (a bounded heap, ties to the earlier row); :func:`zero_shot_labels`
is that labeller over a single batch.
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


def _check_min_positives(min_positives):
    if isinstance(min_positives, bool) or not isinstance(min_positives, (int, np.integer)) or min_positives < 0:
        raise ValueError(f"min_positives must be a non-negative int; got {min_positives!r}.")
    return int(min_positives)


class ZeroShotLabeller:
    """Zero-shot pseudo-labels of rows read in batches, in one pass (see the module docstring).

    Use: :meth:`scan` every batch once (in any batch sizes, rows numbered by
    ``ids`` that grow with the order of the rows), :meth:`finish`, then
    :meth:`labels` gives the pseudo-labels of any scanned rows. The result
    is the same as :func:`zero_shot_labels` on all rows at once. Memory:
    ``S`` counts and ``S x min_positives`` kept rows, whatever the number of rows.

    Parameters
    ----------
    W_text : array-like of shape (S, d)
        One text embedding per concept.
    n_active : int
        ``S~``, concepts per image (1..S).
    min_positives : int, default=10
        Pseudo-positives every concept keeps; ``0``: the top-``S~`` rule alone.
    concept_names : sequence of str, optional
        Names used in the warning.
    """

    def __init__(self, W_text, n_active, *, min_positives=MIN_POSITIVES, concept_names=None):
        self.W = unit_rows(check_embeddings(W_text, name="W_text"), name="concept text embeddings")
        S = self.W.shape[0]
        if not 1 <= int(n_active) <= S:
            raise ValueError(f"n_active must be between 1 and the number of concepts ({S}); got {n_active}.")
        self.n_active = int(n_active)
        self.min_positives = _check_min_positives(min_positives)
        self.concept_names = concept_names
        self.n_seen = 0
        self.counts = np.zeros(S, dtype=np.int64)
        self._best_sims = np.zeros((0, S))
        self._best_ids = np.zeros((0, S), dtype=np.int64)
        self.extra_ = None

    def _sims(self, X):
        X = check_embeddings(X, n_features=self.W.shape[1], name="X_img")
        return unit_rows(X, name="X") @ self.W.T

    def _top(self, sims):
        Y = np.zeros(sims.shape, dtype=bool)
        np.put_along_axis(Y, np.argsort(-sims, axis=1, kind="stable")[:, : self.n_active], True, axis=1)
        return Y

    def _ids(self, ids, n, start):
        if ids is None:
            return np.arange(start, start + n, dtype=np.int64)
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids.size != n:
            raise ValueError(f"{ids.size} ids for {n} rows.")
        return ids

    def scan(self, X_img, ids=None):
        """Count batch ``X_img`` (shape (k, d)) in; return its top-``S~`` labels (bool, (k, S)).

        ``ids``: the rows' numbers (default: counting on from the rows scanned before); a row with a
        smaller id wins a tie for a concept's best-scoring rows, as an earlier row does in
        :func:`zero_shot_labels`.
        """
        if self.extra_ is not None:
            raise RuntimeError("scan() after finish(): start a new ZeroShotLabeller.")
        sims = self._sims(X_img)
        ids = self._ids(ids, sims.shape[0], self.n_seen)
        Y = self._top(sims)
        self.counts += Y.sum(axis=0)
        self.n_seen += sims.shape[0]
        m = self.min_positives
        if m:
            cand_sims = np.concatenate([self._best_sims, sims])
            cand_ids = np.concatenate([self._best_ids, np.broadcast_to(ids[:, None], sims.shape)])
            order = np.lexsort((cand_ids, -cand_sims), axis=0)[:m]  # best first, ties to the smaller id
            self._best_sims = np.take_along_axis(cand_sims, order, axis=0)
            self._best_ids = np.take_along_axis(cand_ids, order, axis=0)
        return Y

    def finish(self, stacklevel=1):
        """Apply the minimum-positives rule to the counts of every scanned row (warns naming the short concepts).

        ``stacklevel``: the warning points at the caller (1), or further up.

        Returns
        -------
        self
        """
        need = min(self.min_positives, self.n_seen)
        short = np.flatnonzero(self.counts < need)
        self.extra_ = {j: self._best_ids[:need, j].copy() for j in short}
        if short.size:
            names = [str(self.concept_names[j]) if self.concept_names is not None else f"concept {j}" for j in short]
            warnings.warn(f"zero-shot pseudo-labels: {', '.join(names)} had fewer than {need} images among their "
                          f"top-{self.n_active}; each keeps its {need} best-scoring images as positives",
                          RuntimeWarning, stacklevel=stacklevel + 1)
        return self

    def add_kept(self, Y, ids):
        """``Y`` (top-``S~`` labels of the rows ``ids``) with the kept positives of short concepts set, in place."""
        if self.extra_ is None:
            raise RuntimeError("finish() the labeller before asking for labels.")
        ids = np.asarray(ids, dtype=np.int64)
        for j, kept in self.extra_.items():
            Y[np.isin(ids, kept), j] = True
        return Y

    def labels(self, X_img, ids):
        """Pseudo-labels (bool, (k, S)) of the scanned rows ``ids`` whose embeddings are ``X_img``."""
        sims = self._sims(X_img)
        return self.add_kept(self._top(sims), self._ids(ids, sims.shape[0], 0))


def zero_shot_labels(X_img, W_text, n_active=None, Y_ref=None, *, min_positives=MIN_POSITIVES,
                     concept_names=None):
    """Binary pseudo-labels: the ``n_active`` concepts most similar to each image.

    :class:`ZeroShotLabeller` over one batch (the rule's one home).

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
    if n_active is None:
        if Y_ref is None:
            raise ValueError("give n_active, or labels Y_ref to estimate it from.")
        n_active = estimate_n_active(Y_ref)
    labeller = ZeroShotLabeller(W, n_active, min_positives=min_positives, concept_names=concept_names)
    Y = labeller.scan(X)
    return labeller.finish(stacklevel=2).add_kept(Y, np.arange(X.shape[0]))

"""Baselines of the retrieval comparison (sec. 4.4).

* :class:`SpLiCE` - sparse non-negative decomposition of (centred) image
  embeddings over a vocabulary's text embeddings (non-negative lasso, as in
  SpLiCE, Bhalla et al. 2024), solved with scikit-learn's coordinate-descent
  lasso (:class:`sklearn.linear_model.Lasso` with ``positive=True``).
  Used unfiltered: the query is replaced by its sparse reconstruction.
* :class:`FSpLiCE` - filtered SpLiCE: every vocabulary word is assigned to
  the concept word with the highest cosine similarity
  (:func:`group_vocabulary`); the component of concept ``j`` is the part of
  the reconstruction made of group ``j``'s words.
* :func:`supervised_svd` - S-SVD, the initialisation of supervised SLiCS
  (``SLiCS(n_iter=0)``).

All inputs are expected to be preprocessed already: image embeddings
unit-normalised, centred and re-normalised, vocabulary and concept text
embeddings likewise with the text mean (see :mod:`slics_core.preprocessing`).

The lasso objective per embedding ``x`` is
``0.5 ||x - w C||^2 + alpha ||w||_1`` subject to ``w >= 0`` with the
vocabulary embeddings ``C`` in rows; ``alpha = 0.25`` is SpLiCE's default
l1 penalty written in that form.
"""
from __future__ import annotations

import numpy as np
from scipy import sparse

from slics_core._validation import check_embeddings

__all__ = ["SpLiCE", "FSpLiCE", "group_vocabulary", "supervised_svd"]


def supervised_svd(n_atoms=5, **kwargs):
    """The S-SVD baseline: an unfitted ``SLiCS(n_atoms, n_iter=0)``.

    Fitting it returns the supervised SVD initialisation of SLiCS (the
    top-``d0`` right singular vectors of every concept's embeddings, with the
    optimal sign) without any dictionary-learning epoch.
    """
    from slics_core.slics import SLiCS

    kwargs.pop("n_iter", None)
    return SLiCS(n_atoms=n_atoms, n_iter=0, **kwargs)


def _unit_rows(A):
    n = np.linalg.norm(A, axis=1, keepdims=True)
    return np.divide(A, n, out=np.zeros_like(A), where=n > 0)


class SpLiCE:
    """Sparse non-negative decomposition over vocabulary text embeddings.

    Parameters
    ----------
    vocabulary : array-like of shape (V, d)
        Text embeddings of the vocabulary words (centred; rows are
        re-normalised to unit norm here).
    words : sequence of str, optional
        The words (for :meth:`top_words`).
    alpha : float, default=0.25
        L1 penalty (see module docstring).
    max_iter : int, default=1000
        Coordinate-descent iterations.
    """

    def __init__(self, vocabulary, words=None, alpha=0.25, max_iter=1000):
        C = check_embeddings(vocabulary, name="vocabulary")
        if not alpha > 0:
            raise ValueError(f"alpha must be > 0; got {alpha!r}.")
        if words is not None and len(words) != C.shape[0]:
            raise ValueError(f"{len(words)} words for {C.shape[0]} vocabulary embeddings.")
        self.dictionary = _unit_rows(C)
        self.words = None if words is None else list(words)
        self.alpha = float(alpha)
        self.max_iter = int(max_iter)

    @property
    def n_words(self):
        return self.dictionary.shape[0]

    def decompose(self, X):
        """Non-negative sparse codes of ``X``, a CSR matrix of shape (n, V)."""
        import warnings

        from sklearn.exceptions import ConvergenceWarning
        from sklearn.linear_model import Lasso

        X = check_embeddings(X, n_features=self.dictionary.shape[1], name="X", allow_zero_rows=True)
        d = X.shape[1]
        # sklearn's lasso minimises (1 / (2 n_samples)) ||y - A w||^2 + a ||w||_1 with the d embedding
        # dimensions as samples, so a = alpha / d. Without a precomputed Gram matrix every
        # coordinate-descent sweep costs O(d V) instead of O(V^2) (and no V x V matrix is stored).
        lasso = Lasso(alpha=self.alpha / d, fit_intercept=False, positive=True, precompute=False,
                      max_iter=self.max_iter, tol=1e-4)
        A = np.asfortranarray(self.dictionary.T)
        rows = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            for start in range(0, X.shape[0], 256):
                Xb = X[start:start + 256]
                lasso.fit(A, Xb.T)
                rows.append(sparse.csr_matrix(np.maximum(lasso.coef_.reshape(Xb.shape[0], -1), 0.0)))
        return sparse.vstack(rows).tocsr()

    def reconstruct(self, X):
        """Sparse reconstruction ``w C`` of every row of ``X``, shape (n, d)."""
        return np.asarray(self.decompose(X) @ self.dictionary)

    def top_words(self, X, n=5):
        """The ``n`` words with the largest weights for every row of ``X``."""
        if self.words is None:
            raise ValueError("this SpLiCE was built without words.")
        W = self.decompose(X).toarray()
        order = np.argsort(-W, axis=1, kind="stable")[:, :n]
        return [[(self.words[i], float(W[r, i])) for i in order[r] if W[r, i] > 0] for r in range(W.shape[0])]


def group_vocabulary(vocabulary, concepts):
    """Assign every vocabulary word to its most similar concept (cosine).

    Parameters
    ----------
    vocabulary : array-like of shape (V, d)
    concepts : array-like of shape (S, d)
        Concept word embeddings, preprocessed like the vocabulary.

    Returns
    -------
    groups : ndarray of int, shape (V,)
    """
    C = _unit_rows(check_embeddings(vocabulary, name="vocabulary"))
    W = _unit_rows(check_embeddings(concepts, n_features=C.shape[1], name="concepts"))
    return np.argmax(C @ W.T, axis=1)


class FSpLiCE(SpLiCE):
    """Filtered SpLiCE: the SpLiCE reconstruction split by word groups.

    Parameters
    ----------
    vocabulary : array-like of shape (V, d)
    concepts : array-like of shape (S, d)
        Concept word embeddings used for grouping (:func:`group_vocabulary`).
    words, alpha, max_iter : see :class:`SpLiCE`.
    """

    def __init__(self, vocabulary, concepts, words=None, alpha=0.25, max_iter=1000):
        super().__init__(vocabulary, words=words, alpha=alpha, max_iter=max_iter)
        self.groups = group_vocabulary(self.dictionary, concepts)
        self.n_concepts = int(np.asarray(concepts).shape[0])

    def components(self, X):
        """Per-concept components, shape (n, S, d); they sum to :meth:`reconstruct`."""
        W = self.decompose(X)
        n, d = W.shape[0], self.dictionary.shape[1]
        V = np.zeros((n, self.n_concepts, d))
        for j in range(self.n_concepts):
            sel = np.flatnonzero(self.groups == j)
            if sel.size:
                V[:, j] = np.asarray(W[:, sel] @ self.dictionary[sel])
        return V

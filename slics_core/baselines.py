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

SpLiCE's objective, as the official code (``AI4LIFE-GROUP/SpLiCE``,
``splice/model.py``) defines it, is, per centred embedding ``x`` and with the
vocabulary embeddings ``C`` in rows,

    minimise_w  ||x - w C||^2 + lam ||w||_1   subject to  w >= 0,

which that code hands to scikit-learn's lasso (objective
``(1 / (2 n)) ||y - A w||^2 + a ||w||_1`` with the ``n = d`` embedding
dimensions as samples) as ``a = lam / (2 d)``, with ``tol=1e-6`` and
``max_iter=10000``. :class:`SpLiCE` does the same: its ``alpha`` *is*
SpLiCE's ``lam``, and the default ``alpha=0.25`` is the l1 penalty the SpLiCE
README recommends. (An earlier version of this module passed ``alpha / d``,
i.e. solved the problem with ``lam = 2 alpha``: twice as sparse as SpLiCE.)

Recomposition. SpLiCE's ``recompose_image`` maps the sparse code back to the
(uncentred) CLIP space: ``normalise(normalise(w C) + image_mean)``.
:meth:`SpLiCE.reconstruct` returns ``w C`` in the centred space by default -
that is what the project's retrieval ranks by (cosine similarity against
centred, re-normalised pool embeddings) - and SpLiCE's recomposition with
``recompose=True`` when the model was given ``image_mean``.
"""
from __future__ import annotations

import warnings

import numpy as np
from numpy.typing import ArrayLike
from scipy import sparse
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import Lasso

from slics_core._validation import check_embeddings
from slics_core.rows import unit_rows
from slics_core.slics import SLiCS

__all__ = ["SpLiCE", "FSpLiCE", "group_vocabulary", "supervised_svd"]


def supervised_svd(n_atoms: int | list[int] = 5, **kwargs) -> SLiCS:
    """The S-SVD baseline: an unfitted ``SLiCS(n_atoms, n_iter=0)``.

    Fitting it returns the supervised SVD initialisation of SLiCS (the
    top-``d0`` right singular vectors of every concept's embeddings, with the
    optimal sign) without any dictionary-learning epoch.
    """
    kwargs.pop("n_iter", None)
    return SLiCS(n_atoms=n_atoms, n_iter=0, **kwargs)


class SpLiCE:
    """Sparse non-negative decomposition over vocabulary text embeddings (SpLiCE).

    Parameters
    ----------
    vocabulary : array-like of shape (V, d)
        Text embeddings of the vocabulary words (centred; rows are
        re-normalised to unit norm here).
    words : sequence of str, optional
        The words (for :meth:`top_words`).
    alpha : float, default=0.25
        SpLiCE's l1 penalty ``lam`` in ``||x - w C||^2 + lam ||w||_1``
        (``w >= 0``); 0.25 is the value the SpLiCE README recommends. Larger
        is sparser.
    max_iter : int, default=10000
        Coordinate-descent iterations (the official code's value).
    image_mean : array-like of shape (d,), optional
        Mean of the unit-normalised image embeddings (the mean the inputs
        were centred with). Only needed for ``reconstruct(X, recompose=True)``.
    tol : float, default=1e-6
        Coordinate-descent tolerance (scikit-learn's duality-gap criterion;
        the official code's value).
    """

    def __init__(self, vocabulary: ArrayLike, words: list[str] | None = None, alpha: float = 0.25,
                 max_iter: int = 10000, *, image_mean: ArrayLike | None = None, tol: float = 1e-6):
        C = check_embeddings(vocabulary, name="vocabulary")
        if not alpha > 0:
            raise ValueError(f"alpha must be > 0 (SpLiCE's l1 penalty, e.g. 0.25); got {alpha!r}.")
        if not tol > 0:
            raise ValueError(f"tol must be > 0; got {tol!r}.")
        if isinstance(max_iter, bool) or not isinstance(max_iter, (int, np.integer)) or max_iter < 1:
            raise ValueError(f"max_iter must be a positive int; got {max_iter!r}.")
        if words is not None and len(words) != C.shape[0]:
            raise ValueError(f"{len(words)} words for {C.shape[0]} vocabulary embeddings.")
        if image_mean is not None:
            image_mean = check_embeddings(np.reshape(image_mean, (1, -1)), n_features=C.shape[1],
                                          name="image_mean", allow_zero_rows=True)[0]
        self.dictionary = unit_rows(C, zero="keep")
        self.words = None if words is None else list(words)
        self.alpha = float(alpha)
        self.max_iter = int(max_iter)
        self.tol = float(tol)
        self.image_mean = image_mean

    @property
    def n_words(self) -> int:
        return self.dictionary.shape[0]

    def decompose(self, X: ArrayLike) -> sparse.csr_matrix:
        """Non-negative sparse codes of ``X``, a CSR matrix of shape (n, V).

        Row ``i`` minimises ``||x_i - w C||^2 + alpha ||w||_1`` over
        ``w >= 0`` (see the module docstring).
        """
        X = check_embeddings(X, n_features=self.dictionary.shape[1], name="X", allow_zero_rows=True)
        d = X.shape[1]
        # scikit-learn's lasso minimises (1 / (2 d)) ||x - w C||^2 + a ||w||_1 here (the d embedding
        # dimensions are its samples); a = alpha / (2 d) gives SpLiCE's ||x - w C||^2 + alpha ||w||_1.
        # Without a precomputed Gram matrix every coordinate-descent sweep costs O(d V) instead of
        # O(V^2) (and no V x V matrix is stored).
        lasso = Lasso(alpha=self.alpha / (2 * d), fit_intercept=False, positive=True, precompute=False,
                      max_iter=self.max_iter, tol=self.tol)
        A = np.asfortranarray(self.dictionary.T)
        rows = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            for start in range(0, X.shape[0], 256):
                Xb = X[start:start + 256]
                lasso.fit(A, Xb.T)
                rows.append(sparse.csr_matrix(np.maximum(lasso.coef_.reshape(Xb.shape[0], -1), 0.0)))
        return sparse.vstack(rows).tocsr()

    def reconstruct(self, X: ArrayLike, recompose: bool = False) -> np.ndarray:
        """Sparse reconstruction of every row of ``X``, shape (n, d).

        Parameters
        ----------
        X : array-like of shape (n, d)
            Centred, re-normalised image embeddings.
        recompose : bool, default=False
            ``False``: ``w C`` in the centred space (what the project's
            retrieval ranks by). ``True``: SpLiCE's ``recompose_image``,
            ``normalise(normalise(w C) + image_mean)`` (needs ``image_mean``;
            a row whose code is all zero recomposes to the normalised mean).
        """
        R = np.asarray(self.decompose(X) @ self.dictionary)
        if not recompose:
            return R
        if self.image_mean is None:
            raise ValueError("reconstruct(recompose=True) needs the image mean: build the SpLiCE with "
                             "image_mean=<mean of the unit-normalised image embeddings>.")
        return unit_rows(unit_rows(R, zero="keep") + self.image_mean, zero="keep")

    def top_words(self, X: ArrayLike, n: int = 5) -> list[list[tuple[str, float]]]:
        """The ``n`` words with the largest weights for every row of ``X``."""
        if self.words is None:
            raise ValueError("this SpLiCE was built without words.")
        W = self.decompose(X).toarray()
        order = np.argsort(-W, axis=1, kind="stable")[:, :n]
        return [[(self.words[i], float(W[r, i])) for i in order[r] if W[r, i] > 0] for r in range(W.shape[0])]


def group_vocabulary(vocabulary: ArrayLike, concepts: ArrayLike) -> np.ndarray:
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
    C = unit_rows(check_embeddings(vocabulary, name="vocabulary"), zero="keep")
    W = unit_rows(check_embeddings(concepts, n_features=C.shape[1], name="concepts"), zero="keep")
    return np.argmax(C @ W.T, axis=1)


class FSpLiCE(SpLiCE):
    """Filtered SpLiCE: the SpLiCE reconstruction split by word groups.

    Parameters
    ----------
    vocabulary : array-like of shape (V, d)
    concepts : array-like of shape (S, d)
        Concept word embeddings used for grouping (:func:`group_vocabulary`).
    words, alpha, max_iter, image_mean, tol : see :class:`SpLiCE`.
    """

    def __init__(self, vocabulary: ArrayLike, concepts: ArrayLike, words: list[str] | None = None,
                 alpha: float = 0.25, max_iter: int = 10000, *, image_mean: ArrayLike | None = None,
                 tol: float = 1e-6):
        super().__init__(vocabulary, words=words, alpha=alpha, max_iter=max_iter, image_mean=image_mean, tol=tol)
        self.groups = group_vocabulary(self.dictionary, concepts)
        self.n_concepts = int(np.asarray(concepts).shape[0])

    def components(self, X: ArrayLike) -> np.ndarray:
        """Per-concept components, shape (n, S, d); they sum to :meth:`reconstruct`."""
        W = self.decompose(X)
        n, d = W.shape[0], self.dictionary.shape[1]
        V = np.zeros((n, self.n_concepts, d))
        for j in range(self.n_concepts):
            sel = np.flatnonzero(self.groups == j)
            if sel.size:
                V[:, j] = np.asarray(W[:, sel] @ self.dictionary[sel])
        return V

"""Embedding preprocessing of the paper (sec. 4.1).

CLIP embeddings are unit-normalised, centred with a mean (given, e.g.
SpLiCE's precomputed image mean, or fitted on the data) and re-normalised.
DINOv2 embeddings are only normalised. TiTok token embeddings are normalised
per token (each of the 32 tokens of 12 dimensions separately) and then
flattened.
"""
from __future__ import annotations

import os
import pickle
import zipfile

import numpy as np
from numpy.typing import ArrayLike
from sklearn.base import BaseEstimator, OneToOneFeatureMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from slics_core._validation import check_embeddings, validate_embeddings
from slics_core.errors import UserError, refused_pickle_error
from slics_core.extras import require
from slics_core.formats import load_user_array
from slics_core.rows import unit_rows


def normalize_tokens(tokens: ArrayLike) -> np.ndarray:
    """Unit-normalise every token of token embeddings.

    Parameters
    ----------
    tokens : array-like of shape (..., n_tokens, token_dim)
        E.g. TiTok's (n, 32, 12) pre-quantisation tokens or a (K, 1, 12)
        codebook.

    Returns
    -------
    ndarray of the same shape, each token of unit norm.
    """
    T = np.asarray(tokens, dtype=np.float64)
    if T.ndim < 2:
        raise ValueError(f"tokens must have shape (..., n_tokens, token_dim); got {T.shape}.")
    if not np.isfinite(T).all():
        raise ValueError("tokens contain NaN or infinite values.")
    return unit_rows(T, name="tokens")


class EmbeddingNormalizer(OneToOneFeatureMixin, TransformerMixin, BaseEstimator):
    """Unit-normalise, subtract a mean, and re-normalise (sec. 4.1).

    A scikit-learn transformer (``Pipeline(EmbeddingNormalizer(), SLiCS())``; ``check_estimator``
    passes except ``check_estimators_dtypes``, whose integer data has an all-zero row, which no
    normalisation can give a direction: :data:`slics_core.slics.SKLEARN_EXPECTED_FAILED_CHECKS`). Output columns keep
    the input's names.

    Parameters
    ----------
    center : bool, default=True
        Whether to subtract a mean (CLIP: yes; DINOv2: no).
    mean : array-like of shape (d,), optional
        The mean to subtract (e.g. a precomputed modality-gap mean). If
        ``None`` and ``center`` is True, the mean of the unit-normalised
        training embeddings is fitted.

    Attributes
    ----------
    mean_ : ndarray of shape (d,)
        The subtracted mean (zeros when ``center`` is False).
    n_features_in_ : int
    """

    def __init__(self, center: bool = True, mean: ArrayLike | None = None):
        self.center = center
        self.mean = mean

    def fit(self, X, y=None) -> EmbeddingNormalizer:
        """Fit the mean (if needed) on ``X`` of shape (n, d)."""
        U = unit_rows(validate_embeddings(self, X, reset=True), name="X")  # zero rows were refused there
        d = U.shape[1]
        if not self.center:
            self.mean_ = np.zeros(d)
        elif self.mean is not None:
            self.mean_ = check_embeddings(np.reshape(self.mean, (1, -1)), n_features=d, name="mean",
                                          allow_zero_rows=True)[0]
        else:
            self.mean_ = U.mean(axis=0)
        self.n_features_in_ = d
        return self

    def transform(self, X) -> np.ndarray:
        """Return ``unit(unit(X) - mean_)``."""
        check_is_fitted(self, "mean_")
        U = unit_rows(validate_embeddings(self, X, reset=False), name="X")
        return unit_rows(U - self.mean_, name="X after centring (an embedding equal to the mean)")


class TokenNormalizer(TransformerMixin, BaseEstimator):
    """Per-token normalisation of token embeddings, then flattening (TiTok, sec. 4.4.1).

    Parameters
    ----------
    n_tokens : int, default=32
        Number of tokens; 2-D input of width ``n_tokens * token_dim`` is
        reshaped, 3-D input ``(n, n_tokens, token_dim)`` is used as is.
    """

    def __init__(self, n_tokens=32):
        self.n_tokens = n_tokens

    def fit(self, X, y=None):
        """Record the token layout of ``X``."""
        T = self._tokens(X)
        self.token_dim_ = T.shape[2]
        self.n_features_in_ = T.shape[1] * T.shape[2]
        return self

    def _tokens(self, X):
        X = np.asarray(X, dtype=np.float64)
        if X.ndim == 3:
            if X.shape[1] != self.n_tokens:
                raise ValueError(f"expected {self.n_tokens} tokens per sample; got {X.shape[1]}.")
            return X
        if X.ndim != 2 or X.shape[1] % self.n_tokens:
            raise ValueError(f"expected (n, {self.n_tokens}, token_dim) or (n, {self.n_tokens} * token_dim) input; "
                             f"got {X.shape}.")
        return X.reshape(X.shape[0], self.n_tokens, -1)

    def transform(self, X):
        """Return the flattened, per-token normalised embeddings, shape (n, n_tokens * token_dim)."""
        check_is_fitted(self, "token_dim_")
        T = self._tokens(X)
        if T.shape[2] != self.token_dim_:
            raise ValueError(f"tokens have {T.shape[2]} dimensions but {self.token_dim_} were fitted.")
        return normalize_tokens(T).reshape(T.shape[0], -1)


class IdentityTransform(TransformerMixin, BaseEstimator):
    """Embeddings used as they are (``preprocessing="none"``)."""

    def fit(self, X, y=None):
        self.n_features_in_ = check_embeddings(X, allow_zero_rows=True).shape[1]
        return self

    def transform(self, X):
        check_is_fitted(self, "n_features_in_")
        return check_embeddings(X, n_features=self.n_features_in_, allow_zero_rows=True)


#: Preprocessing kinds, recorded in embedding caches and workspaces.
PREPROCESSING = ("clip", "unit", "token", "none")


def make_preprocessor(kind: str = "clip", *, mean: ArrayLike | None = None, n_tokens: int = 32):
    """The preprocessing step named ``kind``; the one place where the switch is made.

    Parameters
    ----------
    kind : {"clip", "unit", "token", "none"}
        ``clip``: unit-normalise, subtract a mean, re-normalise (sec. 4.1, CLIP);
        ``unit``: unit-normalise (DINOv2); ``token``: per-token normalisation (TiTok);
        ``none``: as is.
    mean : array-like of shape (d,), optional
        ``clip`` only: the mean to subtract. Default (``None``): fitted on the data given
        to ``fit``, which callers make the *training* split (the paper's setting with its
        own data; ``load_mean`` reads a precomputed mean such as SpLiCE's CLIP means).
    n_tokens : int
        ``token`` only.

    Returns
    -------
    transformer with ``fit`` / ``transform`` (scikit-learn API)
    """
    if kind == "clip":
        return EmbeddingNormalizer(center=True, mean=mean)
    if mean is not None:
        raise ValueError(f"a mean is only used by 'clip' preprocessing, not {kind!r}")
    if kind == "unit":
        return EmbeddingNormalizer(center=False)
    if kind == "token":
        return TokenNormalizer(n_tokens=n_tokens)
    if kind == "none":
        return IdentityTransform()
    raise ValueError(f"unknown preprocessing {kind!r}; choose from {PREPROCESSING}")


def load_mean(path: str | os.PathLike, dim: int | None = None) -> np.ndarray:
    """A precomputed mean embedding from ``.npy``, ``.npz`` (its array ``mean``, or its only array),
    ``.txt``/``.csv`` or ``.pt``.

    SpLiCE publishes its CLIP image and text means as torch ``.pt`` files; they are read with
    ``torch.load(weights_only=True)`` (no code runs). The mean is used as given: it should be
    the mean of *unit-normalised* embeddings of the same encoder.

    Raises
    ------
    FileNotFoundError, ValueError
        Missing file; unreadable, not one vector, wrong dimension or not finite (one line
        naming the file).
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no mean file at {path!r}")
    low = path.lower()
    try:
        if low.endswith((".npy", ".npz")):
            m = load_user_array(path, "fiu", what="mean embedding", preferred="mean")
        elif low.endswith((".pt", ".pth")):
            torch = require("torch")

            try:
                m = torch.load(path, map_location="cpu", weights_only=True)
            except pickle.UnpicklingError:  # torch's own advice (weights_only=False) is not passed on
                raise refused_pickle_error(path) from None
            m = m.detach().float().numpy() if hasattr(m, "detach") else np.asarray(m)
        elif low.endswith((".txt", ".csv")):
            m = np.loadtxt(path, delimiter="," if low.endswith(".csv") else None)
        else:
            raise ValueError("use a .npy, .npz, .pt or .txt file")
    except UserError:
        raise  # already one line naming the file and what to give
    except (OSError, ValueError, RuntimeError, EOFError, zipfile.BadZipFile) as exc:
        raise ValueError(f"mean file {path!r} cannot be read: {exc}") from None
    m = np.asarray(m, dtype=np.float64).reshape(-1) if np.ndim(m) == 2 and 1 in np.shape(m) else np.asarray(
        m, dtype=np.float64)
    if m.ndim != 1:
        raise ValueError(f"mean file {path!r} holds shape {m.shape}; expected one vector")
    if dim is not None and m.shape[0] != dim:
        raise ValueError(f"mean file {path!r} has {m.shape[0]} dimensions but the embeddings have {dim}")
    if not np.isfinite(m).all():
        raise ValueError(f"mean file {path!r} contains NaN or infinite values")
    return m

"""Orthogonal Procrustes alignment between two embedding spaces (sec. 3.8).

Image-to-prompt generation needs a component from the space SLiCS was fitted
in (e.g. CLIP ViT-B/32, 512-d) expressed in the space the generator was
trained on (CLIP ViT-L/14, 768-d). :class:`ProcrustesAlignment` fits

    W = argmin ||X W - Y||_F   subject to  W W^T = I  (d_x <= d_y)
                                        or W^T W = I  (d_x >= d_y)

from paired embeddings ``X`` (n, d_x), ``Y`` (n, d_y) of the same images.
For equal dimensions this is the classical orthogonal Procrustes problem
(solved with :func:`scipy.linalg.orthogonal_procrustes`); for different
dimensions the solution is the semi-orthogonal ``W = U V^T`` from the thin
SVD ``X^T Y = U S V^T``. An orthogonal map cannot rescale, so by default rows
are L2-normalised before fitting (``normalize=True``), and the quality
measure is the mean cosine between ``transform(X)`` and ``Y`` on held-out
pairs (:meth:`score`, :func:`fit_alignment`).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from scipy.linalg import orthogonal_procrustes

from slics_core.errors import damaged_file_error
from slics_core.formats import atomic_save_npz, load_npz
from slics_core.rows import unit_rows

__all__ = ["ProcrustesAlignment", "fit_alignment", "mean_cosine"]

_FORMAT = "slics-procrustes-v1"
#: Largest embedding dimension an alignment file may declare (a 16384 x 16384 float64 map is 2 GiB).
_MAX_DIM = 16384


def _as_matrix(X, name: str, dim: int | None = None) -> np.ndarray:
    try:
        X = np.asarray(X, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a numeric array") from None
    if X.ndim == 1 and dim is not None:
        X = X[None, :]
    if X.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n_samples, dim), got shape {X.shape}")
    if dim is not None and X.shape[1] != dim:
        raise ValueError(f"{name} has {X.shape[1]} columns, expected {dim}")
    if not np.all(np.isfinite(X)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return X


def mean_cosine(A, B) -> float:
    """Mean row-wise cosine similarity of two ``(n, d)`` arrays."""
    A = _as_matrix(A, "A")
    B = _as_matrix(B, "B", A.shape[1])
    if len(A) != len(B):
        raise ValueError(f"A and B have different numbers of rows ({len(A)} vs {len(B)})")
    num = np.sum(A * B, axis=1)
    den = np.linalg.norm(A, axis=1) * np.linalg.norm(B, axis=1)
    return float(np.mean(num / np.maximum(den, 1e-300)))


class ProcrustesAlignment:
    """(Semi-)orthogonal linear map from a source to a target embedding space.

    Parameters
    ----------
    normalize : bool, default True
        L2-normalise the rows of ``X`` and ``Y`` before fitting. ``transform``
        applies ``W`` to its input as given (``W`` preserves norms when
        ``d_x <= d_y``).
    source_id, target_id : str, optional
        Names of the two spaces (e.g. encoder ids), stored with the map.

    Attributes
    ----------
    W_ : ndarray of shape (d_x, d_y)
    n_features_in_ : int
    n_features_out_ : int
    n_pairs_ : int
        Pairs it was fitted on (not stored by :meth:`save`).
    train_cosine_ : float
        Mean cosine on the fitting pairs.
    held_out_cosine_ : float or None
        Set by :func:`fit_alignment` (or by the user) after scoring held-out pairs.
    """

    def __init__(self, normalize: bool = True, source_id: str | None = None, target_id: str | None = None):
        self.normalize = normalize
        self.source_id = source_id
        self.target_id = target_id

    def fit(self, X, Y) -> ProcrustesAlignment:
        """Fit ``W`` from paired rows ``X`` (n, d_x) and ``Y`` (n, d_y)."""
        X = _as_matrix(X, "X")
        Y = _as_matrix(Y, "Y")
        if len(X) != len(Y):
            raise ValueError(f"X and Y must be paired: {len(X)} rows vs {len(Y)} rows")
        if len(X) < 2:
            raise ValueError("need at least 2 pairs to fit an alignment")
        if self.normalize:
            X = unit_rows(X, name="X")
            Y = unit_rows(Y, name="Y")
        if X.shape[1] == Y.shape[1]:
            W, _ = orthogonal_procrustes(X, Y)
        else:
            U, _, Vt = np.linalg.svd(X.T @ Y, full_matrices=False)
            W = U @ Vt
        self.W_ = W
        self.n_pairs_ = len(X)
        self.n_features_in_ = X.shape[1]
        self.n_features_out_ = Y.shape[1]
        self.train_cosine_ = mean_cosine(X @ W, Y)
        self.held_out_cosine_ = None
        return self

    def _check_fitted(self):
        if not hasattr(self, "W_"):
            raise ValueError("this ProcrustesAlignment is not fitted yet; call fit(X, Y) first")

    def transform(self, X) -> np.ndarray:
        """Map rows of ``X`` (n, d_x) (or one vector) into the target space."""
        self._check_fitted()
        X_arr = np.asarray(X)
        single = X_arr.ndim == 1
        out = _as_matrix(X_arr, "X", self.n_features_in_) @ self.W_
        return out[0] if single else out

    def score(self, X, Y) -> float:
        """Mean cosine between ``transform(X)`` and ``Y`` (rows paired)."""
        self._check_fitted()
        X = _as_matrix(X, "X", self.n_features_in_)
        Y = _as_matrix(Y, "Y", self.n_features_out_)
        return mean_cosine(X @ self.W_, Y)

    # persistence
    def save(self, path) -> Path:
        """Save to an ``.npz`` file (no pickles), written beside and then renamed into place."""
        self._check_fitted()
        path = Path(path)
        meta = {
            "format": _FORMAT, "normalize": bool(self.normalize),
            "source_id": self.source_id, "target_id": self.target_id,
            "train_cosine": self.train_cosine_, "held_out_cosine": self.held_out_cosine_,
        }
        atomic_save_npz(path, W=self.W_, meta=np.array(json.dumps(meta)))
        return path

    @classmethod
    def load(cls, path) -> ProcrustesAlignment:
        """Load an alignment written by :meth:`save` (its arrays' sizes are checked before reading them)."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"alignment file {path} does not exist")
        fix = "fit it again with `slics align`"

        def check(shapes):
            if len(shapes["W"][0]) != 2 or max(shapes["W"][0], default=0) > _MAX_DIM or shapes["meta"][0] != ():
                raise damaged_file_error(path, f"W has shape {shapes['W'][0]}, meta {shapes['meta'][0]}", fix)

        z = load_npz(path, {"W": "f", "meta": "U"}, dense=("W",), fix=fix, check=check)
        W = np.asarray(z["W"], dtype=np.float64)
        try:
            meta = json.loads(str(z["meta"]))
        except json.JSONDecodeError as exc:
            raise damaged_file_error(path, exc, fix) from None
        if not isinstance(meta, dict) or meta.get("format") != _FORMAT or not np.all(np.isfinite(W)):
            raise damaged_file_error(path, "it is not a SLiCS alignment file (format "
                                     f"{meta.get('format') if isinstance(meta, dict) else None!r})", fix)
        obj = cls(normalize=bool(meta["normalize"]), source_id=meta.get("source_id"),
                  target_id=meta.get("target_id"))
        obj.W_ = W
        obj.n_features_in_, obj.n_features_out_ = W.shape
        obj.train_cosine_ = meta.get("train_cosine")
        obj.held_out_cosine_ = meta.get("held_out_cosine")
        return obj

    def __repr__(self) -> str:
        if not hasattr(self, "W_"):
            return f"ProcrustesAlignment(normalize={self.normalize})"
        return (f"ProcrustesAlignment({self.n_features_in_} -> {self.n_features_out_}, "
                f"held-out cosine={self.held_out_cosine_})")


def fit_alignment(X, Y, test_size: float = 0.2, random_state=0, normalize: bool = True,
                  source_id: str | None = None, target_id: str | None = None) -> ProcrustesAlignment:
    """Fit on a random part of the pairs and score the rest.

    Parameters
    ----------
    X, Y : arrays (n, d_x), (n, d_y)
        Embeddings of the same ``n`` images by the source and target encoders
        (e.g. ``enc_b32.encode_images(imgs)``, ``enc_l14.encode_images(imgs)``).
    test_size : float in (0, 1)
        Fraction of pairs held out.
    random_state : int or None

    Returns
    -------
    ProcrustesAlignment
        Fitted on the training pairs, with ``held_out_cosine_`` set to the
        mean cosine on the held-out pairs.
    """
    X = _as_matrix(X, "X")
    Y = _as_matrix(Y, "Y")
    if len(X) != len(Y):
        raise ValueError(f"X and Y must be paired: {len(X)} rows vs {len(Y)} rows")
    if not 0 < test_size < 1:
        raise ValueError(f"test_size must be in (0, 1), got {test_size}")
    n_test = int(round(test_size * len(X)))
    if n_test < 1 or len(X) - n_test < 2:
        raise ValueError(f"too few pairs ({len(X)}) to hold out {test_size:.0%} and still fit")
    perm = np.random.default_rng(random_state).permutation(len(X))
    test, train = perm[:n_test], perm[n_test:]
    align = ProcrustesAlignment(normalize=normalize, source_id=source_id, target_id=target_id).fit(X[train], Y[train])
    Xt, Yt = X[test], Y[test]
    if normalize:
        Xt, Yt = unit_rows(Xt, name="X"), unit_rows(Yt, name="Y")
    align.held_out_cosine_ = align.score(Xt, Yt)
    return align

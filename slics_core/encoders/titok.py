"""TiTok tokens: import pre-quantisation tokens and the codebook from files, or compute them with a TiTok model.

:func:`load_titok_tokens` / :func:`load_titok_codebook` read tokens ``(n, 32, 12)`` and the codebook
from ``.npy`` / ``.npz`` files; :class:`TiTokEncoder` computes the tokens with a TiTok model object the
user's environment can import (bytedance/1d-tokenizer). Tokens are L2-normalised one by one (sec. 4.1
of the paper) and concatenated.
"""
from __future__ import annotations

import numpy as np
from PIL import Image

from slics_core.encoders.base import PILTransform, check_batch_size, check_images, to_device, to_numpy
from slics_core.extras import require
from slics_core.formats import load_user_array
from slics_core.torch_device import device_dtype

__all__ = ["TiTokEncoder", "load_titok_tokens", "load_titok_codebook"]


def _normalize_tokens(tokens):
    """:func:`slics_core.preprocessing.normalize_tokens`, imported when first used: ``preprocessing`` loads
    scikit-learn, and ``slics --version`` / ``slics models`` import the encoder registry without it."""
    from slics_core.preprocessing import normalize_tokens

    return normalize_tokens(tokens)


def load_titok_tokens(path, key: str | None = None, n_tokens: int = 32, token_dim: int = 12,
                      normalize: bool = True) -> np.ndarray:
    """Import TiTok pre-quantisation token embeddings.

    Parameters
    ----------
    path : path to ``.npy`` or ``.npz``
        Array of shape ``(n, n_tokens, token_dim)``, ``(n, n_tokens*token_dim)``
        or TiTok's own layout ``(n, token_dim, 1, n_tokens)``.
    key : str, optional
        Array name inside an ``.npz`` (default ``"tokens"`` if present, else
        the only array).
    normalize : bool, default True
        L2-normalise each token (sec. 4.1 of the paper).

    Returns
    -------
    X : ndarray of shape (n, n_tokens * token_dim), float32
        Tokens concatenated in order.
    """
    arr = load_user_array(path, "fiu", what="TiTok tokens", key=key, preferred="tokens")
    tokens = _titok_layout(arr, n_tokens, token_dim, source=str(path))
    if normalize:
        tokens = np.asarray(_normalize_tokens(tokens), dtype=np.float64)
    return tokens.reshape(len(tokens), n_tokens * token_dim).astype(np.float32)


def _titok_layout(arr: np.ndarray, n_tokens: int, token_dim: int, source: str) -> np.ndarray:
    if not np.issubdtype(arr.dtype, np.number):
        raise ValueError(f"{source}: expected numbers, got dtype {arr.dtype}")
    arr = arr.astype(np.float64)
    if arr.ndim == 4 and arr.shape[1:] == (token_dim, 1, n_tokens):
        arr = arr[:, :, 0, :].transpose(0, 2, 1)
    elif arr.ndim == 2 and arr.shape[1] == n_tokens * token_dim:
        arr = arr.reshape(len(arr), n_tokens, token_dim)
    if arr.ndim != 3 or arr.shape[1:] != (n_tokens, token_dim):
        raise ValueError(f"{source}: expected shape (n, {n_tokens}, {token_dim}), got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{source}: tokens contain NaN or infinite values")
    return arr


def load_titok_codebook(path, key: str | None = None, token_dim: int | None = 12, normalize: bool = True) -> np.ndarray:
    """Import the TiTok codebook ``(K, token_dim)`` (rows L2-normalised by default; ``token_dim=None``: any width)."""
    C = load_user_array(path, "fiu", what="TiTok codebook", key=key, preferred="codebook")
    if C.ndim != 2 or (token_dim is not None and C.shape[1] != token_dim) or len(C) == 0 or C.shape[1] == 0:
        raise ValueError(f"{path}: expected a codebook of shape (K, {token_dim or 'token_dim'}), got {C.shape}")
    if not np.issubdtype(C.dtype, np.number):
        raise ValueError(f"{path}: expected numbers in the codebook, got dtype {C.dtype}")
    C = C.astype(np.float64)
    if not np.all(np.isfinite(C)):
        raise ValueError(f"{path}: codebook contains NaN or infinite values")
    if normalize:
        C = np.asarray(_normalize_tokens(C[:, None, :]))[:, 0, :]
    return C.astype(np.float32)


class _ResizeToUnit:
    """PIL image -> ``(3, size, size)`` float tensor in ``[0, 1]`` (bicubic resize, TiTok's input)."""

    def __init__(self, size):
        self.size = int(size)

    def __call__(self, image):
        torch = require("torch")

        arr = np.asarray(image.resize((self.size, self.size), resample=3), dtype=np.float32) / 255.0
        return torch.from_numpy(arr).permute(2, 0, 1)


class TiTokEncoder:
    """Adapter computing TiTok pre-quantisation tokens with a TiTok model object.

    ``titok`` is a model from the TiTok code base (``modeling.titok.TiTok`` of
    bytedance/1d-tokenizer) or anything with the same parts: ``encoder``
    called as ``encoder(pixel_values=x, latent_tokens=latent_tokens)`` and
    returning ``(B, token_dim, 1, n_tokens)``, and ``latent_tokens``.
    Images are resized to ``image_size`` and scaled to ``[0, 1]``.
    The embedding is the per-token-normalised concatenation, ``dim =
    n_tokens * token_dim`` (384 for TiTok-L-32).
    """

    has_text = False

    def __init__(self, titok, image_size: int = 256, id: str = "titok", device=None, half=None):
        if not hasattr(titok, "encoder") or not hasattr(titok, "latent_tokens"):
            raise ValueError("titok must have .encoder and .latent_tokens (a TiTok model)")
        self.device, self.dtype = device_dtype(device, half)
        self.titok = titok.to(self.device, dtype=self.dtype).eval()
        self.image_size = int(image_size)
        self.id = id
        self.n_tokens = int(titok.latent_tokens.shape[0])
        self.token_dim = None
        self.dim = None

        probe = self._raw_tokens([Image.new("RGB", (self.image_size, self.image_size))])
        self.token_dim = probe.shape[2]
        self.dim = self.n_tokens * self.token_dim

    @property
    def draft_size(self) -> int:
        """Smallest side a decoded image needs (``image_size``)."""
        return self.image_size

    def image_transform(self) -> PILTransform:
        """The per-image preprocessing, ``PIL image -> (3, S, S)`` tensor in ``[0, 1]`` (picklable)."""
        return PILTransform(_ResizeToUnit(self.image_size))

    def _tokens_from_pixels(self, pixels) -> np.ndarray:
        torch = require("torch")

        with torch.inference_mode():
            z = self.titok.encoder(pixel_values=to_device(pixels, self.device, self.dtype),
                                   latent_tokens=self.titok.latent_tokens)
        z = to_numpy(z)
        if z.ndim != 4 or z.shape[2] != 1 or z.shape[3] != self.n_tokens:
            raise ValueError(f"TiTok encoder returned shape {z.shape}, expected (B, d, 1, {self.n_tokens})")
        return z[:, :, 0, :].transpose(0, 2, 1)  # (B, n_tokens, token_dim)

    def _raw_tokens(self, images) -> np.ndarray:
        torch = require("torch")

        resize = _ResizeToUnit(self.image_size)
        return self._tokens_from_pixels(torch.stack([resize(im) for im in images]))

    def encode_tokens(self, images, batch_size: int = 32) -> np.ndarray:
        """Raw pre-quantisation tokens ``(n, n_tokens, token_dim)``."""
        images = check_images(images)
        batch_size = check_batch_size(batch_size)
        out = [self._raw_tokens(images[s:s + batch_size]) for s in range(0, len(images), batch_size)]
        return np.concatenate(out) if out else np.zeros((0, self.n_tokens, self.token_dim), np.float32)

    def _normalised(self, tokens) -> np.ndarray:
        normed = np.asarray(_normalize_tokens(tokens.astype(np.float64)))
        return normed.reshape(len(tokens), -1).astype(np.float32)

    def encode_tensors(self, pixels) -> np.ndarray:
        """Per-token-normalised, concatenated tokens ``(n, dim)`` of a batch from :meth:`image_transform`."""
        return self._normalised(self._tokens_from_pixels(pixels))

    def encode_images(self, images, batch_size: int = 32) -> np.ndarray:
        """Per-token-normalised, concatenated tokens ``(n, dim)``."""
        return self._normalised(self.encode_tokens(images, batch_size))

    @property
    def codebook(self):
        """The model's quantizer codebook ``(K, token_dim)``, rows L2-normalised, or None.

        Read from ``titok.quantize.embedding.weight`` (TiTok's ``VectorQuantizer``) or a
        ``titok.codebook`` array/tensor; ``slics embed`` stores it with the cache so that
        ``slics evaluate`` can also score quantized pools (Table 3).
        """
        C = getattr(getattr(getattr(self.titok, "quantize", None), "embedding", None), "weight", None)
        if C is None:
            C = getattr(self.titok, "codebook", None)
        if C is None:
            return None
        C = np.asarray(to_numpy(C) if hasattr(C, "detach") else C, dtype=np.float64)
        if C.ndim != 2 or C.shape[1] != self.token_dim:
            raise ValueError(f"TiTok codebook has shape {C.shape}, expected (K, {self.token_dim})")
        return np.asarray(_normalize_tokens(C[:, None, :]))[:, 0, :].astype(np.float32)

    def encode_texts(self, texts, batch_size: int = 256) -> np.ndarray:
        raise NotImplementedError("TiTok is an image tokenizer; it has no text encoder")

"""The quantized candidate pool of a workspace with token embeddings (TiTok, sec. 4.4.1 / Table 3).

A workspace made from a cache with a token codebook (``slics embed --codebook``, or a TiTok
encoder's own) keeps the codebook. Its pool can then be searched quantized: every candidate
is replaced by its nearest codeword per token and scored through the look-up tables
``G^j[t, k] = <v_j^t, c_k>`` (:class:`slics_core.retrieval.QuantizedPool`).

The index this module returns has the interface of the pool indexes the app already uses
(``n_pool`` and ``search(vectors, k)``): it is the index of the workspace's quantized
:class:`~slics_core.explorer.pool.Pool` (``ws.quantized_pool``, kind ``"quantized"``), whose positions are
pool positions and whose scores are cosines against the quantized candidates. It is built once per
workspace (kept on that pool): quantizing the pool is a nearest-codeword search of every token.
"""
from __future__ import annotations

import numpy as np

from slics_core.retrieval import QuantizedPool, token_count

__all__ = ["has_quantized_pool", "quantized_pool_problem", "quantized_pool_index", "quantization_info"]


def _codebook_problem(ws) -> str | None:
    """Why the workspace's token codebook cannot quantize its pool (none, or one that does not fit its
    embeddings), in one line saying what to do; None when it can."""
    C = getattr(ws, "codebook", None)
    if C is None:
        return (f"workspace {ws.name!r} has no token codebook, so it has no quantized pool; import the token "
                "embeddings with `slics embed ... --codebook CODEBOOK.npy` and rebuild the workspace")
    try:
        token_count(ws.X.shape[1], C)
    except ValueError as exc:
        return f"workspace {ws.name!r}: {exc}"
    return None


def has_quantized_pool(ws) -> bool:
    """Whether the workspace can search a quantized pool (it keeps a token codebook that fits its embeddings)."""
    return _codebook_problem(ws) is None


def quantized_pool_problem(ws) -> str | None:
    """Why the workspace has no quantized pool (:func:`has_quantized_pool` says no, or its pool is shards on
    disk), in one line; None when it has one (:func:`slics_core.explorer.pool.quantized_pool`)."""
    if getattr(ws, "pool_shards", None) is not None:
        return f"workspace {ws.name!r} has no quantized pool: its pool is shards on disk"
    return _codebook_problem(ws)


def quantized_pool_index(ws) -> QuantizedPool:
    """A :class:`~slics_core.retrieval.QuantizedPool` over the workspace's pool rows ``ws.X[ws.index["pool"]]``.

    Position ``i`` of the index is workspace row ``ws.index["pool"][i]`` (as for the float pool index).

    Raises
    ------
    ValueError
        The workspace has no token codebook (not token embeddings, or made without one), or
        one that does not fit its embeddings; the message says how to get one.
    """
    C = getattr(ws, "codebook", None)
    if C is None:
        raise ValueError(_codebook_problem(ws))
    pool = np.asarray(ws.index["pool"], dtype=int)
    return QuantizedPool.from_embeddings(np.asarray(ws.X)[pool], C, token_count(ws.X.shape[1], C))


def quantization_info(ws, index: QuantizedPool | None = None) -> dict:
    """Numbers to show beside a quantized search: tokens, codebook size, storage of both pools.

    Returns
    -------
    dict
        ``n_pool``, ``n_tokens``, ``codebook_size``, ``token_dim``, ``float_bytes`` (the pool as
        float32), ``code_bytes`` (indices, 2 bytes each for K <= 65536, else 4) and
        ``mean_token_cosine`` (mean cosine between a pool token and its codeword; only with ``index``).
    """
    C = np.asarray(ws.codebook)
    n_pool = len(ws.index["pool"])
    n_tokens = token_count(ws.X.shape[1], C)
    info = {"n_pool": n_pool, "n_tokens": n_tokens, "codebook_size": int(C.shape[0]), "token_dim": int(C.shape[1]),
            "float_bytes": int(n_pool * ws.X.shape[1] * 4),
            "code_bytes": int(n_pool * n_tokens * (2 if C.shape[0] <= 65536 else 4))}
    if index is not None:
        X = np.asarray(ws.X)[np.asarray(ws.index["pool"], dtype=int)].reshape(n_pool, n_tokens, -1)
        Xt = index.dequantize().reshape(n_pool, n_tokens, -1)
        num = (X * Xt).sum(axis=2)
        den = np.linalg.norm(X, axis=2) * np.linalg.norm(Xt, axis=2)
        info["mean_token_cosine"] = float(np.mean(np.divide(num, den, out=np.zeros_like(num), where=den > 0)))
    return info

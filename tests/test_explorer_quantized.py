"""The app-support layer's quantized pool (TiTok): a workspace keeps the cache's codebook and searches it."""
import numpy as np
import pytest

from slics_core.cli import main
from slics_core.explorer.quantized import has_quantized_pool, quantization_info, quantized_pool_index
from slics_core.explorer.queries import concept_galleries, query_components
from slics_core.explorer.workspace import build_workspace_from_cache, load_workspace
from tests.test_quantized_eval import T, _brute_dequantize, _token_data, _write_precomputed


@pytest.fixture
def token_cache(tmp_path):
    X, Y, Z, s2c, C = _token_data(300, seed=7)
    _write_precomputed(tmp_path, X, Y, Z, s2c)
    np.save(tmp_path / "cb.npy", C)
    cache = tmp_path / "cache"
    base = ["embed", "--dataset", "precomputed", "--embeddings", str(tmp_path / "tok.npy"), "--metadata",
            str(tmp_path / "meta.csv")]
    assert main(base + ["--preprocessing", "token", "--codebook", str(tmp_path / "cb.npy"), "--cache", str(cache)]) == 0
    assert main(base + ["--preprocessing", "unit", "--cache", str(tmp_path / "plain")]) == 0
    return tmp_path, cache, X, C


def test_workspace_quantized_pool_ranks_like_brute_force(token_cache):
    tmp, cache, X, C = token_cache
    build_workspace_from_cache(cache, tmp / "ws", vocabulary="none", d0_values=(2,), methods=["S-SVD", "UF"],
                               n_iter=2)
    ws = load_workspace(tmp / "ws")
    assert has_quantized_pool(ws)
    np.testing.assert_allclose(ws.codebook, C, atol=1e-6)
    qp = quantized_pool_index(ws)
    pool = np.asarray(ws.index["pool"])
    assert qp.n_pool == len(pool) and qp.n_tokens == T
    q = int(ws.index["query"][0])
    x = ws.X[q]
    V = query_components(ws.model("S-SVD", 2), x)
    concepts = [j for j in range(V.shape[0]) if np.linalg.norm(V[j]) > 0]
    pairs = concept_galleries(V, x, ws.X, pool, concepts, 10, Y=ws.Y, index=qp)
    Xt = _brute_dequantize(ws.X[pool], C)
    Xt /= np.linalg.norm(Xt, axis=1, keepdims=True)
    for (cg, uf), j in zip(pairs, concepts):
        ref = pool[np.argsort(-(Xt @ (V[j] / np.linalg.norm(V[j]))), kind="stable")[:10]]
        np.testing.assert_array_equal(cg.rows, ref)
        np.testing.assert_array_equal(uf.rows, pool[np.argsort(-(Xt @ (x / np.linalg.norm(x))), kind="stable")[:10]])
    info = quantization_info(ws, qp)
    assert info["n_tokens"] == T and info["codebook_size"] == C.shape[0]
    assert info["code_bytes"] == len(pool) * T * 2 and info["float_bytes"] == ws.X[pool].size * 4
    Xp = ws.X[pool].reshape(len(pool), T, -1)
    ref_cos = np.mean((Xp * _brute_dequantize(ws.X[pool], C).reshape(len(pool), T, -1)).sum(axis=2))
    assert info["mean_token_cosine"] == pytest.approx(ref_cos, abs=1e-5)  # tokens and codewords are unit


def test_workspace_without_codebook_says_how_to_get_one(token_cache):
    tmp, _, _, _ = token_cache
    build_workspace_from_cache(tmp / "plain", tmp / "ws2", vocabulary="none", d0_values=(2,), methods=["UF"])
    ws = load_workspace(tmp / "ws2")
    assert ws.codebook is None and not has_quantized_pool(ws)
    with pytest.raises(ValueError, match="--codebook"):
        quantized_pool_index(ws)

"""The app-support layer's quantized pool (TiTok): a workspace keeps the cache's codebook and searches it."""
import numpy as np
import pytest

from slics_core.cli import main
from slics_core.explorer.build import build_workspace_from_cache
from slics_core.explorer.quantized import has_quantized_pool, quantization_info, quantized_pool_index
from slics_core.explorer.queries import components_of_row, concept_galleries
from slics_core.explorer.workspace_files import load_workspace
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
    V = components_of_row(ws.model("S-SVD", 2), x)
    concepts = [j for j in range(V.shape[0]) if np.linalg.norm(V[j]) > 0]
    qpool = ws.quantized_pool  # the workspace's quantized Pool: the same ranking, with the pool's labels
    assert qpool.kind == "quantized" and qpool.labelled and qpool.n == len(pool)
    pairs = concept_galleries(V, x, qpool, concepts, 10)
    Xt = _brute_dequantize(ws.X[pool], C)
    Xt /= np.linalg.norm(Xt, axis=1, keepdims=True)
    for (cg, uf), j in zip(pairs, concepts):
        ref = pool[np.argsort(-(Xt @ (V[j] / np.linalg.norm(V[j]))), kind="stable")[:10]]
        np.testing.assert_array_equal(cg.rows, ref)
        np.testing.assert_array_equal(uf.rows, pool[np.argsort(-(Xt @ (x / np.linalg.norm(x))), kind="stable")[:10]])
        np.testing.assert_array_equal(cg.relevant_general, ws.Y[ref, j])
        # the Pool's index is the existing quantized search: its positions and scores, mapped to rows
        pos, sc = qp.search(np.asarray(V[j], np.float32)[None], 10)
        np.testing.assert_array_equal(cg.rows, pool[pos[0]])
        np.testing.assert_allclose(cg.scores, sc[0], rtol=1e-6)
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
    assert ws.codebook is None and not has_quantized_pool(ws) and ws.quantized_pool is None
    with pytest.raises(ValueError, match="--codebook"):
        quantized_pool_index(ws)


def test_retrieve_page_searches_the_quantized_pool(token_cache, monkeypatch):
    """Retrieve on a token workspace: a toggle switches the galleries to the quantized pool (the brute-force
    quantized ranking), the CSV says which pool; workspaces without a codebook show no toggle."""
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    tmp, cache, X, C = token_cache
    root = tmp / "workspaces"
    build_workspace_from_cache(cache, root / "tok", vocabulary="none", d0_values=(2,), methods=["S-SVD", "UF"],
                               n_iter=2)
    build_workspace_from_cache(tmp / "plain", root / "plain", vocabulary="none", d0_values=(2,), methods=["UF"])
    monkeypatch.setenv("SLICS_WORKSPACES", str(root))
    ws = load_workspace(root / "tok")
    page = str(Path(__file__).resolve().parent.parent / "app_pages" / "retrieve.py")
    at = AppTest.from_file(page, default_timeout=180)
    at.session_state["ws_choice"] = "tok"
    at.run()
    assert not at.exception
    toggle = at.toggle(key="retrieve_quantized")
    assert toggle.value is False
    pool = np.asarray(ws.index["pool"])

    float_table = at.dataframe[-1].value  # the table of the galleries
    toggle.set_value(True).run()
    assert not at.exception
    assert any("Quantized pool" in c.value and "tokens" in c.value for c in at.sidebar.caption)
    q_table = at.dataframe[-1].value
    assert not float_table.equals(q_table)
    # the unfiltered gallery of the query equals brute force over the dequantized pool
    q = at.session_state["query"]
    x = ws.X[int(q)]
    Xt = _brute_dequantize(ws.X[pool], C)
    Xt /= np.linalg.norm(Xt, axis=1, keepdims=True)
    k = int(at.slider(key="k").value)
    ref = pool[np.argsort(-(Xt @ (x / np.linalg.norm(x))), kind="stable")[:k]].tolist()
    uf = q_table[q_table["gallery"] == "unfiltered"]
    first = uf[uf["concept"] == uf["concept"].iloc[0]]
    assert first["row"].tolist() == ref

    plain = AppTest.from_file(page, default_timeout=180)
    plain.session_state["ws_choice"] = "plain"
    plain.run()
    assert not plain.exception
    assert not [t for t in plain.toggle if t.key == "retrieve_quantized"]
    # a workspace with no dictionary at all (UF only): every page opens; Atoms and Subspaces say why they are empty
    for name in sorted(p.name for p in Path(page).parent.glob("[a-z]*.py")):
        other = AppTest.from_file(str(Path(page).with_name(name)), default_timeout=180)
        other.session_state["ws_choice"] = "plain"
        other.run()
        assert not other.exception, (name, other.exception)
        if name == "home.py":
            assert any("No dictionaries fitted" in m.value for m in other.markdown)
        if name in ("atoms.py", "subspaces.py"):
            assert any("no fitted dictionary" in m.value for m in other.info), name

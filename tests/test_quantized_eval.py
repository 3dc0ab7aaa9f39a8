"""Table 3 end to end: quantized candidate pools (TiTok) in evaluate / reproduce, and resumable runs."""
import json

import numpy as np
import pytest
from PIL import Image

from slics_core.cli import main
from slics_core.data import EvalData, fit_inputs
from slics_core.evaluation import evaluate_methods, sweep_d0
from slics_core.labels import Labels
from slics_core.methods import fit_method
from slics_core.preprocessing import normalize_tokens
from slics_core.retrieval import QuantizedPool, token_count
from slics_core.runs import ResultStore
from slics_core.splits import make_split
from slics_core.store import EmbeddingStore
from slics_core.synthetic import make_concept_cones

T, DT, K, S = 8, 3, 96, 3


def _token_data(n=420, seed=0):
    cones = make_concept_cones(n_samples=n, n_features=T * DT, n_concepts=S, n_atoms=3, noise=0.3,
                               random_state=seed)
    X = normalize_tokens(cones.X.reshape(n, T, DT)).reshape(n, T * DT)
    rng = np.random.default_rng(seed + 1)
    C = rng.standard_normal((K, DT))
    C /= np.linalg.norm(C, axis=1, keepdims=True)
    Z = np.zeros((n, S * 3), dtype=bool)
    for j in range(S):
        on = cones.sublabels[:, j] >= 0
        Z[np.flatnonzero(on), j * 3 + cones.sublabels[on, j]] = True
    return X, cones.Y, Z, np.repeat(np.arange(S), 3), C


def _brute_dequantize(X, C):
    """Nearest codeword of every token by an explicit loop over tokens (independent of quantize_tokens)."""
    out = np.empty_like(X, dtype=np.float64)
    for i in range(X.shape[0]):
        for t in range(T):
            tok = X[i, t * DT:(t + 1) * DT]
            out[i, t * DT:(t + 1) * DT] = C[int(np.argmin(((C - tok) ** 2).sum(axis=1)))]
    return out


def _ap(rel):
    """AP@k, normalised by the relevant items retrieved (a plain loop)."""
    hits, total = 0, 0.0
    for i, r in enumerate(rel, start=1):
        if r:
            hits += 1
            total += hits / i
    return total / hits if hits else 0.0


def _brute_map(vectors_of, Xq_rows, Y, Z, s2c, pool, Xt, k=20):
    """General and sub-label mAP@k of cosine rankings against the de-quantized pool ``Xt``."""
    Xn = Xt / np.linalg.norm(Xt, axis=1, keepdims=True)
    gen, sub = [], []
    for q in Xq_rows:
        for j in np.flatnonzero(Y[q]):
            v = vectors_of(q, j)
            scores = Xn @ (v / np.linalg.norm(v))
            top = np.argsort(-scores, kind="stable")[:k]
            gen.append(_ap(Y[pool[top], j]))
            L = np.flatnonzero(s2c == j)
            if Z[q, L].any():
                sub.append(_ap((Z[pool[top]][:, L] & Z[q, L]).any(axis=1)))
    return float(np.mean(gen)), float(np.mean(sub))


def test_quantized_rows_match_brute_force_lookup_of_the_dequantized_pool():
    X, Y, Z, s2c, C = _token_data()
    data = EvalData(X=X, labels=Labels(Y, ["a", "b", "c"], Z, [f"s{i}" for i in range(Z.shape[1])], s2c))
    split = make_split(Y, 150, 20, 60, seed=1)
    qp = QuantizedPool.from_embeddings(X[split.pool], C)
    Xt = _brute_dequantize(X[split.pool], C)
    np.testing.assert_allclose(qp.dequantize(), Xt, atol=1e-6)
    rows = evaluate_methods(data, split, ["S-SVD", "UF"], n_atoms=2, n_iter=2, seeds=(0,), quantized=qp)
    by = {r["method"]: r for r in rows}
    assert [r["method"] for r in rows] == ["S-SVD", "S-SVD (quant. pool)", "UF", "UF (quant. pool)"]
    assert [r["pool"] for r in rows] == ["original", "quantized"] * 2
    uf = _brute_map(lambda q, j: X[q], split.query, Y, Z, s2c, split.pool, Xt)
    assert by["UF (quant. pool)"]["general_mean"] == pytest.approx(uf[0], abs=1e-12)
    assert by["UF (quant. pool)"]["sub_mean"] == pytest.approx(uf[1], abs=1e-12)
    model = fit_method("S-SVD", fit_inputs(data, split.train), 2, n_iter=2, batch_size=None, seed=0)
    V = model.project(X[split.query], None)
    pos = {q: i for i, q in enumerate(split.query)}
    ssvd = _brute_map(lambda q, j: V[pos[q], j], split.query, Y, Z, s2c, split.pool, Xt)
    assert by["S-SVD (quant. pool)"]["general_mean"] == pytest.approx(ssvd[0], abs=1e-12)
    assert by["S-SVD (quant. pool)"]["sub_mean"] == pytest.approx(ssvd[1], abs=1e-12)
    # the original-pool row is not the quantized one (quantization moves the candidates)
    orig = _brute_map(lambda q, j: X[q], split.query, Y, Z, s2c, split.pool, X[split.pool])
    assert by["UF"]["general_mean"] == pytest.approx(orig[0], abs=1e-12)
    # the LUT search (sec. 4.4.1) and the float index over the de-quantized pool rank alike
    Vq = V.reshape(-1, T * DT)[:40]
    Vq = Vq[np.linalg.norm(Vq, axis=1) > 0]
    i_lut, s_lut = qp.search(Vq, 20)
    i_flt, s_flt = qp.float_index().search(Vq, 20)
    np.testing.assert_array_equal(i_lut, i_flt)
    np.testing.assert_allclose(s_lut, s_flt, atol=1e-5)
    with pytest.raises(ValueError, match="quantized pool holds"):
        evaluate_methods(data, split, ["UF"], quantized=QuantizedPool.from_embeddings(X[:10], C))


def test_token_count_and_bad_codebooks():
    assert token_count(384, np.ones((4096, 12))) == 32
    with pytest.raises(ValueError, match="not a multiple"):
        token_count(384, np.ones((10, 7)))


def test_result_store_resumes_without_refitting(tmp_path, monkeypatch):
    X, Y, Z, s2c, C = _token_data(360, seed=3)
    data = EvalData(X=X, labels=Labels(Y, ["a", "b", "c"], Z, [f"s{i}" for i in range(Z.shape[1])], s2c))
    split = make_split(Y, 120, 30, 40, seed=0)
    store = ResultStore(tmp_path / "runs")
    qp = QuantizedPool.from_embeddings(X[split.pool], C)
    recs = sweep_d0(data, split, [2, 3], n_iter=2, results=store)
    rows = evaluate_methods(data, split, ["S-SVD", "S-SLiCS", "UF"], n_atoms=3, n_iter=2, batch_size=50,
                            seeds=(0, 1), quantized=qp, results=store)
    assert {r["method"]: r["n_runs"] for r in rows}["S-SLiCS (quant. pool)"] == 2
    # a fresh run with the same store computes nothing: fitting would fail here
    import slics_core.evaluation as ev

    def no_fit(*a, **k):
        raise AssertionError("a finished run was fitted again")

    monkeypatch.setattr(ev, "fit_method", no_fit)
    assert sweep_d0(data, split, [2, 3], n_iter=2, results=store) == recs
    again = evaluate_methods(data, split, ["S-SVD", "S-SLiCS", "UF"], n_atoms=3, n_iter=2, batch_size=50,
                             seeds=(0, 1), quantized=qp, results=store)
    assert [(r["method"], r["general_mean"], r["sub_mean"]) for r in again] == \
        [(r["method"], r["general_mean"], r["sub_mean"]) for r in rows]
    # a damaged result file is computed again (with the saved dictionary: still no fit)
    victim = next(p for p in (tmp_path / "runs").glob("*.json") if "S-SLiCS" in p.name and "table" in p.name)
    victim.write_text("{half")
    third = evaluate_methods(data, split, ["S-SLiCS"], n_atoms=3, n_iter=2, batch_size=50, seeds=(0, 1),
                             quantized=qp, results=store)
    assert third[0]["general_mean"] == pytest.approx(rows[2]["general_mean"])
    assert json.loads(victim.read_text())["key"]["method"] == "S-SLiCS"


def _write_precomputed(tmp, X, Y, Z, s2c):
    np.save(tmp / "tok.npy", X.astype(np.float32))
    lines = ["id,labels,sub_labels"]
    for i in range(len(X)):
        act = np.flatnonzero(Y[i])
        subs = [f"c{j}/s{s}" for j in act for s in np.flatnonzero(Z[i, s2c == j])]
        lines.append(f"i{i}," + "|".join(f"c{j}" for j in act) + "," + "|".join(subs))
    (tmp / "meta.csv").write_text("\n".join(lines) + "\n")


def test_cli_import_with_codebook_reports_both_pools_and_resumes(tmp_path, capsys):
    X, Y, Z, s2c, C = _token_data(400, seed=5)
    _write_precomputed(tmp_path, X, Y, Z, s2c)
    np.save(tmp_path / "cb.npy", C)
    cache = tmp_path / "cache"
    assert main(["embed", "--dataset", "precomputed", "--embeddings", str(tmp_path / "tok.npy"), "--metadata",
                 str(tmp_path / "meta.csv"), "--preprocessing", "token", "--codebook", str(tmp_path / "cb.npy"),
                 "--cache", str(cache)]) == 0
    store = EmbeddingStore(cache)
    np.testing.assert_allclose(store.load_codebook(), C, atol=1e-6)
    assert store.meta()["preprocessing"] == {"embedding": "token", "n_tokens": T}
    out = tmp_path / "res"
    args = ["evaluate", "--cache", str(cache), "--n-train", "150", "--n-val", "20", "--n-query", "50",
            "--n-atoms", "2", "--n-iter", "2", "--methods", "S-SVD,S-SLiCS,UF", "--out-dir", str(out)]
    assert main(args) == 0
    cap = capsys.readouterr()
    assert "estimate: about" in cap.err and "quantized pool:" in cap.err
    assert "S-SLiCS (quant. pool)" in cap.out
    rows = json.loads((out / "methods.json").read_text())
    assert [r["method"] for r in rows] == ["S-SVD", "S-SVD (quant. pool)", "S-SLiCS", "S-SLiCS (quant. pool)",
                                          "UF", "UF (quant. pool)"]
    import csv

    flat = list(csv.DictReader((out / "methods.csv").read_text().splitlines()))
    assert [r["pool"] for r in flat[:2]] == ["original", "quantized"], flat[:2]
    # independent check of the UF quantized number from the files the CLI read
    from slics_core.data import load_cache

    data = load_cache(cache)
    split = make_split(data.Y, 150, 20, 50, seed=0)
    Xt = _brute_dequantize(X[split.pool], C)
    uf = _brute_map(lambda q, j: X[q], split.query, Y, Z, s2c, split.pool, Xt)
    assert rows[5]["general_mean"] == pytest.approx(uf[0], abs=1e-6)
    # the same command again reuses every finished run
    files = sorted((out / "runs").rglob("*.json"))
    mtimes = [p.stat().st_mtime_ns for p in files]
    assert main(args + ["--no-estimate"]) == 0
    assert [p.stat().st_mtime_ns for p in sorted((out / "runs").rglob("*.json"))] == mtimes
    assert json.loads((out / "methods.json").read_text()) == rows
    # a codebook of the wrong width: one line, nothing written
    np.save(tmp_path / "bad.npy", np.ones((5, 5)))
    capsys.readouterr()
    assert main(["embed", "--dataset", "precomputed", "--embeddings", str(tmp_path / "tok.npy"), "--metadata",
                 str(tmp_path / "meta.csv"), "--codebook", str(tmp_path / "bad.npy"),
                 "--cache", str(tmp_path / "c2")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--codebook" in err and "not a multiple" in err
    assert not (tmp_path / "c2").exists()


TITOK_MODULE = '''
import torch
from slics_core.encoders import TiTokEncoder


class TinyTiTok(torch.nn.Module):
    """Randomly initialised, TiTok's interface: encoder(pixel_values=, latent_tokens=), quantize.embedding."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.latent_tokens = torch.nn.Parameter(torch.randn(8, 3))
        self.proj = torch.nn.Linear(3 * 4 * 4, 8 * 3)
        self.quantize = torch.nn.Module()
        self.quantize.embedding = torch.nn.Embedding(32, 3)

    def encoder(self, pixel_values, latent_tokens):
        pooled = torch.nn.functional.adaptive_avg_pool2d(pixel_values, 4).flatten(1)
        z = self.proj(pooled).view(-1, 8, 3) + 0.3 * latent_tokens[None]
        return z.permute(0, 2, 1)[:, :, None, :]


def make():
    return TiTokEncoder(TinyTiTok(), image_size=16, device="cpu")
'''


@pytest.fixture
def titok_folder(tmp_path, monkeypatch):
    (tmp_path / "tinytitok.py").write_text(TITOK_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    d = tmp_path / "photos"
    d.mkdir()
    rng = np.random.default_rng(0)
    rows = ["image,red,green,blue"]
    for i in range(120):
        y = rng.random(3) < 0.5
        if not y.any():
            y[rng.integers(3)] = True
        img = np.zeros((16, 16, 3), np.uint8) + 30
        for c in np.flatnonzero(y):  # each colour in its own quadrant
            r, s = divmod(int(c), 2)
            img[r * 8:(r + 1) * 8, s * 8:(s + 1) * 8, c] = 200 + rng.integers(0, 50)
        img = np.clip(img + rng.normal(0, 10, img.shape), 0, 255).astype(np.uint8)
        Image.fromarray(img).save(d / f"p{i:03d}.png")
        rows.append(f"p{i:03d}.png," + ",".join(str(int(v)) for v in y))
    (tmp_path / "labels.csv").write_text("\n".join(rows) + "\n")
    return tmp_path


def test_reproduce_with_a_tiny_random_titok_stores_its_codebook_and_scores_both_pools(titok_folder, capsys):
    from tinytitok import make

    enc = make()
    cb = enc.codebook
    assert cb.shape == (32, 3)
    w = enc.titok.quantize.embedding.weight.detach().numpy()
    np.testing.assert_allclose(cb, w / np.linalg.norm(w, axis=1, keepdims=True), atol=1e-6)
    out = titok_folder / "run"
    assert main(["reproduce", "--dataset", "folder", "--images", str(titok_folder / "photos"), "--labels",
                 str(titok_folder / "labels.csv"), "--encoder", "tinytitok:make", "--out-dir", str(out),
                 "--no-progress", "--preprocessing", "token", "--n-train", "50", "--n-val", "15", "--n-query", "25",
                 "--sweep", "1", "2", "--n-iter", "2", "--k", "5", "--methods", "S-SVD,S-SLiCS,UF"]) == 0
    err = capsys.readouterr().err
    assert "stored a 32 x 3 token codebook" in err and "estimate: about" in err and "[1/" in err
    store = EmbeddingStore(out / "cache")
    np.testing.assert_allclose(store.load_codebook(), cb, atol=1e-6)
    assert store.meta()["preprocessing"]["n_tokens"] == 8
    rows = {r["method"]: r for r in json.loads((out / "methods.json").read_text())}
    assert set(rows) == {"S-SVD", "S-SVD (quant. pool)", "S-SLiCS", "S-SLiCS (quant. pool)", "UF",
                         "UF (quant. pool)"}
    assert all(0 <= r["general_mean"] <= 1 for r in rows.values())

"""A sharded pool's index kind (issue 40, item 2 and finding 7): chosen once, by slics_core.search_index.index_kind,
for the builder and the opener alike; a small pool gets exact search (recall 1.0), not an IVF-PQ index trained on too
few rows ("recall@20 0.637 against exact search" for 6 000 rows before)."""
import json
import shutil
import types
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from slics_core import search_index
from slics_core.cli import main
from slics_core.explorer import workspace as workspace_module
from slics_core.explorer.build import build_pool_index
from slics_core.explorer.scoring import pool_index_words
from slics_core.explorer.workspace import POOL_INDEX, POOL_RECALL, Workspace
from slics_core.explorer.workspace_files import load_workspace
from slics_core.preprocessing import make_preprocessor
from slics_core.retrieval import StreamingIndex

D = 32
SIZES = (4_000, 2_000)  # the finding's 6 000 rows, in two shards


def _write_shards(root: Path, E: np.ndarray) -> Path:
    (root / "img_emb").mkdir(parents=True)
    (root / "metadata").mkdir()
    start = 0
    for n, size in enumerate(SIZES):
        np.save(root / "img_emb" / f"img_emb_{n}.npy", E[start:start + size].astype(np.float16))
        pd.DataFrame({"image_path": [f"img/{i:06d}.jpg" for i in range(start, start + size)]}).to_parquet(
            root / "metadata" / f"metadata_{n}.parquet")
        start += size
    return root


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A labelled cache (600 rows) and a 6 000-row sharded pool, built with `slics workspace --pool-shards`."""
    tmp = tmp_path_factory.mktemp("kind")
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((3, D))
    y = np.arange(600) % 3
    src = tmp / "src"
    src.mkdir()
    np.save(src / "e.npy", (centres[y] + 0.5 * rng.standard_normal((600, D))).astype(np.float32))
    (src / "meta.csv").write_text("id,labels\n" + "".join(f"x{i},{'abc'[k]}\n" for i, k in enumerate(y)))
    cache = tmp / "cache"
    assert main(["embed", "--dataset", "precomputed", "--embeddings", str(src / "e.npy"), "--metadata",
                 str(src / "meta.csv"), "--cache", str(cache)]) == 0
    pool = centres[rng.integers(0, 3, sum(SIZES))] + 0.8 * rng.standard_normal((sum(SIZES), D))
    shards = _write_shards(tmp / "shards", pool)
    held = pool.astype(np.float16).astype(np.float32)
    return {"tmp": tmp, "cache": cache, "shards": shards, "pool": held}


def _build(small, out, *extra):
    return main(["workspace", "--cache", str(small["cache"]), "--out", str(out), "--vocab", "none", "--methods",
                 "S-SLiCS", "--d0", "2", "--n-iter", "1", "--quiet", "--pool-shards", str(small["shards"]), *extra])


def _brute_top(ws, held, Q, k=20):
    """Exact top-k over the shards' rows, preprocessed as the pool, in float64 numpy (independent of the index)."""
    P = ws.preprocess(held).astype(np.float64)
    P /= np.linalg.norm(P, axis=1, keepdims=True)
    Q = np.asarray(Q, dtype=np.float64)
    Q = Q / np.linalg.norm(Q, axis=1, keepdims=True)
    return np.argsort(-(Q @ P.T), axis=1, kind="stable")[:, :k]


def test_a_small_sharded_pool_gets_exact_search_and_reports_recall_1(small, tmp_path, capsys):
    assert sum(SIZES) < search_index.EXACT_MAX_ROWS
    out = tmp_path / "ws"
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # the chosen kind is no fallback: no warning
        assert _build(small, out) == 0
        printed = capsys.readouterr().out
        assert "Exact search over the 6,000 shard rows" in printed and "recall is 1.0 by construction" in printed
        assert "On-disk index" not in printed
        assert not (out / POOL_INDEX).exists()  # nothing was built
        ws = load_workspace(out)
        index = ws.pool_index()
    assert isinstance(index, StreamingIndex) and index.exact and index.n_pool == 6_000
    # recall 1.0, checked against an independent exact search
    Q = ws.X[ws.index["query"]]
    found = index.search(Q, 20)[0]
    truth = _brute_top(ws, small["pool"], Q)
    assert np.mean([np.intersect1d(a, b).size / 20 for a, b in zip(found, truth)]) == 1.0
    assert "recall is 1.0 by construction" in pool_index_words(ws, index)


def test_the_builder_and_the_opener_both_follow_the_kind_rule(small, tmp_path, monkeypatch):
    """Lower the rule's threshold under the pool: the builder builds the on-disk index and a fresh open of the
    workspace opens it; raise it again: the same folder is not opened, the rule says exact."""
    from slics_core.ondisk_index import SETTINGS_FILE, OnDiskIndex

    out = tmp_path / "ws"
    assert _build(small, out) == 0
    ws = load_workspace(out)
    asked = []
    rule = search_index.index_kind

    def spy(n, **kw):
        asked.append((n, kw.get("sharded")))
        return rule(n, **kw)
    monkeypatch.setattr(workspace_module, "index_kind", spy)
    monkeypatch.setattr(search_index, "EXACT_MAX_ROWS", 5_000)
    built = build_pool_index(ws, n_list=16, pq_m=8, rerank=500, train_rows=6_000)
    assert isinstance(built, OnDiskIndex) and (out / POOL_INDEX / SETTINGS_FILE).is_file()
    assert (out / POOL_INDEX / POOL_RECALL).is_file()  # an approximate index's recall is measured
    assert asked and all(a == (6_000, True) for a in asked)
    asked.clear()
    assert isinstance(load_workspace(out).pool_index(), OnDiskIndex) and asked == [(6_000, True)]
    monkeypatch.setattr(search_index, "EXACT_MAX_ROWS", 6_001)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        reopened = load_workspace(out).pool_index()
    assert isinstance(reopened, StreamingIndex)
    build_pool_index(ws)  # the builder, under the rule's exact kind, removes the previous build's index
    assert not (out / POOL_INDEX).exists()


def test_a_recall_below_the_floor_is_reported_with_how_to_raise_it(small, tmp_path, monkeypatch):
    monkeypatch.setattr(search_index, "EXACT_MAX_ROWS", 5_000)
    out = tmp_path / "ws"
    assert _build(small, out, "--pool-rerank", "0") == 0  # the option reaches the index
    ws = load_workspace(out)
    index = ws.pool_index()
    assert not index.exact and index.rerank == 0
    rec_path = out / POOL_INDEX / POOL_RECALL
    rec = json.loads(rec_path.read_text())
    assert rec["rerank"] == 0
    for recall, advised in ((0.637, True), (0.949, True), (0.95, False), (1.0, False)):
        rec_path.write_text(json.dumps({**rec, "recall": recall}))
        words = pool_index_words(ws, index)
        assert f"recall@20 {recall:.3f}" in words
        assert ("--pool-rerank 1000" in words) is advised, words


def test_pool_rerank_needs_pool_shards(small, tmp_path, capsys):
    assert main(["workspace", "--cache", str(small["cache"]), "--out", str(tmp_path / "w"), "--pool-rerank",
                 "100"]) != 0
    assert "--pool-rerank needs --pool-shards" in capsys.readouterr().err


def test_preprocess_keeps_its_fitted_step_and_gives_what_a_fresh_fit_gives():
    rng = np.random.default_rng(5)
    raw = rng.standard_normal((40, 8))
    ws = types.SimpleNamespace(X=np.zeros((1, 8), np.float32), mean=rng.standard_normal(8) * 0.1,
                               preprocessing="clip", n_tokens=32, _opened={})
    ws.remember = lambda name, factory: Workspace.remember(ws, name, factory)
    for _ in range(2):
        want = make_preprocessor("clip", mean=ws.mean).fit(raw).transform(raw).astype(np.float32)
        np.testing.assert_array_equal(Workspace.preprocess(ws, raw), want)
        ws.mean = rng.standard_normal(8) * 0.1  # a changed mean is not served from the kept step
    ws.preprocessing = "unit"
    np.testing.assert_allclose(Workspace.preprocess(ws, raw), raw / np.linalg.norm(raw, axis=1, keepdims=True),
                               atol=1e-6)


def test_words_for_a_missing_on_disk_index_say_exact_search_and_why(small, tmp_path, monkeypatch):
    out = tmp_path / "ws"
    assert _build(small, out) == 0
    monkeypatch.setattr(search_index, "EXACT_MAX_ROWS", 5_000)  # the rule wants an index the folder lacks
    ws = load_workspace(out)
    with pytest.warns(RuntimeWarning, match="no on-disk pool index, so the 6000 pool rows are searched exactly"):
        index = ws.pool_index()
    assert index.exact and pool_index_words(ws, index).startswith("No on-disk index")
    shutil.rmtree(out)


def test_without_faiss_a_large_pool_is_searched_exactly_with_one_warning_naming_the_extra(small, tmp_path,
                                                                                           monkeypatch):
    from slics_core.explorer import build as build_module
    from slics_core.extras import MissingExtraError

    out = tmp_path / "ws"
    assert _build(small, out) == 0
    ws = load_workspace(out)
    monkeypatch.setattr(search_index, "EXACT_MAX_ROWS", 5_000)

    def no_faiss(*a, **k):
        raise MissingExtraError("the on-disk pool index needs faiss: pip install 'slics-explorer[faiss]'",
                                name="faiss")
    monkeypatch.setattr(build_module, "build_ondisk_index", no_faiss)
    monkeypatch.setattr(workspace_module, "require", no_faiss)
    with pytest.warns(RuntimeWarning) as caught:
        index = build_pool_index(ws)
    assert len(caught) == 1 and "needs faiss" in str(caught[0].message) and "searched exactly" in str(caught[0].message)
    assert isinstance(index, StreamingIndex) and not (out / POOL_INDEX).exists()
    assert pool_index_words(ws, index).startswith("No on-disk index")

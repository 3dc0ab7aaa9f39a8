"""slics_core.explorer.pool (issue 40, item 1): one Pool per workspace, searched into Hits, against brute force."""
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from slics_core.cli import main
from slics_core.explorer.arrival import pool_codes, pool_top_items
from slics_core.explorer.atom_tables import MAX_TOP_ITEMS, codes_top_items, top_items_table
from slics_core.explorer.pool import Pool, labelled_rows, memory_pool
from slics_core.explorer.workspace_files import load_workspace
from slics_core.retrieval import ExactIndex
from tests.top_items_reference import atom_top_items

ROOT = Path(__file__).resolve().parents[1]


def _brute_top(P, q, k):
    """Rows of ``P`` by cosine with ``q``, best first (ties by the smaller row), and the cosines."""
    cos = (P / np.linalg.norm(P, axis=1, keepdims=True)) @ (q / np.linalg.norm(q))
    order = np.argsort(-cos, kind="stable")[:k]
    return order, cos[order]


@pytest.fixture(scope="module")
def arrays():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((300, 16))
    Y = rng.random((300, 4)) < 0.4
    Z = rng.random((300, 6)) < 0.3
    pool = np.sort(rng.choice(300, 180, replace=False))
    ids = [f"item-{i}" for i in range(300)]
    return X, Y, Z, pool, ids


# ----------------------------------------------------------------------------- a memory pool
def test_memory_pool_hits_equal_brute_force_top_k(arrays):
    X, Y, Z, pool, ids = arrays
    P = memory_pool(X, pool, Y=Y, Z=Z, ids=ids)
    assert P.kind == "memory" and P.n == len(pool) and P.labelled
    Q = np.random.default_rng(4).standard_normal((3, 16))
    found = P.search(Q, 9)
    assert isinstance(found, list) and len(found) == 3
    for q, hits in zip(Q, found):
        order, cos = _brute_top(X[pool], q, 9)
        np.testing.assert_array_equal(hits.positions, order)
        np.testing.assert_array_equal(hits.rows, pool[order])
        np.testing.assert_allclose(hits.scores, cos, atol=1e-5)
        assert hits.ids == [ids[r] for r in pool[order]]
        np.testing.assert_array_equal(hits.labels, Y[pool[order]])
        np.testing.assert_array_equal(hits.sub_labels, Z[pool[order]])
    one = P.search(Q[1], 9)  # a 1-D query: one Hits, the same as its row's
    np.testing.assert_array_equal(one.positions, found[1].positions)
    assert len(P.search(Q[0], 10_000)) == len(pool)  # k clipped to the pool


def test_memory_pool_without_labels_or_ids(arrays):
    X, _, _, pool, _ = arrays
    P = memory_pool(X, pool)
    hits = P.search(X[5], 4)
    assert not P.labelled and hits.labels is None and hits.sub_labels is None
    assert hits.ids == [str(r) for r in hits.rows]  # the row number stands for a missing id
    with pytest.raises(ValueError, match="no images"):
        hits.thumbnail(0)


def test_pool_refuses_a_wrong_index_an_empty_pool_and_bad_positions(arrays):
    X, Y, _, pool, _ = arrays
    with pytest.raises(ValueError, match="index holds"):
        memory_pool(X, pool, index=ExactIndex(X[pool[:-1]])).search(X[0], 3)
    with pytest.raises(ValueError, match="empty"):
        memory_pool(X, []).search(X[0], 3)
    with pytest.raises(ValueError, match="rows="):
        Pool("memory", 3, None, Y=Y)
    with pytest.raises(ValueError, match="kind"):
        Pool("disk", 3, None)
    with pytest.raises(IndexError, match="positions"):
        memory_pool(X, pool).hits([len(pool)], [1.0])


def test_a_given_index_is_used_as_it_is(arrays):
    X, _, _, pool, _ = arrays
    calls = []
    index = ExactIndex(X[pool])

    class Spy:
        n_pool = index.n_pool

        def search(self, Q, k):
            calls.append(Q.shape)
            return index.search(Q, k)

    hits = memory_pool(X, pool, index=Spy()).search(X[:2], 5)
    assert calls == [(2, 16)] and len(hits) == 2


# ----------------------------------------------------------------------------- the workspace's pool
def test_workspace_pool_is_its_rows_with_labels_ids_and_thumbnails(ws):
    P = ws.pool
    assert P is ws.pool and P.kind == "memory" and P.labelled  # opened once, kept
    assert ws.eval_pool is P  # Evaluate's labelled pool is the same object
    rows = np.asarray(ws.index["pool"])
    q = ws.X[int(ws.index["query"][0])]
    hits = P.search(q, 12)
    order, cos = _brute_top(ws.X[rows], q, 12)
    np.testing.assert_array_equal(hits.rows, rows[order])
    np.testing.assert_allclose(hits.scores, cos, atol=1e-5)
    np.testing.assert_array_equal(hits.labels, ws.Y[rows[order]])
    assert hits.ids == [ws.ids[r] for r in rows[order]]
    # the thumbnail is the workspace row's (the bytes every gallery shows)
    assert hits.thumbnail(2, 64).tobytes() == ws.thumbnail(int(rows[order][2]), 64).tobytes()


def test_labelled_rows_of_an_ordinary_workspace_are_its_pool(ws):
    np.testing.assert_array_equal(labelled_rows(ws), ws.index["pool"])


# ----------------------------------------------------------------------------- a sharded workspace's pools
@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    """A small sharded workspace (3 000 shard rows: exact streamed search) over a 300-row labelled cache."""
    tmp = tmp_path_factory.mktemp("pool-shards")
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((3, 16))
    y = np.arange(300) % 3
    np.save(tmp / "e.npy", (centres[y] + 0.5 * rng.standard_normal((300, 16))).astype(np.float32))
    (tmp / "meta.csv").write_text("id,labels\n" + "".join(f"x{i},{'abc'[k]}\n" for i, k in enumerate(y)))
    assert main(["embed", "--dataset", "precomputed", "--embeddings", str(tmp / "e.npy"), "--metadata",
                 str(tmp / "meta.csv"), "--cache", str(tmp / "cache")]) == 0
    E = (centres[rng.integers(0, 3, 3_000)] + 0.8 * rng.standard_normal((3_000, 16))).astype(np.float32)
    (tmp / "shards" / "img_emb").mkdir(parents=True)
    (tmp / "shards" / "metadata").mkdir()
    for n, (a, b) in enumerate(((0, 1_200), (1_200, 3_000))):
        np.save(tmp / "shards" / "img_emb" / f"img_emb_{n}.npy", E[a:b])
        pd.DataFrame({"image_path": [f"img/{i:05d}.jpg" for i in range(a, b)]}).to_parquet(
            tmp / "shards" / "metadata" / f"metadata_{n}.parquet")
    assert main(["workspace", "--cache", str(tmp / "cache"), "--out", str(tmp / "ws"), "--vocab", "none",
                 "--methods", "S-SLiCS", "--d0", "2", "--n-iter", "1", "--quiet", "--pool-shards",
                 str(tmp / "shards")]) == 0
    return load_workspace(tmp / "ws"), E


def test_shards_pool_hits_are_exact_search_over_the_shard_arrays_without_labels(sharded):
    ws, E = sharded
    P = ws.pool
    assert P.kind == "shards" and not P.labelled and P.rows is None and P.n == len(E)
    assert ws.quantized_pool is None
    q = ws.X[int(ws.index["query"][0])]
    hits = P.search(q, 15)
    order, cos = _brute_top(ws.preprocess(E).astype(np.float64), q, 15)  # the shard rows, preprocessed as built
    np.testing.assert_array_equal(hits.positions, order)
    np.testing.assert_allclose(hits.scores, cos, atol=1e-4)
    assert hits.labels is None and hits.sub_labels is None and hits.rows is None
    assert hits.ids == [f"img/{p:05d}.jpg" for p in order]  # from the shards' metadata
    thumb = hits.thumbnail(0, 32)  # no image file: the grey tile, as today's shard galleries
    assert thumb.size == (32, 32)


def test_a_sharded_workspaces_labelled_pool_is_its_cache_rows_with_labels(sharded):
    ws, _ = sharded
    L = ws.eval_pool
    assert L is ws.eval_pool and L is not ws.pool and L.kind == "memory" and L.labelled
    used = np.concatenate([ws.index[s] for s in ("train", "val", "query")])
    want = np.setdiff1d(np.arange(len(ws)), used)  # every cache row is labelled
    np.testing.assert_array_equal(L.rows, want)
    q = ws.X[int(ws.index["query"][1])]
    hits = L.search(q, 8)
    order, cos = _brute_top(ws.X[want].astype(np.float64), q, 8)
    np.testing.assert_array_equal(hits.rows, want[order])
    np.testing.assert_array_equal(hits.labels, ws.Y[want[order]])


def test_atoms_top_items_of_either_pool_are_its_stored_rankings(ws, sharded):
    """The Atoms page's top images per atom come as pool positions for both kinds: an in-memory pool's equal
    atom_top_items of its codes, a sharded pool's are the streamed ones."""
    method, d0 = "S-SLiCS", ws.default_d0
    codes = pool_codes(ws, method, d0)
    pos, coef = pool_top_items(ws, method, d0)
    np.testing.assert_array_equal((pos, coef), codes_top_items(codes))
    for atom in range(0, codes.shape[1], 7):
        want = atom_top_items(codes, atom, k=MAX_TOP_ITEMS, rows=ws.index["pool"])
        got = top_items_table(pos, coef, atom, k=MAX_TOP_ITEMS)
        hits = ws.pool.hits(got.row, got.coefficient)
        np.testing.assert_array_equal(hits.rows, want["row"].to_numpy())
        np.testing.assert_allclose(hits.scores, want["coefficient"].to_numpy())
    sws, _ = sharded
    spos, _ = pool_top_items(sws, method, 2)
    assert spos.shape[1] == MAX_TOP_ITEMS and spos.max() < sws.pool.n
    assert sws.pool.hits(spos[0][spos[0] >= 0], np.ones((spos[0] >= 0).sum())).labels is None


def test_codes_top_items_k_is_bounded():
    with pytest.raises(ValueError, match="between 1 and 60"):
        codes_top_items(np.ones((3, 2)), k=61)


# ----------------------------------------------------------------------------- the pages ask the pool, not the kind
def test_no_page_branches_on_the_workspaces_sharded_flag():
    """Issue 40: pages ask ``hits.labels is None`` (or ``ws.pool``), never which kind of pool the workspace has."""
    found = [f"{p.name}:{i}" for p in sorted((ROOT / "app_pages").glob("*.py"))
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"\.sharded\b", line)]
    assert not found, found

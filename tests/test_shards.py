"""Sharded pools (issue 32, item 1): clip-retrieval shards as a workspace's pool, memory-mapped.

The fixture writes clip-retrieval's real layout (``img_emb/img_emb_N.npy`` float16 and float32,
``metadata/metadata_N.parquet``) from a 50 000-row pool; the labelled cache comes from
``slics embed --dataset precomputed``; the sharded workspace from ``slics workspace --pool-shards``.
"""
import os
import shutil
import signal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from gallery_helpers import gallery_srcs

from slics_core import search_index
from slics_core.cli import main
from slics_core.data import LabelledEmbeddings, load_cache
from slics_core.explorer import safe_text
from slics_core.explorer.arrival import pool_top_items
from slics_core.explorer.atom_tables import item_codes, stream_atom_top_items, top_items_table
from slics_core.explorer.build import build_pool_index, build_workspace
from slics_core.explorer.workspace import POOL_INDEX
from slics_core.explorer.workspace_files import load_workspace, save_workspace
from slics_core.labels import Labels
from slics_core.retrieval import ExactIndex, StreamingIndex
from slics_core.shards import PoolShards, remote_url
from slics_core.splits import Split
from tests.top_items_reference import atom_top_items

D = 32
N_POOL = 50_000
SIZES = (20_000, 20_000, 10_000)
CONCEPTS = "abc"


def _write_shards(root: Path, E: np.ndarray, sizes, dtypes=None) -> Path:
    (root / "img_emb").mkdir(parents=True)
    (root / "metadata").mkdir()
    start = 0
    for n, size in enumerate(sizes):
        dtype = (dtypes or [np.float16] * len(sizes))[n]
        np.save(root / "img_emb" / f"img_emb_{n}.npy", E[start:start + size].astype(dtype))
        pos = np.arange(start, start + size)
        pd.DataFrame({"image_path": [f"img/{i:06d}.jpg" for i in pos],
                      "url": [f"https://images.example.org/{i}.jpg" for i in pos],
                      "caption": ["a photo"] * size}).to_parquet(root / "metadata" / f"metadata_{n}.parquet")
        start += size
    return root


@pytest.fixture(scope="module", autouse=True)
def _on_disk_index_from_1000_rows():
    """These tests are about the on-disk index and its fallback: the 50 000-row test pool gets it, as a pool from the
    kind rule's measured threshold does (tests/test_pool_index_kind.py tests the rule with its own threshold)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(search_index, "EXACT_MAX_ROWS", 1_000)
        yield


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("shards")
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((3, D))
    n = 600
    y = np.arange(n) % 3
    src = tmp / "src"
    src.mkdir()
    np.save(src / "e.npy", (centres[y] + 0.5 * rng.standard_normal((n, D))).astype(np.float32))
    (src / "meta.csv").write_text("id,labels\n" + "".join(f"x{i},{CONCEPTS[k]}\n" for i, k in enumerate(y)))
    cache = tmp / "cache"
    assert main(["embed", "--dataset", "precomputed", "--embeddings", str(src / "e.npy"), "--metadata",
                 str(src / "meta.csv"), "--cache", str(cache)]) == 0
    pool = centres[rng.integers(0, 3, N_POOL)] + 0.8 * rng.standard_normal((N_POOL, D))
    # shards 0 and 1 float16, shard 2 float32 (clip-retrieval writes either); the pool as the shards hold it
    shards = _write_shards(tmp / "shards", pool, SIZES, [np.float16, np.float16, np.float32])
    held = np.concatenate([pool[:40_000].astype(np.float16).astype(np.float32), pool[40_000:].astype(np.float32)])
    out = tmp / "ws"
    assert main(["workspace", "--cache", str(cache), "--out", str(out), "--vocab", "none", "--methods", "S-SLiCS",
                 "--d0", "2", "--n-iter", "1", "--quiet", "--pool-shards", str(shards)]) == 0
    return {"tmp": tmp, "cache": cache, "shards": shards, "pool": held, "out": out, "centres": centres}


def _in_memory(world, ws):
    """The same data as an ordinary workspace: the cache's rows, then the 50 000 pool rows as its pool."""
    data = load_cache(world["cache"])
    n = len(data)
    Y = np.vstack([data.Y, np.zeros((N_POOL, data.Y.shape[1]), dtype=data.Y.dtype)])
    both = LabelledEmbeddings(raw=np.vstack([data.raw, world["pool"]]).astype(np.float32),
                              ids=list(data.ids) + [f"p{i}" for i in range(N_POOL)],
                              labels=Labels(Y, data.concept_names), preprocessing=data.preprocessing)
    split = Split(train=ws.index["train"], val=ws.index["val"], query=ws.index["query"],
                  pool=np.arange(n, n + N_POOL), dropped=np.zeros(0, dtype=np.int64))
    return build_workspace(both, None, split=split, d0_values=(2,), n_iter=1, methods=["S-SLiCS"], prepare=False)


def test_sharded_pool_index_finds_the_in_memory_workspaces_top_20(world, tmp_path):
    """Without an on-disk index (a workspace built before them) the pool is searched exactly, with a note."""
    shutil.copytree(world["out"], tmp_path / "ws", ignore=shutil.ignore_patterns(POOL_INDEX))
    ws = load_workspace(tmp_path / "ws")
    assert ws.sharded and len(ws.index["pool"]) == 0 and ws.n_pool == N_POOL
    mem = _in_memory(world, ws)
    assert isinstance(mem.pool_index(), ExactIndex) and mem.pool_index() is mem.pool_index()
    with pytest.warns(RuntimeWarning, match="no on-disk pool index.*searched exactly"):
        index = ws.pool_index()
    assert isinstance(index, StreamingIndex) and index.n_pool == N_POOL
    rng = np.random.default_rng(1)
    Q = np.vstack([ws.X[ws.index["query"][:8]], ws.preprocess(world["centres"] + 0.3 * rng.standard_normal((3, D)))])
    got_i, got_s = index.search(Q, 20)
    want_i, want_s = mem.pool_index().search(Q, 20)
    np.testing.assert_array_equal(got_i, want_i)
    np.testing.assert_allclose(got_s, want_s, atol=1e-5)
    # and against a brute-force search of the pool as the shards hold it
    brute = ExactIndex(ws.preprocess(world["pool"])).search(Q, 20)[0]
    np.testing.assert_array_equal(got_i, brute)


# ----------------------------------------------------------------------------- the on-disk pool index
SMALL_INDEX = dict(n_list=32, pq_m=8, rerank=500, train_rows=8192)  # 32-d rows: coarse lists, 4-d codebooks


def _overlap(found, truth):
    return float(np.mean([len(set(a) & set(b)) / truth.shape[1] for a, b in zip(found, truth)]))


def test_command_builds_the_on_disk_pool_index_that_pool_index_opens(world):
    from slics_core.ondisk_index import SETTINGS_FILE, OnDiskIndex

    assert (world["out"] / POOL_INDEX / SETTINGS_FILE).is_file()
    index = load_workspace(world["out"]).pool_index()
    assert isinstance(index, OnDiskIndex) and index.n_pool == N_POOL and index.transform is not None


def test_on_disk_pool_index_ranks_the_preprocessed_rows_and_moves_with_the_folder(world, tmp_path):
    """Trained, filled and re-ranked on ``Workspace.preprocess``'d rows ('clip': the training mean subtracted):
    its top-20 is the exact search's over those rows; an index of the raw rows is not."""
    from slics_core.ondisk_index import OnDiskIndex, build_ondisk_index

    shutil.copytree(world["out"], tmp_path / "ws")
    ws = load_workspace(tmp_path / "ws")
    assert ws.preprocessing == "clip" and np.linalg.norm(ws.mean) > 0.3  # of unit rows
    build_pool_index(ws, **SMALL_INDEX)
    Q = ws.X[ws.index["query"]]
    exact = StreamingIndex(ws.shards(), ws.preprocess).search(Q, 20)[0]
    found = ws.pool_index().search(Q, 20)[0]
    assert _overlap(found, exact) >= 0.95
    raw = build_ondisk_index(ws.shards().arrays, tmp_path / "raw", **SMALL_INDEX)
    assert _overlap(raw.search(Q, 20)[0], exact) < 0.6  # the preprocessing is what makes the difference
    save_workspace(ws, tmp_path / "ws", overwrite=True)  # saving again keeps the index folder
    shutil.move(tmp_path / "ws", tmp_path / "moved")
    moved = load_workspace(tmp_path / "moved")
    index = moved.pool_index()
    assert isinstance(index, OnDiskIndex) and index.folder == (tmp_path / "moved" / POOL_INDEX).absolute()
    np.testing.assert_array_equal(index.search(Q, 20)[0], found)


def test_command_builds_a_workspace_that_keeps_the_pool_on_disk(world):
    ws = load_workspace(world["out"])
    info = ws.pool_shards
    assert info["counts"] == list(SIZES) and info["n_rows"] == N_POOL and info["dim"] == D
    assert Path(info["folder"]) == world["shards"].resolve()
    assert len(ws) == 600  # X holds the labelled cache only
    with np.load(world["out"] / "arrays.npz") as z:
        assert max(z[k].shape[0] for k in z.files if z[k].ndim) <= 20_000
    rows = ws.pool_sample_rows
    assert rows.size == 20_000 and np.all(np.diff(rows) > 0) and rows.max() < N_POOL
    np.testing.assert_allclose(ws.pool_sample[:50], ws.preprocess(world["pool"][rows[:50]]), atol=1e-6)
    s, r = ws.shards().locate([0, 19_999, 20_000, 49_999])
    assert s.tolist() == [0, 0, 1, 2] and r.tolist() == [0, 19_999, 0, 9_999]
    assert ws.shards().position(2, 5) == 40_005
    assert ws.summary()["pool_shards"]["n_rows"] == N_POOL


def test_remote_thumbnails_are_off_by_default(world, tmp_path):
    ws = load_workspace(world["out"])
    assert not ws.remote_thumbnails and ws.pool_shards["remote_hosts"] == []
    item = ws.pool_item(20_001)
    assert item["id"] == "img/020001.jpg" and item["url"] is None and item["path"] is None
    out = tmp_path / "remote"
    assert main(["workspace", "--cache", str(world["cache"]), "--out", str(out), "--vocab", "none", "--methods",
                 "S-SLiCS", "--d0", "2", "--n-iter", "1", "--quiet", "--pool-shards", str(world["shards"]),
                 "--remote-thumbnails"]) == 0
    remote = load_workspace(out)
    assert remote.remote_thumbnails and remote.pool_shards["remote_hosts"] == ["images.example.org"]
    assert remote.pool_item(20_001)["url"] == "https://images.example.org/20001.jpg"
    assert remote.pool_thumbnail(20_001) == "https://images.example.org/20001.jpg"
    assert not isinstance(ws.pool_thumbnail(20_001), str)  # off: the grey tile, no URL


@pytest.mark.parametrize("value", ["javascript:alert(1)", "data:image/png;base64,AAAA", "file:///etc/passwd",
                                   "https:///nohost", "https://a.org/x y.jpg", "//a.org/x.jpg", None, 5])
def test_only_http_urls_with_a_host_are_thumbnails(value):
    assert remote_url(value) is None


def test_thumbnail_url_is_escaped():
    assert remote_url('https://a.org/x.jpg?a=1&b="2"<x>\'`') == "https://a.org/x.jpg?a=1&b=%222%22%3Cx%3E%27%60"


def test_remote_thumbnails_need_pool_shards(world, capsys):
    assert main(["workspace", "--cache", str(world["cache"]), "--remote-thumbnails", "--quiet"]) != 0
    assert "--pool-shards" in capsys.readouterr().err


def _build_err(world, shards, tmp_path, capsys):
    rc = main(["workspace", "--cache", str(world["cache"]), "--out", str(tmp_path / "bad"), "--vocab", "none",
               "--methods", "S-SLiCS", "--d0", "2", "--n-iter", "1", "--quiet", "--pool-shards", str(shards)])
    err = capsys.readouterr().err.strip()
    assert rc != 0 and len(err.splitlines()) == 1, err
    return err


def test_bad_shard_folder_is_one_line_naming_it(world, tmp_path, capsys):
    err = _build_err(world, tmp_path / "nowhere", tmp_path, capsys)
    assert "nowhere" in err and "img_emb" in err


def test_damaged_shard_is_one_line_naming_the_file(world, tmp_path, capsys):
    rng = np.random.default_rng(2)
    shards = _write_shards(tmp_path / "s", rng.standard_normal((300, D)), (100, 200))
    f = shards / "img_emb" / "img_emb_1.npy"
    f.write_bytes(f.read_bytes()[:-64])  # truncated
    err = _build_err(world, shards, tmp_path, capsys)
    assert "img_emb_1.npy" in err and "damaged" in err


def test_lone_metadata_file_is_named(world, tmp_path, capsys):
    rng = np.random.default_rng(2)
    shards = _write_shards(tmp_path / "s", rng.standard_normal((300, D)), (100, 200))
    (shards / "img_emb" / "img_emb_1.npy").unlink()
    err = _build_err(world, shards, tmp_path, capsys)
    assert "metadata_1.parquet" in err and "img_emb_1.npy" in err


def test_shard_of_another_width_is_named(world, tmp_path, capsys):
    rng = np.random.default_rng(2)
    shards = _write_shards(tmp_path / "s", rng.standard_normal((300, D + 1)), (100, 200))
    err = _build_err(world, shards, tmp_path, capsys)
    assert str(D + 1) in err and str(shards) in err


def test_shard_changed_after_the_build_is_named_on_open(world, tmp_path):
    rng = np.random.default_rng(3)
    shards = _write_shards(tmp_path / "s", rng.standard_normal((300, D)), (100, 200))
    out = tmp_path / "ws"
    assert main(["workspace", "--cache", str(world["cache"]), "--out", str(out), "--vocab", "none", "--methods",
                 "S-SLiCS", "--d0", "2", "--n-iter", "1", "--quiet", "--pool-shards", str(shards)]) == 0
    np.save(shards / "img_emb" / "img_emb_1.npy", rng.standard_normal((150, D)).astype(np.float16))
    with pytest.raises(ValueError, match=r"img_emb_1\.npy.*150 rows where the workspace recorded 200"):
        load_workspace(out)


def test_metadata_with_other_row_count_is_named(tmp_path):
    rng = np.random.default_rng(4)
    shards = _write_shards(tmp_path / "s", rng.standard_normal((300, D)), (100, 200))
    pd.DataFrame({"image_path": ["a"] * 7}).to_parquet(shards / "metadata" / "metadata_0.parquet")
    with pytest.raises(ValueError, match=r"metadata_0\.parquet.*7 rows"):
        PoolShards(shards).item(3)


@pytest.mark.parametrize("rows", [150, 250], ids=["fewer", "more"])
def test_build_refuses_metadata_whose_row_count_is_not_its_shards(world, tmp_path, capsys, rows):
    """Checked at build, in one line naming the table (it used to pass, and fail when an item was shown)."""
    rng = np.random.default_rng(5)
    shards = _write_shards(tmp_path / "s", rng.standard_normal((300, D)), (100, 200))
    pd.DataFrame({"image_path": [f"x{i}.jpg" for i in range(rows)]}).to_parquet(
        shards / "metadata" / "metadata_1.parquet")
    err = _build_err(world, shards, tmp_path, capsys)
    assert "metadata_1.parquet" in err and f"{rows} rows of metadata for the 200 embeddings" in err
    assert not (tmp_path / "bad").exists()


def test_nan_rows_in_a_shard_are_named_by_shard_file_and_row(world, tmp_path, capsys):
    rng = np.random.default_rng(7)
    E = rng.standard_normal((300, D))
    E[100 + 37] = np.nan  # shard 1, row 37
    E[100 + 90, 3] = np.inf
    shards = _write_shards(tmp_path / "s", E, (100, 200))
    err = _build_err(world, shards, tmp_path, capsys)
    assert "img_emb_1.npy" in err and "2 of the rows read hold NaN or infinity (row 37 of the shard first)" in err


def test_a_named_pipe_as_a_shard_is_refused_at_once(world, tmp_path, capsys):
    """Opening a FIFO for reading waits for a writer forever; the build refuses it by its type instead."""
    rng = np.random.default_rng(6)
    shards = _write_shards(tmp_path / "s", rng.standard_normal((300, D)), (100, 200))
    f = shards / "img_emb" / "img_emb_1.npy"
    f.unlink()
    os.mkfifo(f)

    def hung(signum, frame):
        raise AssertionError("the build waited on the named pipe")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(120)
    try:
        err = _build_err(world, shards, tmp_path, capsys)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert "img_emb_1.npy" in err and "named pipe" in err


# ----------------------------------------------------------------------------- Atoms: streaming top-k per atom
def test_streaming_top_items_per_atom_equal_the_dense_table(world, tmp_path):
    ws = load_workspace(world["out"])
    model = ws.model("S-SLiCS", 2)
    rng = np.random.default_rng(5)
    E = world["centres"][rng.integers(0, 3, 3_000)] + 0.8 * rng.standard_normal((3_000, D))
    shards = PoolShards(_write_shards(tmp_path / "small", E, (1_300, 1_700)))
    X = ws.preprocess(shards.rows(np.arange(len(shards))))
    dense = item_codes(model, X)
    blocks = ((start, ws.preprocess(raw)) for start, raw in shards.blocks(block_rows=700))
    pos, coef = stream_atom_top_items(model, blocks, k=60)
    assert pos.shape == (dense.shape[1], 60)
    for atom in range(dense.shape[1]):
        want = atom_top_items(dense, atom, k=60)
        got = top_items_table(pos, coef, atom, k=60)
        np.testing.assert_array_equal(got["row"].to_numpy(), want["row"].to_numpy())
        np.testing.assert_allclose(got["coefficient"].to_numpy(), want["coefficient"].to_numpy(), rtol=1e-10)


def test_atoms_page_store_streams_the_sharded_pool(world):
    ws = load_workspace(world["out"])
    pos, coef = pool_top_items(ws, "S-SLiCS", 2)
    assert pos.shape[1] == 60 and pos.max() < N_POOL
    # the best item of atom 0 is the pool row with the largest coefficient (checked on that row's neighbourhood)
    top = pos[0, 0]
    codes = item_codes(ws.model("S-SLiCS", 2), ws.preprocess(world["pool"][top:top + 1]))
    assert codes[0, 0] == pytest.approx(coef[0, 0], rel=1e-6)


def test_streaming_top_items_k_is_bounded(world):
    ws = load_workspace(world["out"])
    with pytest.raises(ValueError, match="between 1 and 60"):
        stream_atom_top_items(ws.model("S-SLiCS", 2), [], k=61)


# ----------------------------------------------------------------------------- the Atoms page on a sharded workspace
def _atoms_page(monkeypatch, folder):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("SLICS_WORKSPACES", str(folder.parent))
    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app_pages" / "atoms.py"), default_timeout=180)
    at.session_state["ws_choice"] = folder.name
    at.run()
    assert not at.exception, at.exception
    return at


def _image_urls(at):
    return [url for el in at.get("image") for url in el.value]


def test_atoms_page_shows_a_sharded_pools_top_images_without_remote_urls(world, monkeypatch):
    at = _atoms_page(monkeypatch, world["out"])
    urls = _image_urls(at)
    assert len(urls) == 12 and all(u.startswith("data:image/jpeg") for u in urls)
    assert not any("Remote thumbnails" in c.value for c in at.caption)


def test_atoms_page_names_the_hosts_of_remote_thumbnails(world, tmp_path, monkeypatch, capsys):
    out = tmp_path / "remote"
    assert main(["workspace", "--cache", str(world["cache"]), "--out", str(out), "--vocab", "none", "--methods",
                 "S-SLiCS", "--d0", "2", "--n-iter", "1", "--quiet", "--pool-shards", str(world["shards"]),
                 "--remote-thumbnails"]) == 0
    rec = load_workspace(out).pool_index_recall()  # the command prints the index's recall measured at build
    assert f"On-disk index: recall@20 {rec['recall']:.3f} against exact search on 20 queries" in capsys.readouterr().out
    at = _atoms_page(monkeypatch, out)
    urls = _image_urls(at)
    assert len(urls) == 12 and all(u.startswith("https://images.example.org/") for u in urls)
    host = safe_text.text("images.example.org")  # shown as plain text, never a link
    assert any("Remote thumbnails" in c.value and host in c.value for c in at.caption)


def test_evaluation_ranks_with_the_workspaces_one_pool_index(world):
    """scoring and the pages' store search ``Workspace.pool_index()`` (one index per workspace), not a new one."""
    from slics_core.explorer import scoring

    ws = load_workspace(world["out"])
    mem = _in_memory(world, ws)
    calls = []
    index = mem.pool_index()

    class Spy:
        n_pool = index.n_pool

        def search(self, Q, k):
            calls.append(len(Q))
            return index.search(Q, k)

    mem._opened["index"] = Spy()
    scoring.methods_table(mem, 2, split="query", k=5, methods=["S-SLiCS"])
    assert calls


# ----------------------------------------------------------------------------- Retrieve and Mix on a sharded workspace
def _page(monkeypatch, folder, name):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("SLICS_WORKSPACES", str(folder.parent))
    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app_pages" / name), default_timeout=180)
    at.session_state["ws_choice"] = folder.name
    at.run()
    assert not at.exception, at.exception
    return at


def test_retrieve_searches_a_sharded_pool_and_shows_galleries_without_marks(world, monkeypatch):
    at = _page(monkeypatch, world["out"], "retrieve.py")
    assert not any("does not read shards" in m.value for m in at.info)
    galleries = [g for g in gallery_srcs(at) if g]
    k = int(at.slider(key="k").value)
    assert galleries and all(len(g) == k and all(u.startswith("data:image/jpeg") for u in g) for g in galleries)
    assert not at.metric  # no P@k: shard rows carry no labels
    assert any("no relevance borders and no P@k" in c.value for c in at.caption)
    table = at.dataframe[-1].value
    ws = load_workspace(world["out"])
    q = ws.X[int(at.session_state["query"])]
    uf = table[table["gallery"] == "unfiltered"].drop_duplicates("rank")
    want = ws.pool_index().search(q[None], k)[0][0]
    assert uf["row"].tolist() == want.tolist()
    assert uf["item_id"].tolist() == [ws.pool_item(p)["id"] for p in want]


def test_mix_searches_a_sharded_pool_and_shows_its_gallery(world, monkeypatch):
    at = _page(monkeypatch, world["out"], "mix.py")
    assert not any("does not read shards" in m.value for m in at.info)
    k = int(at.slider(key="k").value)
    galleries = [g for g in gallery_srcs(at) if len(g) == k]
    assert galleries and all(u.startswith("data:image/jpeg") for u in galleries[-1])
    assert not at.metric and any("no borders and no P@k" in c.value for c in at.caption)


# ----------------------------------------------------------------------------- Evaluate on a sharded workspace
def _cache_candidates(ws):
    """The cache's rows in none of train / val / query (every row of the fixture's cache is labelled)."""
    used = set(np.concatenate([ws.index[s] for s in ("train", "val", "query")]).tolist())
    return np.array([i for i in range(len(ws)) if i not in used])


def _dense_twin(ws, pool):
    """``ws`` as an ordinary workspace whose pool is the rows ``pool`` (same X, labels and models)."""
    import dataclasses

    return dataclasses.replace(ws, pool_shards=None, pool_sample=None, pool_sample_rows=None,
                               index={**ws.index, "pool": np.asarray(pool)})


def test_evaluate_scores_a_sharded_workspace_on_the_caches_labelled_candidate_rows(world):
    """The sharded workspace's methods table and d0 sweep are those of the ordinary workspace whose pool is the
    labelled cache's rows outside train / val / query (the protocol's scores, computed on those rows)."""
    from slics_core.explorer import scoring

    ws = load_workspace(world["out"])
    rows = _cache_candidates(ws)
    assert rows.size == len(ws) - sum(len(ws.index[s]) for s in ("train", "val", "query")) > 0
    np.testing.assert_array_equal(scoring.eval_pool(ws), rows)
    twin = _dense_twin(ws, rows)
    for split in ("query", "val"):
        got = scoring.methods_table(ws, 2, split=split, k=20, methods=["S-SLiCS"])
        want = scoring.methods_table(twin, 2, split=split, k=20, methods=["S-SLiCS"])
        assert got == want and all(np.isfinite(r["general"]) and r["n_pairs_general"] > 0 for r in got)
    words = scoring.eval_pool_words(ws)
    assert f"{rows.size:,} labelled rows" in words and f"{N_POOL:,} shard rows carry no labels" in words
    assert scoring.eval_pool_words(twin) is None


def test_evaluate_pool_is_the_training_rows_when_the_cache_has_no_other_rows(world):
    import dataclasses

    from slics_core.explorer import scoring

    ws = load_workspace(world["out"])
    train = np.sort(np.concatenate([ws.index["train"], _cache_candidates(ws)]))
    every = dataclasses.replace(ws, index={**ws.index, "train": train})
    np.testing.assert_array_equal(scoring.eval_pool(every), train)
    assert "training rows" in scoring.eval_pool_words(every)


def _exact_recall(ws, held, rows, found, k=20):
    """recall@k of ``found`` against a brute-force numpy search of the shards' rows, preprocessed as the pool."""
    P = ws.preprocess(held).astype(np.float64)
    P /= np.linalg.norm(P, axis=1, keepdims=True)
    Q = ws.X[rows].astype(np.float64)
    Q /= np.linalg.norm(Q, axis=1, keepdims=True)
    truth = np.argsort(-(Q @ P.T), axis=1, kind="stable")[:, :k]
    return float(np.mean([len(set(a) & set(b)) / k for a, b in zip(found, truth)]))


def test_stored_recall_of_the_on_disk_index_equals_an_independent_exact_search(world, tmp_path):
    """The build's recall@20 (stored beside the index) is the index's top 20 against exact numpy search over the
    shards, on 20 seeded query rows; with re-ranking off (rerank 0) it measures a planted loss."""
    ws = load_workspace(world["out"])
    rec = ws.pool_index_recall()
    rows = np.asarray(rec["query_rows"])
    assert rec["k"] == 20 and rec["n_queries"] == rows.size == 20 and set(rows) <= set(ws.index["query"].tolist())
    index = ws.pool_index()
    assert rec["rerank"] == index.rerank
    found = index.search(ws.X[rows], 20)[0]
    assert rec["recall"] == pytest.approx(_exact_recall(ws, world["pool"], rows, found), abs=1e-12)
    shutil.copytree(world["out"], tmp_path / "ws", ignore=shutil.ignore_patterns(POOL_INDEX))
    coarse = load_workspace(tmp_path / "ws")
    build_pool_index(coarse, **{**SMALL_INDEX, "rerank": 0})
    rec = coarse.pool_index_recall()
    rows = np.asarray(rec["query_rows"])
    found = coarse.pool_index().search(coarse.X[rows], 20)[0]
    truth = _exact_recall(coarse, world["pool"], rows, found)
    assert rec["rerank"] == 0 and rec["recall"] == pytest.approx(truth, abs=1e-12) and truth < 0.95


def test_pool_index_words_say_exact_or_not_measured_without_a_stored_recall(world, tmp_path):
    from slics_core.explorer.scoring import pool_index_words
    from slics_core.explorer.workspace import POOL_RECALL

    shutil.copytree(world["out"], tmp_path / "old")
    (tmp_path / "old" / POOL_INDEX / POOL_RECALL).unlink()  # a workspace built before the measurement
    old = load_workspace(tmp_path / "old")
    assert old.pool_index_recall() is None
    assert "recall not measured (rebuild with `slics workspace --pool-shards` to measure)" in \
        pool_index_words(old, old.pool_index())
    shutil.copytree(world["out"], tmp_path / "bare", ignore=shutil.ignore_patterns(POOL_INDEX))
    bare = load_workspace(tmp_path / "bare")
    with pytest.warns(RuntimeWarning, match="searched exactly"):
        index = bare.pool_index()
    assert "recall is 1.0 by construction" in pool_index_words(bare, index)


def test_evaluate_page_on_a_sharded_workspace_shows_the_table_and_the_index_recall(world, monkeypatch):
    from slics_core.explorer import scoring

    at = _page(monkeypatch, world["out"], "evaluate.py")
    ws = load_workspace(world["out"])
    rows = _cache_candidates(ws)
    assert [m.value for m in at.info if f"Measured on the {rows.size:,} labelled rows" in m.value]
    rec = ws.pool_index_recall()
    line = f"On-disk index: recall@20 {rec['recall']:.3f} against exact search on 20 queries, rerank {rec['rerank']}"
    assert [c.value for c in at.caption if line in c.value]
    table = at.dataframe[0].value
    want = scoring.methods_table(_dense_twin(ws, rows), 2, split="query", k=20, methods=["S-SLiCS"])
    assert table["Method"].tolist() == ["S-SLiCS"]
    recall = next(c for c in table.columns if c.startswith("Gen. Recall@20"))  # its header names its ceiling
    assert float(table["Gen. mAP@20"][0].split(" [")[0]) == pytest.approx(want[0]["general"], abs=5e-4)
    assert float(table[recall][0].split(" [")[0]) == pytest.approx(want[0]["recall20_general"], abs=5e-4)
    assert any("Dictionary health" in m.value for m in at.markdown)

"""Where a sharded pool's search should switch from exact (streamed) search to the on-disk IVF-PQ index (not a test).

For each pool size (default 5 000, 20 000, 100 000, 300 000 rows x 512, float16 shards of at most 100 000 rows in
clip-retrieval's layout, rows around random centres as in ``bench_scale``), with the workspace's own preprocessing
(``Workspace.preprocess``: the ``clip`` mean subtracted, unit rows) as the transform:

* exact: :class:`slics_core.retrieval.StreamingIndex` over :class:`slics_core.shards.PoolShards` (what a sharded
  workspace below the threshold searches), one search of a Retrieve click's query vectors (``--click`` concept
  components of one query), the median of 3 runs after a warm-up;
* IVF-PQ: :func:`slics_core.ondisk_index.build_ondisk_index` with its defaults (build wall and CPU seconds), the same
  search, and recall@20 against the exact search over ``--queries`` concept components (those with a clear 20th
  neighbour).

Printed per size: wall and CPU seconds of each, the load average before and after (the machine is shared), recall.

    python -m benchmarks.bench_index_kind
    python -m benchmarks.bench_index_kind --sizes 5000,20000 --dim 512
"""
import argparse
import os
import shutil
import tempfile
import time
import types
from pathlib import Path

import numpy as np

from benchmarks.bench_retrieval import planted_model
from benchmarks.bench_scale import CENTRES, CONCEPTS, PER, _queries, _spread
from slics_core.explorer.workspace import Workspace
from slics_core.methods import components_of
from slics_core.ondisk_index import build_ondisk_index
from slics_core.retrieval import StreamingIndex
from slics_core.shards import PoolShards

K = 20
SHARD_ROWS = 100_000


def _load():
    return "/".join(f"{v:.1f}" for v in os.getloadavg())


def write_pool(folder, n, dim, centres, seed):
    """``folder/img_emb/img_emb_{i}.npy`` float16 shards of at most SHARD_ROWS rows and their metadata."""
    import pandas as pd

    (folder / "img_emb").mkdir(parents=True)
    (folder / "metadata").mkdir()
    rng = np.random.default_rng(seed)
    for i, a in enumerate(range(0, n, SHARD_ROWS)):
        m = min(SHARD_ROWS, n - a)
        np.save(folder / "img_emb" / f"img_emb_{i}.npy", _spread(rng, m, centres).astype(np.float16))
        pd.DataFrame({"id": [f"r{a + r}" for r in range(m)]}).to_parquet(folder / "metadata" / f"metadata_{i}.parquet")
    return PoolShards(folder)


def timed(fn, repeat=1):
    """``fn()``'s result and its median wall / CPU seconds over ``repeat`` runs."""
    walls, cpus, out = [], [], None
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        out = fn()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return out, float(np.median(walls)), float(np.median(cpus))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="5000,20000,100000,300000")
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--click", type=int, default=12, help="query vectors of one search (one query's concepts)")
    ap.add_argument("--queries", type=int, default=100, help="query vectors of the recall measurement")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = np.random.default_rng(12345 + a.seed)
    centres = rng.standard_normal((CENTRES, a.dim)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    atoms = centres[:CONCEPTS * PER]
    model = planted_model(atoms, CONCEPTS, PER)
    Xq = _queries(np.random.default_rng(999), a.queries, atoms).astype(np.float64)
    V = components_of(model, Xq, "partial")
    concept = np.argmax(np.linalg.norm(V, axis=2) > 0, axis=1)
    Vq = V[np.arange(len(V)), concept].astype(np.float32)  # one concept component per query
    click = V[0][np.linalg.norm(V[0], axis=1) > 0].astype(np.float32)
    click = np.concatenate([click, Vq[1:1 + max(0, a.click - len(click))]])[:a.click]
    print(f"{os.cpu_count()} CPUs; dim {a.dim}; one search = {len(click)} query vectors; recall over {len(Vq)}")
    for n in (int(s) for s in a.sizes.split(",")):
        tmp = Path(tempfile.mkdtemp(prefix="bench-kind-"))
        try:
            shards = write_pool(tmp / "pool", n, a.dim, centres, seed=[a.seed, n])
            sample = np.concatenate([b for _, b in shards.blocks()][:1])[:20_000]
            u = sample / np.linalg.norm(sample, axis=1, keepdims=True)
            ws = types.SimpleNamespace(X=np.zeros((1, a.dim), np.float32), mean=u.mean(axis=0),
                                       preprocessing="clip", n_tokens=32, _opened={})

            def transform(raw, ws=ws):
                return Workspace.preprocess(ws, raw)

            before = _load()
            exact = StreamingIndex(shards, transform)
            exact.search(click, K)  # warm-up: pages in the cache, as on a workspace in use
            _, ex_wall, ex_cpu = timed(lambda: exact.search(click, K), repeat=3)  # noqa: B023 (called here)
            truth = exact.search(Vq, K + 1)
            ivf, b_wall, b_cpu = timed(lambda: build_ondisk_index(shards.arrays, tmp / "ix", transform=transform))  # noqa: B023
            ivf.search(click, K)
            _, s_wall, s_cpu = timed(lambda: ivf.search(click, K), repeat=3)  # noqa: B023
            found = ivf.search(Vq, K)[0]
            clear = (truth[1][:, K - 1] - truth[1][:, K]) > 1e-4
            recall = np.mean([np.intersect1d(f, e).size / K for f, e, c in zip(found, truth[0][:, :K], clear) if c])
            print(f"n={n:>7}: exact streamed search {ex_wall:.3f} s wall / {ex_cpu:.3f} s CPU | IVF-PQ build "
                  f"{b_wall:.1f} s / {b_cpu:.1f} s CPU (n_list {ivf.n_list}, rerank {ivf.rerank}), search "
                  f"{s_wall:.3f} s / {s_cpu:.3f} s CPU, recall@{K} {recall:.3f} on {int(clear.sum())} clear queries"
                  f" | load {before} -> {_load()}",
                  flush=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

"""A pool larger than memory: sharded float16 embeddings, the on-disk index, concept-filtered queries (not a test).

Target (issue 32): 10 shards x 10^6 x 512 float16 (10.2 GB); build with peak RSS <= 4 GB, server time
per concept-filtered query (projection included) <= 100 ms, recall@20 against exact search >= 0.95.

    python -m benchmarks.bench_scale                                # 2 x 100 000 x 512 (small default)
    python -m benchmarks.bench_scale --shards 4 --rows 250000       # 10^6 rows (docs/scale.md)
    python -m benchmarks.bench_scale --shards 10 --rows 1000000     # the issue's 10^7 rows
    python -m benchmarks.bench_scale --shards 4 --rows 250000 --backend lancedb   # LanceDB IVF_PQ

Steps: (1) writes the shards in clip-retrieval's layout (``DATA/img_emb/img_emb_{i}.npy``, float16,
kept and reused by later runs with the same sizes) of rows spread around 2 000 random centres
(cosine ~0.86 to their centre, so a query's neighbours are graded, not a band of near-ties), the
first 96 of which are the planted model's atoms (12 concepts x 8);
(2) builds the index over the memory-mapped shards (``slics_core.ondisk_index``, or a LanceDB table);
(3) runs held-out queries (1-3 concepts, one atom each, plus noise): each is projected on its
concepts with the planted model (``slics_core.methods.components_of``, partial mode) and the
component of its first concept is searched, k = 20; (4) computes the exact top-20 over the same
float16 rows, shard by shard.

Printed: build time, peak RSS of this process after the build and after the queries (the exact
search runs last, in bounded chunks; the peak is reset before the build and before the queries where
Linux allows it), bytes on disk, server time per query (p50, p95), recall@20
over the queries whose 20th and 21st exact neighbours differ by more than 1e-4 (a near-tie makes
recall meaningless; their share is printed).
"""
import argparse
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.bench_retrieval import planted_model
from slics_core.methods import components_of
from slics_core.ondisk_index import build_ondisk_index, open_ondisk_index
from slics_core.retrieval import ExactIndex

K = 20
CONCEPTS, PER = 12, 8
CENTRES = 2000  # the pool's rows lie around these; the first CONCEPTS * PER are the model's atoms
NOISE = 0.6


def _spread(rng, n, centres):
    """Rows around random centres with isotropic noise (cosine ~0.86 to their centre): graded neighbours."""
    d = centres.shape[1]
    X = centres[rng.integers(len(centres), size=n)]
    return X + (NOISE / np.sqrt(d)) * rng.standard_normal((n, d), dtype=np.float32)


def _queries(rng, n, atoms):
    """Held-out images made of 1-3 concepts (one planted atom each, weights 0.5-1) plus noise."""
    d = atoms.shape[1]
    X = (NOISE / np.sqrt(d)) * rng.standard_normal((n, d), dtype=np.float32)
    for i in range(n):
        for j in rng.choice(CONCEPTS, size=rng.integers(1, 4), replace=False):
            X[i] += rng.uniform(0.5, 1.0) * atoms[j * PER + rng.integers(PER)]
    return X


def _reset_peak_rss():
    """Start a new peak (Linux: writing 5 to /proc/self/clear_refs resets VmHWM); else the peak stays the process's."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def _peak_rss_gib():
    """Peak resident memory since the last :func:`_reset_peak_rss` (VmHWM), else of the whole process."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 2**20  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def _bytes(folder):
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())


def write_shards(data, n_shards, rows, dim, centres, seed=0):
    """``data/img_emb/img_emb_{i}.npy`` float16 shards (reused when they already have this shape)."""
    folder = Path(data) / "img_emb"
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"img_emb_{i}.npy" for i in range(n_shards)]
    for i, path in enumerate(paths):
        if path.exists() and np.load(path, mmap_mode="r").shape == (rows, dim):
            continue
        rng = np.random.default_rng([seed, i])
        out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float16, shape=(rows, dim))
        for s in range(0, rows, 100_000):
            m = min(100_000, rows - s)
            out[s:s + m] = _spread(rng, m, centres)
        out.flush()
        del out
    return [np.load(p, mmap_mode="r") for p in paths]


def exact_top(shards, V, k):
    """Exact top-``k + 1`` positions and cosines over the shards, 100 000 rows at a time."""
    best_i = np.zeros((len(V), 0), dtype=np.int64)
    best_s = np.zeros((len(V), 0), dtype=np.float32)
    offset = 0
    for shard in shards:
        for s in range(0, shard.shape[0], 100_000):
            i, sc = ExactIndex(np.asarray(shard[s:s + 100_000], dtype=np.float32)).search(V, k + 1)
            best_i = np.concatenate([best_i, i + offset + s], axis=1)
            best_s = np.concatenate([best_s, sc], axis=1)
            order = np.lexsort((best_i, -best_s), axis=1)[:, :k + 1]
            best_i, best_s = np.take_along_axis(best_i, order, 1), np.take_along_axis(best_s, order, 1)
        offset += shard.shape[0]
    return best_i, best_s


class LanceDBPool:
    """LanceDB IVF_PQ over the same shards (cosine, refine_factor = exact re-ranking), for comparison."""

    def __init__(self, shards, folder, *, n_list, pq_m, nprobe, refine):
        import lancedb  # a benchmark-only comparison, not a dependency of the library
        import pyarrow as pa

        dim = shards[0].shape[1]
        schema = pa.schema([pa.field("pos", pa.int64()), pa.field("vector", pa.list_(pa.float32(), dim))])

        def batches():
            offset = 0
            for shard in shards:
                for s in range(0, shard.shape[0], 65_536):
                    X = np.asarray(shard[s:s + 65_536], dtype=np.float32)
                    pos = np.arange(offset + s, offset + s + len(X), dtype=np.int64)
                    vec = pa.FixedSizeListArray.from_arrays(pa.array(X.reshape(-1)), dim)
                    yield pa.RecordBatch.from_arrays([pa.array(pos), vec], schema=schema)
                offset += shard.shape[0]

        db = lancedb.connect(str(folder))
        self.table = db.create_table("pool", data=batches(), schema=schema, mode="overwrite")
        self.table.create_index(metric="cosine", num_partitions=n_list, num_sub_vectors=pq_m,
                                index_type="IVF_PQ", max_iterations=10)
        self.nprobe, self.refine = nprobe, refine

    def search(self, v, k):
        q = self.table.search(v[0]).metric("cosine").nprobes(self.nprobe).limit(k).select(["pos"])
        if self.refine:
            q = q.refine_factor(self.refine)
        tab = q.to_arrow()
        return np.asarray(tab["pos"])[None], 1 - np.asarray(tab["_distance"])[None]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--rows", type=int, default=100_000, help="rows per shard")
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--data", default=None, help="folder of the shards (default: a temporary one, removed)")
    ap.add_argument("--backend", choices=("faiss", "lancedb"), default="faiss")
    ap.add_argument("--n-list", type=int, default=None)
    ap.add_argument("--pq-m", type=int, default=None)
    ap.add_argument("--nprobe", type=int, default=None)
    ap.add_argument("--rerank", type=int, default=None,
                    help="candidates re-ranked exactly (0: none; default: the index's default)")
    ap.add_argument("--sweep", default=None, metavar="NPROBE:RERANK,...",
                    help="also search the same index with these settings, e.g. 62:200,62:1000,124:500")
    ap.add_argument("--reuse", action="store_true",
                    help="faiss: search the index an earlier run with the same --data left (no build; with --sweep)")
    ap.add_argument("--seed", type=int, default=0,
                    help="seeds the centres, the shards and the queries (0: the data of docs/scale.md's "
                         "first tables); a new seed is data the defaults were not chosen on")
    a = ap.parse_args()
    data = Path(a.data) if a.data else Path(tempfile.mkdtemp(prefix="bench-scale-"))
    n = a.shards * a.rows
    rng = np.random.default_rng(12345 + a.seed)
    centres = rng.standard_normal((CENTRES, a.dim)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    atoms = centres[:CONCEPTS * PER]
    model = planted_model(atoms, CONCEPTS, PER)
    print(f"pool {a.shards} shards x {a.rows} x {a.dim} float16 = {n} rows "
          f"({n * a.dim * 2 / 1e9:.2f} GB) in {data}; seed {a.seed}; {os.cpu_count()} CPUs")
    t = time.perf_counter()
    shards = write_shards(data, a.shards, a.rows, a.dim, centres, seed=a.seed)
    print(f"shards ready in {time.perf_counter() - t:.1f} s; peak RSS {_peak_rss_gib():.2f} GiB")

    folder = data / f"index-{a.backend}"
    reuse = a.reuse and a.backend == "faiss" and folder.is_dir()
    if not reuse:
        shutil.rmtree(folder, ignore_errors=True)
    _reset_peak_rss()
    t, c = time.perf_counter(), time.process_time()
    if a.backend == "faiss":
        kw = {} if a.rerank is None else {"rerank": a.rerank}
        index = (open_ondisk_index(folder, shards, **kw) if reuse
                 else build_ondisk_index(shards, folder, n_list=a.n_list, pq_m=a.pq_m, **kw))
        if a.nprobe:
            index.nprobe = a.nprobe
        settings = (f"n_list {index.n_list}, pq_m {index.index.pq.M if hasattr(index.index, 'pq') else a.pq_m}, "
                    f"nprobe {index.nprobe}, rerank {index.rerank}")
    else:
        n_list = a.n_list or int(round(np.sqrt(n)))
        nprobe = a.nprobe or max(16, n_list // 16)
        rerank = 200 if a.rerank is None else a.rerank
        refine = -(-rerank // K) if rerank else 0
        index = LanceDBPool(shards, folder, n_list=n_list, pq_m=a.pq_m or a.dim // 16, nprobe=nprobe, refine=refine)
        settings = f"partitions {n_list}, sub-vectors {a.pq_m or a.dim // 16}, nprobes {nprobe}, refine_factor {refine}"
    build, build_cpu = time.perf_counter() - t, time.process_time() - c
    done = "opened (--reuse)" if reuse else "build"
    print(f"{a.backend}: {settings}; {done} {build:.1f} s wall / {build_cpu:.1f} s CPU; "
          f"{_bytes(folder) / 1e6:.1f} MB on disk; peak RSS after the build {_peak_rss_gib():.2f} GiB")

    Xq = _queries(np.random.default_rng(999), a.queries, atoms).astype(np.float64)
    V = components_of(model, Xq, "partial")  # (q, concepts, d): the query's concept components
    concept = np.argmax(np.linalg.norm(V, axis=2) > 0, axis=1)
    runs = {}
    _reset_peak_rss()
    if a.backend != "faiss":
        plan = [None]
    else:
        plan = [(index.nprobe, index.rerank)] + ([(index.nprobe, 0)] if index.rerank else [])
        for item in (a.sweep.split(",") if a.sweep else []):
            nprobe, rerank = (int(v) for v in item.split(":"))
            plan += [(nprobe, rerank)] if (nprobe, rerank) not in plan else []
    for setting in plan:
        if setting is not None:
            index.nprobe, index.rerank = setting
        walls, found = [], []
        index.search(V[0, concept[0]][None].astype(np.float32), K)  # warm-up
        for x, j in zip(Xq, concept):
            w = time.perf_counter()
            v = components_of(model, x[None], "partial")[0, j]
            pos, _ = index.search(v[None].astype(np.float32), K)
            walls.append(time.perf_counter() - w)
            found.append(pos[0])
        walls = np.array(walls) * 1e3
        runs[setting] = found
        print(f"{len(walls)} concept-filtered queries (nprobe, rerank {setting}), projection included: "
              f"p50 {np.percentile(walls, 50):.1f} ms, p95 {np.percentile(walls, 95):.1f} ms; "
              f"peak RSS after the queries {_peak_rss_gib():.2f} GiB")

    Vq = V[np.arange(len(V)), concept].astype(np.float32)
    t = time.perf_counter()
    top, sc = exact_top(shards, Vq, K)
    clear = (sc[:, K - 1] - sc[:, K]) > 1e-4
    print(f"exact search {time.perf_counter() - t:.1f} s; {int(clear.sum())} of {len(clear)} queries "
          "have a clear 20th neighbour")
    for setting, found in runs.items():
        recall = np.mean([len(set(f) & set(e)) / K for f, e, c in zip(found, top[:, :K], clear) if c])
        print(f"recall@{K} vs exact (nprobe, rerank {setting}): {recall:.4f}")
    if not a.data:
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()

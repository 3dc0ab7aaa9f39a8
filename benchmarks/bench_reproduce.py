"""Compute time of ``slics reproduce`` at the paper's COCO scale, on planted synthetic embeddings (not a test).

The paper's COCO run: 118 000 labelled images, 20 000 training, 500 validation,
1 000 query items and the rest as the candidate pool; the d0 sweep 5..20 on the
validation split; S-SVD, S-SLiCS (5 mini-batch seeds, batch 2000) and UF on the
query split. Embedding is not part of it: the embeddings here are made from
planted concept cones (:func:`slics_core.synthetic.make_concept_cones`, 12
concepts, 512 dimensions, noise) with one sub-label per active concept (its
dominant atom), and imported with ``--dataset precomputed``. Text methods
(U-SLiCS, F-SpLiCE, SpLiCE) are skipped: synthetic data has no text encoder.

Runs ``python -m slics_core reproduce`` as a child process and prints its wall
time and CPU time (user + system of the child), then, with ``--resume-check``,
runs the same command again to show that finished runs are reused. ``--scale``
shrinks every size (items, training split, validation, query) for a quick run.

    python -m benchmarks.bench_reproduce [--scale 0.25] [--sweep 5 20] [--seeds 5] [--resume-check]
"""
import argparse
import csv
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from slics_core.synthetic import make_concept_cones


def write_dataset(folder, n, dim, n_concepts, n_atoms, noise, seed):
    cones = make_concept_cones(n_samples=n, n_features=dim, n_concepts=n_concepts, n_atoms=n_atoms,
                               mean_active=2.3, noise=noise, random_state=seed)
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "emb.npy", cones.X.astype(np.float32), allow_pickle=False)
    with open(folder / "meta.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "labels", "sub_labels"])
        for i in range(n):
            active = np.flatnonzero(cones.Y[i])
            w.writerow([f"item{i}", "|".join(f"c{j}" for j in active),
                        "|".join(f"c{j}/s{cones.sublabels[i, j]}" for j in active)])
    return folder / "emb.npy", folder / "meta.csv"


def run(cmd):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return proc, wall, cpu


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of the COCO sizes (1.0: 118 000 items)")
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--concepts", type=int, default=12)
    ap.add_argument("--planted-atoms", type=int, default=8)
    ap.add_argument("--noise", type=float, default=0.5)
    ap.add_argument("--sweep", type=int, nargs=2, default=(5, 20))
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=2000)
    ap.add_argument("--n-iter", type=int, default=10)
    ap.add_argument("--out", default=None, help="work folder (default: a temporary one)")
    ap.add_argument("--resume-check", action="store_true", help="run the same command a second time")
    a = ap.parse_args()
    s = a.scale
    n, n_train = int(118_000 * s), int(20_000 * s)
    n_val, n_query = max(20, int(500 * s)), max(20, int(1000 * s))
    work = Path(a.out or tempfile.mkdtemp(prefix="slics-bench-reproduce-"))
    t = time.perf_counter()
    emb, meta = write_dataset(work / "data", n, a.dim, a.concepts, a.planted_atoms, a.noise, seed=0)
    print(f"planted data {n} x {a.dim} written in {time.perf_counter() - t:.1f} s to {work}")
    cmd = [sys.executable, "-m", "slics_core", "reproduce", "--dataset", "precomputed", "--embeddings", str(emb),
           "--metadata", str(meta), "--preprocessing", "unit", "--out-dir", str(work / "run"),
           "--n-train", str(n_train), "--n-val", str(n_val), "--n-query", str(n_query),
           "--batch-size", str(a.batch_size), "--n-iter", str(a.n_iter), "--seeds", str(a.seeds),
           "--sweep", str(a.sweep[0]), str(a.sweep[1]), "--methods", "S-SVD,S-SLiCS,UF", "--no-progress"]
    print("command:", " ".join(cmd))
    print(f"machine: {os.cpu_count()} CPUs visible")
    runs = [("first run", *run(cmd))]
    if a.resume_check:
        runs.append(("same command again", *run(cmd)))
    for label, proc, wall, cpu in runs:
        lines = proc.stderr.splitlines()
        est = [x for x in lines if x.startswith("estimate:")]
        comp = [x for x in lines if x.startswith("compute time:")]
        print(f"--- {label}: exit {proc.returncode}, wall {wall:.1f} s, CPU {cpu:.1f} s (child user+system)")
        for x in est + comp:
            print("   ", x)
        if proc.returncode:
            print(proc.stderr[-3000:])
        else:
            print("\n".join(proc.stdout.splitlines()[-8:]))


if __name__ == "__main__":
    main()

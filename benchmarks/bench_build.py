"""Wall and CPU time of ``slics workspace`` (and optionally ``slics emoji-build``) with ``--jobs 1`` and more
(not a test: the ratios are measured in one run, the jobs alternating, the load average beside them).

The workspace: a COCO-shaped synthetic precomputed dataset (default 20 000 x 512 float32, 12 concepts, about
2.3 labels per row, one sub-label per active concept: :func:`benchmarks.bench_reproduce.write_dataset`),
imported once with ``slics embed --dataset precomputed``, then built with ``--d0 5 10 15 20`` (no text tower:
S-SVD and S-SLiCS at four d0, and UF, nine fits). Each build is a child process; its wall time, the CPU time
of it and its workers (user + system, ``RUSAGE_CHILDREN``), and the fit stage's wall time (the ``fit`` stage
lines ``slics workspace`` prints with their seconds) are reported, with the 1-minute load average before
and after it. The built folders of every job count are compared file by file (they must be identical).

    python -m benchmarks.bench_build [--rows 20000] [--jobs 1 2 1 2] [--n-train N] [--emoji] [--emoji-scale 1]
"""
import argparse
import datetime
import io
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.bench_reproduce import write_dataset

_FIT_LINE = re.compile(r"^\[(?:workspace|emoji)\] (fit[^:]*): ([0-9.]+) s$")
_STAGE_LINE = re.compile(r"^\[(?:workspace|emoji)\] (.+): ([0-9.]+) s$")


def run(cmd, env=None):
    """``(process, wall s, CPU s of the child and the workers it waited for, load before, load after)``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load0 = os.getloadavg()[0]
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return proc, wall, cpu, load0, os.getloadavg()[0]


def stage_seconds(stderr: str, pattern=_STAGE_LINE) -> dict:
    out = {}
    for line in stderr.splitlines():
        m = pattern.match(line.strip())
        if m:
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(2))
    return out


def _others(stderr: str) -> str:
    """The stages other than the fits, longest first, with their seconds."""
    stages = stage_seconds(stderr)
    return ", ".join(f"{k} {v:.1f}" for k, v in sorted(stages.items(), key=lambda kv: -kv[1])
                     if not _FIT_LINE.match(f"[workspace] {k}: {v} s"))


def files(folder: Path) -> dict:
    """Every file under ``folder``, by relative path, with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def differing_files(one: dict, two: dict) -> list:
    """Names (of :func:`files` snapshots) that differ between two builds, beyond what may differ: a map layout
    (``pagecache/tsne-*.npz``) keeps the wall seconds it took beside it, so only its ``xy`` is compared."""
    out = sorted(set(one) ^ set(two))
    for name in sorted(set(one) & set(two)):
        if one[name] == two[name]:
            continue
        if name.startswith("pagecache/tsne-") and name.endswith(".npz"):
            a, b = (np.load(io.BytesIO(f[name]), allow_pickle=False) for f in (one, two))
            if sorted(a.files) == sorted(b.files) == ["seconds", "xy"] and np.array_equal(a["xy"], b["xy"]):
                continue
        out.append(name)
    return out


def _synthetic_cache(work, a):
    """The COCO-shaped synthetic dataset, imported as an embedding cache; its folder."""
    t = time.perf_counter()
    emb, meta = write_dataset(work / "data", a.rows, a.dim, a.concepts, 8, 0.5, seed=0)
    cache = work / "cache"
    proc, *_ = run([sys.executable, "-m", "slics_core", "embed", "--dataset", "precomputed", "--embeddings",
                    str(emb), "--metadata", str(meta), "--cache", str(cache), "--no-progress", "--overwrite"])
    if proc.returncode:
        sys.exit(proc.stderr)
    print(f"data {a.rows} x {a.dim} written and imported in {time.perf_counter() - t:.1f} s")
    return cache


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20_000, help="items of the synthetic dataset (20 000)")
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--concepts", type=int, default=12)
    ap.add_argument("--d0", type=int, nargs="+", default=[5, 10, 15, 20])
    ap.add_argument("--n-iter", type=int, default=10)
    ap.add_argument("--n-train", type=int, default=None, help="training items (default: the command's, 60%% of "
                                                              "the rest; the paper's COCO: 20000)")
    ap.add_argument("--jobs", type=int, nargs="+", default=[1, 2, 1, 2], help="--jobs of each build, in order")
    ap.add_argument("--emoji", action="store_true", help="also time `slics emoji-build --rebuild` (minutes)")
    ap.add_argument("--emoji-scale", type=float, default=1.0, help="$SLICS_EMOJI_SCALE of the emoji builds")
    ap.add_argument("--emoji-only", action="store_true", help="only the emoji builds (no synthetic workspace)")
    ap.add_argument("--out", default=None, help="work folder (default: a temporary one)")
    a = ap.parse_args()
    work = Path(a.out or tempfile.mkdtemp(prefix="slics-bench-build-"))
    print(f"date {datetime.datetime.now().isoformat(timespec='minutes')}, {os.cpu_count()} CPUs visible, "
          f"load average {os.getloadavg()[0]:.2f}; work folder {work}")
    rows, built = [], {}
    for i, jobs in enumerate([] if a.emoji_only else a.jobs):
        if i == 0:
            cache = _synthetic_cache(work, a)
        out = work / f"ws-jobs{jobs}"
        cmd = [sys.executable, "-m", "slics_core", "workspace", "--cache", str(cache), "--out", str(out), "--vocab",
               "none", "--d0", *map(str, a.d0), "--n-iter", str(a.n_iter), "--jobs", str(jobs), "--overwrite",
               *(["--n-train", str(a.n_train)] if a.n_train else [])]
        if i == 0:
            print("command:", " ".join(cmd))
        proc, wall, cpu, l0, l1 = run(cmd)
        if proc.returncode:
            sys.exit(proc.stderr[-3000:])
        fit = sum(stage_seconds(proc.stderr, _FIT_LINE).values())
        rows.append(("workspace", jobs, wall, cpu, fit, l0, l1))
        print(f"workspace --jobs {jobs}: wall {wall:6.1f} s, CPU {cpu:6.1f} s, fit stage {fit:6.1f} s "
              f"(load {l0:.2f} -> {l1:.2f}); other stages (s): {_others(proc.stderr)}", flush=True)
        snapshot = files(out)
        for other in built.values():
            if differing_files(snapshot, other):
                print("!! the workspace differs from the one built with other --jobs: "
                      f"{differing_files(snapshot, other)}")
        built[jobs] = snapshot
    if a.emoji or a.emoji_only:
        env = {**os.environ, "SLICS_EMOJI_SCALE": str(a.emoji_scale)}
        emoji_built = {}
        for jobs in a.jobs:
            cmd = [sys.executable, "-m", "slics_core", "emoji-build", "--rebuild", "--cache-dir", str(work / "emoji"),
                   "--jobs", str(jobs)]
            proc, wall, cpu, l0, l1 = run(cmd, env)
            if proc.returncode:
                sys.exit(proc.stderr[-3000:])
            fit = sum(stage_seconds(proc.stderr, _FIT_LINE).values())
            rows.append(("emoji-build", jobs, wall, cpu, fit, l0, l1))
            snapshot = files(next((work / "emoji").glob("workspace-*")))
            for other in emoji_built.values():
                if differing_files(snapshot, other):
                    print("!! the emoji workspace differs from the one built with other --jobs: "
                          f"{differing_files(snapshot, other)}")
            emoji_built[jobs] = snapshot
            print(f"emoji-build --jobs {jobs}: wall {wall:6.1f} s, CPU {cpu:6.1f} s, fit stage {fit:6.1f} s "
                  f"(load {l0:.2f} -> {l1:.2f}); other stages (s): {_others(proc.stderr)}", flush=True)
    print("\n| build | --jobs | wall (s) | CPU (s) | fit stage (s) | load before -> after |\n|---|---|---|---|---|---|")
    for what, jobs, wall, cpu, fit, l0, l1 in rows:
        print(f"| {what} | {jobs} | {wall:.1f} | {cpu:.1f} | {fit:.1f} | {l0:.2f} -> {l1:.2f} |")
    for what in ("workspace", "emoji-build"):
        mine = [r for r in rows if r[0] == what]
        best = {j: min(r[2] for r in mine if r[1] == j) for j in {r[1] for r in mine}}
        fits = {j: min(r[4] for r in mine if r[1] == j) for j in {r[1] for r in mine}}
        if 1 in best:
            for j in sorted(best):
                if j != 1:
                    print(f"{what}: --jobs {j} against 1 (best of each): whole build {best[1] / best[j]:.2f}x, "
                          f"fit stage {fits[1] / max(fits[j], 1e-9):.2f}x")


if __name__ == "__main__":
    main()

"""Time of the dictionary-health columns, mostly *misplaced*'s null (:func:`slics_core.analysis.nearest_other_null`:
a seeded parametric bootstrap, ``MISPLACED_NULL_SAMPLES * M * d`` multiply-adds), at the app's dictionary sizes.

Random atoms in 12 concepts; the items' codes are a small random matrix (the null does not depend on them). Each
size is timed on one BLAS thread and on the default threads, wall and CPU seconds side by side (best of 3).

    python -m benchmarks.bench_health
"""
from __future__ import annotations

import time

import numpy as np
from threadpoolctl import threadpool_limits

from slics_core.analysis import health_columns

SIZES = ((60, 64), (240, 512), (800, 512))  # (atoms, dimension): the emoji world, CLIP-sized dictionaries


def timed(f, *args):
    w, c = time.perf_counter(), time.process_time()
    f(*args)
    return time.perf_counter() - w, time.process_time() - c


def main():
    rng = np.random.default_rng(0)
    print("atoms\tdim\tone thread wall / CPU s\tdefault threads wall / CPU s")
    for M, d in SIZES:
        atoms = rng.standard_normal((M, d))
        groups = np.arange(M) % 12
        codes = np.abs(rng.standard_normal((200, M)))
        Y = np.ones((200, 12), dtype=bool)
        row = [f"{M}\t{d}"]
        for threads in (1, None):
            with threadpool_limits(threads):
                best = min((timed(health_columns, codes, atoms, groups, Y) for _ in range(3)), key=lambda t: t[0])
            row.append(f"{best[0]:.3f} / {best[1]:.3f}")
        print("\t".join(row))


if __name__ == "__main__":
    main()

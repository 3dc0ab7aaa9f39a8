"""Issue 39's oversubscription check: on a machine with one busy process per core, ``n_jobs=2`` is not
slower than ``n_jobs=1`` by more than 10 %.

The one timed assertion in ``tests/`` (DEVELOPERS.md keeps speed in ``benchmarks/``): issue 39 asks for
this check as a test, because the failure it guards against is not a few per cent but a fit 16 times
slower (threads woken once per 60 us Lanczos product, OpenMP workers spinning against the busy
processes: docs/performance.md, "n_jobs"). The measurement is the benchmark's own
(``benchmarks.bench_fit.alternate_n_jobs``, also printed by ``python -m benchmarks.bench_fit
--oversubscribed``): the two settings alternate (the order flips every round) and the medians are compared,
so load from other programs that comes and goes falls on both. The fit is CPU-bound; the CPU seconds
are compared too (spinning threads show there even when the wall clock is noisy).
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from benchmarks.bench_fit import alternate_n_jobs, busy_processes, make_data  # the repository root is on sys.path
from slics_core import SLiCS

pytestmark = pytest.mark.slow

#: About 0.4 s per fit on one free core; 7 rounds of two fits beside the busy processes take 15-40 s here.
CASE = dict(n=4000, d=512, S=12, d0=10, T=2, batch=2000, seed=3)
ROUNDS = 7
#: The issue's bound: n_jobs=2 at most 10 % slower than n_jobs=1.
SLOWER_AT_MOST = 1.10


def test_issue39_n_jobs_2_is_not_slower_than_1_beside_one_busy_process_per_core():
    X, Y = make_data(CASE["n"], CASE["d"], CASE["S"], CASE["d0"], seed=CASE["seed"])
    kw = dict(n_atoms=CASE["d0"], n_iter=CASE["T"], batch_size=CASE["batch"], random_state=0)
    for jobs in (1, 2):  # compile or load the kernels, start the pool thread: not part of the timings
        SLiCS(**kw, n_jobs=jobs).fit(X[:600], Y[:600])
    with busy_processes() as procs:
        assert len(procs) == len(os.sched_getaffinity(0)) and all(p.poll() is None for p in procs)
        times, same = alternate_n_jobs(X, Y, kw, rounds=ROUNDS)
        assert all(p.poll() is None for p in procs)  # they were spinning throughout
    wall = {j: float(np.median([w for w, _ in t])) for j, t in times.items()}
    cpu = {j: float(np.median([c for _, c in t])) for j, t in times.items()}
    report = (f"n_jobs=1 {wall[1]:.3f} s wall / {cpu[1]:.3f} s CPU, n_jobs=2 {wall[2]:.3f} s / {cpu[2]:.3f} s "
              f"(medians of {ROUNDS}; walls {[round(w, 2) for w, _ in times[1]]} and "
              f"{[round(w, 2) for w, _ in times[2]]}; load average {os.getloadavg()[0]:.1f})")
    print(report)
    assert same, "the atoms depend on n_jobs"
    assert cpu[2] <= SLOWER_AT_MOST * cpu[1], "n_jobs=2 burns more CPU than one thread: " + report
    assert wall[2] <= SLOWER_AT_MOST * wall[1], "n_jobs=2 is slower than one thread: " + report

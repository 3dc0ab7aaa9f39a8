"""Benchmark: SLiCS.fit against a straightforward implementation of Algorithm 1.

The straightforward reference is written here, independently of the library:
scipy's NNLS per sample for the coefficient step and a full SVD of the
residual for every atom update. Both run on the same data with the same
number of epochs; the script prints the times, their ratio and the final
reconstruction errors (mean squared, with fresh NNLS coefficients).

Then a COCO-sized mini-batch fit (20000 x 512, S=12, d0=10, T=10, batch 2000)
and, with ``--coco-full``, a fit of the size of all of COCO train2017
(118000 x 512, same settings). Times are wall-clock and CPU seconds of this
process (the fit uses one BLAS thread); memory is the process's peak resident
set size (``getrusage``), printed before and after the fit. The CPU seconds count every thread of
the process, so with ``--n-jobs`` their ratio to the wall seconds shows how many cores were busy. A tiny fit first
compiles or loads the numba kernels, so that no timing includes that.

    python -m benchmarks.bench_fit              # both parts
    python -m benchmarks.bench_fit --quick      # smaller sizes, for a smoke run
    python -m benchmarks.bench_fit --coco-full  # only the full-COCO-sized fit
    python -m benchmarks.bench_fit --coco --n-jobs 1 2        # only the COCO-sized fit, on 1 then 2 threads
    python -m benchmarks.bench_fit --coco-full --n-jobs 1 4 16
    python -m benchmarks.bench_fit --oversubscribed             # n_jobs 1 vs 2, quiet and one busy process per core
    python -m benchmarks.bench_fit --oversubscribed --coco --rounds 2   # the same on the COCO-sized fit

With ``--n-jobs``, the mini-batch fit runs once per value (``SLiCS(n_jobs=...)``), on the same data,
and the script prints each run's wall and CPU seconds, the wall speed-up over the first value and
whether the atoms are identical to the first run's (they must be).

``--oversubscribed`` (issue 39) fits a 6000 x 512 problem (S=12, d0=10, T=2, batch 2000) with ``n_jobs=1`` and
``n_jobs=2`` alternately, ``--rounds`` times each (the order flips every round), first on the machine as it is,
then with one busy process (a Python ``while True`` loop) per core beside it, and prints the medians, their
ratio, the median of the rounds' own ratios and the load average (``--coco``: the COCO-sized fit instead).
``tests/test_n_jobs_oversubscribed.py`` runs the busy half as the issue's check.

Run from the repository root: ``python -m benchmarks.bench_fit``.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import resource
import subprocess
import sys
import time

import numpy as np
from scipy.optimize import nnls
from threadpoolctl import threadpool_limits

from slics_core import SLiCS
from slics_core.synthetic import make_concept_cones


def unit(X):
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def reference_fit(X, Y, d0, n_iter, batch_size=None, random_state=None):
    """Algorithm 1 written plainly: per-sample scipy NNLS, full SVD per atom.

    With ``batch_size``, each epoch splits the same shuffle as ``SLiCS`` with
    the same ``random_state`` (``RandomState.permutation`` per epoch, sorted
    chunks) and runs the coefficient and atom steps batch by batch (sec. 3.3).
    Atoms no sample uses are left as they are.
    """
    n, d = X.shape
    S = Y.shape[1]
    blocks = []
    for j in range(S):
        _, _, Vt = np.linalg.svd(X[Y[:, j]], full_matrices=False)
        block = Vt[:d0].copy()
        for k in range(d0):
            u = X[Y[:, j]] @ block[k]
            if np.linalg.norm(np.maximum(u, 0)) < np.linalg.norm(np.maximum(-u, 0)):
                block[k] = -block[k]
        blocks.append(block)
    B = np.vstack(blocks)
    groups = np.repeat(np.arange(S), d0)
    rng = np.random.RandomState(random_state) if isinstance(random_state, (int, type(None))) else random_state
    for _ in range(n_iter):
        if batch_size is None or batch_size >= n:
            batches = [np.arange(n)]
        else:
            order = rng.permutation(n)
            batches = [np.sort(order[i:i + batch_size]) for i in range(0, n, batch_size)]
        for idx in batches:
            A = np.zeros((idx.size, B.shape[0]))
            for r, i in enumerate(idx):
                P = np.flatnonzero(Y[i, groups])
                A[r, P], _ = nnls(B[P].T, X[i])
            for m in range(B.shape[0]):
                L = np.flatnonzero(A[:, m])
                if L.size == 0:
                    continue
                E = X[idx[L]] - A[L] @ B + np.outer(A[L, m], B[m])
                _, s, Vt = np.linalg.svd(E, full_matrices=False)
                b = Vt[0]
                beta = E @ b
                p = 1.0 if np.linalg.norm(np.maximum(beta, 0)) >= np.linalg.norm(np.maximum(-beta, 0)) else -1.0
                B[m] = p * b
                A[L, m] = np.maximum(p * beta, 0)
    return B, groups


def reference_error(X, Y, B, groups):
    err = 0.0
    for i in range(X.shape[0]):
        P = np.flatnonzero(Y[i, groups])
        _, r = nnls(B[P].T, X[i])
        err += r * r
    return err / X.shape[0]


def make_data(n, d, S, d0, seed):
    data = make_concept_cones(n_samples=n, n_features=d, n_concepts=S, n_atoms=2 * d0,
                              noise=0.5, random_state=seed)
    return unit(data.X), data.Y


def peak_rss_mb():
    """Peak resident set size of this process so far, in MB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed(fn):
    """Run ``fn()``; return (result, wall seconds, CPU seconds)."""
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w0, time.process_time() - c0


def warm_kernels(n_jobs=(None,)):
    """Fit a tiny problem once (per ``n_jobs``), so that no timed fit includes compiling or loading the numba
    kernels (the threaded Lanczos product is a kernel of its own)."""
    X, Y = make_data(600, 16, 3, 2, seed=9)

    def fits():
        for jobs in n_jobs:
            SLiCS(n_atoms=2, n_iter=2, batch_size=300, random_state=0, n_jobs=jobs).fit(X, Y)

    _, wall, cpu = timed(fits)
    print(f"kernels ready      : {wall:8.3f} s wall  {cpu:8.3f} s CPU (numba: compiled once per machine, "
          "then loaded from its cache; not part of the timings below)")


def minibatch_case(label, n, d, S, d0, T, batch, seed, n_jobs=(None,)):
    X, Y = make_data(n, d, S, d0, seed=seed)
    print(f"== {label}: n={n}, d={d}, S={S}, d0={d0}, T={T}, batch={batch}")
    first = None
    for jobs in n_jobs:
        rss0 = peak_rss_mb()
        model, wall, cpu = timed(lambda jobs=jobs: SLiCS(n_atoms=d0, n_iter=T, batch_size=batch, random_state=0,
                                                         n_jobs=jobs).fit(X, Y))
        tag = "slics_core fit" if jobs is None else f"n_jobs={jobs:<6}"
        print(f"{tag:<19}: {wall:8.3f} s wall  {cpu:8.3f} s CPU   peak RSS {rss0:.0f} MB before fit, "
              f"{peak_rss_mb():.0f} MB after (X alone: {X.nbytes / 2**20:.0f} MB)")
        if first is None:
            first = (model, wall)
            print(f"error history      : {np.round(model.history_, 6).tolist()}")
        else:
            same = np.array_equal(model.atoms_, first[0].atoms_)
            print(f"{'':<19}  wall speed-up over n_jobs={n_jobs[0]}: {first[1] / wall:.2f} x; CPU / wall "
                  f"{cpu / wall:.2f}; atoms identical to n_jobs={n_jobs[0]}: {same}")


@contextlib.contextmanager
def busy_processes(n=None):
    """``n`` (default: one per core) processes that spin a Python loop, killed (by their ids) on exit."""
    n = len(os.sched_getaffinity(0)) if n is None else n
    procs = [subprocess.Popen([sys.executable, "-S", "-c", "while True: pass"]) for _ in range(n)]
    try:
        time.sleep(0.2)  # let them start spinning
        yield procs
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def alternate_n_jobs(X, Y, fit_kwargs, n_jobs=(1, 2), rounds=5):
    """Fit ``SLiCS(**fit_kwargs, n_jobs=j)`` for every ``j``, ``rounds`` times, the order reversed every other round.

    Returns ``{j: [(wall, cpu), ...]}`` and whether every fit's atoms were identical to the first.
    """
    times = {j: [] for j in n_jobs}
    first, same = None, True
    for r in range(rounds):
        for j in (n_jobs if r % 2 == 0 else n_jobs[::-1]):
            model, wall, cpu = timed(lambda j=j: SLiCS(**fit_kwargs, n_jobs=j).fit(X, Y))
            times[j].append((wall, cpu))
            if first is None:
                first = model.atoms_
            same = same and np.array_equal(first, model.atoms_)
    return times, same


#: The oversubscription check's fit (issue 39): about half a second per fit on one free core of the 2-core machine.
OVERSUBSCRIBED_CASE = dict(n=6000, d=512, S=12, d0=10, T=2, batch=2000, seed=3)
#: ``--coco --oversubscribed``: the COCO-sized fit of ``--coco``.
COCO_CASE = dict(n=20000, d=512, S=12, d0=10, T=10, batch=2000, seed=1)


def oversubscribed_case(rounds=5, quiet=True, busy=True, case=OVERSUBSCRIBED_CASE):
    """``n_jobs=1`` against ``n_jobs=2`` alternately, on the machine as it is and beside one busy process per
    core; prints and returns ``{"quiet"/"busy": (median wall 1, median wall 2, times, same atoms)}``."""
    X, Y = make_data(case["n"], case["d"], case["S"], case["d0"], seed=case["seed"])
    kw = dict(n_atoms=case["d0"], n_iter=case["T"], batch_size=case["batch"], random_state=0)
    print(f"== n_jobs 1 vs 2, {rounds} rounds alternating: n={case['n']}, d={case['d']}, S={case['S']}, "
          f"d0={case['d0']}, T={case['T']}, batch={case['batch']}; {os.cpu_count()} cores")
    out = {}
    for label, on in (("quiet", quiet), ("busy", busy)):
        if not on:
            continue
        ctx = busy_processes() if label == "busy" else contextlib.nullcontext()
        with ctx:
            load0 = os.getloadavg()[0]
            times, same = alternate_n_jobs(X, Y, kw, rounds=rounds)
            load1 = os.getloadavg()[0]
        med = {j: float(np.median([w for w, _ in t])) for j, t in times.items()}
        paired = float(np.median([w2 / w1 for (w1, _), (w2, _) in zip(times[1], times[2])]))
        cpu = {j: float(np.median([c for _, c in t])) for j, t in times.items()}
        what = "machine as it is" if label == "quiet" else "one busy process per core"
        print(f"{what:<26}: n_jobs=1 {med[1]:6.3f} s wall ({cpu[1]:.3f} CPU), n_jobs=2 {med[2]:6.3f} s wall "
              f"({cpu[2]:.3f} CPU), medians; n_jobs=2 / n_jobs=1 = {med[2] / med[1]:.2f}; atoms identical: {same}; "
              f"load average {load0:.2f} -> {load1:.2f}")
        print(f"{'':<26}  walls n_jobs=1 {[round(w, 2) for w, _ in times[1]]}, "
              f"n_jobs=2 {[round(w, 2) for w, _ in times[2]]}; median of the rounds' ratios {paired:.2f}")
        out[label] = (med[1], med[2], times, same)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller problem sizes")
    parser.add_argument("--coco-full", action="store_true", help="only the fit of the size of all of COCO")
    parser.add_argument("--coco", action="store_true", help="only the COCO-sized (20 000 rows) fit")
    parser.add_argument("--oversubscribed", action="store_true",
                        help="only n_jobs 1 vs 2, alternating, quiet and beside one busy process per core")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of --oversubscribed (default 5)")
    parser.add_argument("--n-jobs", type=int, nargs="+", default=[None], metavar="N",
                        help="fit the mini-batch case once per value of SLiCS(n_jobs=N), e.g. 1 2")
    args = parser.parse_args()
    if args.oversubscribed:
        warm_kernels((1, 2))
        oversubscribed_case(args.rounds, case=COCO_CASE if args.coco else OVERSUBSCRIBED_CASE)
        return
    warm_kernels(args.n_jobs)
    if args.coco_full:
        minibatch_case("full-COCO-sized mini-batch fit", 118_000, 512, 12, 10, 10, 2000, seed=2, n_jobs=args.n_jobs)
        return
    if args.coco:
        minibatch_case("COCO-sized mini-batch fit", 20000, 512, 12, 10, 10, 2000, seed=1, n_jobs=args.n_jobs)
        return
    n, d, S, d0, T = (500, 128, 6, 5, 3) if args.quick else (2000, 512, 12, 5, 10)

    X, Y = make_data(n, d, S, d0, seed=0)
    print(f"== Algorithm 1, full batch: n={n}, d={d}, S={S}, d0={d0}, T={T}")
    runs = [timed(lambda: SLiCS(n_atoms=d0, n_iter=T).fit(X, Y)) for _ in range(3)]
    model = runs[0][0]
    walls, cpus = [r[1] for r in runs], [r[2] for r in runs]
    t_ours, c_ours = float(np.median(walls)), float(np.median(cpus))
    print(f"slics_core runs    : wall {', '.join(f'{t:.3f}' for t in walls)} s; "
          f"CPU {', '.join(f'{t:.3f}' for t in cpus)} s")
    with threadpool_limits(limits=1, user_api="blas"):  # like SLiCS.fit: one BLAS thread (stable timings)
        (B_ref, groups_ref), t_ref, c_ref = timed(lambda: reference_fit(X, Y, d0, T))
    err_ours = model.reconstruction_error(X, Y)
    err_ref = reference_error(X, Y, B_ref, groups_ref)
    print(f"slics_core fit     : {t_ours:8.3f} s wall  {c_ours:8.3f} s CPU (median of 3)   final error {err_ours:.9f}")
    print(f"straightforward fit: {t_ref:8.3f} s wall  {c_ref:8.3f} s CPU                 final error {err_ref:.9f}")
    print(f"speed-up           : {t_ref / t_ours:8.1f} x wall  {c_ref / c_ours:6.1f} x CPU   "
          f"error (ours - reference) / reference {(err_ours - err_ref) / err_ref:+.2e}")

    if args.quick:
        minibatch_case("COCO-sized mini-batch fit (quick)", 4000, 128, 6, 5, 3, 500, seed=1, n_jobs=args.n_jobs)
    else:
        minibatch_case("COCO-sized mini-batch fit", 20000, 512, 12, 10, 10, 2000, seed=1, n_jobs=args.n_jobs)


if __name__ == "__main__":
    main()

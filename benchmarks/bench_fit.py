"""Benchmark: SLiCS.fit against a straightforward implementation of Algorithm 1.

The straightforward reference is written here, independently of the library:
scipy's NNLS per sample for the coefficient step and a full SVD of the
residual for every atom update. Both run on the same data with the same
number of epochs; the script prints the times, their ratio and the final
reconstruction errors (mean squared, with fresh NNLS coefficients).

Then a COCO-sized mini-batch fit (20000 x 512, S=12, d0=10, T=10, batch 2000).

    python benchmarks/bench_fit.py            # both parts
    python benchmarks/bench_fit.py --quick    # smaller sizes, for a smoke run
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from scipy.optimize import nnls

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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller problem sizes")
    args = parser.parse_args()
    n, d, S, d0, T = (500, 128, 6, 5, 3) if args.quick else (2000, 512, 12, 5, 10)

    X, Y = make_data(n, d, S, d0, seed=0)
    print(f"== Algorithm 1, full batch: n={n}, d={d}, S={S}, d0={d0}, T={T}")
    times = []
    for _ in range(3):  # median of 3 (the first run also pays one-off start-up costs)
        t0 = time.perf_counter()
        model = SLiCS(n_atoms=d0, n_iter=T).fit(X, Y)
        times.append(time.perf_counter() - t0)
    t_ours = float(np.median(times))
    print(f"slics_core runs    : {', '.join(f'{t:.3f}' for t in times)} s")
    t0 = time.perf_counter()
    B_ref, groups_ref = reference_fit(X, Y, d0, T)
    t_ref = time.perf_counter() - t0
    err_ours = model.reconstruction_error(X, Y)
    err_ref = reference_error(X, Y, B_ref, groups_ref)
    print(f"slics_core fit     : {t_ours:8.3f} s   final error {err_ours:.7f} (median of 3)")
    print(f"straightforward fit: {t_ref:8.3f} s   final error {err_ref:.7f}")
    print(f"speed-up           : {t_ref / t_ours:8.1f} x   error ratio (ours/reference) {err_ours / err_ref:.6f}")

    n, d, S, d0, T, batch = (4000, 128, 6, 5, 3, 500) if args.quick else (20000, 512, 12, 10, 10, 2000)
    X, Y = make_data(n, d, S, d0, seed=1)
    print(f"== COCO-sized mini-batch fit: n={n}, d={d}, S={S}, d0={d0}, T={T}, batch={batch}")
    t0 = time.perf_counter()
    model = SLiCS(n_atoms=d0, n_iter=T, batch_size=batch, random_state=0).fit(X, Y)
    t_big = time.perf_counter() - t0
    print(f"slics_core fit     : {t_big:8.3f} s   error history {np.round(model.history_, 5).tolist()}")


if __name__ == "__main__":
    main()

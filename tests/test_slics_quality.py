"""Fit quality against a plain, independent implementation of Algorithm 1.

The reference (``benchmarks/bench_fit.py``) uses scipy's NNLS per sample and a
full LAPACK SVD per atom update. On configurations the implementation was
never tuned on (other seeds, sizes, one concept, d > n, mini-batch and full
batch) SLiCS's final reconstruction error must never be above the
reference's by more than 1e-4 (relative). Since SLiCS computes every rank-1
SVD to a relative residual of 1e-9, it reproduces the reference's final error
to about 1e-10 on the fixed grid below, so that test also checks closeness
both ways at 1e-6: an approximate atom update (e.g. a Lanczos tolerance of
1e-3) measured 1e-5 to 1e-4 *above* the reference on these configurations.

The fixed grid holds well-conditioned configurations only. On configurations
drawn at random (``benchmarks/bench_fit_quality.py``) about one in ten is
chaotic: a 1e-9 perturbation of X moves the reference's own final error by
1e-3 to 1e-1, so the comparison is judged only where the reference is
determined (:func:`test_never_above_where_algorithm_1_is_well_conditioned`).
"""

import numpy as np
import pytest
from scipy.optimize import nnls

from benchmarks import bench_fit, bench_fit_quality  # the repository root is on sys.path (python -m pytest)
from slics_core import SLiCS

#: (seed, n, d, S, d0, noise, batch_size)
GRID = [
    (101, 300, 32, 4, 3, 0.3, None),
    (102, 300, 64, 5, 4, 0.5, None),
    (103, 300, 32, 1, 3, 0.4, None),   # one concept
    (104, 40, 64, 3, 2, 0.3, None),    # d > n
    (105, 300, 64, 5, 4, 0.5, 100),    # mini-batch
    (106, 300, 32, 4, 3, 0.6, 64),     # small mini-batches
    (107, 200, 64, 3, 5, 0.8, None),   # noisy, more atoms
    (108, 300, 64, 6, 5, 0.8, 64),     # noisy small mini-batches (most sensitive to rounding)
    (112, 250, 48, 3, 7, 0.5, None),   # many atoms per concept (atoms used by part of the concept's rows)
    (113, 60, 96, 3, 4, 0.4, 20),      # d > n in mini-batch
    (114, 400, 40, 2, 6, 0.7, 90),     # two concepts, uneven last batch
]


def _data(seed, n, d, S, d0, noise):
    """Unit embeddings and labels of a planted configuration (as the quality benchmark makes them)."""
    return bench_fit_quality.Config(seed, n, d, S, d0, noise, None).data()


@pytest.mark.parametrize("seed, n, d, S, d0, noise, batch", GRID)
def test_final_error_never_above_exact_svd_algorithm_1(seed, n, d, S, d0, noise, batch):
    X, Y = _data(seed, n, d, S, d0, noise)
    T = 8
    model = SLiCS(n_atoms=d0, n_iter=T, batch_size=batch, random_state=seed).fit(X, Y)
    B, groups = bench_fit.reference_fit(X, Y, d0, T, batch_size=batch, random_state=seed)
    ours = model.reconstruction_error(X, Y)
    ref = bench_fit.reference_error(X, Y, B, groups)
    assert ours <= ref * (1 + 1e-4), (ours, ref)  # the requirement
    assert abs(ours - ref) <= 1e-6 * ref, (ours, ref)  # exact Algorithm 1, up to rounding


def test_never_above_where_algorithm_1_is_well_conditioned():
    """Random held-out configurations, judged where the reference itself is determined.

    Where a 1e-9 perturbation of X moves the reference's own final error by
    more than 1e-5 (chaotic trajectories: small batches of noisy data), no
    implementation that differs from it by rounding can match it, and the row
    is not judged. Everywhere else SLiCS must not end above it by more than
    1e-4. An approximate atom update is caught here: with a Lanczos residual of
    1e-3 SLiCS ended as much as 0.10 above the reference on these configurations.
    """
    rows = [bench_fit_quality.compare(c) for c in bench_fit_quality.held_out_configs(20)]
    well = [r for r in rows if not r.chaotic]
    assert len(well) >= 15, [str(r.config) for r in rows if r.chaotic]
    above = [(str(r.config), r.ours) for r in well if r.ours > 1e-4]
    assert not above, above


def test_tol_stop_returns_a_complete_exact_epoch():
    X, Y = _data(110, 300, 48, 4, 3, 0.4)
    stopped = SLiCS(n_atoms=3, n_iter=60, tol=1e-3).fit(X, Y)
    k = stopped.n_iter_
    assert 2 <= k < 60
    again = SLiCS(n_atoms=3, n_iter=k).fit(X, Y)  # the same epochs, without early stopping
    np.testing.assert_allclose(stopped.atoms_, again.atoms_, atol=1e-12)
    B, groups = bench_fit.reference_fit(X, Y, 3, k)
    assert stopped.reconstruction_error(X, Y) <= bench_fit.reference_error(X, Y, B, groups) * (1 + 1e-4)


def _batch_error(X, allowed, B):
    """Sum over the rows of the squared NNLS residual on their allowed atoms (scipy)."""
    total = 0.0
    for x, ok in zip(X, allowed):
        P = np.flatnonzero(ok)
        total += nnls(B[P].T, x)[1] ** 2
    return total


class _Recording(SLiCS):
    """SLiCS that records every batch's samples and dictionary before and after its update."""

    def _update_atoms(self, X, At, B, allowed, full_batch, steps, R):
        before = B.copy()
        error = super()._update_atoms(X, At, B, allowed, full_batch, steps, R)
        self.log_.append((X.copy(), allowed.copy(), before, B.copy()))
        return error


@pytest.mark.parametrize("update", ["ksvd", "bcd"])
def test_monotone_minibatch_never_raises_a_batch_error(update):
    """What ``monotone`` guarantees in mini-batch mode: each batch's own error never rises."""
    X, Y = _data(111, 240, 24, 4, 3, 0.8)
    model = _Recording(n_atoms=3, n_iter=4, batch_size=40, update=update, monotone=True, random_state=0)
    model.log_ = []
    model.fit(X, Y)
    assert len(model.log_) == 4 * 6
    changed = 0
    for Xb, allowed, before, after in model.log_:
        e_before, e_after = _batch_error(Xb, allowed, before), _batch_error(Xb, allowed, after)
        assert e_after <= e_before * (1 + 1e-12) + 1e-12
        changed += not np.array_equal(before, after)
    assert changed > 0

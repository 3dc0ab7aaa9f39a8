"""How sure a compared number is: the one home of the intervals and null bands the tables and pages show.

* :func:`bootstrap_mean_interval` - a percentile bootstrap interval of a mean over (query, concept) pairs,
  resampling *queries* (a query's pairs go together: they share its image), seeded;
* :func:`query_sums` - per-query sums and counts of per-pair values, the input of the bootstrap (kept so that
  several runs can be averaged query by query before resampling);
* :func:`subset_mean_band` - a permutation null for the mean of a column over a subset of rows: the
  ``alpha/2`` and ``1 - alpha/2`` quantiles of that mean over random row subsets of the same size.

Choices (the paper reports no intervals): 1000 resamples (:data:`N_RESAMPLES`) and 200 random subsets
(:data:`N_SUBSETS`) by default, 95 % (:data:`CONFIDENCE`), seed 0, so that a page and the command line give
the same interval for the same numbers.
"""
from __future__ import annotations

import functools

import numpy as np

__all__ = ["CONFIDENCE", "N_RESAMPLES", "N_SUBSETS", "bootstrap_mean_interval", "query_sums", "subset_mean_band"]

#: Coverage of every interval and band (percentile method).
CONFIDENCE = 0.95
#: Bootstrap resamples of :func:`bootstrap_mean_interval`.
N_RESAMPLES = 1000
#: Random subsets of :func:`subset_mean_band`.
N_SUBSETS = 200


def _check_confidence(confidence):
    confidence = float(confidence)
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1; got {confidence}.")
    return confidence


def query_sums(values, queries, n_queries):
    """Sum and count of per-pair ``values`` for every query ``0..n_queries-1``.

    Parameters
    ----------
    values : array-like of float, shape (n_pairs,)
    queries : array-like of int, shape (n_pairs,)
        The query of each pair.
    n_queries : int

    Returns
    -------
    sums, counts : ndarray of shape (n_queries,)
        A query without pairs has sum 0 and count 0.
    """
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    q = np.asarray(queries, dtype=np.int64).reshape(-1)
    if v.shape != q.shape:
        raise ValueError(f"{v.size} values for {q.size} query indices.")
    if q.size and (q.min() < 0 or q.max() >= n_queries):
        raise ValueError(f"query indices must lie in 0..{n_queries - 1}.")
    return (np.bincount(q, weights=v, minlength=n_queries).astype(np.float64),
            np.bincount(q, minlength=n_queries).astype(np.float64))


def bootstrap_mean_interval(sums, counts=None, *, n_resamples=N_RESAMPLES, confidence=CONFIDENCE, seed=0):
    """Percentile bootstrap interval of a mean over pairs, resampling queries with replacement.

    The statistic is ``sum(sums) / sum(counts)`` (the mean over every pair, as mAP@k and Recall@k are); each
    resample draws ``n`` queries out of the ``n`` that have pairs (``rng.integers``, ``numpy.random.default_rng(seed)``)
    and recomputes it; the interval is the ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` quantiles
    (``numpy.quantile``, linear) of the resampled statistics. Several statistics over the same queries (columns
    of a 2-D ``sums``: mAP and Recall@k, general and sub-label) share the draws, so their intervals cost one
    resampling; a query is then left out only when it has no pair in any column, and a resample whose queries
    have no pair in a column has no value there (left out of that column's quantiles).

    Parameters
    ----------
    sums : array-like of float, shape (n_queries,) or (n_queries, m)
        Per query, the sum of its pairs' values (:func:`query_sums`); per-item values when ``counts`` is None.
    counts : array-like of float, the shape of ``sums``, optional
        Pairs of each query (default 1 each: a plain mean). Queries with count 0 (in every column) are left out.
    n_resamples : int
    confidence : float
    seed : int

    Returns
    -------
    lo, hi : float, or ndarray of shape (m,) for a 2-D ``sums``
        NaN where no query has a pair.
    """
    s = np.asarray(sums, dtype=np.float64)
    one = s.ndim == 1
    c = np.ones_like(s) if counts is None else np.asarray(counts, dtype=np.float64)
    if s.shape != c.shape or s.ndim not in (1, 2):
        raise ValueError(f"sums of shape {s.shape} for counts of shape {c.shape}: one count per sum, 1-D or 2-D.")
    s, c = s.reshape(len(s), -1), c.reshape(len(c), -1)
    if int(n_resamples) < 1:
        raise ValueError(f"n_resamples must be at least 1; got {n_resamples}.")
    confidence = _check_confidence(confidence)
    keep = (c > 0).any(axis=1)
    s, c = s[keep], c[keep]
    m = s.shape[1]
    if not s.size:
        nan = np.full(m, np.nan)
        return (float("nan"), float("nan")) if one else (nan, nan.copy())
    n = s.shape[0]
    sc = np.hstack([s, c])
    stats = np.empty((int(n_resamples), m))
    for start, weights in _resample_weights(n, int(n_resamples), int(seed)):
        tot = weights @ sc  # every column's resampled sums at once (one product)
        with np.errstate(invalid="ignore", divide="ignore"):
            stats[start:start + len(tot)] = np.where(tot[:, m:] > 0, tot[:, :m] / tot[:, m:], np.nan)
    alpha = 1.0 - confidence
    lo, hi = np.full(m, np.nan), np.full(m, np.nan)
    cols = np.isfinite(stats).any(axis=0)
    if cols.any():
        lo[cols], hi[cols] = np.nanquantile(stats[:, cols], [alpha / 2, 1 - alpha / 2], axis=0)
    return (float(lo[0]), float(hi[0])) if one else (lo, hi)


#: Resample weights kept in memory (:func:`_resample_weights`) when they hold at most this many numbers.
KEEP_WEIGHTS = 4_000_000


def _draw_weights(n, n_resamples, seed):
    """``(start, weights)`` blocks: how often each of ``n`` queries is drawn in each resample (``rng.integers``
    with ``default_rng(seed)``, 2 000 000 draws a block)."""
    rng = np.random.default_rng(seed)
    step = max(1, 2_000_000 // n)
    for start in range(0, n_resamples, step):
        rows = min(n_resamples, start + step) - start
        idx = rng.integers(0, n, size=(rows, n))
        yield start, np.bincount((idx + n * np.arange(rows)[:, None]).ravel(),
                                 minlength=rows * n).reshape(rows, n).astype(np.float64)


@functools.lru_cache(maxsize=2)
def _kept_weights(n, n_resamples, seed):
    out = tuple(_draw_weights(n, n_resamples, seed))
    for _, w in out:
        w.setflags(write=False)
    return out


def _resample_weights(n, n_resamples, seed):
    """:func:`_draw_weights`, kept for the last two ``(n, n_resamples, seed)`` when small: a table's scores
    (every method, both components) resample the same queries with the same seed, so they share the draws."""
    if n * n_resamples <= KEEP_WEIGHTS:
        return _kept_weights(n, n_resamples, seed)
    return _draw_weights(n, n_resamples, seed)


def subset_mean_band(values, size, *, n_subsets=N_SUBSETS, confidence=CONFIDENCE, seed=0):
    """Null band of the column means of a ``size``-row subset: quantiles over random subsets of that size.

    Each of ``n_subsets`` subsets is ``size`` rows drawn without replacement
    (``numpy.random.default_rng(seed).choice``); the band of column ``j`` is the ``(1 - confidence) / 2``
    and ``(1 + confidence) / 2`` quantiles of the subsets' mean of column ``j``. A subset chosen for
    something else (e.g. the items carrying one label) whose mean lies inside the band is what a random
    subset of its size gives.

    Parameters
    ----------
    values : array-like of shape (n, m)
    size : int
        Rows per subset, ``1..n``.
    n_subsets : int
    confidence : float
    seed : int

    Returns
    -------
    lo, hi : ndarray of shape (m,)
    """
    V = np.asarray(values, dtype=np.float64)
    if V.ndim == 1:
        V = V[:, None]
    if V.ndim != 2:
        raise ValueError(f"values must be 2-D (rows, columns); got shape {V.shape}.")
    size = int(size)
    if not 1 <= size <= V.shape[0]:
        raise ValueError(f"subset size must lie in 1..{V.shape[0]}; got {size}.")
    if int(n_subsets) < 1:
        raise ValueError(f"n_subsets must be at least 1; got {n_subsets}.")
    confidence = _check_confidence(confidence)
    rng = np.random.default_rng(seed)
    means = np.empty((int(n_subsets), V.shape[1]))
    for i in range(int(n_subsets)):
        means[i] = V[rng.choice(V.shape[0], size, replace=False)].mean(axis=0)
    alpha = 1.0 - confidence
    lo, hi = np.quantile(means, [alpha / 2, 1 - alpha / 2], axis=0)
    return lo, hi

"""t-SNE layouts of the maps (Subspaces): the engine rule, fitting a layout, and placing new points into one.

Choices (the paper is silent on them)
-------------------------------------
* **t-SNE geometry.** Embeddings, components and atoms are unit-normalised
  before t-SNE, so distances are cosine distances (retrieval ranks by cosine
  and components have smaller norms than the embeddings they come from).
  Zero components (a concept that gets no coefficient in the full
  disentanglement) have no direction and are left out. The layout is
  seeded, PCA-initialised, perplexity ``min(30, (N - 1) / 3)``, 500
  iterations, and runs single-threaded (``n_jobs=1`` and one BLAS thread): on
  a busy two-core machine that was about 5x faster than letting
  scikit-learn's OpenMP and BLAS threads compete.
* **t-SNE engine.** One rule (:func:`tsne_engine`): scikit-learn's Barnes-Hut up to
  :data:`OPENTSNE_MIN_POINTS` points, openTSNE's FFT-accelerated t-SNE above it (same settings: cosine,
  PCA init, 250 early-exaggeration iterations then the rest), chosen by measurement (the constant's
  comment). Without openTSNE, scikit-learn at every size and maps stay at :data:`SKLEARN_MAX_ITEMS` items
  (:func:`engine_note`). An openTSNE map places a new point without being recomputed (:func:`place_points`).
* **Placing a point on a scikit-learn map** (:func:`place_near`). scikit-learn's t-SNE cannot place a new point
  (no ``transform``), and laying the map out again would move every point. Rule: the new vector's
  :data:`PLACE_NEIGHBOURS` nearest map points by cosine (the vectors the map was computed from, unit-normalised as
  they were), and the mean of their positions weighted by the cosine (clipped at 0; equal weights when none is
  positive). A vector equal to a map point lands inside that point's neighbourhood; one halfway between two
  groups lands between them. The caller gives the vector in the map's own space (an item embedding for a map of
  embeddings, a component taken as the map's components were: :func:`slics_core.explorer.current_query.query_points`).
"""
from __future__ import annotations

import importlib.util

import numpy as np
from sklearn.manifold import TSNE
from threadpoolctl import threadpool_limits

from slics_core._validation import check_embeddings
from slics_core.extras import require
from slics_core.rows import unit_rows

__all__ = ["OPENTSNE_MIN_POINTS", "MAX_MAP_ITEMS", "SKLEARN_MAX_ITEMS", "BACKGROUND_MIN_POINTS", "ENGINES",
           "open_tsne_installed", "tsne_engine", "max_map_items", "engine_note", "tsne_fit", "tsne_layout",
           "tsne_embedding", "place_points", "PLACE_NEIGHBOURS", "place_near"]

#: Layouts of more points than this use openTSNE's FFT-accelerated t-SNE when it is installed; up to it,
#: scikit-learn's Barnes-Hut. Measured (docs/performance.md, "t-SNE for large maps", one thread): at 2 000
#: points scikit-learn is as fast or faster (20.9 s vs 24.9 s; openTSNE's FFT grid has a fixed cost), at 5 000
#: openTSNE is 2.6x faster and at 20 000 12x (133.6 s vs 1 631.6 s).
OPENTSNE_MIN_POINTS = 2_000
#: The negative-gradient method of openTSNE layouts ("fft"; tests may use "bh", the same rule at small sizes).
OPENTSNE_GRADIENT = "fft"
#: Items a map may sample with openTSNE installed (the COCO training split), and without it.
MAX_MAP_ITEMS = 20_000
SKLEARN_MAX_ITEMS = 3_000
#: Layouts of more points than this are computed in the background (the page shows their progress): about 2 s
#: with scikit-learn at the measured ~1 s per 500 points (the 200-item default map, ~650 points: 0.95 s).
BACKGROUND_MIN_POINTS = 1_000
#: Map points whose positions place a new point on a scikit-learn map (:func:`place_near`).
PLACE_NEIGHBOURS = 10
#: The two t-SNE engines.
ENGINES = ("scikit-learn", "openTSNE")


def open_tsne_installed() -> bool:
    """Whether openTSNE (the ``tsne`` extra) can be imported."""
    return importlib.util.find_spec("openTSNE") is not None


def tsne_engine(n_points) -> str:
    """The engine of a layout of ``n_points``: ``"openTSNE"`` above :data:`OPENTSNE_MIN_POINTS` when it is
    installed, else ``"scikit-learn"``."""
    return "openTSNE" if int(n_points) > OPENTSNE_MIN_POINTS and open_tsne_installed() else "scikit-learn"


def max_map_items() -> int:
    """The most items a map may sample: :data:`MAX_MAP_ITEMS` with openTSNE, :data:`SKLEARN_MAX_ITEMS` without."""
    return MAX_MAP_ITEMS if open_tsne_installed() else SKLEARN_MAX_ITEMS


def engine_note() -> str | None:
    """One line when openTSNE is missing (maps stay at :data:`SKLEARN_MAX_ITEMS` items), else None."""
    if open_tsne_installed():
        return None
    return (f"Maps are limited to {SKLEARN_MAX_ITEMS:,} items: openTSNE is not installed "
            '(pip install "slics-explorer[tsne]" for maps of up to 20,000 items).')


def _perplexity(n, perplexity):
    return float(min(perplexity, max(1.0, (n - 1) / 3.0)))


def tsne_fit(P, *, perplexity=30.0, max_iter=500, random_state=0, n_jobs=1, engine=None, progress=None):
    """2-D t-SNE of the rows of ``P`` in cosine geometry (rows unit-normalised; PCA init), and openTSNE's
    embedding object when openTSNE made it (it places new points: :func:`place_points`).

    Parameters
    ----------
    P : array-like of shape (N, d), N >= 3
        Non-zero vectors.
    perplexity : float
        Upper bound; lowered to ``(N - 1) / 3`` for small ``N``.
    max_iter : int
        Iterations (>= 250, scikit-learn's minimum), the first 250 with early exaggeration (both engines).
    random_state : int
    n_jobs : int
        Threads for the neighbour search, the gradient and BLAS.
    engine : one of :data:`ENGINES`, optional
        Default :func:`tsne_engine` of ``N``.
    progress : callable, optional
        ``progress(line, done, total)`` every 25 iterations (openTSNE only).

    Returns
    -------
    Y2 : ndarray of shape (N, 2)
    embedding : openTSNE.TSNEEmbedding or None
    """
    P = check_embeddings(P, name="points")
    if P.shape[0] < 3:
        raise ValueError(f"t-SNE needs at least 3 points; got {P.shape[0]} (show more items or kinds).")
    engine = tsne_engine(P.shape[0]) if engine is None else engine
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}; got {engine!r}.")
    U = unit_rows(P, name="points")
    perp = _perplexity(P.shape[0], perplexity)
    if engine == "scikit-learn":
        tsne = TSNE(n_components=2, perplexity=perp, init="pca", random_state=random_state,
                    max_iter=int(max_iter), n_jobs=n_jobs)
        with threadpool_limits(n_jobs):
            return tsne.fit_transform(U), None
    open_tsne = require("openTSNE", "maps of more than 2,000 points")
    every, calls = 25, [0]
    total = int(max_iter) // every

    def callback(iteration, error, embedding):
        calls[0] += 1
        if progress is not None and calls[0] <= total:  # the embedding keeps it: placing points calls it too
            progress(f"t-SNE of {P.shape[0]:,} points (openTSNE), iteration {calls[0] * every}/{int(max_iter)}",
                     min(calls[0], total), total)

    tsne = open_tsne.TSNE(n_components=2, perplexity=perp, initialization="pca", random_state=random_state,
                          early_exaggeration_iter=250, n_iter=max(0, int(max_iter) - 250), metric="cosine",
                          negative_gradient_method=OPENTSNE_GRADIENT, n_jobs=n_jobs, callbacks=callback,
                          callbacks_every_iters=every)
    with threadpool_limits(n_jobs):
        embedding = tsne.fit(U)
    xy = np.array(embedding, dtype=np.float64)  # a copy: placing points moves the embedding (below)
    return xy, _centred(embedding)


def _centred(embedding):
    """openTSNE's ``transform`` first moves the map's box centre to the origin (in place); it is done here once,
    and :func:`place_points` adds the offset back, so placed points are in the stored layout's coordinates."""
    centre = (np.max(embedding, axis=0) + np.min(embedding, axis=0)) / 2
    embedding -= centre
    embedding.slics_offset = np.asarray(centre, dtype=np.float64).reshape(2)
    return embedding


def tsne_layout(P, *, perplexity=30.0, max_iter=500, random_state=0, n_jobs=1, engine=None, progress=None):
    """The coordinates of :func:`tsne_fit` (same parameters): ``Y2``, shape (N, 2)."""
    return tsne_fit(P, perplexity=perplexity, max_iter=max_iter, random_state=random_state, n_jobs=n_jobs,
                    engine=engine, progress=progress)[0]


def tsne_embedding(P, xy, *, perplexity=30.0, random_state=0, n_jobs=1):
    """openTSNE's embedding object of a computed layout ``xy`` of the points ``P`` (e.g. read from a store),
    without optimising it again: the points' affinities (their nearest neighbours in cosine geometry, the
    cost of this call) and the stored coordinates. It places new points (:func:`place_points`)."""
    open_tsne = require("openTSNE", "placing a point on a stored map")
    P = check_embeddings(P, name="points")
    xy = np.asarray(xy, dtype=np.float64)
    if xy.shape != (P.shape[0], 2):
        raise ValueError(f"xy must have shape {(P.shape[0], 2)} for {P.shape[0]} points; got {xy.shape}.")
    U = unit_rows(P, name="points")
    with threadpool_limits(n_jobs):
        aff = open_tsne.affinity.PerplexityBasedNN(U, perplexity=_perplexity(P.shape[0], perplexity), metric="cosine",
                                                   n_jobs=n_jobs, random_state=random_state)
    return _centred(open_tsne.TSNEEmbedding(xy.copy(), aff, negative_gradient_method=OPENTSNE_GRADIENT,
                                            n_jobs=n_jobs, random_state=random_state))


def place_points(embedding, Q, n_jobs=1):
    """Places new vectors ``Q`` (rows, unit-normalised as the map's) into a computed openTSNE map without
    moving its points (``TSNEEmbedding.transform``: a new point starts at the median of its nearest map
    points and is optimised against the fixed map). Returns their coordinates in the layout's frame, shape
    (len(Q), 2). ``embedding``: from :func:`tsne_fit` or :func:`tsne_embedding`."""
    Q = check_embeddings(np.atleast_2d(Q), name="query")
    with threadpool_limits(n_jobs):
        placed = np.array(embedding.transform(unit_rows(Q, name="query")), dtype=np.float64)
    return placed + getattr(embedding, "slics_offset", 0.0)


def place_near(P, xy, Q, k=PLACE_NEIGHBOURS):
    """Places new vectors ``Q`` on a computed layout ``xy`` of the points ``P`` without moving them (the rule of
    the module docstring: the cosine-weighted mean position of each vector's ``k`` nearest map points). Returns
    their coordinates, shape (len(Q), 2)."""
    P = check_embeddings(P, name="points")
    xy = np.asarray(xy, dtype=np.float64)
    if xy.shape != (P.shape[0], 2):
        raise ValueError(f"xy must have shape {(P.shape[0], 2)} for {P.shape[0]} points; got {xy.shape}.")
    Q = check_embeddings(np.atleast_2d(Q), n_features=P.shape[1], name="query")
    sims = unit_rows(Q, name="query") @ unit_rows(P, name="points").T
    k = max(1, min(int(k), P.shape[0]))
    near = np.argpartition(-sims, k - 1, axis=1)[:, :k]
    w = np.clip(np.take_along_axis(sims, near, axis=1), 0.0, None)
    w[w.sum(axis=1) <= 0] = 1.0
    return np.einsum("qk,qkc->qc", w, xy[near]) / w.sum(axis=1, keepdims=True)

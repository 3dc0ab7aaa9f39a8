"""t-SNE time for the Subspaces map: scikit-learn's Barnes-Hut against openTSNE's FFT-accelerated t-SNE.

Both on one thread (the app's setting, see :mod:`slics_core.explorer.maps`), perplexity 30, PCA
initialisation, 250 early-exaggeration iterations then 250 more (scikit-learn's ``max_iter=500``), on
unit-normalised 512-d points drawn around 12 random centres ("random but clustered"). Quality: the share
of each point's 10 nearest neighbours on the map that come from its own cluster. Also the time openTSNE
takes to place one new point into a computed map (``TSNEEmbedding.transform``), without recomputing it.

    python -m benchmarks.bench_tsne 2000 5000 20000

Needs openTSNE (``pip install -e ".[tsne]"``).
"""
from __future__ import annotations

import sys
import time

import numpy as np
from sklearn.manifold import TSNE
from sklearn.neighbors import NearestNeighbors
from threadpoolctl import threadpool_limits

from slics_core.extras import require


def clustered(n, d=512, k=12, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((k, d))
    lab = rng.integers(0, k, n)
    X = centres[lab] + 1.5 * rng.standard_normal((n, d))
    return X / np.linalg.norm(X, axis=1, keepdims=True), lab


def own_cluster_share(Y, lab, k=10):
    idx = NearestNeighbors(n_neighbors=k + 1).fit(Y).kneighbors(Y, return_distance=False)[:, 1:]
    return float((lab[idx] == lab[:, None]).mean())


def timed(f, *args):
    w, c = time.perf_counter(), time.process_time()
    out = f(*args)
    return out, time.perf_counter() - w, time.process_time() - c


def sklearn_tsne(X):
    return TSNE(2, perplexity=30, init="pca", random_state=0, max_iter=500, n_jobs=1).fit_transform(X)


def open_tsne_fft(X):
    open_tsne = require("openTSNE", "tsne")
    return open_tsne.TSNE(n_components=2, perplexity=30, initialization="pca", random_state=0, n_iter=250,
                          early_exaggeration_iter=250, negative_gradient_method="fft", n_jobs=1,
                          metric="cosine").fit(X)


def main(sizes):
    require("openTSNE", "tsne")
    print("n\tscikit-learn BH wall / CPU s (share)\topenTSNE FFT wall / CPU s (share)\tplace 1 point s")
    for n in sizes:
        X, lab = clustered(n)
        with threadpool_limits(1):
            Ys, ws, cs = timed(sklearn_tsne, X)
            emb, wo, co = timed(open_tsne_fft, X)
            _, wt, _ = timed(emb.transform, X[:1])
        print(f"{n}\t{ws:.1f} / {cs:.1f} ({own_cluster_share(Ys, lab):.3f})\t"
              f"{wo:.1f} / {co:.1f} ({own_cluster_share(np.asarray(emb), lab):.3f})\t{wt:.2f}", flush=True)


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [2000, 5000, 20000])

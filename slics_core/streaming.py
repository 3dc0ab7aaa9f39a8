"""Streaming fits: a SLiCS dictionary fitted over an embedding cache's batches with bounded memory.

:func:`stream_fit` (``slics fit --cache DIR --stream``) never loads the cache's
embedding matrix: it reads the batch files (``batches/b*.npz``,
:meth:`slics_core.store.EmbeddingStore.read_batch`) one at a time.

1. **First pass** over the batches: the training mean of the unit embeddings
   (``clip`` preprocessing; ``mean`` given: that one), the seeded reservoir
   sample that starts the fit (:class:`Reservoir`, Algorithm R) and, for
   U-SLiCS, the zero-shot pseudo-labels' counts and kept rows
   (:class:`slics_core.unsupervised.ZeroShotLabeller`).
2. **Start**: :meth:`SLiCS.partial_fit` on the reservoir sample (the S-SVD
   start of Algorithm 1; the sample must show every concept).
3. **Epochs**: ``epochs`` passes over the batches, in a fresh seeded order
   each pass, one :meth:`SLiCS.partial_fit` step per batch file.

Every item of the cache with a direction (a non-zero embedding) is a training
item (there is no val/query split); its labels are the cache's labels
(:func:`slics_core.data.cache_labels`), found by the item's position. Items
with no positive label are skipped (counted in the summary). At any time
the loop holds one batch and the reservoir (plus the labels, the ``S x
min_positives`` kept pseudo-positives and the model).
"""
from __future__ import annotations

import numpy as np
from sklearn.utils import check_random_state

from slics_core._validation import check_k, is_int
from slics_core.data import apply_preprocessing, cache_labels, has_direction, present_concepts
from slics_core.encoders import encoder_spec_of
from slics_core.methods import active_count
from slics_core.preprocessing import make_preprocessor
from slics_core.rows import unit_rows
from slics_core.slics import SLiCS
from slics_core.store import EmbeddingStore
from slics_core.unsupervised import ZeroShotLabeller

__all__ = ["DEFAULT_EPOCHS", "DEFAULT_START_SIZE", "STREAM_METHODS", "Reservoir", "stream_fit"]

#: Passes over the batches after the start (``slics fit --stream --epochs``): the in-memory fit's ``n_iter``
#: default, so both fits see every item as often.
DEFAULT_EPOCHS = 10
#: Rows of the reservoir sample whose S-SVD starts a streaming fit: the paper's COCO mini-batch.
DEFAULT_START_SIZE = 2000
#: The registered methods a streaming fit makes (SLiCS dictionaries).
STREAM_METHODS = ("S-SLiCS", "U-SLiCS")


class Reservoir:
    """A seeded uniform sample of ``n`` rows from rows given in batches (Algorithm R, Vitter 1985).

    Row ``i`` (counting from 0 over every batch) is kept when ``i < n``; after that it draws one
    uniform ``u`` from ``random_state`` and replaces slot ``floor(u * (i + 1))`` when that is below
    ``n``. Every row ends in the sample with probability ``n / N`` (``N`` rows in all), and the
    sample depends on the rows' order and the seed, never on how the rows are cut into batches.

    Parameters
    ----------
    n : int
        Sample size.
    random_state : int, RandomState or None
    """

    def __init__(self, n, random_state=None):
        self.n = check_k(n, "n")
        self.rng = check_random_state(random_state)
        self.n_seen = 0
        self._rows = None
        self._ids = np.zeros(self.n, dtype=np.int64)

    def add(self, rows, ids=None):
        """Offer the batch ``rows`` (shape (k, d)); ``ids`` (default: their numbers in the stream) go with them."""
        rows = np.asarray(rows)
        k = rows.shape[0]
        ids = np.arange(self.n_seen, self.n_seen + k) if ids is None else np.asarray(ids, dtype=np.int64)
        if ids.shape != (k,):
            raise ValueError(f"{ids.shape[0]} ids for {k} rows.")
        if self._rows is None:
            self._rows = np.zeros((self.n,) + rows.shape[1:], dtype=rows.dtype)
        i = self.n_seen + np.arange(k)
        fill = i < self.n
        self._rows[i[fill]], self._ids[i[fill]] = rows[fill], ids[fill]
        rest = np.flatnonzero(~fill)
        if rest.size:
            slot = np.floor(self.rng.random_sample(rest.size) * (i[rest] + 1)).astype(np.int64)
            hit = slot < self.n
            slot, src = slot[hit][::-1], rest[hit][::-1]
            _, last = np.unique(slot, return_index=True)  # a slot hit twice keeps the later row
            self._rows[slot[last]], self._ids[slot[last]] = rows[src[last]], ids[src[last]]
        self.n_seen += k
        return self

    def sample(self):
        """``(rows, ids)`` of the sample, in the order the rows came; ``min(n, rows seen)`` of them."""
        m = min(self.n, self.n_seen)
        if self._rows is None:
            return np.zeros((0,)), np.zeros(0, dtype=np.int64)
        order = np.argsort(self._ids[:m], kind="stable") if m else np.zeros(0, dtype=np.int64)
        return self._rows[:m][order], self._ids[:m][order]


def _stream_labels(store, meta):
    """The cache's labels and ``row_of`` (position in the item list -> label row; -1 for failed items)."""
    if not meta.get("complete"):
        raise ValueError(f"cache {str(store.path)!r} is not complete (interrupted?); rerun 'slics embed' to resume.")
    positions = store.positions()
    labels = cache_labels(store, positions.size)
    row_of = np.full(int(meta["n_items"]), -1, dtype=np.int64)
    row_of[positions] = np.arange(positions.size)
    return labels, row_of


def _batches(store, meta, row_of, order):
    """``(raw embeddings, label rows)`` of the batches ``order``, one batch read at a time; rows without a
    direction are left out."""
    for b in order:
        pos, E, _, _ = store.read_batch(int(b), meta)
        keep = has_direction(E) if E.shape[0] else np.zeros(0, dtype=bool)
        yield E[keep], row_of[pos[keep]]


def stream_fit(cache, *, method="S-SLiCS", n_atoms=10, epochs=DEFAULT_EPOCHS, start_size=DEFAULT_START_SIZE,
               seed=0, n_active=None, mean=None, ridge=0.0, n_jobs=None, progress=None):
    """Fit a SLiCS dictionary over the batches of the embedding cache ``cache`` (see the module docstring).

    Parameters
    ----------
    cache : path-like
        A finished embedding cache with labels (``slics embed``).
    method : {"S-SLiCS", "U-SLiCS"}
        On the cache's labels, or on zero-shot pseudo-labels from the cache's concept prompts.
    n_atoms : int
        ``d0``, atoms per concept.
    epochs : int
        Passes over the batches after the start (:data:`DEFAULT_EPOCHS`).
    start_size : int
        Rows of the seeded reservoir sample the S-SVD start is made on (:data:`DEFAULT_START_SIZE`).
    seed : int
        Seeds the reservoir, the start and the batch order of every epoch.
    n_active : int, optional
        U-SLiCS: concepts per image (default: from the cache's labels, :func:`slics_core.methods.active_count`).
    mean : array-like of shape (d,), optional
        ``clip`` preprocessing: the mean to subtract; default: the mean of the unit embeddings of every
        training item, computed in the first pass.
    ridge : float
    n_jobs : int or None
        Threads of the per-sample steps (:class:`~slics_core.slics.SLiCS`'s ``n_jobs``; the same model).
    progress : callable, optional
        ``progress(epoch, n_epochs)`` after the start (epoch 0) and after each epoch.

    Returns
    -------
    model : SLiCS
    info : dict
        ``n_items`` (training items), ``n_batches``, ``epochs``, ``steps`` (partial_fit calls),
        ``start_rows``, ``unlabelled`` (items skipped: no positive label), ``preprocessing``, ``encoder``.

    Raises
    ------
    ValueError
        Another method, an unfinished cache, bad labels, U-SLiCS without concept prompts, or a start sample
        that misses a concept (the message says to raise ``start_size``).
    """
    if method not in STREAM_METHODS:
        raise ValueError(f"a streaming fit makes {' or '.join(STREAM_METHODS)}, not {method!r}")
    if not is_int(epochs) or epochs < 0:
        raise ValueError(f"epochs must be a non-negative integer; got {epochs!r}.")
    start_size = check_k(start_size, "start_size")
    store = EmbeddingStore(cache)
    meta = store.meta()
    labels, row_of = _stream_labels(store, meta)
    keep = present_concepts(labels, stacklevel=2)
    Y_all = labels.Y if keep is None else labels.Y[:, keep]
    names = list(labels.concept_names) if keep is None else [labels.concept_names[j] for j in keep]
    prep = meta.get("preprocessing") or {}
    kind, n_tokens = str(prep.get("embedding", "clip")), int(prep.get("n_tokens", 32))
    labeller = None
    if method == "U-SLiCS":
        W, _ = store.load_array("concept_text")
        if W is None:
            raise ValueError(f"U-SLiCS needs the concept prompts' text embeddings, and cache {str(store.path)!r} "
                             "has none; embed with an encoder that has a text tower")
        W = np.asarray(W, dtype=np.float64) if keep is None else np.asarray(W, dtype=np.float64)[keep]
        labeller = ZeroShotLabeller(W, active_count(Y_all, n_active), concept_names=names)

    # 1. first pass: mean, reservoir, pseudo-label counts
    n_batches = store.n_batches(meta)
    reservoir = Reservoir(start_size, seed)
    total, n_direction, unlabelled = None, 0, 0
    for E, rows in _batches(store, meta, row_of, range(n_batches)):
        if not rows.size:
            continue
        if kind == "clip" and mean is None:
            s = unit_rows(np.asarray(E, dtype=np.float64), name="X").sum(axis=0)
            total = s if total is None else total + s
        n_direction += rows.size
        if labeller is not None:
            labeller.scan(E, rows)
        else:
            labelled = Y_all[rows].any(axis=1)
            unlabelled += int((~labelled).sum())
            E, rows = E[labelled], rows[labelled]
        reservoir.add(E, rows)
    if not reservoir.n_seen:
        raise ValueError(f"cache {str(store.path)!r} has no labelled item with a non-zero embedding to fit on")
    if kind == "clip" and mean is None:
        mean = total / n_direction
    if labeller is not None:
        labeller.finish(stacklevel=2)
    n_items = reservoir.n_seen

    def labels_of(E, rows):
        return labeller.labels(E, rows) if labeller is not None else Y_all[rows]

    # 2. start on the reservoir sample
    start_raw, start_rows = reservoir.sample()
    pre = make_preprocessor(kind, mean=mean if kind == "clip" else None, n_tokens=n_tokens).fit(start_raw)
    Y0 = labels_of(start_raw, start_rows)
    missing = [names[j] for j in np.flatnonzero(~Y0.any(axis=0))]
    if missing:
        raise ValueError(f"the start sample of {start_rows.size} items has no item of concept(s) {', '.join(missing)}; "
                         "raise the start sample's size (--start-size)")
    model = SLiCS(n_atoms=n_atoms, ridge=ridge, random_state=seed, n_jobs=n_jobs)
    model.partial_fit(apply_preprocessing(pre, start_raw), Y0, concept_names=names)
    del start_raw, reservoir
    if progress is not None:
        progress(0, epochs)

    # 3. epochs over the batches
    rng = check_random_state(seed)
    for epoch in range(epochs):
        for E, rows in _batches(store, meta, row_of, rng.permutation(n_batches)):
            if not rows.size:
                continue
            Y = labels_of(E, rows)
            labelled = Y.any(axis=1)  # pseudo-labels: every row
            if labelled.any():
                model.partial_fit(apply_preprocessing(pre, E[labelled]), Y[labelled])
        if progress is not None:
            progress(epoch + 1, epochs)
    return model, {"n_items": n_items, "n_batches": n_batches, "epochs": epochs, "steps": int(model.n_steps_),
                   "start_rows": int(start_rows.size), "unlabelled": unlabelled, "preprocessing": kind,
                   "encoder": encoder_spec_of(meta)}

"""Streaming fits (``slics fit --stream``): the reservoir sample, one-pass U-SLiCS pseudo-labels, and the fit over
a cache's batch files, against in-memory computations of the same schedule."""
import contextlib
import warnings

import numpy as np
import pytest
from sklearn.utils import check_random_state

from slics_core import streaming
from slics_core.cli import main
from slics_core.data import load_cache
from slics_core.preprocessing import make_preprocessor
from slics_core.slics import SLiCS
from slics_core.store import EmbeddingStore
from slics_core.streaming import DEFAULT_EPOCHS, DEFAULT_START_SIZE, Reservoir
from slics_core.unsupervised import MIN_POSITIVES, ZeroShotLabeller, zero_shot_labels
from tests.test_cli_data import toy  # noqa: F401 (the fixture: a labelled folder of 90 images and a toy encoder)


@contextlib.contextmanager
def _warnings(action):
    with warnings.catch_warnings():
        warnings.simplefilter(action)
        yield


def _cut(X, size):
    return [X[i:i + size] for i in range(0, len(X), size)]


def reservoir_sample(batches, n, random_state=None):
    """``(rows, ids)`` of a seeded :class:`Reservoir` of ``n`` rows fed the row batches ``batches``."""
    res = Reservoir(n, random_state)
    for rows in batches:
        res.add(rows)
    return res.sample()


# ------------------------------------------------------------------------------------------ reservoir
def _one_by_one(rows, n, seed):
    """Algorithm R written row by row: the reference the batched reservoir must equal."""
    rng = np.random.RandomState(seed)
    slots, ids = [None] * n, [None] * n
    for i, row in enumerate(rows):
        if i < n:
            slots[i], ids[i] = row, i
        else:
            j = int(np.floor(rng.random_sample() * (i + 1)))
            if j < n:
                slots[j], ids[j] = row, i
    keep = [k for k in range(min(n, len(rows)))]
    order = np.argsort([ids[k] for k in keep])
    return np.array([slots[keep[k]] for k in order]), np.array([ids[keep[k]] for k in order])


@pytest.mark.parametrize("n", [1, 7, 30, 200])
def test_reservoir_equals_taking_rows_one_by_one_for_any_batch_cut(n):
    X = np.random.default_rng(1).standard_normal((100, 4))
    want_rows, want_ids = _one_by_one(X, n, seed=5)
    for size in (1, 3, 16, 100):
        rows, ids = reservoir_sample(_cut(X, size), n, random_state=5)
        np.testing.assert_array_equal(ids, want_ids)
        np.testing.assert_array_equal(rows, want_rows)
        np.testing.assert_array_equal(rows, X[ids])
    assert len(ids) == min(n, 100) and len(set(ids.tolist())) == len(ids)
    again, _ = reservoir_sample(_cut(X, 7), n, random_state=5)
    np.testing.assert_array_equal(again, want_rows)  # same seed, same rows


def test_reservoir_includes_every_row_with_probability_n_over_N():
    """Over 4000 fixed seeds each of 50 rows is in a 10-row sample about 4000 * 0.2 times; the bound is 6 binomial
    standard deviations (the seeds are fixed, so the test is deterministic; a biased sampler misses it by far)."""
    N, n, seeds = 50, 10, 4000
    X = np.arange(N)[:, None]
    counts = np.zeros(N)
    for seed in range(seeds):
        _, ids = reservoir_sample(_cut(X, 8), n, random_state=seed)
        counts[ids] += 1
    p = n / N
    assert np.abs(counts - seeds * p).max() <= 6 * np.sqrt(seeds * p * (1 - p))
    assert counts.sum() == seeds * n


def test_reservoir_refuses_a_bad_size():
    with pytest.raises(ValueError, match="n must be a positive integer"):
        Reservoir(0)


# ------------------------------------------------------------------------------------------ pseudo-labels
def _tied_data():
    """Concept 2 is never among the top-1 (the minimum-positives rule adds its best rows) and 9 copies of one
    row tie for its last kept places; ``W = eye`` makes every cosine a coordinate, exact whatever the batch."""
    rng = np.random.default_rng(0)
    X = np.abs(rng.standard_normal((60, 8))) * np.array([1, 1, 0.05, 0, 0, 0, 0, 0]) + 0.01
    def order():
        return np.argsort(-(X / np.linalg.norm(X, axis=1, keepdims=True))[:, 2], kind="stable")

    r = order()[5]
    copies = [i for i in (7, 13, 21, 30, 31, 40, 45, 52, 59) if i != r]
    X[copies] = X[r] * 2  # the same direction: equal cosines, bit for bit
    top = order()[:MIN_POSITIVES]
    assert r in top and copies[-1] not in top and len(set(copies) & set(top)) >= 3  # the cut falls inside the tie
    return X, np.eye(3, 8)


def _direct_labels(X, W, n_active, m=MIN_POSITIVES):
    """The rule on the whole matrix, written out (top-S~ per row; a concept with fewer than m gets its m best rows,
    ties to the earlier row): the reference both the batch and the streaming labels must equal."""
    sims = (X / np.linalg.norm(X, axis=1, keepdims=True)) @ (W / np.linalg.norm(W, axis=1, keepdims=True)).T
    Y = np.zeros(sims.shape, dtype=bool)
    for i, row in enumerate(sims):
        Y[i, np.argsort(-row, kind="stable")[:n_active]] = True
    need = min(m, len(X))
    for j in np.flatnonzero(Y.sum(axis=0) < need):
        Y[np.argsort(-sims[:, j], kind="stable")[:need], j] = True
    return Y


@pytest.mark.parametrize("data", ["tied", "random"])
def test_streaming_pseudo_labels_equal_zero_shot_labels(data):
    if data == "tied":
        X, W = _tied_data()
        n_active = 1
    else:
        rng = np.random.default_rng(3)
        X, W = rng.standard_normal((57, 12)), rng.standard_normal((6, 12))
        n_active = 2
    with pytest.warns(RuntimeWarning, match="fewer than") if data == "tied" else _warnings("error"):
        want = zero_shot_labels(X, W, n_active=n_active)
    np.testing.assert_array_equal(want, _direct_labels(X, W, n_active))
    assert data != "tied" or want[:, 2].sum() == MIN_POSITIVES
    for size in (1, 3, MIN_POSITIVES - 1, MIN_POSITIVES, 16, len(X)):
        labeller = ZeroShotLabeller(W, n_active)
        for part in _cut(X, size):
            labeller.scan(part)
        with pytest.warns(RuntimeWarning, match="fewer than") if data == "tied" else _warnings("error"):
            labeller.finish()
        got = np.concatenate([labeller.labels(part, np.arange(s, s + len(part)))
                              for s, part in zip(range(0, len(X), size), _cut(X, size))])
        np.testing.assert_array_equal(got, want, err_msg=f"batch size {size}")
        np.testing.assert_array_equal(labeller.labels(X[::-1], np.arange(len(X))[::-1]), want[::-1])


def test_labeller_refuses_misuse():
    W = np.eye(3, 4)
    lab = ZeroShotLabeller(W, 1)
    with pytest.raises(RuntimeError, match="finish"):
        lab.labels(np.ones((2, 4)), [0, 1])
    lab.scan(np.ones((2, 4)))
    with pytest.warns(RuntimeWarning, match="concept 1, concept 2 had fewer than 2"):
        lab.finish()
    with pytest.raises(RuntimeError, match="after finish"):
        lab.scan(np.ones((2, 4)))
    with pytest.raises(ValueError, match="n_active"):
        ZeroShotLabeller(W, 4)
    with pytest.raises(ValueError, match="min_positives"):
        ZeroShotLabeller(W, 1, min_positives=-1)


# ------------------------------------------------------------------------------------------ the CLI fit
def _embed_clip(tmp, cache):
    return main(["embed", "--dataset", "folder", "--images", str(tmp / "photos"), "--labels",
                 str(tmp / "labels.csv"), "--encoder", "toyenc:make", "--cache", str(cache), "--batch-size", "16",
                 "--preprocessing", "clip", "--no-progress"])


@pytest.fixture
def cache(toy):  # noqa: F811
    c = toy / "cache"
    assert _embed_clip(toy, c) == 0
    return c


def _in_memory(cache, method, epochs, start_size, seed, n_atoms):
    """The streaming schedule computed on the whole matrix: the training mean of every item, the reservoir
    sample of the labelled items in batch order, then ``epochs`` seeded permutations of the batch files."""
    data = load_cache(cache)
    store = EmbeddingStore(cache)
    batch_size = int(store.meta()["batch_size"])
    batch_of = store.positions() // batch_size
    n_batches = store.n_batches()
    pre = make_preprocessor("clip").fit(data.raw)  # mean of the unit embeddings of every item
    X = pre.transform(data.raw.astype(np.float64)).astype(np.float32)
    if method == "U-SLiCS":
        with _warnings("ignore"):
            Y = zero_shot_labels(data.raw, data.concept_text, Y_ref=data.Y)
    else:
        Y = data.Y
    rows_of = [np.flatnonzero((batch_of == b) & Y.any(axis=1)) for b in range(n_batches)]
    _, ids = reservoir_sample([data.raw[r] for r in rows_of], start_size, random_state=seed)
    start = np.concatenate(rows_of)[ids]
    model = SLiCS(n_atoms=n_atoms, random_state=seed).partial_fit(X[start], Y[start], concept_names=data.concept_names)
    rng = check_random_state(seed)
    for _ in range(epochs):
        for b in rng.permutation(n_batches):
            if rows_of[b].size:
                model.partial_fit(X[rows_of[b]], Y[rows_of[b]])
    return model


@pytest.mark.parametrize("method", ["S-SLiCS", "U-SLiCS"])
def test_stream_fit_through_the_cli_equals_partial_fit_in_memory(cache, method, capsys):
    out = cache.parent / "stream.npz"
    assert main(["fit", "--cache", str(cache), "--stream", "--method", method, "--epochs", "2", "--start-size", "40",
                 "--n-atoms", "2", "--seed", "3", "--out", str(out)]) == 0
    said, progress = capsys.readouterr()
    assert progress.splitlines()[-3:] == ["fit --stream: started on the sample", "fit --stream: epoch 1/2",
                                          "fit --stream: epoch 2/2"]
    assert "streaming over 6 batches" in said and "90 items" in said and "start on 40, 2 epochs, 13 steps" in said
    got = SLiCS.load(out)
    want = _in_memory(cache, method, epochs=2, start_size=40, seed=3, n_atoms=2)
    assert got.concept_names_ == want.concept_names_ == ["red", "green", "blue"]
    np.testing.assert_array_equal(got.groups_, want.groups_)
    np.testing.assert_allclose(got.atoms_, want.atoms_, rtol=0, atol=1e-8)
    # the schedule matters: another seed gives other atoms
    other = _in_memory(cache, method, epochs=2, start_size=40, seed=4, n_atoms=2)
    assert np.abs(other.atoms_ - got.atoms_).max() > 1e-3


def test_stream_fit_holds_one_batch_and_the_reservoir(cache, monkeypatch):
    """The loop reads batch files only (never the whole matrix) and hands the model one batch or the start sample."""
    def refuse(*a, **k):
        raise AssertionError("a streaming fit loaded the whole embedding matrix")

    monkeypatch.setattr(EmbeddingStore, "load", refuse)
    read, fitted, reservoirs = [], [], []
    real_read, real_fit, real_add = EmbeddingStore.read_batch, SLiCS.partial_fit, Reservoir.add

    def spy_read(self, b, meta=None):
        out = real_read(self, b, meta)
        read.append(out[1].shape[0])
        return out

    def spy_fit(self, X, Y, concept_names=None):
        fitted.append(np.shape(X)[0])
        return real_fit(self, X, Y, concept_names)

    def spy_add(self, rows, ids=None):
        out = real_add(self, rows, ids)
        reservoirs.append(self._rows.shape[0])
        return out

    monkeypatch.setattr(EmbeddingStore, "read_batch", spy_read)
    monkeypatch.setattr(SLiCS, "partial_fit", spy_fit)
    monkeypatch.setattr(Reservoir, "add", spy_add)
    model, info = streaming.stream_fit(cache, n_atoms=1, epochs=3, start_size=25, seed=0)
    assert len(read) == 6 * (1 + 3) and max(read) <= 16  # one pass for the start, then 3 epochs of 6 batch files
    assert fitted[0] == 25 and max(fitted[1:]) <= 16 and len(fitted) == 1 + 6 * 3
    assert max(reservoirs) == 25
    assert info["n_items"] == 90 and info["steps"] == 19 and model.n_steps_ == 19


def test_stream_fit_defaults_and_errors(cache, capsys):
    assert DEFAULT_EPOCHS == 10 and DEFAULT_START_SIZE == 2000
    out = str(cache.parent / "m.npz")
    refused = ((["--n-train", "30"], "leave out --n-train"), (["--batch-size", "8"], "--batch-size"),
               (["--method", "S-SVD"], "S-SLiCS or U-SLiCS"), (["--start-size", "1"], "raise the start sample"))
    for extra, words in refused:
        assert main(["fit", "--cache", str(cache), "--stream", "--out", out, "--n-atoms", "1"] + extra) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err, err
    assert main(["fit", "--cache", str(cache), "--epochs", "2", "--out", out]) == 2
    assert "--epochs goes with --stream" in capsys.readouterr().err
    # the defaults: the whole cache is smaller than the start sample, so the start is every item
    assert main(["fit", "--cache", str(cache), "--stream", "--out", out, "--n-atoms", "1"]) == 0
    assert "start on 90, 10 epochs, 61 steps" in capsys.readouterr().out

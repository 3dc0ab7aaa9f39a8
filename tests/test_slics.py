import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference_kernels import ksvd_atom_update, top_singular_vector
from scipy.optimize import nnls

from slics_core import SLiCS
from slics_core._kernels import top_triplet
from slics_core.atom_steps import bcd_atom_update, initial_atoms, majority_sign
from slics_core.slics import epoch_batches
from slics_core.synthetic import atom_recovery, make_concept_cones


@pytest.fixture(scope="module")
def cones():
    return make_concept_cones(n_samples=1500, n_features=48, n_concepts=5, n_atoms=3, noise=0.05,
                              random_state=0)


def _rank1_error(E, b, beta):
    return np.linalg.norm(E - np.outer(beta, b)) ** 2


# -- the paper's building blocks ---------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 30), st.integers(1, 12))
def test_majority_sign_is_never_worse_than_the_other_sign(seed, n, d):
    E = np.random.default_rng(seed).normal(size=(n, d))
    _, _, Vt = np.linalg.svd(E, full_matrices=False)
    u = Vt[0]
    beta = E @ u
    p = majority_sign(beta)
    best = _rank1_error(E, p * u, np.maximum(p * beta, 0))
    other = _rank1_error(E, -p * u, np.maximum(-p * beta, 0))
    assert best <= other + 1e-9
    # closed form of the proof: ||E||^2 - ||(p beta)_+||^2
    assert np.isclose(best, np.linalg.norm(E) ** 2 - np.sum(np.maximum(p * beta, 0) ** 2))


def test_top_singular_vector_matches_svd():
    rng = np.random.default_rng(1)
    E = rng.normal(size=(50, 20)) + 3 * np.outer(rng.normal(size=50), rng.normal(size=20))
    v = top_singular_vector(E, rng.normal(size=20))
    _, _, Vt = np.linalg.svd(E)
    assert abs(v @ Vt[0]) > 1 - 1e-8


@pytest.mark.parametrize("n", [1, 2, 3, 6, 40, 200])
def test_lanczos_triplet_of_implicit_rank1_update_matches_lapack_svd(n):
    """E = R + a v0^T with fewer, as many or more rows than Lanczos steps (incl. d > n)."""
    rng = np.random.default_rng(n)
    d = 64
    R = rng.normal(size=(n, d)) + 2 * np.outer(rng.random(n), rng.normal(size=d))
    v0 = rng.normal(size=d)
    v0 /= np.linalg.norm(v0)
    a = rng.random(n)
    E = R + np.outer(a, v0)
    v, ev, ev0, _ = top_triplet(R, np.arange(n), a, v0, True, 1e-12, 100, 3)
    # the rows with a_i = 0 are left out of E (they do not use the atom)
    a0 = a.copy()
    a0[::2] = 0.0
    if n > 1:
        E0 = (R + np.outer(a0, v0))[1::2]
        v_0, ev_0, _, _ = top_triplet(R, np.arange(n), a0, v0, True, 1e-12, 100, 3)
        _, _, Vt0 = np.linalg.svd(E0)
        assert abs(v_0 @ Vt0[0]) > 1 - 1e-12
        assert not ev_0[::2].any()
        np.testing.assert_allclose(ev_0[1::2], E0 @ v_0, atol=1e-10)
    _, s, Vt = np.linalg.svd(E)
    assert abs(v @ Vt[0]) > 1 - 1e-12
    np.testing.assert_allclose(ev, E @ v, atol=1e-10)
    np.testing.assert_allclose(ev0, E @ v0, atol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(ev), s[0], rtol=1e-12)


def test_ksvd_atom_update_equals_full_svd_reference():
    rng = np.random.default_rng(2)
    E = rng.normal(size=(40, 16)) + 2 * np.outer(rng.random(40), rng.normal(size=16))
    b, beta = ksvd_atom_update(E, rng.normal(size=16))
    _, _, Vt = np.linalg.svd(E)
    ref = min(_rank1_error(E, p * Vt[0], np.maximum(p * (E @ Vt[0]), 0)) for p in (1, -1))
    assert np.isclose(_rank1_error(E, b, beta), ref, rtol=1e-8)
    assert (beta >= 0).all() and np.isclose(np.linalg.norm(b), 1)


def test_bcd_update_never_worse_than_least_squares_atom_and_power_steps_descend():
    rng = np.random.default_rng(3)
    E = rng.normal(size=(60, 10)) + np.outer(rng.random(60), rng.normal(size=10))
    beta0 = rng.random(60)
    gamma = E.T @ beta0 / (beta0 @ beta0)  # best atom for beta0 (Appendix A)
    start = _rank1_error(E, gamma, beta0)
    errors = [_rank1_error(E, *bcd_atom_update(E, beta0, steps)) for steps in range(6)]
    assert errors[0] <= start + 1e-9
    assert all(b <= a + 1e-9 for a, b in zip(errors, errors[1:]))


def test_initial_atoms_are_top_singular_directions_with_majority_sign(cones):
    B, groups = initial_atoms(cones.X, cones.Y, [3] * 5)
    for j in range(5):
        Xj = cones.X[cones.Y[:, j]]
        _, _, Vt = np.linalg.svd(Xj, full_matrices=False)
        for k in range(3):
            b = B[groups == j][k]
            assert abs(b @ Vt[k]) > 1 - 1e-6
            proj = Xj @ b
            assert np.linalg.norm(np.maximum(proj, 0)) >= np.linalg.norm(np.maximum(-proj, 0))


# -- the estimator -----------------------------------------------------------------------------
def test_coefficient_step_matches_scipy_nnls(cones):
    model = SLiCS(n_atoms=3, n_iter=2).fit(cones.X, cones.Y)
    A = model.transform(cones.X[:50], cones.Y[:50])
    for i in range(50):
        P = np.flatnonzero(cones.Y[i, model.groups_])
        ref = nnls(model.atoms_[P].T, cones.X[i])[1]
        assert np.linalg.norm(cones.X[i] - A[i] @ model.atoms_) <= ref + 1e-9
        assert not A[i, ~cones.Y[i, model.groups_]].any()


@pytest.mark.parametrize("update", ["ksvd", "bcd"])
def test_monotone_never_raises_the_error(update):
    data = make_concept_cones(n_samples=400, n_features=24, n_concepts=4, n_atoms=4, noise=0.3,
                              random_state=4)
    model = SLiCS(n_atoms=3, n_iter=12, update=update, monotone=True).fit(data.X, data.Y)
    h = model.history_
    assert np.all(np.diff(h) <= 1e-12 * h[0])
    init_error = SLiCS(n_atoms=3, n_iter=0).fit(data.X, data.Y).reconstruction_error(data.X, data.Y)
    assert h[0] <= init_error


def test_learned_cones_recover_the_planted_ones(cones):
    model = SLiCS(n_atoms=3, n_iter=15).fit(cones.X, cones.Y)
    init = SLiCS(n_atoms=3, n_iter=0).fit(cones.X, cones.Y)

    learned = atom_recovery(cones.atoms, cones.groups, model.atoms_, model.groups_)
    start = atom_recovery(cones.atoms, cones.groups, init.atoms_, init.groups_)
    assert np.median(learned) > 0.85
    assert np.median(learned) > np.median(start) + 0.1
    assert model.history_[-1] < 0.1 * model.history_[0]


def test_concept_filtered_retrieval_beats_unfiltered(cones):
    train, query, pool = slice(0, 800), slice(800, 950), slice(950, None)
    model = SLiCS(n_atoms=3, n_iter=10).fit(cones.X[train], cones.Y[train])
    Xp, subp = cones.X[pool], cones.sublabels[pool]

    def unit(Z):
        return Z / np.maximum(np.linalg.norm(Z, axis=-1, keepdims=True), 1e-12)

    filtered, unfiltered = [], []
    for i in range(query.start, query.stop):
        for j in np.flatnonzero(cones.Y[i]):
            relevant = subp[:, j] == cones.sublabels[i, j]
            comp = model.project(cones.X[i:i + 1], j)
            top_f = np.argsort(-(unit(Xp) @ unit(comp)[0]))[:10]
            top_u = np.argsort(-(unit(Xp) @ unit(cones.X[i])))[:10]
            filtered.append(relevant[top_f].mean())
            unfiltered.append(relevant[top_u].mean())
    assert np.mean(filtered) > np.mean(unfiltered) + 0.1


def test_components_sum_to_reconstruction_and_project_is_nearest_cone_point(cones):
    model = SLiCS(n_atoms=3, n_iter=3).fit(cones.X, cones.Y)
    X, Y = cones.X[:20], cones.Y[:20]
    V = model.components(X, Y)
    np.testing.assert_allclose(V.sum(axis=1), model.transform(X, Y) @ model.atoms_, atol=1e-10)
    assert not V[~Y].any()
    for j in range(5):
        P = model.project(X, j)
        Bj = model.atoms_[model.groups_ == j]
        for i in range(20):
            coef, _ = nnls(Bj.T, X[i])
            np.testing.assert_allclose(P[i], coef @ Bj, atol=1e-8)
    np.testing.assert_allclose(model.project(X, None)[:, 2], model.project(X, 2))


def test_full_batch_is_deterministic_and_minibatch_reproducible(cones):
    a = SLiCS(n_atoms=2, n_iter=3).fit(cones.X, cones.Y)
    b = SLiCS(n_atoms=2, n_iter=3).fit(cones.X, cones.Y)
    np.testing.assert_array_equal(a.atoms_, b.atoms_)
    m1 = SLiCS(n_atoms=2, n_iter=3, batch_size=400, random_state=7).fit(cones.X, cones.Y)
    m2 = SLiCS(n_atoms=2, n_iter=3, batch_size=400, random_state=7).fit(cones.X, cones.Y)
    m3 = SLiCS(n_atoms=2, n_iter=3, batch_size=400, random_state=8).fit(cones.X, cones.Y)
    np.testing.assert_array_equal(m1.atoms_, m2.atoms_)
    assert not np.allclose(m1.atoms_, m3.atoms_)
    assert m1.history_[-1] < m1.history_[0]


def test_tol_stops_early_and_n_iter_zero_is_the_svd_initialisation(cones):
    model = SLiCS(n_atoms=3, n_iter=50, tol=1e-2).fit(cones.X, cones.Y)
    assert 2 <= model.n_iter_ < 50
    h = model.history_
    assert (h[-2] - h[-1]) / h[-2] < 1e-2
    init = SLiCS(n_atoms=3, n_iter=0).fit(cones.X, cones.Y)
    B, _ = initial_atoms(cones.X, cones.Y, [3] * 5)
    np.testing.assert_array_equal(init.atoms_, B)
    assert init.n_iter_ == 0


def test_per_concept_atom_counts_and_ridge():
    data = make_concept_cones(n_samples=300, n_features=16, n_concepts=3, n_atoms=2, random_state=1)
    model = SLiCS(n_atoms=[1, 2, 3], n_iter=2, ridge=0.1).fit(data.X, data.Y)
    assert np.bincount(model.groups_).tolist() == [1, 2, 3]
    Bj = model.atoms_[model.groups_ == 2]
    aug = np.vstack([Bj.T, np.sqrt(0.1) * np.eye(3)])
    coef, _ = nnls(aug, np.concatenate([data.X[0], np.zeros(3)]))
    np.testing.assert_allclose(model.project(data.X[:1], 2)[0], coef @ Bj, atol=1e-8)


def test_save_load_round_trip(tmp_path, cones):
    model = SLiCS(n_atoms=[2, 3, 2, 2, 2], n_iter=2, random_state=3).fit(
        cones.X, cones.Y, concept_names=list("abcde"))
    path = tmp_path / "model.slics"
    model.save(path)
    loaded = SLiCS.load(path)
    np.testing.assert_array_equal(loaded.atoms_, model.atoms_)
    np.testing.assert_array_equal(loaded.groups_, model.groups_)
    np.testing.assert_array_equal(loaded.history_, model.history_)
    assert loaded.get_params() == model.get_params()
    assert loaded.concept_names_ == list("abcde")
    np.testing.assert_allclose(loaded.project(cones.X[:5], 1), model.project(cones.X[:5], 1))


def test_load_rejects_damaged_and_foreign_files(tmp_path, cones):
    with pytest.raises(FileNotFoundError):
        SLiCS.load(tmp_path / "missing.npz")
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip file at all")
    with pytest.raises(ValueError, match="not a readable SLiCS model"):
        SLiCS.load(junk)
    other = tmp_path / "other.npz"
    np.savez(other, atoms=np.eye(3))
    with pytest.raises(ValueError, match="not a SLiCS model file"):
        SLiCS.load(other)
    good = tmp_path / "good.npz"
    SLiCS(n_atoms=2, n_iter=1).fit(cones.X, cones.Y).save(good)
    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(good.read_bytes()[:200])
    with pytest.raises(ValueError):
        SLiCS.load(truncated)


# -- bad input ---------------------------------------------------------------------------------
def test_bad_input_gets_clear_errors(cones):
    X, Y = cones.X[:200], cones.Y[:200]
    bad = X.copy()
    bad[3, 0] = np.nan
    with pytest.raises(ValueError, match="NaN or infinite"):
        SLiCS().fit(bad, Y)
    zero = X.copy()
    zero[5] = 0
    with pytest.raises(ValueError, match="all zero"):
        SLiCS().fit(zero, Y)
    with pytest.raises(ValueError, match="rows"):
        SLiCS().fit(X, Y[:-1])
    with pytest.raises(ValueError, match="binary"):
        SLiCS().fit(X, Y * 2)
    Y0 = Y.copy()
    Y0[:, 2] = False
    Y0[~Y0.any(axis=1), 0] = True
    with pytest.raises(ValueError, match="no positive sample"):
        SLiCS().fit(X, Y0)
    with pytest.raises(ValueError, match="update"):
        SLiCS(update="svd").fit(X, Y)
    model = SLiCS(n_atoms=2, n_iter=1).fit(X, Y)
    with pytest.raises(ValueError, match="features"):
        model.transform(X[:, :10])
    with pytest.raises(ValueError, match="out of range"):
        model.project(X, 9)
    with pytest.raises(ValueError, match="concept columns"):
        model.transform(X, Y[:, :3])


def test_unlabelled_samples_and_small_concepts_are_warned_not_fatal():
    data = make_concept_cones(n_samples=200, n_features=16, n_concepts=3, n_atoms=2, random_state=2)
    Y = data.Y.copy()
    Y[:5] = False
    with pytest.warns(RuntimeWarning, match="no positive label"):
        SLiCS(n_atoms=2, n_iter=1).fit(data.X, Y)
    Y = data.Y.copy()
    Y[:, 1] = False
    Y[:2, 1] = True  # only 2 samples for 4 atoms
    Y[~Y.any(axis=1), 0] = True  # keep every sample labelled
    with pytest.warns(RuntimeWarning, match="random unit vectors"):
        model = SLiCS(n_atoms=4, n_iter=2, random_state=0).fit(data.X, Y)
    assert np.isfinite(model.atoms_).all()
    np.testing.assert_allclose(np.linalg.norm(model.atoms_, axis=1), 1)


# -- progress hook -----------------------------------------------------------------------------
@pytest.mark.parametrize("batch_size, n_batches", [(None, 1), (400, 4), (500, 3)])
def test_callback_sees_every_batch_and_leaves_the_fit_unchanged(cones, batch_size, n_batches):
    calls = []
    with_cb = SLiCS(n_atoms=2, n_iter=3, batch_size=batch_size, random_state=4,
                    callback=lambda *args: calls.append(args)).fit(cones.X, cones.Y)
    without = SLiCS(n_atoms=2, n_iter=3, batch_size=batch_size, random_state=4).fit(cones.X, cones.Y)
    assert calls == [(e, 3, b, n_batches) for e in range(3) for b in range(n_batches)]  # 1500 rows
    np.testing.assert_array_equal(with_cb.atoms_, without.atoms_)
    np.testing.assert_array_equal(with_cb.history_, without.history_)


def test_callback_follows_early_stop_and_is_never_saved(tmp_path, cones):
    calls = []
    model = SLiCS(n_atoms=3, n_iter=50, tol=1e-2, callback=lambda *a: calls.append(a)).fit(cones.X, cones.Y)
    assert calls == [(e, 50, 0, 1) for e in range(model.n_iter_)]
    SLiCS(n_atoms=2, n_iter=0, callback=lambda *a: calls.append("svd")).fit(cones.X, cones.Y)
    assert "svd" not in calls  # no epoch, no batch
    path = model.save(tmp_path / "m.npz")
    loaded = SLiCS.load(path)
    assert loaded.callback is None
    np.testing.assert_array_equal(loaded.atoms_, model.atoms_)
    with pytest.raises(ValueError, match="callback must be None or a callable"):
        SLiCS(callback="print").fit(cones.X, cones.Y)


def test_values_whose_squares_overflow_are_refused_clearly():
    """X * 1e300 is finite, but its squares are not: say so and what to do, not numpy's "infs or NaNs"."""
    data = make_concept_cones(n_samples=60, n_features=8, n_concepts=3, n_atoms=2, random_state=0)
    with pytest.raises(ValueError) as info:
        SLiCS(n_atoms=2, n_iter=2).fit(data.X * 1e300, data.Y)
    msg = str(info.value)
    assert msg.startswith("X has values as large as ") and "overflow" in msg and "normalise the embeddings" in msg
    assert "infs or NaNs" not in msg
    model = SLiCS(n_atoms=2, n_iter=2).fit(data.X * 1e100, data.Y)  # large but safe: still fitted
    assert np.isfinite(model.atoms_).all()


# -- streaming fits: partial_fit -----------------------------------------------------------------
def test_first_partial_fit_is_the_svd_start_of_its_batch(cones):
    X, Y = cones.X[:300], cones.Y[:300]
    model = SLiCS(n_atoms=3).partial_fit(X, Y, concept_names=list("abcde"))
    B, groups = initial_atoms(X, Y, [3] * 5)
    np.testing.assert_array_equal(model.atoms_, B)
    np.testing.assert_array_equal(model.groups_, groups)
    start = SLiCS(n_atoms=3, n_iter=0).fit(X, Y, concept_names=list("abcde"))
    np.testing.assert_array_equal(model.atoms_, start.atoms_)
    assert (model.n_steps_, model.n_iter_, model.n_features_in_, model.n_concepts_) == (1, 0, 48, 5)
    assert model.concept_names_ == list("abcde") and model.history_.shape == (0,)
    np.testing.assert_array_equal(model.transform(cones.X[300:310]), start.transform(cones.X[300:310]))
    np.testing.assert_array_equal(model.project(cones.X[:4], 2), start.project(cones.X[:4], 2))


@pytest.mark.parametrize("update", ["ksvd", "bcd"])
def test_partial_fit_over_the_epochs_batches_equals_minibatch_fit(cones, update):
    """The issue's pinned interface: the start, then one call per batch of ``epoch_batches``, is ``fit``."""
    fitted = SLiCS(n_atoms=3, n_iter=2, batch_size=400, update=update, random_state=7).fit(cones.X, cones.Y)
    streamed = SLiCS(n_atoms=3, n_iter=0, batch_size=400, update=update, random_state=7).fit(cones.X, cones.Y)
    rng = np.random.RandomState(7)
    for _ in range(2):
        for batch in epoch_batches(len(cones.X), 400, rng):
            streamed.partial_fit(cones.X[batch], cones.Y[batch])
    np.testing.assert_allclose(streamed.atoms_, fitted.atoms_, rtol=0, atol=1e-8)
    assert streamed.n_steps_ == fitted.n_steps_ == 1 + 2 * 4


def test_a_partial_fit_step_moves_only_the_atoms_its_batch_uses(cones):
    model = SLiCS(n_atoms=2).partial_fit(cones.X, cones.Y)
    before = model.atoms_.copy()
    only0 = cones.Y[:, 0] & (cones.Y.sum(axis=1) == 1)  # samples of concept 0 alone
    model.partial_fit(cones.X[only0], cones.Y[only0])
    moved = np.abs(model.atoms_ - before).max(axis=1) > 0
    assert moved[model.groups_ == 0].all() and not moved[model.groups_ != 0].any()
    assert model.n_steps_ == 2


def test_streaming_several_passes_reaches_the_minibatch_fit_error(cones):
    """Ten passes of 500-row batches in a fixed order against ``fit`` reshuffling 500-row batches.

    The two runs take different batch orders, so they reach different local minima; both sit at the
    noise floor (measured 0.5 % apart, while the S-SVD start of the first batch is 250 times above).
    The tolerance, 5 % of the fit's error, is ten times the measured gap and far below the start.
    """
    X, Y = cones.X, cones.Y
    fitted = SLiCS(n_atoms=3, n_iter=10, batch_size=500, random_state=1).fit(X, Y)
    streamed = SLiCS(n_atoms=3)
    for _ in range(10):
        for i in range(0, len(X), 500):
            streamed.partial_fit(X[i:i + 500], Y[i:i + 500])
    target = fitted.reconstruction_error(X, Y)
    start = SLiCS(n_atoms=3, n_iter=0).fit(X[:500], Y[:500]).reconstruction_error(X, Y)
    assert start > 100 * target
    assert abs(streamed.reconstruction_error(X, Y) - target) <= 0.05 * target
    assert streamed.n_steps_ == 1 + 10 * 3 - 1  # the first call only starts


def test_partial_fit_refuses_a_batch_that_does_not_match_in_one_line(cones):
    model = SLiCS(n_atoms=2).partial_fit(cones.X[:300], cones.Y[:300])
    with pytest.raises(ValueError) as info:
        model.partial_fit(cones.X[300:400, :40], cones.Y[300:400])
    assert str(info.value) == "X has 40 features, but SLiCS is expecting 48 features as input."
    with pytest.raises(ValueError) as info:
        model.partial_fit(cones.X[300:400], cones.Y[300:400, :4])
    assert str(info.value) == "Y has 4 concept columns, but 5 are expected."
    with pytest.raises(ValueError, match=r"concept_names \['a', 'b', 'c', 'd', 'e'\] differ from the fitted model's"):
        model.partial_fit(cones.X[300:400], cones.Y[300:400], concept_names=list("abcde"))
    with pytest.raises(ValueError, match=r"concept\(s\) \['concept 2'\] have no positive sample"):
        SLiCS(n_atoms=2).partial_fit(cones.X[~cones.Y[:, 2]], cones.Y[~cones.Y[:, 2]])
    Y = cones.Y[300:400].copy()
    Y[:3] = False
    with pytest.warns(RuntimeWarning, match="3 sample"):
        model.partial_fit(cones.X[300:400], Y)
    assert model.n_steps_ == 2


def test_partial_fit_takes_class_labels_like_fit():
    data = make_concept_cones(n_samples=200, n_features=16, n_concepts=3, n_atoms=2, random_state=5)
    y = np.array(["cat", "dog", "owl"])[np.argmax(data.Y, axis=1)]
    model = SLiCS(n_atoms=2).partial_fit(data.X[:100], y[:100])
    assert list(model.classes_) == ["cat", "dog", "owl"] and model.concept_names_ == ["cat", "dog", "owl"]
    model.partial_fit(data.X[100:], y[100:])
    onehot = (y[:, None] == model.classes_).astype(int)
    ref = SLiCS(n_atoms=2).partial_fit(data.X[:100], onehot[:100]).partial_fit(data.X[100:], onehot[100:])
    np.testing.assert_array_equal(model.atoms_, ref.atoms_)
    with pytest.raises(ValueError, match="'eel'"):
        model.partial_fit(data.X[:2], np.array(["cat", "eel"]))


def test_save_load_after_partial_fit_round_trips_and_streams_on(tmp_path, cones):
    model = SLiCS(n_atoms=2, random_state=0).partial_fit(cones.X[:500], cones.Y[:500])
    model.partial_fit(cones.X[500:1000], cones.Y[500:1000])
    path = model.save(tmp_path / "streamed.slics")
    loaded = SLiCS.load(path)
    np.testing.assert_array_equal(loaded.atoms_, model.atoms_)
    np.testing.assert_array_equal(loaded.groups_, model.groups_)
    assert loaded.get_params() == model.get_params() and loaded.n_iter_ == 0
    np.testing.assert_array_equal(loaded.transform(cones.X[1000:1010]), model.transform(cones.X[1000:1010]))
    model.partial_fit(cones.X[1000:], cones.Y[1000:])
    loaded.partial_fit(cones.X[1000:], cones.Y[1000:])  # a loaded model streams on from its atoms
    np.testing.assert_allclose(loaded.atoms_, model.atoms_, rtol=0, atol=1e-8)

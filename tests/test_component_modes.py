"""The component modes have one home: methods.components_of (checked by methods.check_mode).

Every caller (retrieval, evaluation, the scorer, the maps, the explorer's one-query form) computes
"partial" and "full" through it, and each is compared here with an independent NNLS (scipy) on the
model's atoms: partial = the projection of each row onto concept j's cone (tilde-v_j, eq. 3); full =
v_j = B_j a_j of the joint NNLS of the row over its active concepts (eq. 2), zero elsewhere.
"""
import numpy as np
import pytest
from scipy.optimize import nnls

from slics_core import SLiCS
from slics_core.evaluation import rank_queries
from slics_core.explorer.maps import map_points, point_text
from slics_core.explorer.queries import components_of_row, concept_scores
from slics_core.methods import MODES, FitInputs, check_mode, components_of, fit_method
from slics_core.metrics import RetrievalScorer
from slics_core.retrieval import ConceptRetriever, build_index
from slics_core.synthetic import make_concept_cones

S, D0, D = 4, 3, 20


@pytest.fixture(scope="module")
def world():
    data = make_concept_cones(n_samples=260, n_features=D, n_concepts=S, n_atoms=D0, noise=0.05, random_state=2)
    X = data.X / np.linalg.norm(data.X, axis=1, keepdims=True)
    model = SLiCS(n_atoms=D0, n_iter=3, random_state=0).fit(X[:200], data.Y[:200])
    return model, X[200:], np.asarray(data.Y[200:], dtype=bool)


def _partial(model, X):
    """tilde-v_j for every row and concept: scipy's NNLS of the row on concept j's atoms."""
    V = np.zeros((len(X), S, D))
    for i, x in enumerate(X):
        for j in range(S):
            B = model.atoms_[model.groups_ == j]
            V[i, j] = nnls(B.T, x)[0] @ B
    return V


def _full(model, X, Y):
    """v_j for every row: scipy's NNLS of the row on the atoms of its active concepts, split by concept."""
    V = np.zeros((len(X), S, D))
    for i, x in enumerate(X):
        on = np.isin(model.groups_, np.flatnonzero(Y[i]))
        B, g = model.atoms_[on], model.groups_[on]
        a = nnls(B.T, x)[0]
        for j in np.flatnonzero(Y[i]):
            V[i, j] = a[g == j] @ B[g == j]
    return V


def test_partial_components_are_each_concepts_cone_projection(world):
    model, X, _ = world
    V = components_of(model, X, "partial")
    assert V.shape == (len(X), S, D)
    np.testing.assert_allclose(V, _partial(model, X), atol=1e-8)
    assert (np.linalg.norm(V, axis=2) == 0).any()  # some rows lie outside some cones: their component is zero


def test_full_components_are_the_joint_nnls_over_the_active_concepts(world):
    model, X, Y = world
    Y = Y.copy()
    Y[~Y.any(axis=1), 0] = True
    V = components_of(model, X, "full", active=Y)
    np.testing.assert_allclose(V, _full(model, X, Y), atol=1e-8)
    assert np.all(V[~Y] == 0)
    # differs from partial where a row has two or more active concepts (the joint fit shares the row)
    assert not np.allclose(V[Y.sum(axis=1) > 1], components_of(model, X, "partial")[Y.sum(axis=1) > 1])
    with pytest.raises(ValueError, match="needs the active concepts"):
        components_of(model, X, "full")


def test_a_model_with_one_kind_of_component_gives_it_in_both_modes(world):
    _, X, Y = world
    uf = fit_method("UF", FitInputs(X=X, Y=Y, concept_names=[f"c{j}" for j in range(S)]))
    assert uf.modes == ("partial",)
    expected = np.repeat(X[:, None, :], S, axis=1)
    for mode in MODES:  # no active concepts needed, none used
        np.testing.assert_array_equal(components_of(uf, X, mode), expected)
    np.testing.assert_array_equal(components_of(uf, X, "full", active=np.zeros_like(Y)), expected)


def test_one_row_form_equals_the_batch(world):
    model, X, Y = world
    for i in range(5):
        x = X[i]
        np.testing.assert_array_equal(components_of_row(model, x), components_of(model, X[i:i + 1], "partial")[0])
        act = np.flatnonzero(Y[i]) if Y[i].any() else [0]
        mask = np.zeros((1, S), bool)
        mask[0, act] = True
        np.testing.assert_array_equal(components_of_row(model, x, "full", active=act),
                                      components_of(model, X[i:i + 1], "full", active=mask)[0])
    P = _partial(model, X[:6])
    cos = np.einsum("nsd,nd->ns", P, X[:6]) / np.maximum(np.linalg.norm(P, axis=2), 1e-300)
    np.testing.assert_allclose(concept_scores(model, X[:6]), np.where(np.linalg.norm(P, axis=2) > 0, cos, 0),
                               atol=1e-8)


def _ranked(V, pool, k):
    U = pool / np.linalg.norm(pool, axis=1, keepdims=True)
    n = np.linalg.norm(V, axis=-1, keepdims=True)
    scores = np.divide(V, n, out=np.zeros_like(V), where=n > 0) @ U.T
    return np.argsort(-scores, axis=-1, kind="stable")[..., :k]


def test_retrieval_evaluation_and_scorer_rank_by_these_components(world):
    model, X, Y = world
    Y = Y.copy()
    Y[~Y.any(axis=1), 0] = True
    pool, Xq, Yq = X[:40], X[40:], Y[40:]
    index = build_index(pool, "exact")
    for mode, V in (("partial", _partial(model, Xq)), ("full", _full(model, Xq, Yq))):
        want = _ranked(V, pool, 5)
        got = ConceptRetriever(model, pool, mode=mode, backend="exact").search(Xq, k=5, Y_query=Yq).indices
        assert (got == want).mean() > 0.99  # float32 search: a near-tie may swap
        got = rank_queries(model, "S-SLiCS", Xq, index, 5, mode=mode, Y_active=Yq if mode == "full" else None)
        assert (got == want).mean() > 0.99
        assert RetrievalScorer(k=5, mode=mode)(model, X, Y) > 0


def test_maps_show_these_components(world):
    model, X, Y = world
    rows = np.arange(30)
    for mode, V in (("partial", _partial(model, X[rows])), ("full", _full(model, X[rows], Y[rows]))):
        P, table = map_points(model, X, Y, rows, kinds=("component",), component=mode)
        at = {(r, c): k for k, (r, c) in enumerate(zip(table["row"], table["concept"]))}
        expected = [(i, j) for i in rows for j in np.flatnonzero(Y[i]) if np.linalg.norm(V[i, j]) > 0]
        assert sorted(at) == sorted((int(i), f"concept {j}") for i, j in expected)
        for i, j in expected:
            np.testing.assert_allclose(P[at[(int(i), f"concept {j}")]], V[i, j], atol=1e-8)


def test_every_entry_point_refuses_an_unknown_mode_with_one_message(world):
    model, X, Y = world
    with pytest.raises(ValueError) as one:
        check_mode("half")
    message = str(one.value)
    assert "'half'" in message and "partial" in message and "full" in message
    _, table = map_points(model, X, Y, np.arange(5), kinds=("atom",))
    calls = {
        "components_of": lambda: components_of(model, X, "half"),
        "components_of_row": lambda: components_of_row(model, X[0], "half"),
        "ConceptRetriever": lambda: ConceptRetriever(model, X, mode="half"),
        "rank_queries": lambda: rank_queries(model, "S-SLiCS", X, build_index(X, "exact"), 5, mode="half"),
        "RetrievalScorer": lambda: RetrievalScorer(mode="half"),
        "map_points": lambda: map_points(model, X, Y, np.arange(5), component="half"),
        "point_text": lambda: point_text(table, "half"),
    }
    for name, call in calls.items():
        with pytest.raises(ValueError) as err:
            call()
        assert str(err.value) == message, name
    assert check_mode("full") == "full"

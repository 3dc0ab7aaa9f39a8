"""The current query as embeddings (slics_core.explorer.current_query) and placing it on a map without recomputing
the map (layouts.place_near on scikit-learn maps, current_query.query_points for the vectors placed)."""
import numpy as np
import pytest
from scipy.optimize import nnls

from slics_core.explorer.current_query import (
    QueryVector,
    current_query,
    edit_key,
    query_key,
    query_label,
    query_points,
)
from slics_core.explorer.edits import edit_query
from slics_core.explorer.layouts import PLACE_NEIGHBOURS, place_near
from slics_core.explorer.maps import map_points
from slics_core.slics import SLiCS
from slics_core.synthetic import make_concept_cones

S, D0, D = 4, 3, 40


def _planted_map(seed=0, n=30, d=16, spread=0.05):
    """Two tight clusters of directions (e1-ish and e2-ish) laid out as two planted blobs far apart on the map."""
    rng = np.random.default_rng(seed)
    a, b = np.eye(d)[0], np.eye(d)[1]
    P = np.vstack([a + spread * rng.standard_normal((n, d)), b + spread * rng.standard_normal((n, d))])
    xy = np.vstack([rng.normal([0.0, 0.0], 0.5, (n, 2)), rng.normal([20.0, 0.0], 0.5, (n, 2))])
    return P, xy, a, b


def _independent_place(P, xy, q, k):
    """Independent computation: a loop over the map's points, sorted by cosine, weighted mean of the first k."""
    cos = [float(p @ q / (np.linalg.norm(p) * np.linalg.norm(q))) for p in P]
    order = sorted(range(len(P)), key=lambda i: -cos[i])[:k]
    w = np.array([max(cos[i], 0.0) for i in order])
    if w.sum() <= 0:
        w = np.ones(len(order))
    return sum(wi * xy[i] for wi, i in zip(w, order)) / w.sum()


def test_place_near_matches_an_independent_knn_and_planted_places():
    P, xy, a, b = _planted_map()
    rng = np.random.default_rng(1)
    Q = np.vstack([P[3], P[40], (a + b) / np.sqrt(2), rng.standard_normal((5, P.shape[1])), -a])
    got = place_near(P, xy, Q)
    assert got.shape == (len(Q), 2)
    for q, g in zip(Q, got):
        np.testing.assert_allclose(g, _independent_place(P, xy, q, PLACE_NEIGHBOURS), atol=1e-9)
    # a query equal to a map point lands in that point's blob (near it: the blob is 0.5 wide, the gap 20)
    assert np.linalg.norm(got[0] - xy[3]) < 3.0 and np.linalg.norm(got[0] - xy[:30].mean(0)) < 1.0
    assert np.linalg.norm(got[1] - xy[40]) < 3.0 and np.linalg.norm(got[1] - xy[30:].mean(0)) < 1.0
    # halfway between the two clusters of vectors: between the two blobs, far from both
    mid = got[2]
    assert 4.0 < mid[0] < 16.0, mid
    # nothing positive (a query opposite to every point): the plain mean of its k nearest
    assert np.all(np.isfinite(got[-1]))
    # k larger than the map is the whole map; the map itself is not moved
    kept = xy.copy()
    np.testing.assert_allclose(place_near(P, xy, (a + b), k=10_000)[0], _independent_place(P, xy, a + b, len(P)))
    np.testing.assert_array_equal(xy, kept)


def test_place_near_refuses_bad_shapes():
    P, xy, a, _ = _planted_map()
    with pytest.raises(ValueError, match="xy must have shape"):
        place_near(P, xy[:-1], a)
    with pytest.raises(ValueError):
        place_near(P, xy, a[:-1])


@pytest.fixture(scope="module")
def planted():
    data = make_concept_cones(n_samples=300, n_features=D, n_concepts=S, n_atoms=D0, mean_active=1.8,
                              secondary=0.2, noise=0.02, random_state=0)
    model = SLiCS(n_atoms=D0, n_iter=5, random_state=0).fit(data.X, data.Y)
    return data, model, [f"c{j}" for j in range(S)]


def test_query_points_are_the_map_points_an_item_would_have(planted):
    data, model, names = planted
    r = int(np.flatnonzero(data.Y.sum(1) >= 2)[0])
    # a map with embeddings: the query's embedding only
    Q, what = query_points(model, data.X[r], data.Y[r], concept_names=names)
    np.testing.assert_allclose(Q, data.X[r][None])
    assert what == ["embedding"]
    for mode in ("partial", "full"):
        # a map of components: the query's components of its concepts, exactly map_points' for that item
        Q, what = query_points(model, data.X[r], data.Y[r], kinds=["component", "atom"], component=mode,
                               concept_names=names)
        P, tab = map_points(model, data.X, data.Y, [r], kinds=["component"], component=mode, concept_names=names)
        np.testing.assert_allclose(Q, P)
        assert what == list(tab.concept)
    # independent: the partial component of concept j is the NNLS of x on concept j's atoms
    Q, what = query_points(model, data.X[r], data.Y[r], kinds=["component"], concept_names=names)
    for q, c in zip(Q, what):
        Bj = model.atoms_[model.groups_ == names.index(c)]
        np.testing.assert_allclose(q, nnls(Bj.T, data.X[r])[0] @ Bj, atol=1e-6)
    # the map's concept filter, an atoms-only map, no active concept
    j = int(np.flatnonzero(data.Y[r])[0])
    Q, what = query_points(model, data.X[r], data.Y[r], kinds=["component"], concepts=[names[j]],
                           concept_names=names)
    assert what == [names[j]]
    assert query_points(model, data.X[r], data.Y[r], kinds=["atom"])[0].shape == (0, D)
    assert query_points(model, data.X[r], np.zeros(S, bool), kinds=["component"])[0].shape == (0, D)
    with pytest.raises(ValueError, match="active must have"):
        query_points(model, data.X[r], [True], kinds=["component"])


def test_current_query_reads_rows_uploads_phrases_and_kept_edits(planted):
    data, model, names = planted
    X = data.X
    up = {"name": "cat.png", "sha": "abc", "x": X[5] * 2}
    # a row
    (qv,) = current_query(7, X)
    assert isinstance(qv, QueryVector) and (qv.key, qv.label, qv.row) == ("row:7", "item 7", 7)
    np.testing.assert_array_equal(qv.x, X[7])
    assert current_query(len(X), X) == [] and current_query(None, X) == [] and current_query(True, X) == []
    # an upload: its kept embedding and file name
    (qv,) = current_query("upload", X, upload=up)
    assert (qv.key, qv.label, qv.row) == ("upload:abc", "upload: cat.png", None)
    np.testing.assert_array_equal(qv.x, X[5] * 2)
    assert current_query("upload", X) == []
    # a phrase: only its kept embedding (it needs the text encoder), and only when kept for that phrase
    phrase = "text:a red car"
    assert current_query(phrase, X) == []
    assert current_query(phrase, X, kept={"key": "text:a blue car", "x": X[1], "edits": {}}) == []
    (qv,) = current_query(phrase, X, kept={"key": phrase, "x": X[1], "edits": {}})
    assert (qv.key, qv.label) == (phrase, "phrase: a red car")
    # edits: those Retrieve kept for this query, labelled; one not kept is left out
    j = int(np.flatnonzero(data.Y[7])[0])
    rm, _ = edit_query(model, X[7], j, "remove", active=np.flatnonzero(data.Y[7]))
    boost, _ = edit_query(model, X[7], j, "boost", strength=1.5)
    kept = {"key": "row:7", "x": X[7], "edits": {edit_key("remove", names[j]): rm,
                                                 edit_key("boost", names[j], 1.5): boost}}
    asked = [("remove", names[j], 1.0), ("boost", names[j], 1.5), ("boost", names[j], 0.5)]
    got = current_query(7, X, kept=kept, edits=asked)
    assert [g.label for g in got] == ["item 7", f"item 7 without {names[j]}", f"item 7 more of {names[j]} (λ=1.5)"]
    assert [g.key for g in got] == ["row:7", f"row:7|remove:{names[j]}:1", f"row:7|boost:{names[j]}:1.5"]
    np.testing.assert_array_equal(got[1].x, rm)
    np.testing.assert_array_equal(got[2].x, boost)
    assert got[1].row is None
    # kept edits of another query are not this query's
    assert len(current_query(8, X, kept=kept, edits=asked)) == 1
    assert query_key(3) == "row:3" and query_key("upload") is None and query_key("nonsense") is None
    assert query_label("text:x") == "phrase: x"


def test_current_query_computes_a_row_querys_edit_the_kept_query_lacks(planted):
    """A row query's asked edit that Retrieve never computed comes from ``edit_fn`` (called with the edit, the
    concept, the strength, the row's embedding and the row); a phrase's does not (its labels are unknown)."""
    from slics_core.explorer.current_query import current_query

    X = planted[0].X
    calls = []

    def edit_fn(edit, name, strength, x, row):
        calls.append((edit, name, strength, row))
        return x * 2

    got = current_query(3, X, edits=[("remove", "c1", 1.0)], edit_fn=edit_fn)
    assert [q.label for q in got] == ["item 3", "item 3 without c1"]
    np.testing.assert_allclose(got[1].x, 2 * np.asarray(X[3], dtype=float))
    assert calls == [("remove", "c1", 1.0, 3)]
    assert len(current_query(3, X, edits=[("remove", "c1", 1.0)])) == 1  # without edit_fn: as before
    phrase = "text:a red car"
    assert len(current_query(phrase, X, kept={"key": phrase, "x": X[1], "edits": {}},
                             edits=[("remove", "c1", 1.0)], edit_fn=edit_fn)) == 1

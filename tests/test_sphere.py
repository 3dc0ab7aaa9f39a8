"""Geometry of the Learn page (slics_core.explorer.sphere) against scipy and closed forms."""
import numpy as np
import pytest
from scipy.optimize import nnls as scipy_nnls

from slics_core.explorer import sphere
from slics_core.explorer.sphere import ConeScene


def unit(v):
    v = np.asarray(v, float)
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def in_cone_residual(B, p):
    """Distance from p to cone(B) computed with scipy's NNLS (independent of slics_core.nnls)."""
    _, r = scipy_nnls(np.asarray(B, float).T, np.asarray(p, float))
    return r


E1, E2, E3 = np.eye(3)


# ---------------------------------------------------------------------- angles, arcs
@pytest.mark.parametrize("az, el, expected", [(0, 0, E1), (90, 0, E2), (180, 0, -E1), (-90, 0, -E2),
                                              (37, 90, E3), (0, -90, -E3),
                                              (45, 0, unit([1, 1, 0])), (0, 45, unit([1, 0, 1]))])
def test_direction_known_values(az, el, expected):
    np.testing.assert_allclose(sphere.direction(az, el), expected, atol=1e-12)


def test_angles_of_inverts_direction():
    rng = np.random.default_rng(0)
    for az, el in zip(rng.uniform(-179, 179, 20), rng.uniform(-89, 89, 20)):
        a, e = sphere.angles_of(sphere.direction(az, el))
        assert a == pytest.approx(az) and e == pytest.approx(el)
    with pytest.raises(ValueError):
        sphere.direction(0, 95)
    with pytest.raises(ValueError):
        sphere.direction(np.nan, 0)


def test_great_circle_arc():
    a, b = unit([1, 0.2, 0.1]), unit([0.1, 1, 0.5])
    arc = sphere.great_circle_arc(a, b, 17)
    np.testing.assert_allclose(arc[0], a, atol=1e-12)
    np.testing.assert_allclose(arc[-1], b, atol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(arc, axis=1), 1, atol=1e-12)
    # on the great circle through a and b: orthogonal to a x b
    np.testing.assert_allclose(arc @ np.cross(a, b), 0, atol=1e-12)
    # equal angular steps summing to the angle between a and b
    steps = np.arccos(np.clip(np.sum(arc[1:] * arc[:-1], axis=1), -1, 1))
    np.testing.assert_allclose(steps, np.arccos(a @ b) / 16, atol=1e-9)
    with pytest.raises(ValueError):
        sphere.great_circle_arc(E1, -E1)
    with pytest.raises(ValueError):
        sphere.great_circle_arc(E1, E2, 1)


# ---------------------------------------------------------------------- polygons
def test_interior_direction_and_pointedness():
    B = np.array([E1, E2, E3])
    c = sphere.interior_direction(B)
    assert np.all(B @ c > 0.1)
    with pytest.raises(ValueError, match="not pointed"):
        sphere.interior_direction([E1, -E1])
    with pytest.raises(ValueError, match="not pointed"):
        sphere.interior_direction([E1, E2, unit([-1, -1, 0])])  # spans the whole xy-plane


def test_polygon_vertices_drop_interior_atoms():
    corners = np.array([E1, E2, E3])
    inner = unit([1, 1, 1])
    V = sphere.polygon_vertices(np.vstack([corners[:2], inner, corners[2:]]))
    assert V.shape == (3, 3)
    assert {tuple(np.round(v, 9)) for v in V} == {tuple(np.round(v, 9)) for v in corners}
    # coplanar atoms (a flat wedge): the two extreme ones
    wedge = np.array([sphere.direction(a, 0) for a in (10, 40, 70)])
    V2 = sphere.polygon_vertices(wedge)
    assert V2.shape == (2, 3)
    assert {tuple(np.round(v, 9)) for v in V2} == {tuple(np.round(wedge[i], 9)) for i in (0, 2)}
    assert sphere.polygon_vertices([E1, E1]).shape == (1, 3)


def test_cone_boundary_lies_on_the_cone_boundary():
    B = np.array([sphere.direction(a, e) for a, e in [(-10, 15), (25, 20), (20, 45), (-15, 40)]])
    curve = sphere.cone_boundary(B, 20)
    np.testing.assert_allclose(np.linalg.norm(curve, axis=1), 1, atol=1e-12)
    np.testing.assert_allclose(curve[0], curve[-1])
    c = unit(B.mean(0))
    for p in curve:
        assert in_cone_residual(B, p) < 1e-9  # inside (or on) the cone
        outside = unit(p + 0.02 * (p - c))
        assert in_cone_residual(B, outside) > 1e-5  # a step outwards leaves it
    # a wedge is one arc; a ray one point
    assert sphere.cone_boundary([E1, E2], 9).shape == (9, 3)
    np.testing.assert_allclose(sphere.cone_boundary([E3]), [E3])


def test_cone_surface_covers_the_spherical_polygon():
    B = np.array([E1, E2, E3])  # an octant: a spherical triangle of area pi/2 (Girard)
    verts, tris = sphere.cone_surface(B, n_per_arc=24, n_rings=12)
    assert tris.min() >= 0 and tris.max() < len(verts)
    np.testing.assert_allclose(np.linalg.norm(verts, axis=1), 1, atol=1e-12)
    assert max(in_cone_residual(B, v) for v in verts) < 1e-9
    a, b, c = verts[tris[:, 0]], verts[tris[:, 1]], verts[tris[:, 2]]
    area = 0.5 * np.linalg.norm(np.cross(b - a, c - a), axis=1).sum()
    assert area == pytest.approx(np.pi / 2, rel=0.02)
    v2, t2 = sphere.cone_surface([E1, E2])
    assert t2.shape == (0, 3) and len(v2) > 1


def test_sphere_mesh_is_on_the_unit_sphere():
    X, Y, Z = sphere.sphere_mesh(10, 20)
    assert X.shape == (10, 20)
    np.testing.assert_allclose(X ** 2 + Y ** 2 + Z ** 2, 1, atol=1e-12)


# ---------------------------------------------------------------------- decomposition
def brute_nearest(B, x, n=60):
    """Nearest point of cone(B) to x by searching a grid of non-negative coefficients."""
    grid = np.linspace(0, 1.5, n)
    mesh = np.stack(np.meshgrid(*[grid] * B.shape[0], indexing="ij"), -1).reshape(-1, B.shape[0])
    P = mesh @ B
    return P[np.argmin(np.linalg.norm(P - x, axis=1))]


@pytest.mark.parametrize("seed", range(6))
def test_decompose_matches_scipy_nnls(seed):
    sc = sphere.random_scene(seed)
    rng = np.random.default_rng(100 + seed)
    x = unit(rng.standard_normal(3))
    d = sphere.decompose(sc, x)
    # partial: each projection is scipy's NNLS on that concept's atoms (the nearest point is unique)
    for j in range(sc.n_concepts):
        Bj = sc.concept_atoms(j)
        a, r = scipy_nnls(Bj.T, x)
        np.testing.assert_allclose(d.projections[j], a @ Bj, atol=1e-8)
        assert d.partial_errors[j] == pytest.approx(r, abs=1e-8)
        # and no point of a fine grid of the cone is closer
        assert np.linalg.norm(x - d.projections[j]) <= np.linalg.norm(x - brute_nearest(Bj, x, 25)) + 1e-9
    # full: the optimum value is unique even when the coefficients are not
    _, r_all = scipy_nnls(sc.atoms.T, x)
    assert d.error == pytest.approx(r_all, abs=1e-8)
    assert np.all(d.coef >= 0)
    np.testing.assert_allclose(d.components.sum(0), d.reconstruction, atol=1e-12)
    for j in range(sc.n_concepts):
        np.testing.assert_allclose(d.components[j], d.coef[sc.groups == j] @ sc.concept_atoms(j), atol=1e-12)
        # a cone's own projection is never farther from x than the full component of that cone
        assert np.linalg.norm(x - d.projections[j]) <= np.linalg.norm(x - d.components[j]) + 1e-9


def test_decompose_with_ridge_matches_augmented_scipy_nnls():
    sc = sphere.preset_scene("Paper Fig. 2a (4, 2, 4 atoms)")
    x = sphere.direction(60, 35)
    lam = 0.05
    d = sphere.decompose(sc, x, ridge=lam)
    A = np.vstack([sc.atoms.T, np.sqrt(lam) * np.eye(len(sc.atoms))])
    a, _ = scipy_nnls(A, np.concatenate([x, np.zeros(len(sc.atoms))]))
    np.testing.assert_allclose(d.coef, a, atol=1e-7)


def test_unique_full_decomposition_with_independent_atoms():
    sc = ConeScene(np.array([unit([1, 0.2, 0]), unit([0.1, 1, 0.1]), unit([0, 0.3, 1])]), [0, 1, 2])
    x = unit([0.5, 0.6, 0.7])
    d = sphere.decompose(sc, x)
    a, _ = scipy_nnls(sc.atoms.T, x)
    np.testing.assert_allclose(d.coef, a, atol=1e-9)
    np.testing.assert_allclose(d.components, a[:, None] * sc.atoms, atol=1e-9)


def test_point_inside_a_cone_projects_to_itself():
    sc = sphere.preset_scene("Overlapping cones")
    B = sc.concept_atoms(2)
    x = unit(np.array([0.2, 0.5, 0.3]) @ B)
    d = sphere.decompose(sc, x)
    np.testing.assert_allclose(d.projections[2], x, atol=1e-9)
    assert d.partial_errors[2] == pytest.approx(0, abs=1e-9)
    assert d.projection_cosines[2] == pytest.approx(1)
    assert d.error == pytest.approx(0, abs=1e-9)  # inside a cone: exactly reconstructed


def test_point_on_an_atom_ray():
    sc = sphere.preset_scene("Paper Fig. 2a (4, 2, 4 atoms)")
    b = sc.atoms[5]  # second atom of concept 2
    d = sphere.decompose(sc, 2.0 * b)
    np.testing.assert_allclose(d.projections[sc.groups[5]], 2.0 * b, atol=1e-9)
    # a one-atom cone: closed form max(0, x.b) b
    ray = ConeScene(np.array([E1, E2]), [0, 1])
    x = np.array([0.6, -0.8, 0.0])
    d = sphere.decompose(ray, x)
    np.testing.assert_allclose(d.projections, [[0.6, 0, 0], [0, 0, 0]], atol=1e-12)
    assert np.isnan(d.projection_cosines[1])


def test_orthogonal_cones_full_equals_partial():
    sc = sphere.preset_scene("Orthogonal cones (axes)")
    x = sphere.direction(30, 40)  # positive octant
    d = sphere.decompose(sc, x)
    np.testing.assert_allclose(d.components, np.diag(x), atol=1e-12)
    np.testing.assert_allclose(d.projections, np.diag(x), atol=1e-12)
    np.testing.assert_allclose(d.component_norms, x, atol=1e-12)
    np.testing.assert_allclose(d.projection_cosines, x, atol=1e-12)
    x2 = sphere.direction(-60, 20)  # negative y: that concept's component vanishes
    d2 = sphere.decompose(sc, x2)
    np.testing.assert_allclose(d2.components, np.diag(np.maximum(x2, 0)), atol=1e-12)
    assert d2.error == pytest.approx(abs(x2[1]))


def test_inactive_concepts_get_no_component():
    sc = sphere.preset_scene("Overlapping cones")
    x = sphere.direction(30, 30)
    d = sphere.decompose(sc, x, active=[True, False, True])
    assert np.all(d.coef[sc.groups == 1] == 0)
    np.testing.assert_allclose(d.components[1], 0)
    keep = sc.groups != 1
    _, r = scipy_nnls(sc.atoms[keep].T, x)
    assert d.error == pytest.approx(r, abs=1e-9)
    assert np.linalg.norm(d.projections[1]) > 0  # partial projections ignore J
    rows = d.table(sc.names)
    assert [r["concept"] for r in rows] == sc.names and rows[1]["active"] is False
    assert rows[0]["||v_j||"] == pytest.approx(np.linalg.norm(d.components[0]))
    with pytest.raises(ValueError):
        sphere.decompose(sc, x, active=[True, False])
    with pytest.raises(ValueError):
        sphere.decompose(sc, [1, 0])
    with pytest.raises(ValueError):
        sphere.decompose(sc, x, ridge=-1)


# ---------------------------------------------------------------------- scenes
def test_presets_and_random_scenes_are_valid():
    for name in sphere.PRESETS:
        sc = sphere.preset_scene(name)
        assert sc.n_concepts == 3
        for j in range(sc.n_concepts):
            sphere.polygon_vertices(sc.concept_atoms(j))  # pointed cones
    with pytest.raises(ValueError, match="unknown preset"):
        sphere.preset_scene("nope")
    a, b = sphere.random_scene(7), sphere.random_scene(7)
    np.testing.assert_array_equal(a.atoms, b.atoms)
    assert not np.allclose(sphere.random_scene(8).atoms[:2], a.atoms[:2])
    for seed in range(20):
        sc = sphere.random_scene(seed, atoms_per_concept=(2, 3), spread=(12, 35))
        counts = np.bincount(sc.groups)
        assert counts.min() >= 2 and counts.max() <= 3
        np.testing.assert_allclose(np.linalg.norm(sc.atoms, axis=1), 1)
        for j in range(sc.n_concepts):
            B = sc.concept_atoms(j)
            c = sphere.interior_direction(B)
            assert np.all(B @ c > 0)


def test_scene_validation():
    with pytest.raises(ValueError):
        ConeScene(np.array([E1, E2]), [0])
    with pytest.raises(ValueError):
        ConeScene(np.array([E1, E2]), [0, 2])  # concept 1 has no atom
    with pytest.raises(ValueError):
        ConeScene(np.array([[1.0, 0]]), [0])
    with pytest.raises(ValueError):
        ConeScene(np.array([E1, E2]), [0, 1], names=["a"])
    with pytest.raises(ValueError):
        sphere.random_scene(0, spread=(10, 95))

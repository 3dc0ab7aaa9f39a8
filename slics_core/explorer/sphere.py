"""Concept cones in three dimensions: the geometry of the paper's Fig. 2a (Learn page).

Each concept ``j`` is a positive cone ``V_j = {B_j a : a >= 0}`` spanned by a few
unit atoms. Its intersection with the unit sphere is a *spherical polygon*
whose vertices are the cone's extreme atoms and whose edges are great-circle
arcs. For a query direction ``x*`` on the sphere this module computes

* the **full disentanglement** (eq. 2): one NNLS over the atoms of all active
  concepts, grouped by concept into components ``v_j = B_j a_j`` that sum to
  the reconstruction;
* the **partial disentanglement** (eq. 3): for every concept separately the
  nearest point ``tilde-v_j`` of its cone (NNLS on that concept's atoms only);

with :func:`slics_core.nnls.nnls_shared`. It also samples what is needed to
draw the scene (great-circle arcs, spherical-polygon boundaries and filled
surface meshes) and ships a few scenes (:data:`PRESETS`, :func:`random_scene`).

Everything is plain numpy/scipy; the Learn page only draws the results.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import linprog
from scipy.spatial import ConvexHull

from slics_core.nnls import nnls_shared
from slics_core.rows import TIE_TOL, unit_rows

__all__ = [
    "ConeScene",
    "Decomposition",
    "PRESETS",
    "direction",
    "angles_of",
    "great_circle_arc",
    "interior_direction",
    "polygon_vertices",
    "cone_boundary",
    "cone_surface",
    "sphere_mesh",
    "decompose",
    "preset_scene",
    "random_scene",
]

_EPS = 1e-9

def _unit(v):
    """``v`` (one vector or rows) scaled to unit length in double precision; a zero vector raises."""
    return unit_rows(v, tol=_EPS, dtype=np.float64, name="vector")

def direction(azimuth, elevation):
    """Unit vector from angles in degrees.

    ``x = cos(el) cos(az)``, ``y = cos(el) sin(az)``, ``z = sin(el)``.

    Parameters
    ----------
    azimuth : float
        Angle in the xy-plane from the x-axis, degrees.
    elevation : float
        Angle above the xy-plane, degrees, in [-90, 90].

    Returns
    -------
    x : ndarray of shape (3,)
    """
    az, el = float(azimuth), float(elevation)
    if not (np.isfinite(az) and np.isfinite(el)):
        raise ValueError("azimuth and elevation must be finite numbers.")
    if not -90.0 <= el <= 90.0:
        raise ValueError(f"elevation must be in [-90, 90] degrees; got {el}.")
    a, e = np.radians(az), np.radians(el)
    return np.array([np.cos(e) * np.cos(a), np.cos(e) * np.sin(a), np.sin(e)])

def angles_of(v):
    """``(azimuth, elevation)`` in degrees of a non-zero 3-vector (inverse of :func:`direction`)."""
    v = _unit(np.asarray(v, dtype=np.float64).reshape(3))
    return float(np.degrees(np.arctan2(v[1], v[0]))), float(np.degrees(np.arcsin(np.clip(v[2], -1, 1))))

def great_circle_arc(a, b, n=32):
    """Points of the shorter great-circle arc from ``a`` to ``b`` (spherical interpolation).

    Parameters
    ----------
    a, b : array-like of shape (3,)
        End points (normalised here); they must not be antipodal.
    n : int
        Number of points, both ends included (>= 2).

    Returns
    -------
    arc : ndarray of shape (n, 3)
        Unit vectors; ``arc[0] = a``, ``arc[-1] = b``, equally spaced in angle.
    """
    if int(n) < 2:
        raise ValueError(f"n must be >= 2; got {n}.")
    a, b = _unit(np.asarray(a, float).reshape(3)), _unit(np.asarray(b, float).reshape(3))
    cos = float(np.clip(a @ b, -1.0, 1.0))
    if cos < -1 + _EPS:
        raise ValueError("antipodal points have no unique great-circle arc.")
    theta = np.arccos(cos)
    t = np.linspace(0.0, 1.0, int(n))[:, None]
    if theta < _EPS:
        return np.repeat(a[None], int(n), axis=0)
    return (np.sin((1 - t) * theta) * a + np.sin(t * theta) * b) / np.sin(theta)

def _check_atoms(atoms):
    B = np.asarray(atoms, dtype=np.float64)
    if B.ndim == 1:
        B = B[None]
    if B.ndim != 2 or B.shape[1] != 3 or B.shape[0] < 1:
        raise ValueError(f"atoms must have shape (k, 3) with k >= 1; got {np.shape(atoms)}.")
    if not np.isfinite(B).all():
        raise ValueError("atoms contain NaN or infinite values.")
    return _unit(B)

def interior_direction(atoms):
    """A unit direction ``c`` with ``c . b > 0`` for every atom ``b`` (the cone is pointed).

    Found by the linear program ``max t`` s.t. ``b_i . c >= t``, ``-1 <= c <= 1``
    (:func:`scipy.optimize.linprog`).

    Raises
    ------
    ValueError
        The atoms are not in an open half-space: the cone contains a line and
        its intersection with the sphere is not a polygon.
    """

    B = _check_atoms(atoms)
    k = B.shape[0]
    # variables (c1, c2, c3, t); minimise -t; -B c + t <= 0
    res = linprog(c=[0, 0, 0, -1], A_ub=np.hstack([-B, np.ones((k, 1))]), b_ub=np.zeros(k),
                  bounds=[(-1, 1)] * 3 + [(None, 1)], method="highs")
    if res.status != 0 or res.x[3] <= 1e-7:
        raise ValueError("the atoms do not lie in an open half-space: the cone is not pointed "
                         "(it contains a line), so it is not a spherical polygon.")
    return _unit(res.x[:3])

def polygon_vertices(atoms):
    """The extreme atoms of a pointed cone, in order around its boundary.

    Atoms are mapped to the plane tangent to the sphere at an interior
    direction ``c`` (gnomonic projection ``b / (b . c)``, which maps
    great circles to straight lines and the cone to a convex polygon); the
    convex hull there (:class:`scipy.spatial.ConvexHull`) gives the extreme
    atoms counter-clockwise seen from outside the sphere.

    Returns
    -------
    vertices : ndarray of shape (m, 3)
        Unit vectors; ``m = 1`` for a ray, ``2`` for a flat wedge (an arc),
        else the polygon's corners.
    """
    B = _check_atoms(atoms)
    # remove duplicate directions
    keep = []
    for i in range(B.shape[0]):
        if all(B[i] @ B[j] < 1 - TIE_TOL for j in keep):
            keep.append(i)
    B = B[keep]
    if B.shape[0] == 1:
        return B.copy()
    c = interior_direction(B)
    e1 = _unit(np.cross(c, [1.0, 0, 0]) if abs(c[0]) < 0.9 else np.cross(c, [0, 1.0, 0]))
    e2 = np.cross(c, e1)
    P = B / (B @ c)[:, None]
    uv = np.column_stack([P @ e1, P @ e2])
    if B.shape[0] == 2:
        return B.copy()
    centred = uv - uv.mean(axis=0)
    if np.linalg.matrix_rank(centred, tol=1e-9 * max(1.0, np.abs(centred).max())) < 2:
        # all atoms on one great circle: the cone is a flat wedge, keep the two ends
        direction_ = centred[np.argmax(np.linalg.norm(centred, axis=1))]
        s = centred @ direction_
        return B[[int(np.argmin(s)), int(np.argmax(s))]]

    hull = ConvexHull(uv)
    return B[hull.vertices]  # counter-clockwise in the (e1, e2) plane, i.e. seen from outside

def cone_boundary(atoms, n_per_arc=24):
    """Closed boundary curve of a cone's spherical polygon (great-circle arcs).

    Parameters
    ----------
    atoms : array-like of shape (k, 3)
    n_per_arc : int
        Points per edge.

    Returns
    -------
    curve : ndarray of shape (p, 3)
        Unit vectors; for a polygon the first point is repeated at the end;
        a wedge gives its single arc, a ray its single point.
    """
    V = polygon_vertices(atoms)
    if V.shape[0] == 1:
        return V.copy()
    if V.shape[0] == 2:
        return great_circle_arc(V[0], V[1], n_per_arc)
    parts = [great_circle_arc(V[i], V[(i + 1) % len(V)], n_per_arc)[:-1] for i in range(len(V))]
    curve = np.vstack(parts)
    return np.vstack([curve, curve[:1]])

def cone_surface(atoms, n_per_arc=16, n_rings=8):
    """Triangle mesh of a cone's spherical polygon (for a filled drawing).

    The polygon is the image of a convex polygon under the gnomonic
    projection, so the straight segments from the interior direction
    ``c = normalise(mean of atoms)`` to boundary points, normalised, stay
    inside it; rings along these segments are joined by triangles.

    Returns
    -------
    vertices : ndarray of shape (q, 3)
        Unit vectors.
    triangles : ndarray of int, shape (t, 3)
        Vertex indices (empty for a ray or a wedge, which have no area).
    """
    V = polygon_vertices(atoms)
    if V.shape[0] < 3:
        return cone_boundary(atoms, n_per_arc), np.zeros((0, 3), dtype=int)
    ring = cone_boundary(atoms, n_per_arc)[:-1]
    c = _unit(V.mean(axis=0))
    m = ring.shape[0]
    verts = [c[None]]
    for r in np.linspace(0.0, 1.0, int(n_rings) + 1)[1:]:
        verts.append(_unit((1 - r) * c + r * ring))
    verts = np.vstack(verts)
    tris = []
    for i in range(m):  # fan around the centre
        tris.append((0, 1 + i, 1 + (i + 1) % m))
    for r in range(int(n_rings) - 1):
        a0, b0 = 1 + r * m, 1 + (r + 1) * m
        for i in range(m):
            j = (i + 1) % m
            tris.append((a0 + i, b0 + i, b0 + j))
            tris.append((a0 + i, b0 + j, a0 + j))
    return verts, np.asarray(tris, dtype=int)

def sphere_mesh(n_lat=24, n_lon=48):
    """Grid of the unit sphere, ``(X, Y, Z)`` each of shape (n_lat, n_lon) (a plotly Surface)."""
    th = np.linspace(0, np.pi, int(n_lat))
    ph = np.linspace(0, 2 * np.pi, int(n_lon))
    return (np.outer(np.sin(th), np.cos(ph)), np.outer(np.sin(th), np.sin(ph)),
            np.outer(np.cos(th), np.ones_like(ph)))

# ---------------------------------------------------------------------- scenes
@dataclass
class ConeScene:
    """Concept cones in R^3.

    Attributes
    ----------
    atoms : ndarray of shape (M, 3)
        Unit atoms, grouped by concept.
    groups : ndarray of int, shape (M,)
        Concept of each atom (``0..S-1``, every concept has at least one atom).
    names : list of str
        Concept names.
    description : str
    """

    atoms: np.ndarray
    groups: np.ndarray
    names: list = field(default_factory=list)
    description: str = ""

    def __post_init__(self):
        self.atoms = _check_atoms(self.atoms)
        self.groups = np.asarray(self.groups, dtype=int).reshape(-1)
        if self.groups.shape[0] != self.atoms.shape[0]:
            raise ValueError(f"{self.groups.shape[0]} group labels for {self.atoms.shape[0]} atoms.")
        S = int(self.groups.max()) + 1 if self.groups.size else 0
        if self.groups.min() < 0 or set(np.unique(self.groups)) != set(range(S)):
            raise ValueError("groups must number the concepts 0..S-1, each with at least one atom.")
        if not self.names:
            self.names = [f"concept {j + 1}" for j in range(S)]
        if len(self.names) != S:
            raise ValueError(f"{len(self.names)} names for {S} concepts.")

    @property
    def n_concepts(self) -> int:
        return len(self.names)

    def concept_atoms(self, j):
        """Atoms of concept ``j``, shape (M_j, 3)."""
        return self.atoms[self.groups == j]

def _atoms_from_angles(angles):
    return np.array([direction(a, e) for a, e in angles])

def _scene(groups_angles, names, description):
    atoms, groups = [], []
    for j, angles in enumerate(groups_angles):
        atoms.append(_atoms_from_angles(angles))
        groups += [j] * len(angles)
    return ConeScene(np.vstack(atoms), np.array(groups), list(names), description)

#: Built-in scenes: name -> function returning a :class:`ConeScene`.
PRESETS = {
    "Paper Fig. 2a (4, 2, 4 atoms)": lambda: _scene(
        [[(-10, 15), (25, 20), (20, 45), (-15, 40)],
         [(55, 25), (75, 55)],
         [(110, 10), (150, 15), (145, 45), (105, 40)]],
        ["animal", "person", "vehicle"],
        "Three neighbouring cones as in the paper's Fig. 2a: concepts 1 and 3 have four atoms, concept 2 two "
        "(a flat wedge, drawn as an arc)."),
    "Overlapping cones": lambda: _scene(
        [[(0, 10), (40, 10), (20, 45)],
         [(25, 20), (65, 20), (45, 55)],
         [(-40, 30), (0, 60), (-60, 70)]],
        ["animal", "person", "vehicle"],
        "The first two cones share a region: a point there belongs to both concepts, and its full "
        "decomposition must split it between them."),
    "Orthogonal cones (axes)": lambda: _scene(
        [[(0, 0)], [(90, 0)], [(0, 90)]],
        ["x", "y", "z"],
        "Each concept is one coordinate axis. The cones are orthogonal, so for a point in the positive "
        "octant the full and partial decompositions agree (v_j = ṽ_j)."),
    "Far-apart narrow cones": lambda: _scene(
        [[(-8, -6), (8, -6), (0, 10)],
         [(82, -6), (98, -6), (90, 10)],
         [(20, 78), (160, 78), (-90, 78)]],
        ["animal", "person", "vehicle"],
        "Three narrow cones around the x, y and z axes, almost orthogonal to each other: the full and "
        "partial decompositions nearly agree."),
}

def preset_scene(name):
    """The built-in scene ``name`` (a key of :data:`PRESETS`)."""
    try:
        return PRESETS[name]()
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; choose from {list(PRESETS)}.") from None

def random_scene(seed=0, n_concepts=3, atoms_per_concept=(2, 3), spread=(12.0, 35.0), names=None):
    """Random pointed cones: each concept's atoms scattered around a random centre.

    Parameters
    ----------
    seed : int
    n_concepts : int
    atoms_per_concept : (int, int)
        Inclusive range of atoms per concept.
    spread : (float, float)
        Range of the angle (degrees) between a concept's centre and its atoms
        (below 90, so every cone is pointed).
    names : list of str, optional

    Returns
    -------
    ConeScene
    """
    lo, hi = (int(v) for v in atoms_per_concept)
    if not 1 <= lo <= hi:
        raise ValueError(f"atoms_per_concept must be 1 <= low <= high; got {atoms_per_concept}.")
    s_lo, s_hi = (float(v) for v in spread)
    if not 0 < s_lo <= s_hi < 90:
        raise ValueError(f"spread must satisfy 0 < low <= high < 90 degrees; got {spread}.")
    if int(n_concepts) < 1:
        raise ValueError(f"n_concepts must be >= 1; got {n_concepts}.")
    rng = np.random.default_rng(seed)
    atoms, groups = [], []
    for j in range(int(n_concepts)):
        c = _unit(rng.standard_normal(3))
        c[2] = abs(c[2])  # keep the centres in the upper hemisphere, facing the default camera
        e1 = _unit(np.cross(c, [1.0, 0, 0]) if abs(c[0]) < 0.9 else np.cross(c, [0, 1.0, 0]))
        e2 = np.cross(c, e1)
        k = int(rng.integers(lo, hi + 1))
        phase = rng.uniform(0, 2 * np.pi)
        for i in range(k):  # atoms spread around the centre so the polygon is not degenerate
            phi = phase + 2 * np.pi * i / k + rng.uniform(-0.4, 0.4)
            th = np.radians(rng.uniform(s_lo, s_hi))
            atoms.append(np.cos(th) * c + np.sin(th) * (np.cos(phi) * e1 + np.sin(phi) * e2))
            groups.append(j)
    names = list(names) if names else [f"concept {j + 1}" for j in range(int(n_concepts))]
    return ConeScene(np.array(atoms), np.array(groups), names, f"Random cones (seed {seed}).")

# ---------------------------------------------------------------------- decomposition
@dataclass
class Decomposition:
    """Full and partial disentanglement of one query (see :func:`decompose`).

    Attributes
    ----------
    x : ndarray of shape (3,)
    coef : ndarray of shape (M,)
        Non-negative NNLS coefficients of the full decomposition (zero on inactive concepts).
    components : ndarray of shape (S, 3)
        ``v_j`` (eq. 2); they sum to ``reconstruction``.
    projections : ndarray of shape (S, 3)
        ``tilde-v_j`` (eq. 3), the nearest point of each cone to ``x``.
    partial_coef : ndarray of shape (M,)
        Coefficients of every projection on its own concept's atoms.
    reconstruction : ndarray of shape (3,)
    error : float
        ``||x - reconstruction||``.
    partial_errors : ndarray of shape (S,)
        ``||x - tilde-v_j||`` (distance from ``x`` to each cone).
    active : ndarray of bool, shape (S,)
    """

    x: np.ndarray
    coef: np.ndarray
    components: np.ndarray
    projections: np.ndarray
    partial_coef: np.ndarray
    reconstruction: np.ndarray
    error: float
    partial_errors: np.ndarray
    active: np.ndarray

    @staticmethod
    def _cos(V, x):
        n = np.linalg.norm(V, axis=1) * np.linalg.norm(x)
        return np.divide(V @ x, n, out=np.full(V.shape[0], np.nan), where=n > _EPS)

    @property
    def component_norms(self):
        """``||v_j||`` per concept."""
        return np.linalg.norm(self.components, axis=1)

    @property
    def projection_norms(self):
        """``||tilde-v_j||`` per concept."""
        return np.linalg.norm(self.projections, axis=1)

    @property
    def projection_cosines(self):
        """``cos(tilde-v_j, x)`` per concept (NaN when ``tilde-v_j = 0``: ``x`` is at least 90 degrees away)."""
        return self._cos(self.projections, self.x)

    @property
    def component_cosines(self):
        """``cos(v_j, x)`` per concept (NaN when ``v_j = 0``)."""
        return self._cos(self.components, self.x)

    def table(self, names=None):
        """One dict per concept: norms, cosines, distances (for display)."""
        S = self.components.shape[0]
        names = list(names) if names is not None else [f"concept {j + 1}" for j in range(S)]
        nv, nt = self.component_norms, self.projection_norms
        cv, ct = self.component_cosines, self.projection_cosines
        return [{"concept": names[j], "active": bool(self.active[j]), "||v_j||": float(nv[j]),
                 "cos(v_j, x*)": float(cv[j]), "||ṽ_j||": float(nt[j]), "cos(ṽ_j, x*)": float(ct[j]),
                 "||x* − ṽ_j||": float(self.partial_errors[j]), "||ṽ_j − v_j||":
                 float(np.linalg.norm(self.projections[j] - self.components[j]))} for j in range(S)]

def decompose(scene, x, active=None, ridge=0.0):
    """Full (eq. 2) and partial (eq. 3) disentanglement of ``x`` by the cones of ``scene``.

    Parameters
    ----------
    scene : ConeScene
    x : array-like of shape (3,)
        The query (any non-zero norm; typically a point of the unit sphere).
    active : array-like of bool, shape (S,), optional
        Active concepts ``J`` of the full decomposition (default all). The
        partial projections are computed for every concept.
    ridge : float
        Ridge penalty of the full NNLS (makes it unique when the active atoms
        are linearly dependent, as more than three atoms in R^3 always are).

    Returns
    -------
    Decomposition
    """

    x = np.asarray(x, dtype=np.float64).reshape(-1)
    if x.shape != (3,) or not np.isfinite(x).all():
        raise ValueError(f"x must be a finite 3-vector; got {np.asarray(x).shape}.")
    if ridge < 0:
        raise ValueError(f"ridge must be >= 0; got {ridge}.")
    S = scene.n_concepts
    active = np.ones(S, dtype=bool) if active is None else np.asarray(active, dtype=bool).reshape(-1)
    if active.shape != (S,):
        raise ValueError(f"active must have one flag per concept ({S}); got shape {active.shape}.")
    B, g = scene.atoms, scene.groups
    coef = np.zeros(B.shape[0])
    sel = active[g]
    if sel.any():
        coef[sel] = nnls_shared(B[sel], x[None], ridge=float(ridge))[0]
    components = np.zeros((S, 3))
    projections = np.zeros((S, 3))
    partial_coef = np.zeros(B.shape[0])
    for j in range(S):
        m = g == j
        components[j] = coef[m] @ B[m]
        a = nnls_shared(B[m], x[None])[0]
        partial_coef[m] = a
        projections[j] = a @ B[m]
    rec = components.sum(axis=0)
    return Decomposition(x=x, coef=coef, components=components, projections=projections,
                         partial_coef=partial_coef, reconstruction=rec, error=float(np.linalg.norm(x - rec)),
                         partial_errors=np.linalg.norm(x[None] - projections, axis=1), active=active)

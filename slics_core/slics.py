"""Supervised SLiCS dictionary learning (the paper's Algorithm 1).

An embedding ``x`` is modelled as a sum of per-concept components, each a
non-negative combination of that concept's atoms (paper eq. 1)::

    x ~ sum_j v_j = sum_j a_j @ B_j,   a_j >= 0,   a_j = 0 if concept j is absent.

:class:`SLiCS` learns the group-structured dictionary ``B`` from embeddings
``X`` and multi-labels ``Y`` by alternating

1. a *coefficient step*: NNLS per sample on the atoms of its labelled
   concepts (eq. 5), and
2. an *atom step*: for each atom, a rank-1 update of the residual on the
   samples that use it, with the optimal (majority) sign and thresholded
   coefficients (K-SVD style, sec. 3.3), or the block-coordinate alternative
   of Appendix A.

Rows are samples (``X`` is ``(n_samples, d)``, ``atoms_`` is ``(M, d)``),
as in scikit-learn, while the paper writes columns.

Choices where the paper is silent (all documented on :class:`SLiCS`):

* Dead atoms: in a full-batch epoch an atom that no sample uses is re-seeded
  with the normalised residual of the worst-approximated sample of its concept
  (that sample then uses it). This only lowers the error. In mini-batch mode
  atoms not used in a batch keep their value, as in the paper.
* ``history_`` holds the mean squared reconstruction error (over samples)
  after each epoch's atom step; in mini-batch mode it is the sum of each
  batch's error just after that batch's update, divided by ``n_samples``.
* ``ridge`` adds ``ridge * ||a||^2`` to every NNLS (coefficient step,
  :meth:`SLiCS.transform`, :meth:`SLiCS.project`); the atom step is unchanged.
* Samples with no positive label are ignored by :meth:`SLiCS.fit` (with a
  warning), as the paper removes them.
* The rank-1 SVD is a power iteration warm-started at the current atom, on
  the implicit residual ``R_L + a b^T``. All epochs but the last keep the
  residual in single precision (memory traffic dominates this loop) and take
  at most 3 power steps per atom (an approximate rank-1 update; the warm
  start carries the progress into the next epoch); the last epoch runs in
  double precision, to convergence.
* BLAS is limited to one thread inside ``fit``: the products are small or
  medium and OpenBLAS threads measured slower on a 2-core machine.
"""
from __future__ import annotations

import json
import os
import tempfile
import warnings
import zipfile
from numbers import Integral

import numpy as np
from scipy.linalg import eigh
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state
from threadpoolctl import threadpool_limits
from sklearn.utils.validation import check_is_fitted

from slics_core._validation import check_concept, check_embeddings, check_labels
from slics_core.nnls import nnls_gram, nnls_shared

FORMAT_NAME = "slics-model"
FORMAT_VERSION = 1

#: Rank-1 power iterations stop when the unit iterate moves by less than this.
_POWER_TOL = 1e-8
_POWER_MAX_ITER = 200
#: Working precision of the residual in the atom step (the last epoch runs in double precision).
_WORK_DTYPE = np.float32
#: Power-iteration (tolerance, max iterations) per residual precision: single-precision epochs
#: take at most 3 warm-started steps (an approximate rank-1 update, as in approximate K-SVD; the
#: warm start carries the progress to the next epoch), the double-precision last epoch converges.
_POWER_SETTINGS = {np.dtype(np.float32): (1e-4, 3), np.dtype(np.float64): (_POWER_TOL, _POWER_MAX_ITER)}


# ----------------------------------------------------------------------------------------------
# The paper's building blocks
# ----------------------------------------------------------------------------------------------
class _RankOneUpdated:
    """The matrix ``E = R + a b^T`` as an operator (never formed).

    Supports ``E @ v``, ``E.T @ u`` and squared norms, which is all the
    rank-1 atom updates need; this avoids an (n_L, d) temporary per atom.
    """

    def __init__(self, R, a, b):
        self.R, self.a, self.b = R, a, b
        self.shape = R.shape

    @property
    def T(self):
        return _Transposed(self)

    def __matmul__(self, v):
        return self.R @ v + self.a * (self.b @ v)

    def rmatvec(self, u):
        return u @ self.R + self.b * (self.a @ u)

    def base_sq_norm(self):
        """``||R||_F^2``."""
        return float(self.R.ravel() @ self.R.ravel())

    def sq_norm(self):
        """``||R + a b^T||_F^2`` (with ``b`` of any norm)."""
        return self.base_sq_norm() + 2.0 * (self.a @ (self.R @ self.b)) + (self.a @ self.a) * (self.b @ self.b)


class _Transposed:
    def __init__(self, op):
        self.op = op

    def __matmul__(self, u):
        return self.op.rmatvec(u)


def majority_sign(beta):
    """The optimal polarity ``p*`` of a rank-1 factor (paper sec. 3.3.1).

    Returns ``+1`` if ``||max(0, beta)|| >= ||max(0, -beta)||`` and ``-1``
    otherwise. Thresholding ``p* beta`` at zero then gives the best
    non-negative coefficients of the two polarities.
    """
    beta = np.asarray(beta, dtype=np.float64)
    pos = np.square(np.maximum(beta, 0.0)).sum()
    neg = np.square(np.maximum(-beta, 0.0)).sum()
    return 1.0 if pos >= neg else -1.0


def top_singular_vector(E, v0=None, tol=_POWER_TOL, max_iter=_POWER_MAX_ITER):
    """Leading right singular vector of ``E`` (rows are samples) by power iteration.

    Parameters
    ----------
    E : ndarray of shape (n, d), or an operator supporting ``E @ v`` and ``E.T @ u``
        Residual matrix.
    v0 : ndarray of shape (d,), optional
        Warm start (e.g. the atom being updated). Default: the row of ``E``
        with the largest norm (``E`` must then be an array).
    tol, max_iter : float, int
        Stop when the unit iterate moves by less than ``tol`` (Euclidean
        norm; the singular value is then accurate to about ``tol**2``) or
        after ``max_iter`` iterations.

    Returns
    -------
    v : ndarray of shape (d,)
        Unit vector ``v`` maximising ``||E v||`` (sign arbitrary).
    """
    if v0 is None or not np.any(v0):
        v0 = E[np.argmax(np.einsum("ij,ij->i", E, E))]
    v = v0 / np.sqrt(v0 @ v0)
    tol2 = tol * tol
    for _ in range(max_iter):
        w = E.T @ (E @ v)
        s = np.sqrt(w @ w)
        if s == 0.0:
            break
        w /= s
        diff = w - v  # E^T E is positive semi-definite, so the iterate never flips sign
        step2 = diff @ diff
        v = w
        if step2 <= tol2:
            break
    return v


def ksvd_atom_update(E, b0, tol=_POWER_TOL, max_iter=_POWER_MAX_ITER):
    """Rank-1 update of one atom with the optimal sign (Algorithm 1, inner loop).

    Parameters
    ----------
    E : ndarray of shape (n_L, d)
        Residual without the atom, on the samples ``L_m`` that use it.
    b0 : ndarray of shape (d,)
        The current atom (warm start for the rank-1 SVD).
    tol : float
        Relative tolerance of the power iteration (see
        :func:`top_singular_vector`).

    Returns
    -------
    b : ndarray of shape (d,)
        New unit atom ``p* u_1``.
    beta : ndarray of shape (n_L,)
        New coefficients ``max(0, p* beta~)`` with ``beta~ = E u_1``.
    """
    u = top_singular_vector(E, b0, tol=tol, max_iter=max_iter)
    beta = E @ u
    p = majority_sign(beta)
    return p * u, np.maximum(p * beta, 0.0)


def bcd_atom_update(E, beta0, n_power_steps=0):
    """Block-coordinate atom update of Appendix A, with the modified power method.

    The atom is the normalised least-squares atom for the previous
    coefficients, ``b = E^T beta0 / ||E^T beta0||``; the coefficients are the
    thresholded least-squares coefficients ``(E b)_+`` (eq. 19). Each of the
    ``n_power_steps`` further steps repeats this from the new coefficients
    (eq. 21). Every step is a block-coordinate descent step, so the error
    never increases.

    Returns
    -------
    b : ndarray of shape (d,)
    beta : ndarray of shape (n_L,)
    """
    beta = beta0
    b = None
    for _ in range(n_power_steps + 1):
        g = E.T @ beta
        norm = np.linalg.norm(g)
        if norm == 0.0:
            break
        b = g / norm
        beta = np.maximum(E @ b, 0.0)
    return b, beta


def initial_atoms(X, Y, n_atoms, random_state=None):
    """Supervised SVD initialisation (Algorithm 1, lines 1-3): the S-SVD dictionary.

    For each concept ``j``, the top ``M_j`` singular directions of the
    embeddings that have the concept, each with the majority sign of its
    right singular vector (so that most samples have positive coefficients).

    Parameters
    ----------
    X : ndarray of shape (n_samples, d)
    Y : ndarray of bool, shape (n_samples, S)
    n_atoms : sequence of int, length S
        ``M_j`` for each concept.
    random_state : int, RandomState or None
        Only used when a concept has fewer independent samples than ``M_j``:
        the missing atoms are random unit vectors (with a warning).

    Returns
    -------
    atoms : ndarray of shape (M, d)
    groups : ndarray of int, shape (M,)
    """
    d = X.shape[1]
    blocks, groups = [], []
    for j, m_j in enumerate(n_atoms):
        Xj = X[Y[:, j]]
        n_j = Xj.shape[0]
        top = min(m_j, n_j, d)
        if n_j < d:  # eigenvectors of the small n_j x n_j Gram give the left singular vectors
            s2, U = eigh(Xj @ Xj.T, subset_by_index=[n_j - top, n_j - 1])
            s2, U = s2[::-1], U[:, ::-1]
            V = Xj.T @ U / np.sqrt(np.maximum(s2, 1e-300))
        else:  # eigenvectors of the d x d Gram matrix are the right singular vectors
            s2, V = eigh(Xj.T @ Xj, subset_by_index=[d - top, d - 1])
            s2, V = s2[::-1], V[:, ::-1]
        rank = int(np.sum(s2 > 1e-12 * max(s2[0], 1e-300)))
        take = min(m_j, rank)
        block = V[:, :take].T.copy()
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        for i in range(take):
            block[i] *= majority_sign(Xj @ block[i])
        if take < m_j:
            warnings.warn(
                f"concept {j} has only {rank} independent sample direction(s) for {m_j} atoms; "
                f"the other {m_j - take} atom(s) start as random unit vectors.",
                RuntimeWarning,
                stacklevel=3,
            )
            rng = check_random_state(random_state)
            extra = rng.standard_normal((m_j - take, d))
            extra /= np.linalg.norm(extra, axis=1, keepdims=True)
            block = np.vstack([block, extra])
        blocks.append(block)
        groups.extend([j] * m_j)
    return np.vstack(blocks), np.asarray(groups, dtype=np.int64)


# ----------------------------------------------------------------------------------------------
# The estimator
# ----------------------------------------------------------------------------------------------
class SLiCS(BaseEstimator):
    """Sparse Linear Concept Subspaces: supervised group-structured dictionary learning.

    Learns one group of atoms per concept so that every embedding is a
    non-negative combination of the atoms of the concepts it is labelled
    with (Algorithm 1 of the paper).

    Parameters
    ----------
    n_atoms : int or sequence of int, default=5
        Atoms per concept: ``d0`` for every concept, or ``M_j`` per concept.
    n_iter : int, default=10
        Number of epochs ``T`` (coefficient step + atom step over all data).
        ``0`` returns the supervised SVD initialisation (S-SVD).
    batch_size : int, optional
        Mini-batch size. Each epoch splits a fresh shuffle (from
        ``random_state``) of the samples into batches; each batch gets a
        coefficient step and an update of the atoms it uses. ``None``:
        full batch (deterministic).
    update : {"ksvd", "bcd"}, default="ksvd"
        Atom step: the paper's rank-1 SVD with optimal sign and thresholding,
        or the block-coordinate update of Appendix A.
    monotone : bool, default=False
        Skip an atom update that would raise the error (the cyclic-minimiser
        variant, sec. 3.3.2); the error then never increases.
    tol : float, optional
        Stop early when the relative decrease of the epoch error is below
        ``tol``.
    ridge : float, default=0.0
        Ridge penalty ``ridge * ||a||^2`` added to every NNLS; ``> 0`` makes
        every coefficient problem strictly convex (unique solution).
    n_power_steps : int, default=0
        Extra modified power-method steps (eq. 21) of the ``"bcd"`` update.
    random_state : int, RandomState or None, default=None
        Seed of the mini-batch shuffles (and of the fallback for concepts
        with fewer samples than atoms).

    Attributes
    ----------
    atoms_ : ndarray of shape (M, d)
        Unit-norm atoms, one per row, grouped by concept.
    groups_ : ndarray of shape (M,)
        Concept index of each atom.
    history_ : ndarray of shape (n_iter_,)
        Mean squared reconstruction error after each epoch (see the module
        notes for mini-batch).
    n_iter_ : int
        Epochs run (fewer than ``n_iter`` if ``tol`` stopped early).
    n_concepts_ : int
        Number of concepts ``S``.
    n_features_in_ : int
        Embedding dimension ``d``.
    concept_names_ : list of str
        Names of the concepts (``"concept 0"``... unless given to ``fit``).

    Notes
    -----
    Atoms that no sample uses in a full-batch epoch are re-seeded with the
    normalised residual of the worst-approximated sample of their concept;
    in mini-batch mode unused atoms keep their value.

    Examples
    --------
    >>> from slics_core.synthetic import make_concept_cones
    >>> data = make_concept_cones(n_samples=300, n_features=32, n_concepts=3, n_atoms=2, random_state=0)
    >>> model = SLiCS(n_atoms=2, n_iter=5).fit(data.X, data.Y)
    >>> model.atoms_.shape
    (6, 32)
    """

    def __init__(self, n_atoms=5, n_iter=10, batch_size=None, update="ksvd", monotone=False,
                 tol=None, ridge=0.0, n_power_steps=0, random_state=None):
        self.n_atoms = n_atoms
        self.n_iter = n_iter
        self.batch_size = batch_size
        self.update = update
        self.monotone = monotone
        self.tol = tol
        self.ridge = ridge
        self.n_power_steps = n_power_steps
        self.random_state = random_state

    # -- parameter checks ----------------------------------------------------------------------
    def _atom_counts(self, n_concepts):
        if isinstance(self.n_atoms, (Integral, np.integer)) and not isinstance(self.n_atoms, bool):
            counts = [int(self.n_atoms)] * n_concepts
        else:
            try:
                counts = [int(m) for m in self.n_atoms]
            except TypeError:
                raise ValueError(f"n_atoms must be an int or one int per concept; got {self.n_atoms!r}.") from None
            if len(counts) != n_concepts:
                raise ValueError(f"n_atoms has {len(counts)} entries but Y has {n_concepts} concepts.")
        if min(counts) < 1:
            raise ValueError(f"n_atoms must be >= 1 for every concept; got {self.n_atoms!r}.")
        return counts

    def _check_params(self):
        if not isinstance(self.n_iter, (Integral, np.integer)) or self.n_iter < 0:
            raise ValueError(f"n_iter must be a non-negative int; got {self.n_iter!r}.")
        if self.batch_size is not None and (not isinstance(self.batch_size, (Integral, np.integer)) or self.batch_size < 1):
            raise ValueError(f"batch_size must be None or a positive int; got {self.batch_size!r}.")
        if self.update not in ("ksvd", "bcd"):
            raise ValueError(f"update must be 'ksvd' or 'bcd'; got {self.update!r}.")
        if self.tol is not None and not self.tol >= 0:
            raise ValueError(f"tol must be None or >= 0; got {self.tol!r}.")
        if not self.ridge >= 0:
            raise ValueError(f"ridge must be >= 0; got {self.ridge!r}.")
        if not isinstance(self.n_power_steps, (Integral, np.integer)) or self.n_power_steps < 0:
            raise ValueError(f"n_power_steps must be a non-negative int; got {self.n_power_steps!r}.")

    # -- Algorithm 1 ---------------------------------------------------------------------------
    def fit(self, X, Y, concept_names=None):
        """Learn the concept dictionary from embeddings and multi-labels.

        Parameters
        ----------
        X : array-like of shape (n_samples, d)
            Embeddings (typically unit-normalised, see
            :mod:`slics_core.preprocessing`).
        Y : array-like of shape (n_samples, S)
            Binary concept labels.
        concept_names : sequence of str, optional
            Names of the ``S`` concepts (kept in ``concept_names_`` and in
            saved files).

        Returns
        -------
        self : SLiCS
        """
        self._check_params()
        X = check_embeddings(X)
        Y = check_labels(Y, X.shape[0])
        n_concepts = Y.shape[1]
        names = self._check_names(concept_names, n_concepts)
        unlabeled = ~Y.any(axis=1)
        if unlabeled.any():
            warnings.warn(f"{int(unlabeled.sum())} sample(s) have no positive label and are ignored.",
                          RuntimeWarning, stacklevel=2)
            X, Y = X[~unlabeled], Y[~unlabeled]
        counts = Y.sum(axis=0)
        if (counts == 0).any():
            empty = [names[j] for j in np.flatnonzero(counts == 0)]
            raise ValueError(f"concept(s) {empty} have no positive sample; a concept needs examples to learn its atoms.")
        sizes = self._atom_counts(n_concepts)
        rng = check_random_state(self.random_state)

        history = []
        # One BLAS thread: the products here are small or medium, and OpenBLAS threads measured
        # slower (and far slower under CPU contention) on the 2-core development machine.
        with threadpool_limits(limits=1, user_api="blas"):
            # Initialise each B_j from the truncated SVD of its concept's embeddings.
            B, groups = initial_atoms(X, Y, sizes, random_state=rng)
            allowed = Y[:, groups]  # which atoms each sample may use
            A = np.zeros((X.shape[0], B.shape[0]))
            self._epochs(X, A, B, groups, allowed, rng, history)

        self.atoms_ = B
        self.groups_ = groups
        self.history_ = np.asarray(history)
        self.n_iter_ = len(history)
        self.n_concepts_ = n_concepts
        self.n_features_in_ = X.shape[1]
        self.concept_names_ = names
        return self

    def _epochs(self, X, A, B, groups, allowed, rng, history):
        """The loop of Algorithm 1 (lines 4-14); updates ``A``, ``B`` and ``history`` in place."""
        n = X.shape[0]
        full_batch = self.batch_size is None or self.batch_size >= n
        for epoch in range(self.n_iter):
            dtype = np.float64 if epoch == self.n_iter - 1 else _WORK_DTYPE  # polish in double precision
            error = 0.0
            for batch in self._batches(n, rng):
                Xb, allowed_b = X[batch], allowed[batch]
                # Coefficient step: NNLS on the supported concepts (eq. 5).
                Ab = self._coefficients(Xb, B, allowed_b, init=A[batch])
                # Atom step: rank-1 update of every atom on the samples that use it.
                At = np.ascontiguousarray(Ab.T)
                error += self._update_atoms(Xb, At, B, allowed_b, full_batch, dtype)
                A[batch] = At.T
            history.append(error / n)
            if self._converged(history):
                break

    def _batches(self, n, rng):
        if self.batch_size is None:
            return [slice(None)]
        order = rng.permutation(n)
        return [np.sort(order[i:i + self.batch_size]) for i in range(0, n, self.batch_size)]

    def _coefficients(self, X, B, allowed, init=None):
        gram = B @ B.T
        if self.ridge:
            gram = gram + self.ridge * np.eye(B.shape[0])
        return nnls_gram(gram, X @ B.T, allowed, init=init)

    def _update_atoms(self, X, At, B, allowed, full_batch, dtype=_WORK_DTYPE):
        """Update every atom in turn (in place); return the batch's squared error.

        The residual is kept in ``dtype``: single precision halves the memory
        traffic that dominates this loop; atoms and coefficients are always
        double precision. The returned error is exact (double precision) in
        double-precision epochs and whenever ``monotone`` or ``tol`` rely on
        it; otherwise it is read off the single-precision residual (relative
        accuracy about 1e-6).
        """
        R = X.astype(dtype, copy=False) - At.T.astype(dtype) @ B.astype(dtype)  # kept up to date incrementally
        self._update_each_atom(R, At, B, allowed, full_batch, dtype)
        if dtype != np.float64 and not self.monotone and self.tol is None:
            return float(R.ravel().astype(np.float64) @ R.ravel())
        R = X - At.T @ B  # exact error, free of single-precision drift
        return float(R.ravel() @ R.ravel())

    def _update_each_atom(self, R, At, B, allowed, full_batch, dtype):
        """The inner loop of Algorithm 1 (lines 7-13) over atoms ``m = 1..M``."""
        power_tol, power_iter = _POWER_SETTINGS[np.dtype(dtype)]
        rounding = 8 * np.finfo(dtype).eps
        for m in range(B.shape[0]):
            L = np.flatnonzero(At[m])
            if L.size == 0:
                if full_batch:
                    self._reseed(m, R, At, B, allowed)
                continue
            a = At[m, L]
            R_L = R[L]
            # E = R_L + a b_m^T is the residual without atom m (eq. 8), used implicitly.
            E = _RankOneUpdated(R_L, a.astype(dtype), B[m].astype(dtype))
            if self.update == "ksvd":
                b, beta = ksvd_atom_update(E, E.b, tol=power_tol, max_iter=power_iter)
            else:
                b, beta = bcd_atom_update(E, E.a, self.n_power_steps)
                if b is None:
                    continue
            b = b.astype(np.float64)
            b /= np.sqrt(b @ b)
            beta = beta.astype(np.float64)
            if self.monotone:
                # New error on L is ||E||^2 - ||beta||^2 (b is unit, beta optimal for b); skip the
                # update unless it lowers the error by more than the rounding of that estimate.
                total = E.sq_norm()
                if total - beta @ beta > E.base_sq_norm() - rounding * total:
                    continue
            # New residual E - beta b^T = R_L + a b_m^T - beta b^T, a rank-2 update.
            coef = np.empty((L.size, 2), dtype=dtype)
            coef[:, 0], coef[:, 1] = a, -beta
            R[L] = R_L + coef @ np.stack([E.b, b.astype(dtype)])
            At[m, L] = beta
            B[m] = b

    @staticmethod
    def _reseed(m, R, At, B, allowed):
        """Re-seed a dead atom with the worst-approximated sample of its concept."""
        members = np.flatnonzero(allowed[:, m])
        if members.size == 0:
            return
        norms = np.einsum("ij,ij->i", R[members], R[members])
        i = members[np.argmax(norms)]
        r = R[i].astype(np.float64)
        norm = np.linalg.norm(r)
        if norm <= 1e-6:
            return
        B[m] = r / norm
        At[m, i] = norm
        R[i] = 0.0

    def _converged(self, history):
        if len(history) < 2:
            return history[-1] == 0.0
        if self.tol is None:
            return False
        prev, cur = history[-2], history[-1]
        return prev <= 0 or (prev - cur) / prev < self.tol

    # -- using a fitted dictionary -------------------------------------------------------------
    @staticmethod
    def _check_names(names, n_concepts):
        if names is None:
            return [f"concept {j}" for j in range(n_concepts)]
        names = [str(s) for s in names]
        if len(names) != n_concepts:
            raise ValueError(f"concept_names has {len(names)} names but Y has {n_concepts} concepts.")
        return names

    def _check_X(self, X):
        check_is_fitted(self, "atoms_")
        return check_embeddings(X, n_features=self.n_features_in_)

    def _allowed(self, Y, n):
        if Y is None:
            return None
        Y = check_labels(Y, n, n_concepts=self.n_concepts_)
        return Y[:, self.groups_]

    def transform(self, X, Y=None):
        """Coefficients of ``X`` on the dictionary (disentanglement, eq. 2).

        Parameters
        ----------
        X : array-like of shape (n, d)
        Y : array-like of shape (n, S), optional
            Active concepts of each sample; coefficients of the other
            concepts are zero. ``None``: all concepts are active.

        Returns
        -------
        coef : ndarray of shape (n, M)
            Non-negative NNLS coefficients, aligned with ``atoms_``.
        """
        X = self._check_X(X)
        return self._coefficients(X, self.atoms_, self._allowed(Y, X.shape[0]))

    def components(self, X, Y=None):
        """Per-concept components ``v_j = B_j a_j`` (full disentanglement, eq. 2).

        Parameters
        ----------
        X : array-like of shape (n, d)
        Y : array-like of shape (n, S), optional
            Active concepts (all if ``None``).

        Returns
        -------
        V : ndarray of shape (n, S, d)
            ``V[:, j]`` is concept ``j``'s component; they sum to the
            reconstruction of ``X``.
        """
        coef = self.transform(X, Y)
        V = np.zeros((coef.shape[0], self.n_concepts_, self.n_features_in_))
        for j in range(self.n_concepts_):
            sel = self.groups_ == j
            V[:, j] = coef[:, sel] @ self.atoms_[sel]
        return V

    def project(self, X, concept):
        """Partial disentanglement: the nearest point of a concept's cone (eq. 3).

        Parameters
        ----------
        X : array-like of shape (n, d)
        concept : int or None
            Concept index ``j``; ``None`` projects onto every concept.

        Returns
        -------
        V : ndarray of shape (n, d), or (n, S, d) when ``concept`` is None
            ``argmin_{v in cone(B_j)} ||x - v||`` for each row ``x``.
        """
        X = self._check_X(X)
        concepts = range(self.n_concepts_) if concept is None else [check_concept(concept, self.n_concepts_)]
        out = np.zeros((X.shape[0], len(concepts), self.n_features_in_))
        for i, j in enumerate(concepts):
            Bj = self.atoms_[self.groups_ == j]
            out[:, i] = nnls_shared(Bj, X, ridge=self.ridge) @ Bj
        return out if concept is None else out[:, 0]

    def reconstruction_error(self, X, Y=None):
        """Mean squared reconstruction error ``mean_i ||x_i - a_i B||^2`` with NNLS coefficients."""
        X = self._check_X(X)
        coef = self._coefficients(X, self.atoms_, self._allowed(Y, X.shape[0]))
        R = X - coef @ self.atoms_
        return float(np.einsum("ij,ij->", R, R) / X.shape[0])

    # -- persistence ---------------------------------------------------------------------------
    def save(self, path):
        """Save the fitted model to one self-describing ``.npz`` file (written atomically).

        The file holds the atoms, groups and history arrays plus a JSON header
        with the format name and version, hyper-parameters and concept names.
        It never contains pickled objects.
        """
        check_is_fitted(self, "atoms_")
        header = {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "params": self.get_params(),
            "n_iter_": int(self.n_iter_),
            "n_concepts_": int(self.n_concepts_),
            "n_features_in_": int(self.n_features_in_),
            "concept_names_": list(self.concept_names_),
        }
        if not isinstance(header["params"]["random_state"], (int, type(None))):
            header["params"]["random_state"] = None
        if not isinstance(header["params"]["n_atoms"], int):
            header["params"]["n_atoms"] = [int(m) for m in header["params"]["n_atoms"]]
        path = os.fspath(path)
        folder = os.path.dirname(os.path.abspath(path))
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".slics-", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                np.savez_compressed(fh, header=np.array(json.dumps(header)), atoms=self.atoms_,
                                    groups=self.groups_, history=self.history_)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        return path

    @classmethod
    def load(cls, path):
        """Load a model written by :meth:`save`.

        Raises
        ------
        FileNotFoundError
            If ``path`` does not exist.
        ValueError
            If the file is not a SLiCS model file, is damaged, or has an
            unsupported format version.
        """
        path = os.fspath(path)
        if not os.path.exists(path):
            raise FileNotFoundError(f"no SLiCS model file at {path!r}")
        try:
            with np.load(path, allow_pickle=False) as data:
                arrays = {key: data[key] for key in data.files}
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
            raise ValueError(f"{path!r} is not a readable SLiCS model file (damaged or another format): {exc}") from None
        missing = {"header", "atoms", "groups", "history"} - set(arrays)
        if missing:
            raise ValueError(f"{path!r} is not a SLiCS model file: missing {sorted(missing)}.")
        try:
            header = json.loads(str(arrays["header"]))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path!r} has a damaged header: {exc}") from None
        if not isinstance(header, dict) or header.get("format") != FORMAT_NAME:
            raise ValueError(f"{path!r} is not a SLiCS model file (format {header.get('format') if isinstance(header, dict) else None!r}).")
        if header.get("version") != FORMAT_VERSION:
            raise ValueError(f"{path!r} has SLiCS format version {header.get('version')!r}; this library reads version {FORMAT_VERSION}.")
        atoms, groups = arrays["atoms"], arrays["groups"]
        S, d = header["n_concepts_"], header["n_features_in_"]
        if (atoms.ndim != 2 or atoms.shape[1] != d or groups.shape != (atoms.shape[0],)
                or not np.isfinite(atoms).all() or groups.min() < 0 or groups.max() >= S):
            raise ValueError(f"{path!r} is damaged: its arrays do not match its header.")
        model = cls(**header["params"])
        model.atoms_ = atoms.astype(np.float64)
        model.groups_ = groups.astype(np.int64)
        model.history_ = arrays["history"].astype(np.float64)
        model.n_iter_ = int(header["n_iter_"])
        model.n_concepts_ = int(S)
        model.n_features_in_ = int(d)
        model.concept_names_ = list(header["concept_names_"])
        return model

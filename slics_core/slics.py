"""Supervised SLiCS dictionary learning (the paper's Algorithm 1).

The estimator: fit's loop of coefficient and atom steps, partial_fit (one step of that loop on a
streamed batch), transform, project, components; :func:`epoch_batches`, the batch order of an epoch.
Its atom steps (the S-SVD start, the loop over atoms, the majority sign, Appendix A's update) are in
:mod:`slics_core.atom_steps`, its compiled kernels in :mod:`slics_core._kernels`, its file format in
:mod:`slics_core.formats`.

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
* The rank-1 SVD of every atom update is computed to a relative residual
  ``||E^T u - sigma v|| <= 1e-9 sigma`` by the Lanczos method with full
  reorthogonalisation on ``E^T E``, warm-started at the current atom, on the
  implicit residual ``R_L + a b^T`` in double precision, in every epoch (4-10
  Lanczos steps; the paper only asks for "the rank-1 SVD"). The loop is
  compiled (:mod:`slics_core._kernels`, numba) and reads each residual row
  once per step. SLiCS thus reproduces Algorithm 1 with exact SVDs up to
  rounding: final errors agree with a plain reference (full LAPACK SVD per
  atom, scipy NNLS per sample) to about 1e-10 relative on held-out data
  where Algorithm 1 is well conditioned (``tests/test_slics_quality.py``).
  About one random configuration in ten (small batches of noisy data) is
  chaotic: differences grow by a constant factor per batch, and a 1e-9
  perturbation of ``X`` moves the reference's own final error by 1e-3 to
  1e-1, so no implementation that differs from it by rounding matches it
  there (``benchmarks/bench_fit_quality.py``). A sample allowed more atoms
  than there are dimensions can have many NNLS minimisers; which one a
  solver returns is arbitrary, and the trajectories then part too (one such
  configuration in 60 ended 1.5e-4 below the reference). Looser updates
  measured worse on the well-conditioned configurations: a relative residual
  of 1e-6 ended up to 1.3e-3 above the reference, 1e-3 up to 0.10 above.
  Because every epoch is exact, stopping early with ``tol``
  returns the atoms of a complete exact epoch. A start exactly orthogonal to
  the top singular vector (measure zero in real data) keeps the Krylov space
  invariant, as in any Krylov method; the update is then the best rank-1
  update in that space.
* ``monotone=True`` (the cyclic-minimiser variant of sec. 3.3.2) keeps an atom
  update only if it lowers the error on the samples that use the atom
  (decided in double precision). In full-batch mode the coefficient step is
  an exact NNLS, so the epoch error (``history_``) never increases. In
  mini-batch mode the guarantee is per batch: the batch's error with optimal
  coefficients never increases through its update,
  ``min_A ||X_b - A B_new||^2 <= min_A ||X_b - A B_old||^2``; the error of
  the other samples, and hence ``history_``, can rise, because an update fitted
  to one batch is not checked against the rest of the data.
* BLAS is limited to one thread inside ``fit``: the products are small or
  medium and OpenBLAS threads measured slower on a 2-core machine. The
  compiled kernels release the GIL, so fits in different threads (app
  sessions) run on different cores.
* ``n_jobs`` threads share the per-sample steps by blocks of 128 rows (a
  block's codes, linear terms and residual rows are one task), transform,
  project and the S-SVD start by concepts (:mod:`slics_core._parallel`: the
  calling thread works too, idle threads sleep, never more threads than idle
  cores). The atom step, one sequence of rank-1 updates, runs on the calling
  thread alone. Atoms and codes do not depend on ``n_jobs``, bit for bit; the
  measurements behind these rules: docs/performance.md, "n_jobs".
* Each atom is updated in place on the rows of the batch residual that may
  use it (its concept's samples), read through an index list; the samples
  ``L_m`` are those with a non-zero coefficient. The residual is formed from
  the sparse coefficients, and the coefficient step's linear terms ``B x``
  only for the allowed atoms. None of this changes the updates or their
  order (atoms agree with the previous BLAS implementation to about 1e-15).
* ``callback(epoch, n_epochs, batch, n_batches)``, if given, is called after
  every batch (a progress hook; it does not change the fit and is not saved).
* :meth:`SLiCS.partial_fit`: the first call on an unfitted model is the S-SVD
  start of its batch and nothing else; each later call is one mini-batch step
  (coefficient step from a cold start, then every atom), as ``fit`` runs on
  each batch (``docs/choices.md``, "Streaming fits").
"""
from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import _check_feature_names_in, check_is_fitted
from threadpoolctl import threadpool_limits

from slics_core._kernels import aligned_rows, allowed_products, residual
from slics_core._parallel import N_JOBS_EXPECTED, ThreadChoice, effective_n_jobs, n_jobs_ok, rowwise
from slics_core._validation import (
    SKLEARN_EXPECTED_FAILED_CHECKS as SKLEARN_EXPECTED_FAILED_CHECKS,  # public: the checks check_estimator skips
)
from slics_core._validation import (
    check_concept,
    check_labels,
    check_targets,
    is_int,
    is_number,
    validate_embeddings,
)
from slics_core.atom_steps import initial_atoms, update_each_atom
from slics_core.formats import load_model, save_model
from slics_core.nnls import gram_rank, nnls_rows, nnls_shared, solver_gram


def _allowed_atoms(Y, groups):
    """Which atoms each sample may use (those of its concepts), C-ordered as the compiled kernels take it.

    ``Y[:, groups]`` alone is Fortran-ordered, and a second layout would compile each kernel again.
    """
    return np.ascontiguousarray(Y[:, groups])


def _atom_counts_ok(x):
    """``n_atoms``: a positive int, or a non-empty sequence (list, tuple, 1-D array) of positive ints."""
    if is_int(x):
        return x >= 1
    if isinstance(x, (str, bytes, dict, set)) or not isinstance(x, (Sequence, np.ndarray)) or np.ndim(x) != 1:
        return False
    return len(x) > 0 and all(is_int(m) and m >= 1 for m in x)


def epoch_batches(n_samples: int, batch_size: int | None, rng: np.random.RandomState) -> list:
    """The batches of one epoch of the mini-batch schedule (paper sec. 3.3), as :meth:`SLiCS.fit` runs them.

    A fresh permutation of the ``n_samples`` rows from ``rng`` (one draw per epoch) cut into
    consecutive batches of ``batch_size`` (the last may be smaller), each sorted; ``None``: one batch
    of all rows (``slice(None)``, no draw).
    """
    if batch_size is None:
        return [slice(None)]
    order = rng.permutation(n_samples)
    return [np.sort(order[i:i + batch_size]) for i in range(0, n_samples, batch_size)]


# ----------------------------------------------------------------------------------------------
# The estimator
# ----------------------------------------------------------------------------------------------
class SLiCS(TransformerMixin, BaseEstimator):
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
        Skip an atom update that would raise the error on the samples that
        use the atom (the cyclic-minimiser variant, sec. 3.3.2). Full batch:
        the epoch error never increases. Mini-batch: each batch's own error
        (with optimal coefficients) never increases through its update, but
        the error over all samples can (see the module notes).
    tol : float, optional
        Stop early when the relative decrease of the epoch error is below
        ``tol`` (every epoch is exact, so the result is that of a complete
        epoch).
    ridge : float, default=0.0
        Ridge penalty ``ridge * ||a||^2`` added to every NNLS; ``> 0`` makes
        every coefficient problem strictly convex (unique solution).
    n_power_steps : int, default=0
        Extra modified power-method steps (eq. 21) of the ``"bcd"`` update.
    random_state : int, RandomState or None, default=None
        Seed of the mini-batch shuffles (and of the fallback for concepts
        with fewer samples than atoms).
    callback : callable, optional
        Progress hook, called after every batch's atom step as
        ``callback(epoch, n_epochs, batch, n_batches)``: ``epoch`` is the
        0-based index of the current epoch (``n_epochs`` is ``n_iter``),
        ``batch`` the 0-based index of the batch just finished and
        ``n_batches`` the number of batches per epoch (1 in full batch), so
        ``epoch * n_batches + batch + 1`` batches of at most
        ``n_epochs * n_batches`` are done. Its return value is ignored; it
        does not change the fit, and it is not saved by :meth:`save`.
        Not called when ``n_iter=0``; an early stop by ``tol`` ends the calls.
    n_jobs : int, optional
        Threads for the per-sample steps of ``fit``, ``partial_fit``,
        ``transform`` and ``project`` (the NNLS codes, the residual) and for
        the S-SVD start (by concept); ``None`` means 1 and ``-1`` every core,
        as in scikit-learn: at most, capped by the blocks of 128 rows (or
        concepts) there are to share and by the cores other programs leave
        idle; a fit's batch steps use one thread instead where the recent
        steps measured that faster. The atom step always runs on
        one thread (see the module notes). BLAS keeps one thread per worker.
        The result does not depend on it. Not saved by :meth:`save`.

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
    n_steps_ : int
        Steps of the schedule run: the S-SVD start, then one per batch
        (``fit``) or per :meth:`partial_fit` call after the start. Not saved:
        a loaded model counts on from 1.
    n_concepts_ : int
        Number of concepts ``S``.
    n_features_in_ : int
        Embedding dimension ``d``.
    concept_names_ : list of str
        Names of the concepts (``"concept 0"``... unless given to ``fit``;
        the class labels when ``fit`` got 1-D ``Y``).
    classes_ : ndarray or None
        The class labels (in concept order) when ``fit`` got 1-D ``Y``;
        ``None`` after a fit on a 0/1 label matrix.
    feature_names_in_ : ndarray of str
        Column names of ``X`` when it was a DataFrame with string column names.

    Notes
    -----
    Atoms that no sample uses in a full-batch epoch are re-seeded with the
    normalised residual of the worst-approximated sample of their concept;
    in mini-batch mode unused atoms keep their value.

    scikit-learn conventions: ``check_estimator(SLiCS(),
    expected_failed_checks=SKLEARN_EXPECTED_FAILED_CHECKS)`` passes
    (``tests/test_sklearn_conventions.py``). The one check expected to
    fail, ``check_estimators_dtypes``, cannot apply: its integer ``X`` has an
    all-zero row, and an all-zero embedding (no direction: a failed
    encoding) is refused by design; the dtypes themselves are tested.
    ``Y`` may be a 0/1 matrix ``(n_samples, n_concepts)`` (multi-label) or
    1-D class labels (each distinct label is a concept, one per sample).
    Input is dense only (a sparse ``X`` is refused with a message), real
    (complex ``X`` is refused), and ``transform`` returns the atom
    coefficients, whose columns :meth:`get_feature_names_out` names
    ``"<concept>_<k>"``; ``set_output(transform="pandas")`` works. A saved
    and loaded model (:meth:`save`, :meth:`load`) has no ``classes_``: give
    it 0/1 label matrices.

    Examples
    --------
    >>> from slics_core.synthetic import make_concept_cones
    >>> data = make_concept_cones(n_samples=300, n_features=32, n_concepts=3, n_atoms=2, random_state=0)
    >>> model = SLiCS(n_atoms=2, n_iter=5).fit(data.X, data.Y)
    >>> model.atoms_.shape
    (6, 32)
    """

    #: The one table of hyper-parameter constraints (in the spirit of scikit-learn's
    #: ``_parameter_constraints``): name -> (test, what is expected). :meth:`fit` checks the estimator's
    #: parameters with it, :meth:`load` a saved header's (JSON, so ``None`` reads as null).
    _param_constraints: ClassVar[dict] = {
        "n_atoms": (_atom_counts_ok, "a positive int or a list of positive ints (one per concept)"),
        "n_iter": (lambda x: is_int(x) and x >= 0, "a non-negative int"),
        "batch_size": (lambda x: x is None or (is_int(x) and x >= 1), "None (null) or a positive int"),
        "update": (lambda x: isinstance(x, str) and x in ("ksvd", "bcd"), "'ksvd' or 'bcd'"),
        "monotone": (lambda x: isinstance(x, (bool, np.bool_)), "True or False"),
        "tol": (lambda x: x is None or (is_number(x) and x >= 0), "None (null) or a non-negative number"),
        "ridge": (lambda x: is_number(x) and x >= 0, "a non-negative number"),
        "n_power_steps": (lambda x: is_int(x) and x >= 0, "a non-negative int"),
        "random_state": (lambda x: x is None or is_int(x) or isinstance(x, np.random.RandomState),
                         "None (null), an int or a numpy RandomState"),
        "callback": (lambda x: x is None or callable(x),
                     "None or a callable callback(epoch, n_epochs, batch, n_batches)"),
        "n_jobs": (n_jobs_ok, N_JOBS_EXPECTED),
    }
    #: Hyper-parameters that :meth:`save` does not write (a loaded model has their defaults).
    _not_saved: ClassVar[tuple] = ("callback", "n_jobs")

    def __init__(self, n_atoms: int | Sequence[int] = 5, *, n_iter: int = 10, batch_size: int | None = None,
                 update: str = "ksvd", monotone: bool = False, tol: float | None = None, ridge: float = 0.0,
                 n_power_steps: int = 0, random_state: int | np.random.RandomState | None = None,
                 callback: Callable[[int, int, int, int], Any] | None = None, n_jobs: int | None = None):
        self.n_atoms = n_atoms
        self.n_iter = n_iter
        self.batch_size = batch_size
        self.update = update
        self.monotone = monotone
        self.tol = tol
        self.ridge = ridge
        self.n_power_steps = n_power_steps
        self.random_state = random_state
        self.callback = callback
        self.n_jobs = n_jobs

    # -- parameter checks ----------------------------------------------------------------------
    def _atom_counts(self, n_concepts):
        if is_int(self.n_atoms):
            return [int(self.n_atoms)] * n_concepts
        counts = [int(m) for m in self.n_atoms]
        if len(counts) != n_concepts:
            raise ValueError(f"n_atoms has {len(counts)} entries but Y has {n_concepts} concepts.")
        return counts

    def _check_params(self):
        """Check every hyper-parameter against :attr:`_param_constraints` (one line naming the first bad one)."""
        for name, (ok, expected) in self._param_constraints.items():
            value = getattr(self, name)
            if not ok(value):
                raise ValueError(f"{name} must be {expected}; got {value!r}.")

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True  # the concept labels
        tags.target_tags.multi_output = True  # a 0/1 matrix, one column per concept
        tags.input_tags.sparse = False
        tags.input_tags.allow_nan = False
        return tags

    # -- Algorithm 1 ---------------------------------------------------------------------------
    def fit(self, X: ArrayLike, Y: ArrayLike, concept_names: Sequence[str] | None = None) -> SLiCS:
        """Learn the concept dictionary from embeddings and multi-labels.

        Parameters
        ----------
        X : array-like of shape (n_samples, d)
            Embeddings (typically unit-normalised, see
            :mod:`slics_core.preprocessing`). Dense and real.
        Y : array-like of shape (n_samples, S) or (n_samples,)
            Binary concept labels, or one class label per sample (each
            distinct label is a concept; ``classes_`` keeps them).
        concept_names : sequence of str, optional
            Names of the ``S`` concepts (kept in ``concept_names_`` and in
            saved files). Default: the class labels for 1-D ``Y``, else
            ``"concept 0"``, ``"concept 1"``...

        Returns
        -------
        self : SLiCS
        """
        self._check_params()
        X, Y, classes, names = self._labelled(X, Y, concept_names, first=True)
        rng = check_random_state(self.random_state)
        history = []
        # One BLAS thread: the products here are small or medium, and OpenBLAS threads measured
        # slower (and far slower under CPU contention) on the 2-core development machine.
        with threadpool_limits(limits=1, user_api="blas"):
            B, groups, steps = self._start(X, Y, rng)
            n_steps = 1 + self._epochs(X, B, _allowed_atoms(Y, groups), rng, steps, history)
        self._set_fitted(B, groups, steps, n_steps, Y.shape[1], names, classes, history)
        return self

    def partial_fit(self, X: ArrayLike, Y: ArrayLike, concept_names: Sequence[str] | None = None) -> SLiCS:
        """One step of the mini-batch schedule on the batch ``(X, Y)`` (streaming fits).

        The first call on an unfitted model only starts: the S-SVD
        dictionary of this batch, exactly ``SLiCS(n_iter=0).fit(X, Y)``; its
        labels must show every concept. Every later call (also after
        :meth:`fit` or :meth:`load`) runs one mini-batch step of the paper
        (sec. 3.3, "Mini-batch"): the coefficient step, NNLS of each sample on
        its concepts' atoms from a cold start (eq. 5), then the atom step,
        every atom in turn (``update``, ``monotone`` as in :meth:`fit`) on the
        batch's samples that use it; atoms that no sample of the batch uses
        keep their value (no re-seeding). One call is thus one batch of
        :meth:`fit`'s inner loop, and an epoch is ``ceil(n / batch_size)``
        calls: ``fit(X, Y)`` with ``batch_size`` equals ``partial_fit(X, Y)``
        followed by ``partial_fit`` on each batch of :func:`epoch_batches`
        for ``n_iter`` epochs (same ``random_state``). ``n_iter``,
        ``batch_size``, ``tol`` and ``callback`` are not used: the caller
        chooses the batches, their order and the number of passes.

        Parameters are those of :meth:`fit`; on later calls ``X`` must have
        ``n_features_in_`` columns and ``Y`` ``n_concepts_`` concepts (or
        classes of ``classes_``), and ``concept_names``, if given, must be
        ``concept_names_``. Samples with no positive label are ignored.

        Returns
        -------
        self : SLiCS
            ``n_steps_`` counts the calls (the start is step 1); ``history_``
            and ``n_iter_`` keep :meth:`fit`'s epochs (none for a model started
            here: a call does not know where an epoch ends).
        """
        self._check_params()
        first = not hasattr(self, "atoms_")
        X, Y, classes, names = self._labelled(X, Y, concept_names, first=first)
        with threadpool_limits(limits=1, user_api="blas"):
            if first:
                B, groups, steps = self._start(X, Y, check_random_state(self.random_state))
                self._set_fitted(B, groups, steps, 1, Y.shape[1], names, classes, [])
                return self
            B = np.array(self.atoms_, dtype=np.float64, order="C")  # a step that fails leaves atoms_ as it was
            steps = getattr(self, "_lanczos_steps", None)  # a loaded model does not keep it
            steps = np.full(B.shape[0], 3, dtype=np.int64) if steps is None else steps.copy()
            choice = getattr(self, "_thread_choice", None)
            if choice is None or choice.most != self._threads():
                choice = self._thread_choice = ThreadChoice(self.n_jobs)  # kept from call to call, never saved
            if X.shape[0]:
                self._step(X, np.zeros((X.shape[0], B.shape[0])), B, _allowed_atoms(Y, self.groups_), False, steps,
                           choice)
        self.atoms_, self._lanczos_steps = B, steps
        self.n_steps_ = getattr(self, "n_steps_", 1) + 1
        return self

    def _labelled(self, X, Y, concept_names, first):
        """The checked batch of :meth:`fit` or :meth:`partial_fit`: ``X``, boolean ``Y`` (unlabelled rows
        dropped, with a warning), classes and concept names; a later batch is checked against the fitted model."""
        X = validate_embeddings(self, X, reset=first)
        if first:
            Y, classes = check_targets(Y, X.shape[0])
            if concept_names is None and classes is not None:
                concept_names = [str(c) for c in classes]
            names = self._check_names(concept_names, Y.shape[1])
        else:
            Y, classes, names = self._labels(Y, X.shape[0]), getattr(self, "classes_", None), self.concept_names_
            if concept_names is not None and [str(s) for s in concept_names] != names:
                raise ValueError(f"concept_names {list(concept_names)} differ from the fitted model's {names}.")
        unlabeled = ~Y.any(axis=1)
        if unlabeled.any():
            warnings.warn(f"{int(unlabeled.sum())} sample(s) have no positive label and are ignored.",
                          RuntimeWarning, stacklevel=3)
            X, Y = X[~unlabeled], Y[~unlabeled]
        counts = Y.sum(axis=0)
        if first and (counts == 0).any():
            empty = [names[j] for j in np.flatnonzero(counts == 0)]
            raise ValueError(f"concept(s) {empty} have no positive sample; "
                             "a concept needs examples to learn its atoms.")
        return X, Y, classes, names

    def _threads(self):
        """Threads for the per-sample steps (``n_jobs`` resolved once per call)."""
        return effective_n_jobs(self.n_jobs)

    def _start(self, X, Y, rng):
        """The S-SVD start (Algorithm 1, lines 1-3): atoms, groups and the Lanczos step counts."""
        B, groups = initial_atoms(X, Y, self._atom_counts(Y.shape[1]), random_state=rng, n_jobs=self._threads())
        # Lanczos steps of each atom's last rank-1 SVD: the next one starts checking convergence
        # one step earlier (checking costs a small eigenproblem; it never changes the stopping rule).
        return B, groups, np.full(B.shape[0], 3, dtype=np.int64)

    def _set_fitted(self, B, groups, steps, n_steps, n_concepts, names, classes, history):
        self.atoms_ = B
        self.groups_ = groups
        self._lanczos_steps = steps
        self.n_steps_ = n_steps
        self.history_ = np.asarray(history, dtype=np.float64)
        self.n_iter_ = len(history)
        self.n_concepts_ = n_concepts
        self.concept_names_ = names
        self.classes_ = classes

    def _epochs(self, X, B, allowed, rng, steps, history):
        """The loop of Algorithm 1 (lines 4-14): updates ``B``, ``steps`` and ``history`` in place and
        returns the number of batch steps run."""
        n = X.shape[0]
        A = np.zeros((n, B.shape[0]))
        full_batch = self.batch_size is None or self.batch_size >= n
        n_steps = 0
        choice = ThreadChoice(self.n_jobs)
        for epoch in range(self.n_iter):
            error = 0.0
            batches = epoch_batches(n, self.batch_size, rng)
            for b, batch in enumerate(batches):
                A[batch], batch_error = self._step(X[batch], A[batch], B, allowed[batch], full_batch, steps, choice)
                error += batch_error
                n_steps += 1
                if self.callback is not None:
                    self.callback(epoch, self.n_iter, b, len(batches))
            history.append(error / n)
            if self._converged(history):
                break
        return n_steps

    def _step(self, Xb, Ab, B, allowed_b, full_batch, steps, choice):
        """One batch step: the coefficient step (eq. 5, warm-started at ``Ab``) and the residual it leaves,
        then the atom step on ``B`` (in place). Returns the batch's coefficients and its squared error after
        the update.

        The codes and the residual rows are computed together, block of rows by block of rows: one
        hand-out to the threads per batch, each task a few milliseconds long. ``choice`` (a
        :class:`~slics_core._parallel.ThreadChoice`) gives the number of threads and gets the step's time."""
        start, threads = time.perf_counter(), choice.threads()
        G = self._gram(B)
        R = aligned_rows(*Xb.shape)
        Ab = np.ascontiguousarray(Ab)

        def codes_and_residual(rows):
            A = self._codes(Xb[rows], B, G, allowed_b[rows], Ab[rows])
            residual(Xb[rows], A, B, R[rows])
            return A

        Ab = rowwise(codes_and_residual, Xb.shape[0], threads)
        At = np.ascontiguousarray(Ab.T)
        error = self._update_atoms(Xb, At, B, allowed_b, full_batch, steps, R)
        choice.record(threads, time.perf_counter() - start, Xb.shape[0])
        return At.T, error

    def _gram(self, B):
        """The NNLS solver's Gram matrix of the atoms ``B`` (with ``ridge``), computed once per batch or call."""
        gram = B @ B.T
        return solver_gram(gram + self.ridge * np.eye(B.shape[0]) if self.ridge else gram)

    def _codes(self, X, B, G, allowed, init=None):
        """NNLS codes (eq. 5) of the rows of ``X`` on their allowed atoms; each row on its own (a row allowed more
        atoms than the Gram matrix's rank goes to the exact fallback at once: :func:`slics_core.nnls.gram_rank`)."""
        return nnls_rows(G, allowed_products(X, B, allowed), allowed, init, rank=gram_rank(B, self.ridge))

    def _coefficients(self, X, B, allowed):
        """NNLS codes of every row of ``X`` (``allowed`` None: every atom), by blocks of rows on ``n_jobs`` threads."""
        G = self._gram(B)
        if allowed is None:  # every atom; the compiled products make each row's result independent of the batch
            allowed = np.ones((X.shape[0], B.shape[0]), dtype=bool)
        return rowwise(lambda rows: self._codes(X[rows], B, G, allowed[rows]), X.shape[0], self._threads())

    def _update_atoms(self, X, At, B, allowed, full_batch, steps, R):
        """Update every atom in turn (in place); return the batch's squared error.

        ``R = X - A B`` (double precision), formed with the codes, is then
        updated incrementally: a rank-2 update on the rows of each atom.
        ``steps`` holds each atom's last Lanczos step count (updated in place).
        """
        update_each_atom(R, At, B, allowed, full_batch, steps, update=self.update, monotone=bool(self.monotone),
                         n_power_steps=self.n_power_steps)
        return float(np.einsum("ij,ij->", R, R))

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
        return validate_embeddings(self, X, reset=False)

    def _labels(self, Y, n):
        """Boolean labels ``(n, n_concepts_)`` from a 0/1 matrix, or from class labels for a model fitted on them."""
        classes = getattr(self, "classes_", None)
        if classes is not None and np.ndim(Y) == 1 and not (n == 1 and np.size(Y) == self.n_concepts_ > 1):
            Y = check_targets(Y, n, classes=classes)[0]
        return check_labels(Y, n, n_concepts=self.n_concepts_)

    def _allowed(self, Y, n):
        return None if Y is None else _allowed_atoms(self._labels(Y, n), self.groups_)

    def get_feature_names_out(self, input_features: ArrayLike | None = None) -> np.ndarray:
        """Names of the columns of :meth:`transform`: ``"<concept name>_<k>"`` for atom ``k`` of a concept.

        ``input_features``, if given, must match ``feature_names_in_`` (or have
        ``n_features_in_`` entries); it does not change the output names.
        """
        check_is_fitted(self, "atoms_")
        _check_feature_names_in(self, input_features, generate_names=False)
        first = np.searchsorted(self.groups_, self.groups_)  # index of each concept's first atom
        names = [f"{self.concept_names_[g]}_{m - f}" for m, (g, f) in enumerate(zip(self.groups_, first))]
        return np.asarray(names, dtype=object)

    def transform(self, X: ArrayLike, Y: ArrayLike | None = None) -> np.ndarray:
        """Coefficients of ``X`` on the dictionary (disentanglement, eq. 2).

        Parameters
        ----------
        X : array-like of shape (n, d)
        Y : array-like of shape (n, S), optional
            Active concepts of each sample; coefficients of the other
            concepts are zero. ``None``: all concepts are active. A model
            fitted on class labels also takes 1-D class labels here.

        Returns
        -------
        coef : ndarray of shape (n, M)
            Non-negative NNLS coefficients, aligned with ``atoms_``.
        """
        X = self._check_X(X)
        return self._coefficients(X, self.atoms_, self._allowed(Y, X.shape[0]))

    def components(self, X: ArrayLike, Y: ArrayLike | None = None) -> np.ndarray:
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

    def project(self, X: ArrayLike, concept: int | None) -> np.ndarray:
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
            out[:, i] = nnls_shared(Bj, X, ridge=self.ridge, n_jobs=self.n_jobs) @ Bj
        return out if concept is None else out[:, 0]

    def reconstruction_error(self, X: ArrayLike, Y: ArrayLike | None = None) -> float:
        """Mean squared reconstruction error ``mean_i ||x_i - a_i B||^2`` with NNLS coefficients."""
        X = self._check_X(X)
        coef = self._coefficients(X, self.atoms_, self._allowed(Y, X.shape[0]))
        R = X - coef @ self.atoms_
        return float(np.einsum("ij,ij->", R, R) / X.shape[0])

    # -- persistence ---------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> str:
        """Save the fitted model to one self-describing ``.npz`` file (written atomically).

        The file holds the atoms, groups and history arrays plus a JSON header
        with the format name and version, hyper-parameters and concept names
        (:func:`slics_core.formats.save_model`). It never contains pickled objects.
        """
        check_is_fitted(self, "atoms_")
        return save_model(self, path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> SLiCS:
        """Load a model written by :meth:`save`, checking every part of the file first.

        The header (format, version, every hyper-parameter, sizes, concept
        names) is validated key by key, and the shapes and dtypes of the
        arrays are read from their ``.npy`` headers inside the archive and
        checked against it *before* any array data is read, so a damaged or
        hostile file cannot make this allocate more than its header allows
        (:func:`slics_core.formats.load_model`).

        Raises
        ------
        FileNotFoundError
            If ``path`` does not exist.
        ValueError
            One per problem, naming the file, the part at fault and what to
            do: not a SLiCS model file, damaged file, unsupported format
            version, a missing, unknown or ill-typed header key, or arrays
            that do not match the header.
        """
        return load_model(cls, path)

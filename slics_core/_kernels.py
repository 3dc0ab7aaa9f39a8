"""Compiled kernels of Algorithm 1: the K-SVD atom step (rank-1 SVD of an implicit residual and its
update), the residual and the coefficient step's linear terms.

One atom update of Algorithm 1 (lines 8-12) on a block ``R`` of residual rows::

    E = D (R + a b_old^T)                       (D selects the rows with a_i != 0: the samples L_m)
    (sigma, u, v) = top singular triplet of E   (warm-started at b_old)
    b = p* v,  beta = max(0, p* E v)            (majority sign p*, sec. 3.3.1)
    R <- R + a b_old^T - beta b^T

``E`` is never formed. Its top right singular vector is found by the
symmetric Lanczos method with full reorthogonalisation on ``C = E^T E``,
started at ``b_old``. One product ``C v = sum_i (e_i . v) e_i`` reads every
row of ``R`` once (the row is used twice while it is in the L1 cache), where
two BLAS ``dgemv`` calls (``E v`` then ``E^T (E v)``) read the block twice;
on the 2-core development machine (Zen 3) the fused product takes about 45 us
on a 383 x 512 block against 57-73 us for the ``dgemv`` pair. The Krylov spaces are
those of Golub-Kahan bidiagonalisation with the same start, so the Ritz
vectors and the number of steps are the same; the stopping rule is the
relative residual ``||E^T u - sigma v|| <= tol * sigma``, which for
``u = E v / sigma`` is ``||C v - sigma^2 v|| <= tol * sigma^2``.
``E v`` is assembled from the products ``E v_k`` kept from every step.

The kernels are compiled by numba (``cache=True``: once per machine, about
15-20 seconds, then loaded from the cache in a fraction of a second).
Reassociation is allowed (``fastmath`` reassoc/contract) so that the dot
products vectorise; the results differ from a sequential sum only by rounding.
"""
from __future__ import annotations

import numpy as np
from numba import njit

#: reassociation (vectorised sums) and fused multiply-add; no assumptions about NaN or infinities
_FAST = {"reassoc", "contract"}
#: machine epsilon, a compile-time constant (``np.finfo`` inside a kernel compiles string machinery)
_EPS = float(np.finfo(np.float64).eps)
#: Rows per block of the Lanczos product (:func:`_fused_product`): its sums are added block by block, the
#: rounding of every fit since issue 32 (when threads shared the blocks; they no longer do).
PRODUCT_ROWS = 64


def aligned_rows(n, d):
    """An empty ``(n, d)`` float64 array whose first byte is 64-byte aligned (a cache line, an AVX-512 vector).

    The atom step reads the residual through vector loads; on the development machine (AMD EPYC,
    AVX-512) a batch's atom step took 27 ms of CPU on an aligned residual and 34 ms at any other
    offset (8-48 bytes), and numpy's or numba's allocations give either (docs/performance.md, "n_jobs").
    """
    buf = np.empty(n * d + 8)
    start = (-buf.ctypes.data % 64) // 8
    return buf[start:start + n * d].reshape(n, d)


@njit(cache=True, nogil=True)
def _used_rows(rows, a, implicit):
    """``(idx, pos, m)``: the rows of ``R`` that take part (all, or those with ``a_i != 0``) and their positions."""
    n = rows.size
    idx = np.empty(n, dtype=np.int64)  # rows of R
    pos = np.empty(n, dtype=np.int64)  # their positions in rows, a and the products E v
    m = 0
    for i in range(n):
        if not implicit or a[i] != 0.0:
            idx[m] = rows[i]
            pos[m] = i
            m += 1
    return idx, pos, m


@njit(cache=True, nogil=True, fastmath=_FAST)
def _product_block(R, idx, pos, lo, hi, a, vb, implicit, v, wb, s):
    """Rows ``idx[lo:hi]`` of :func:`_fused_product`: their entries of ``s = E v`` and ``wb = sum_i s_i r_i``
    (``r_i`` the rows of ``R``, without the ``a b0^T`` part); returns ``sum_i a_i s_i`` (``implicit``).

    Rows are processed four at a time: the four dot products share the loads
    of ``v`` and the four row updates of ``wb`` share the loads and stores of
    ``wb``.
    """
    d = R.shape[1]
    for j in range(d):
        wb[j] = 0.0
    sa = 0.0
    t = lo
    while t + 4 <= hi:
        i0, i1, i2, i3 = idx[t], idx[t + 1], idx[t + 2], idx[t + 3]
        p0, p1, p2, p3 = pos[t], pos[t + 1], pos[t + 2], pos[t + 3]
        s0 = 0.0
        s1 = 0.0
        s2 = 0.0
        s3 = 0.0
        for j in range(d):
            vj = v[j]
            s0 += R[i0, j] * vj
            s1 += R[i1, j] * vj
            s2 += R[i2, j] * vj
            s3 += R[i3, j] * vj
        if implicit:
            s0 += a[p0] * vb
            s1 += a[p1] * vb
            s2 += a[p2] * vb
            s3 += a[p3] * vb
            sa += a[p0] * s0 + a[p1] * s1 + a[p2] * s2 + a[p3] * s3
        s[p0] = s0
        s[p1] = s1
        s[p2] = s2
        s[p3] = s3
        for j in range(d):
            wb[j] += s0 * R[i0, j] + s1 * R[i1, j] + s2 * R[i2, j] + s3 * R[i3, j]
        t += 4
    while t < hi:
        i0 = idx[t]
        p0 = pos[t]
        s0 = 0.0
        for j in range(d):
            s0 += R[i0, j] * v[j]
        if implicit:
            s0 += a[p0] * vb
            sa += a[p0] * s0
        s[p0] = s0
        for j in range(d):
            wb[j] += s0 * R[i0, j]
        t += 1
    return sa


@njit(cache=True, nogil=True, fastmath=_FAST)
def _fused_product(R, idx, pos, m, a, b0, implicit, v, w, s, W, SA):
    """``s = E v`` and ``w = E^T s`` for ``E = D (R[rows] + a b0^T)`` (``implicit``) or ``E = R[rows]``.

    Only the ``m`` rows ``idx[:m]`` (at positions ``pos[:m]`` of ``s`` and
    ``a``) are read; the other entries of ``s`` are left as they are (zero).
    The rows go in blocks of :data:`PRODUCT_ROWS` (:func:`_product_block`;
    ``W`` and ``SA`` are scratch with a row per block) whose sums are added in
    block order, on the caller's thread (no thread shares a product:
    docs/performance.md, "n_jobs").
    """
    d = R.shape[1]
    vb = 0.0
    if implicit:
        for j in range(d):
            vb += b0[j] * v[j]
    nb = (m + PRODUCT_ROWS - 1) // PRODUCT_ROWS
    for b in range(nb):
        SA[b] = _product_block(R, idx, pos, b * PRODUCT_ROWS, min((b + 1) * PRODUCT_ROWS, m), a, vb, implicit,
                               v, W[b], s)
    for j in range(d):
        w[j] = 0.0
    sa = 0.0
    for b in range(nb):
        sa += SA[b]
        for j in range(d):
            w[j] += W[b, j]
    if implicit and sa != 0.0:
        for j in range(d):
            w[j] += sa * b0[j]


@njit(cache=True, nogil=True)
def _row_of_e(R, idx, pos, t, a, b0, implicit, out):
    """Row ``t`` of ``E`` (see :func:`_fused_product`) into ``out``; returns its squared norm."""
    q = 0.0
    for j in range(R.shape[1]):
        e = R[idx[t], j] + (a[pos[t]] * b0[j] if implicit else 0.0)
        out[j] = e
        q += e * e
    return q


@njit(cache=True, nogil=True)
def _top_ritz(alphas, betas, k):
    """Top eigenpair of the k x k tridiagonal matrix (diagonal ``alphas``, off-diagonal ``betas``)."""
    T = np.zeros((k, k))
    for i in range(k):
        T[i, i] = alphas[i]
        if i + 1 < k:
            T[i, i + 1] = betas[i]
            T[i + 1, i] = betas[i]
    w, Z = np.linalg.eigh(T)
    return w[k - 1], Z[:, k - 1].copy()


@njit(cache=True, nogil=True, fastmath=_FAST)
def top_triplet(R, rows, a, b0, implicit, tol, max_steps, check_from):
    """Leading singular pair of ``E`` (see :func:`_fused_product`), warm-started at the unit vector ``b0``.

    Returns ``(v, ev, eb, steps)``: the unit right singular vector ``v``
    (sign arbitrary), ``E v`` and ``E b0`` (aligned with ``rows``) and the
    number of Lanczos steps (the dimension of the final Krylov space). If
    ``E b0 = 0`` the start is replaced by ``E``'s largest row; if ``E = 0``,
    ``v = b0``.
    """
    n = rows.size
    d = R.shape[1]
    idx, pos, n_rows = _used_rows(rows, a, implicit)
    # the Krylov space holds b0 plus at most rank(E) <= min(n_rows, d) directions of E's row space
    steps = max(1, min(max_steps, min(n_rows, d) + 1, d))
    # Lanczos vectors V and their products S = E V, grown as needed (most solves take under 16 steps)
    cap = min(steps + 1, 16)
    V = np.empty((cap, d))
    S = np.zeros((cap, n))
    w = np.empty(d)
    nb = max(1, (n_rows + PRODUCT_ROWS - 1) // PRODUCT_ROWS)
    W = np.empty((nb, d))
    SA = np.empty(nb)
    for j in range(d):
        V[0, j] = b0[j]
    _fused_product(R, idx, pos, n_rows, a, b0, implicit, V[0], w, S[0], W, SA)
    eb = S[0].copy()
    sn = 0.0
    for i in range(n):
        sn += S[0, i] * S[0, i]
    if sn == 0.0:
        # E b0 = 0: b0 is orthogonal to E's row space; start at E's largest row instead
        best, row = 0.0, -1
        for t in range(n_rows):
            q = _row_of_e(R, idx, pos, t, a, b0, implicit, w)
            if q > best:
                best, row = q, t
        if row < 0:
            return b0.copy(), np.zeros(n), eb, 1
        _row_of_e(R, idx, pos, row, a, b0, implicit, V[0])
        for j in range(d):
            V[0, j] /= np.sqrt(best)
        _fused_product(R, idx, pos, n_rows, a, b0, implicit, V[0], w, S[0], W, SA)
    alphas = np.empty(steps + 1)
    betas = np.empty(steps + 1)
    coef = np.empty(steps + 1)
    rounding = 8 * _EPS
    top = 0.0
    k = 0  # index of the newest Lanczos vector
    z = np.ones(1)
    while True:
        # w = C v_k - beta_{k-1} v_{k-1}; alpha_k = v_k . w; w -= alpha_k v_k
        if k > 0:
            bk = betas[k - 1]
            for j in range(d):
                w[j] -= bk * V[k - 1, j]
        al = 0.0
        for j in range(d):
            al += V[k, j] * w[j]
        alphas[k] = al
        for j in range(d):
            w[j] -= al * V[k, j]
        # one classical Gram-Schmidt pass against all Lanczos vectors (full reorthogonalisation): the
        # recurrence has removed the large components, what is left is at rounding level
        for q in range(k + 1):
            c = 0.0
            for j in range(d):
                c += V[q, j] * w[j]
            coef[q] = c
        for q in range(k + 1):
            c = coef[q]
            for j in range(d):
                w[j] -= c * V[q, j]
        be = 0.0
        for j in range(d):
            be += w[j] * w[j]
        be = np.sqrt(be)
        betas[k] = be
        top = max(top, abs(al), be)
        # beta at rounding level: C v_k lies in span(V): an invariant subspace, the Ritz pair is exact
        invariant = be <= rounding * top
        if k + 1 >= check_from or k + 1 >= steps or invariant:
            theta, z = _top_ritz(alphas, betas, k + 1)
            # ||C v - theta v|| = beta_k |z_k| for the Ritz vector v = V z
            if invariant or be * abs(z[k]) <= tol * theta or k + 1 >= steps:
                break
        k += 1
        if k == V.shape[0]:
            # element loops, not slice assignment: a slice assignment compiles numba's
            # shape-mismatch message (string formatting), several seconds of the first compile
            cap = min(steps + 1, 2 * k)
            V2 = np.empty((cap, d))
            S2 = np.zeros((cap, n))
            for q in range(k):
                for j in range(d):
                    V2[q, j] = V[q, j]
                for i in range(n):
                    S2[q, i] = S[q, i]
            V, S = V2, S2
        for j in range(d):
            V[k, j] = w[j] / be
        _fused_product(R, idx, pos, n_rows, a, b0, implicit, V[k], w, S[k], W, SA)
    v = np.zeros(d)
    ev = np.zeros(n)
    for q in range(k + 1):
        zq = z[q]
        for j in range(d):
            v[j] += zq * V[q, j]
        for i in range(n):
            ev[i] += zq * S[q, i]
    nrm = 0.0
    for j in range(d):
        nrm += v[j] * v[j]
    nrm = np.sqrt(nrm)
    for j in range(d):
        v[j] /= nrm
    for i in range(n):
        ev[i] /= nrm
    return v, ev, eb, k + 1


@njit(cache=True, nogil=True)
def lowers_error(bb, aeb, aa):
    """Whether an atom update lowers the error on its samples L (the test of ``monotone``, sec. 3.3.2).

    On L the error goes from ``||E - a b_old^T||^2 = ||E||^2 - 2 a.(E b_old) + ||a||^2`` to
    ``||E||^2 - ||beta||^2`` (``b`` unit, ``beta`` optimal for ``b``); with ``bb = ||beta||^2``,
    ``aeb = a.(E b_old)`` and ``aa = ||a||^2``, the update must lower it by more than the rounding of
    that comparison. Used by the compiled K-SVD update and by the block-coordinate update in Python.
    """
    gain = bb - (2.0 * aeb - aa)
    return gain > 64 * _EPS * (bb + aa + abs(aeb))


@njit(cache=True, nogil=True, fastmath=_FAST)
def ksvd_update(R, rows, a, b0, tol, max_steps, check_from, monotone):
    """One K-SVD atom update in place on the residual rows ``R[rows]`` and their coefficients ``a``.

    Returns ``(b, steps, kept)``: the new unit atom, the Lanczos steps and
    whether the update was applied (``monotone`` skips an update that does
    not lower the error on the samples that use the atom). Rows with
    ``a_i = 0`` are not touched.
    """
    n = rows.size
    d = R.shape[1]
    v, ev, eb, steps = top_triplet(R, rows, a, b0, True, tol, max_steps, check_from)
    pp = 0.0
    nn = 0.0
    for i in range(n):
        e = ev[i]
        if e > 0.0:
            pp += e * e
        else:
            nn += e * e
    sign = 1.0 if pp >= nn else -1.0  # the majority sign (sec. 3.3.1)
    beta = np.empty(n)
    bb = 0.0
    for i in range(n):
        x = sign * ev[i]
        beta[i] = max(x, 0.0)
        bb += beta[i] * beta[i]
    if monotone:
        aeb = 0.0
        aa = 0.0
        for i in range(n):
            aeb += a[i] * eb[i]
            aa += a[i] * a[i]
        if not lowers_error(bb, aeb, aa):
            return b0.copy(), steps, False
    b = np.empty(d)
    for j in range(d):
        b[j] = sign * v[j]
    rank2_update(R, rows, a, b0, beta, b)
    return b, steps, True


@njit(cache=True, nogil=True, fastmath=_FAST)
def rank2_update(R, rows, a, b0, beta, b):
    """``R[rows] += a b0^T - beta b^T`` and ``a <- beta`` (in place; rows where both are zero are skipped)."""
    d = R.shape[1]
    for i in range(rows.size):
        ai = a[i]
        bi = beta[i]
        if ai == 0.0 and bi == 0.0:
            continue
        r = rows[i]
        for j in range(d):
            R[r, j] += ai * b0[j] - bi * b[j]
        a[i] = bi


@njit(cache=True, nogil=True, fastmath=_FAST)
def residual(X, A, B, R):
    """``R = X - A B`` for sparse coefficients ``A`` (n, M): each row subtracts only its used atoms.

    Each row of ``R`` (n, d; e.g. from :func:`aligned_rows`) is written once, from its own non-zero
    coefficients.
    """
    n, d = X.shape
    M = B.shape[0]
    used = np.empty(M, dtype=np.int64)
    for i in range(n):
        k = 0
        for m in range(M):
            if A[i, m] != 0.0:
                used[k] = m
                k += 1
        for j in range(d):
            R[i, j] = X[i, j]
        for q in range(k):
            m = used[q]
            c = A[i, m]
            for j in range(d):
                R[i, j] -= c * B[m, j]


@njit(cache=True, nogil=True, fastmath=_FAST)
def allowed_products(X, B, allowed):
    """``X B^T`` on the allowed entries (zero elsewhere): the linear terms of the coefficient step."""
    n, d = X.shape
    M = B.shape[0]
    C = np.zeros((n, M))
    for i in range(n):
        for m in range(M):
            if allowed[i, m]:
                c = 0.0
                for j in range(d):
                    c += X[i, j] * B[m, j]
                C[i, m] = c
    return C


@njit(cache=True, nogil=True, fastmath=_FAST)
def reseed(R, rows, a, B, m):
    """Re-seed dead atom ``m`` with the worst-approximated of the rows ``R[rows]`` (that sample then uses it).

    ``B[m]`` becomes the row's normalised residual, its coefficient ``a`` the
    residual's norm, and the row's residual zero. Nothing changes if every
    row's residual is below 1e-6.
    """
    d = R.shape[1]
    best, t = -1.0, 0
    for q in range(rows.size):
        r = rows[q]
        s = 0.0
        for j in range(d):
            s += R[r, j] * R[r, j]
        if s > best:
            best, t = s, q
    norm = np.sqrt(best)
    if norm <= 1e-6:
        return
    r = rows[t]
    for j in range(d):
        B[m, j] = R[r, j] / norm
        R[r, j] = 0.0
    a[t] = norm


@njit(cache=True, nogil=True, fastmath=_FAST)
def ksvd_atoms(R, At, B, allowed_t, steps, tol, max_steps, monotone, full_batch):
    """The atom step of one batch (Algorithm 1, lines 7-13): :func:`ksvd_update` of atoms ``m = 0..M-1`` in turn.

    ``R`` (n, d) is the batch residual, ``At`` (M, n) the coefficients and
    ``allowed_t`` (M, n) which samples may use each atom (its concept's);
    all three and ``B`` are updated in place. ``steps[m]`` holds the Lanczos
    steps of atom ``m``'s last update; its next update checks convergence from
    one step earlier (a check costs a small eigenproblem and never changes the
    stopping rule). An atom that no sample uses is re-seeded (:func:`reseed`)
    in full-batch mode and left as it is in mini-batch mode. One thread: each
    update reads the residual the previous one left, and a product is too short
    to share (docs/performance.md, "n_jobs").
    """
    M, n = At.shape
    rows_all = np.empty(n, dtype=np.int64)
    a_all = np.empty(n)
    for m in range(M):
        k = 0
        used = False
        for i in range(n):
            if allowed_t[m, i]:
                rows_all[k] = i
                a_all[k] = At[m, i]
                used = used or At[m, i] != 0.0
                k += 1
        if k == 0:
            continue
        rows = rows_all[:k]
        a = a_all[:k]
        if not used:
            if full_batch:
                reseed(R, rows, a, B, m)
        else:
            b, st, _ = ksvd_update(R, rows, a, B[m], tol, max_steps, max(3, steps[m] - 1), monotone)
            steps[m] = st
            for j in range(B.shape[1]):
                B[m, j] = b[j]
        for q in range(k):
            At[m, rows[q]] = a[q]

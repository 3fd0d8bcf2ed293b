"""Ridge regression of one factor row on many others: the step of every alternating least
squares method (centralized ALS, federated ALS's user and item steps, their fold-ins).

A row ``x`` (of ``U``, say) with entries ``q`` (columns ``j_q``, regressors
``f_q = F[j_q]``) solves the normal equations

    (G0 + sum_q w_q f_q f_q^T + lam I) x = sum_q y_q f_q,      lam > 0.

Plain least squares, ``min_x sum_q (y_q - f_q . x)^2 + lam ||x||^2``, has ``G0 = 0``,
``w_q = 1`` and the targets ``y_q``. The implicit-feedback form of Hu, Koren and Volinsky
(2008), ``min_x sum_j c_j (p_j - f_j . x)^2 + lam ||x||^2`` over *all* columns ``j`` with
``c_j = 1`` and ``p_j = 0`` off the observed ones, is the same system with ``G0 = F^T F`` (all
columns at weight 1), ``w_q = c_q - 1`` and ``y_q = c_q p_q`` over the observed entries only
(their Eq. (4) and the speed-up of their section 4). :func:`normal_equations_upper` forms the
sums, :func:`solve_row` the whole solve, :func:`ridge_rows` every row of a CSR (centralized
ALS).

:func:`cg_steps` instead takes a few conjugate-gradient steps on the same system from a
previous solution ``x`` (Takacs, Pilaszy and Tikk 2011, "Applications of the conjugate
gradient method for implicit feedback collaborative filtering"; the ``implicit`` library's
ALS): each step lowers the row's quadratic objective ``1/2 x^T A x - b^T x`` over a growing
Krylov space, costs one product with the system, ``O(d^2 + n d)`` for ``n`` entries instead of
the ``O(n d^2 + d^3)`` of forming and factoring it, and ``d`` steps reach the solution in exact
arithmetic. The system is applied without being formed: ``A0 p + sum_q w_q f_q (f_q . p)``
(federated ALS's item step has no entries: its ``A0`` is the item's whole system).

Rows are long (all of a user's or an item's entries), so ``F[cols]`` is first gathered into a
contiguous ``(k, d)`` copy and every entry of the Gram matrix is a dot product of contiguous
vectors, unlike :func:`fedmc.core.kernels.normal_equations`, whose groups are short.

The functions kernels call here are not cached on their own: each kernel compiles them into
itself (:mod:`fedmc.core.kernels`; federated ALS's user and item steps, compiled by two
processes at once on a first run, both call them), and inlines :func:`solve_row` and
:func:`cg_steps`, which call helpers in turn.
"""

from __future__ import annotations

import numba
import numpy as np

from fedmc.core.kernels import cholesky_solve_upper
from fedmc.core.parallel import parallel_for

CHUNK = 128  # entries gathered at a time: (k, CHUNK) float64, 32 KiB at k = 32, in L1 cache


@numba.njit(nogil=True, fastmath=True)
def normal_equations_upper(F, cols, y, w, A, b):
    """Upper triangle of ``A = sum_q w_q f_q f_q^T`` and ``b = sum_q y_q f_q``,
    ``f_q = F[cols[q]]``; ``w`` empty means every ``w_q = 1``.

    The entries are taken :data:`CHUNK` at a time, their rows gathered and transposed into
    ``(k, CHUNK)`` so that every entry of ``A`` is a dot product of contiguous vectors in
    cache, formed four by four (:func:`_block4`: 16 sums from 8 loads, where one entry at a
    time reads two vectors per sum)."""
    k = F.shape[1]
    n = cols.shape[0]
    for a in range(k):
        b[a] = 0.0
        for c in range(a, k):
            A[a, c] = 0.0
    G = np.empty((k, min(n, CHUNK)))
    Gw = G if w.shape[0] == 0 else np.empty((k, min(n, CHUNK)))
    whole = k - k % 4
    for q0 in range(0, n, CHUNK):
        m = min(CHUNK, n - q0)
        for q in range(m):
            f = F[cols[q0 + q]]
            for a in range(k):
                G[a, q] = f[a]
        if w.shape[0] > 0:
            for a in range(k):
                for q in range(m):
                    Gw[a, q] = w[q0 + q] * G[a, q]
        for a in range(k):
            ga = G[a]
            s = 0.0
            for q in range(m):
                s += ga[q] * y[q0 + q]
            b[a] += s
        for a in range(0, whole, 4):
            for c in range(a, whole, 4):
                _block4(Gw, G, a, c, m, A)
        for a in range(k):  # the columns past the last whole block
            gwa = Gw[a]
            for c in range(max(a, whole), k):
                gc = G[c]
                s = 0.0
                for q in range(m):
                    s += gwa[q] * gc[q]
                A[a, c] += s


@numba.njit(nogil=True, fastmath=True, inline="always")
def _block4(Gw, G, a, c, m, A):
    """``A[a + i, c + j] += Gw[a + i, :m] . G[c + j, :m]`` for ``i, j < 4`` on or above the
    diagonal: 16 dot products in one pass over the eight vectors."""
    s00 = s01 = s02 = s03 = s10 = s11 = s12 = s13 = 0.0
    s20 = s21 = s22 = s23 = s30 = s31 = s32 = s33 = 0.0
    w0, w1, w2, w3 = Gw[a], Gw[a + 1], Gw[a + 2], Gw[a + 3]
    g0, g1, g2, g3 = G[c], G[c + 1], G[c + 2], G[c + 3]
    for q in range(m):
        x0, x1, x2, x3 = w0[q], w1[q], w2[q], w3[q]
        z0, z1, z2, z3 = g0[q], g1[q], g2[q], g3[q]
        s00 += x0 * z0
        s01 += x0 * z1
        s02 += x0 * z2
        s03 += x0 * z3
        s10 += x1 * z0
        s11 += x1 * z1
        s12 += x1 * z2
        s13 += x1 * z3
        s20 += x2 * z0
        s21 += x2 * z1
        s22 += x2 * z2
        s23 += x2 * z3
        s30 += x3 * z0
        s31 += x3 * z1
        s32 += x3 * z2
        s33 += x3 * z3
    sums = ((s00, s01, s02, s03), (s10, s11, s12, s13), (s20, s21, s22, s23),
            (s30, s31, s32, s33))
    for i in range(4):
        for j in range(4):
            if c + j >= a + i:
                A[a + i, c + j] += sums[i][j]


@numba.njit(inline="always", nogil=True)
def solve_row(F, cols, y, w, G0, lam, x):
    """``x = (G0 + sum_q w_q f_q f_q^T + lam I)^{-1} sum_q y_q f_q`` (module docstring) by
    Cholesky; ``G0`` a ``(0, 0)`` array for none, ``w`` empty for every ``w_q = 1``."""
    k = F.shape[1]
    A = np.empty((k, k))
    normal_equations_upper(F, cols, y, w, A, x)
    if G0.shape[0] > 0:
        for a in range(k):
            for c in range(a, k):
                A[a, c] += G0[a, c]
    for a in range(k):
        A[a, a] += lam
    cholesky_solve_upper(A, x)



@numba.njit(nogil=True, fastmath=True)
def _apply(A0, F, cols, w, p, out):
    """``out = (A0 + sum_q w_q f_q f_q^T) p`` (:func:`cg_steps`); ``A0`` symmetric, so its
    product is the sum of its rows times ``p``'s entries (no sum across a vector's lanes)."""
    k = p.shape[0]
    for i in range(k):
        out[i] = 0.0
    for c in range(A0.shape[0]):
        pc = p[c]
        row = A0[c]
        for i in range(k):
            out[i] += row[i] * pc
    for q in range(cols.shape[0]):
        f = F[cols[q]]
        s = 0.0
        for a in range(k):
            s += f[a] * p[a]
        if w.shape[0] > 0:
            s *= w[q]
        for a in range(k):
            out[a] += s * f[a]


@numba.njit(inline="always", nogil=True)
def cg_steps(A0, F, cols, w, b, steps, x):
    """``steps`` conjugate-gradient steps on ``(A0 + sum_q w_q f_q f_q^T) x = b`` from the
    given ``x``, in place (module docstring; Takacs et al. 2011, Algorithm 2).

    ``A0`` is symmetric (both triangles; ``(0, k)`` for none); ``f_q = F[cols[q]]`` (``cols``
    may be empty), ``w`` empty for every ``w_q = 1``.
    The system must be positive definite; the steps stop early where the residual is zero or a
    direction has no positive curvature (a system that is not), keeping the last ``x``, which
    never raised the objective."""
    k = x.shape[0]
    r = np.empty(k)
    p = np.empty(k)
    Ap = np.empty(k)
    _apply(A0, F, cols, w, x, Ap)
    rs = 0.0
    for a in range(k):
        r[a] = b[a] - Ap[a]
        p[a] = r[a]
        rs += r[a] * r[a]
    for _ in range(steps):
        if rs == 0.0:
            break
        _apply(A0, F, cols, w, p, Ap)
        curvature = 0.0
        for a in range(k):
            curvature += p[a] * Ap[a]
        if not curvature > 0.0:
            break
        step = rs / curvature
        rs_next = 0.0
        for a in range(k):
            x[a] += step * p[a]
            r[a] -= step * Ap[a]
            rs_next += r[a] * r[a]
        for a in range(k):
            p[a] = r[a] + (rs_next / rs) * p[a]
        rs = rs_next


@numba.njit(nogil=True)
def fixed_targets(values, cols, x_fixed, Y_fixed, y):
    """``y_q = values[q] - x_fixed . Y_fixed[cols[q]]``: the targets of a row once the fixed
    columns' share (the biases' all-ones carriers) is moved over."""
    for q in range(cols.shape[0]):
        y_q = values[q]
        for a in range(x_fixed.shape[0]):
            y_q -= x_fixed[a] * Y_fixed[cols[q], a]
        y[q] = y_q


def ridge_rows(indptr, indices, values, F, X_fixed, Y_fixed, lam, weighted, X):
    """Row ``t`` of ``X`` solves ``(sum_q F[j_q] F[j_q]^T + lam w_t I) x = sum_q y_q F[j_q]``.

    The sums run over the row's entries ``q`` (columns ``j_q = indices[q]``), with targets
    ``y_q = values[q] - X_fixed[t] . Y_fixed[j_q]`` (:func:`fixed_targets`; ``X_fixed,
    Y_fixed`` may have no column); ``w_t`` is the row's count if ``weighted`` else 1 and
    ``lam > 0``. A row with no entries gets ``x = 0``.
    """
    parallel_for(_ridge_rows_range, indptr.shape[0] - 1, indptr, indices, values, F, X_fixed,
                 Y_fixed, lam, weighted, X)


@numba.njit(cache=True, nogil=True)
def _ridge_rows_range(start, stop, indptr, indices, values, F, X_fixed, Y_fixed, lam, weighted, X):
    """:func:`ridge_rows` over ``start:stop`` of its parallel loop."""
    none = np.zeros((0, 0))
    ones = np.zeros(0)
    for t in range(start, stop):
        q0, q1 = indptr[t], indptr[t + 1]
        if q1 == q0:
            X[t] = 0.0
            continue
        y = np.empty(q1 - q0)
        fixed_targets(values[q0:q1], indices[q0:q1], X_fixed[t], Y_fixed, y)
        reg = lam * (q1 - q0) if weighted else lam
        solve_row(F, indices[q0:q1], y, ones, none, reg, X[t])

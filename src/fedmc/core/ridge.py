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
arithmetic. The system is applied without being formed: ``A0 p + sum_q w_q f_q (f_q . p)``.

Rows are long (all of a user's or an item's entries), so ``F[cols]`` is first gathered into a
contiguous ``(k, d)`` copy and every entry of the Gram matrix is a dot product of contiguous
vectors, unlike :func:`fedmc.core.kernels.normal_equations`, whose groups are short.
"""

from __future__ import annotations

import numba
import numpy as np

from fedmc.core.kernels import cholesky_solve_upper


@numba.njit(cache=True, fastmath=True)
def normal_equations_upper(F, cols, y, w, A, b):
    """Upper triangle of ``A = sum_q w_q f_q f_q^T`` and ``b = sum_q y_q f_q``,
    ``f_q = F[cols[q]]``; ``w`` empty means every ``w_q = 1``."""
    k = F.shape[1]
    d = cols.shape[0]
    G = np.empty((k, d))
    for q in range(d):
        f = F[cols[q]]
        for a in range(k):
            G[a, q] = f[a]
    Gw = G
    if w.shape[0] > 0:
        Gw = np.empty((k, d))
        for a in range(k):
            for q in range(d):
                Gw[a, q] = w[q] * G[a, q]
    for a in range(k):
        ga = G[a]
        gwa = Gw[a]
        s = 0.0
        for q in range(d):
            s += ga[q] * y[q]
        b[a] = s
        for c in range(a, k):
            gc = G[c]
            s = 0.0
            for q in range(d):
                s += gwa[q] * gc[q]
            A[a, c] = s


@numba.njit(cache=True)
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


@numba.njit(cache=True)
def _apply(A0, F, cols, w, p, out):
    """``out = A0 p + sum_q w_q f_q (f_q . p)`` with ``f_q = F[cols[q]]``, ``A0`` symmetric by
    its upper triangle and ``w`` empty for every ``w_q = 1``."""
    k = p.shape[0]
    for i in range(k):
        out[i] = 0.0
    for i in range(k):
        pi = p[i]
        s = A0[i, i] * pi
        for c in range(i + 1, k):
            s += A0[i, c] * p[c]
            out[c] += A0[i, c] * pi
        out[i] += s
    for q in range(cols.shape[0]):
        f = F[cols[q]]
        s = 0.0
        for a in range(k):
            s += f[a] * p[a]
        if w.shape[0] > 0:
            s *= w[q]
        for a in range(k):
            out[a] += s * f[a]


@numba.njit(cache=True)
def cg_steps(A0, F, cols, w, b, steps, x):
    """``steps`` conjugate-gradient steps on ``(A0 + sum_q w_q f_q f_q^T) x = b`` from the
    given ``x``, in place (module docstring; Takacs et al. 2011, Algorithm 2): ``A0`` symmetric
    by its upper triangle, ``f_q = F[cols[q]]`` (``cols`` may be empty), ``w`` empty for every
    ``w_q = 1``. The system must be positive definite; the steps stop early where the residual
    is zero or a direction has no positive curvature (a system that is not), keeping the last
    ``x``, which never raised the objective."""
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


@numba.njit(cache=True)
def fixed_targets(values, cols, x_fixed, Y_fixed, y):
    """``y_q = values[q] - x_fixed . Y_fixed[cols[q]]``: the targets of a row once the fixed
    columns' share (the biases' all-ones carriers) is moved over."""
    for q in range(cols.shape[0]):
        y_q = values[q]
        for a in range(x_fixed.shape[0]):
            y_q -= x_fixed[a] * Y_fixed[cols[q], a]
        y[q] = y_q


@numba.njit(cache=True, parallel=True)
def ridge_rows(indptr, indices, values, F, X_fixed, Y_fixed, lam, weighted, X):
    """Row ``t`` of ``X`` solves ``(sum_q F[j_q] F[j_q]^T + lam w_t I) x = sum_q y_q F[j_q]``.

    The sums run over the row's entries ``q`` (columns ``j_q = indices[q]``), with targets
    ``y_q = values[q] - X_fixed[t] . Y_fixed[j_q]`` (:func:`fixed_targets`; ``X_fixed,
    Y_fixed`` may have no column); ``w_t`` is the row's count if ``weighted`` else 1 and
    ``lam > 0``. A row with no entries gets ``x = 0``.
    """
    none = np.zeros((0, 0))
    ones = np.zeros(0)
    for t in numba.prange(indptr.shape[0] - 1):
        q0, q1 = indptr[t], indptr[t + 1]
        if q1 == q0:
            X[t] = 0.0
            continue
        y = np.empty(q1 - q0)
        fixed_targets(values[q0:q1], indices[q0:q1], X_fixed[t], Y_fixed, y)
        reg = lam * (q1 - q0) if weighted else lam
        solve_row(F, indices[q0:q1], y, ones, none, reg, X[t])

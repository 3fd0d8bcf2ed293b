"""Centralized ALS's half-sweep: every row's ridge problem, one Numba kernel parallel over
rows (:mod:`fedmc.algorithms.als`)."""

from __future__ import annotations

import numba
import numpy as np

from fedmc.algorithms.als.config import ALSConfig
from fedmc.core.kernels import cholesky_solve_upper
from fedmc.data.federated import CSR


@numba.njit(cache=True, fastmath=True)
def _normal_equations_upper(F, cols, values, x_fixed, Y_fixed, A, b):
    """Upper triangle of ``A = F[cols]^T F[cols]`` and ``b = F[cols]^T y`` with targets
    ``y_q = values[q] - x_fixed . Y_fixed[cols[q]]`` (the fixed columns' share moved over).

    ``F[cols]`` is first gathered into a ``(k, d)`` copy, so that every entry of ``A`` and ``b``
    is a dot product of contiguous vectors (ALS rows are long: all of a user's or an item's
    ratings), unlike :func:`fedmc.core.kernels.normal_equations`, whose groups are short.
    """
    k = F.shape[1]
    d = cols.shape[0]
    G = np.empty((k, d))
    y = np.empty(d)
    for q in range(d):
        j = cols[q]
        f = F[j]
        for a in range(k):
            G[a, q] = f[a]
        y_q = values[q]
        for a in range(x_fixed.shape[0]):
            y_q -= x_fixed[a] * Y_fixed[j, a]
        y[q] = y_q
    for a in range(k):
        ga = G[a]
        s = 0.0
        for q in range(d):
            s += ga[q] * y[q]
        b[a] = s
        for c in range(a, k):
            gc = G[c]
            s = 0.0
            for q in range(d):
                s += ga[q] * gc[q]
            A[a, c] = s


@numba.njit(cache=True, parallel=True)
def ridge_rows(indptr, indices, values, F, X_fixed, Y_fixed, lam, weighted, X):
    """Row ``t`` of ``X`` solves ``(sum_q F[j_q] F[j_q]^T + lam w_t I) x = sum_q y_q F[j_q]``.

    The sums run over the row's entries ``q`` (columns ``j_q = indices[q]``), with targets
    ``y_q = values[q] - X_fixed[t] . Y_fixed[j_q]`` (``X_fixed, Y_fixed`` may have no column);
    ``w_t`` is the row's count if ``weighted`` else 1 and ``lam > 0``; the system is solved by
    Cholesky. A row with no entries gets ``x = 0``.
    """
    k = F.shape[1]
    for t in numba.prange(indptr.shape[0] - 1):
        count = indptr[t + 1] - indptr[t]
        if count == 0:
            X[t] = 0.0
            continue
        A = np.empty((k, k))
        b = np.empty(k)
        q0, q1 = indptr[t], indptr[t + 1]
        _normal_equations_upper(F, indices[q0:q1], values[q0:q1], X_fixed[t], Y_fixed, A, b)
        reg = lam * count if weighted else lam
        for a in range(k):
            A[a, a] += reg
        cholesky_solve_upper(A, b)
        X[t] = b


def half_sweep(X: np.ndarray, Y: np.ndarray, free: np.ndarray, R: CSR, cfg: ALSConfig) -> None:
    """Solve for ``X[:, free]`` with ``Y`` fixed on the ratings ``R`` (rows of ``X``), in
    place: every row's ridge problem (:func:`ridge_rows`)."""
    fixed = ~free
    F = np.ascontiguousarray(Y[:, free])
    out = np.empty((len(X), F.shape[1]))
    ridge_rows(R.indptr, R.indices, R.values, F, np.ascontiguousarray(X[:, fixed]),
               np.ascontiguousarray(Y[:, fixed]), cfg.lam, cfg.weighted, out)
    X[:, free] = out

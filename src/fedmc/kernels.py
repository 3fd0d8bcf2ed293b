"""Numba kernels shared by the matrix-factorization algorithms.

Conventions: ratings are a CSR over users (``indptr``, ``indices`` = item, ``values``), user
factors ``U`` are ``(m, r)`` and item factors are stored item-major as ``(n, r)`` arrays — the
transpose of the paper's ``r x n`` matrices ``V`` and ``W_i`` — so that the factor of item ``j``
is the contiguous row ``W[j]``. All kernels are compiled with ``cache=True``.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, fastmath=True, error_model="numpy")
def dot(a: np.ndarray, b: np.ndarray) -> float:
    """Inner product of two 1-D arrays of equal length."""
    s = 0.0
    for k in range(a.shape[0]):
        s += a[k] * b[k]
    return s


@numba.njit(cache=True, fastmath=True, error_model="numpy")
def mirror_upper(A: np.ndarray) -> None:
    """Copy the upper triangle of the square array ``A`` onto its lower triangle."""
    for a in range(A.shape[0]):
        for c in range(a):
            A[a, c] = A[c, a]


@numba.njit(cache=True, fastmath=True, error_model="numpy")
def normal_equations(
    ptr: np.ndarray,
    idx: np.ndarray,
    values: np.ndarray,
    g: int,
    X: np.ndarray,
    A: np.ndarray,
    b: np.ndarray,
) -> None:
    """``A = sum_q x_q x_q^T`` and ``b = sum_q values[q] x_q``, ``x_q = X[idx[q]]``, q in group g.

    With the user CSR (``ptr, idx = indptr, indices``, group = user row ``t``, ``X = W``) this
    is row ``t``'s share of ``f_i = 1/2 ||P_Omega(M - U W)||^2``, quadratic in ``u_t`` with
    gradient ``A u_t - b`` (row ``t`` of ``P_Omega(U W - M) W^T`` in (14)). With a client's
    item-major layout (group = item ``j``, ``idx`` = user rows, ``X = U``) it is column ``j``:
    gradient ``A w_j - b`` of (15). Either way ``||A||_F`` is the block's Lipschitz constant.
    Building ``(A, b)`` once costs ``r^2`` per rating; each of the ``N`` steps then costs
    ``r^2`` instead of a pass over the ratings.
    """
    A[:] = 0.0
    b[:] = 0.0
    r = X.shape[1]
    for q in range(ptr[g], ptr[g + 1]):
        x = X[idx[q]]
        m = values[q]
        for a in range(r):
            b[a] += m * x[a]
            for c in range(a, r):  # upper triangle; mirrored below
                A[a, c] += x[a] * x[c]
    mirror_upper(A)


@numba.njit(cache=True, fastmath=True, error_model="numpy")
def gram_fro(X: np.ndarray) -> float:
    """``|| X^T X ||_F`` of a ``(k, r)`` array, without forming anything larger than ``r x r``."""
    r = X.shape[1]
    G = np.zeros((r, r))
    for k in range(X.shape[0]):
        for a in range(r):
            xa = X[k, a]
            for b in range(a, r):  # upper triangle
                G[a, b] += xa * X[k, b]
    total = 0.0
    for a in range(r):
        total += G[a, a] * G[a, a]
        for b in range(a + 1, r):
            total += 2.0 * G[a, b] * G[a, b]
    return np.sqrt(total)


@numba.njit(cache=True, fastmath=True, error_model="numpy")
def fro_norm(A: np.ndarray) -> float:
    """Frobenius norm of a square ``r x r`` array."""
    total = 0.0
    for a in range(A.shape[0]):
        for c in range(A.shape[1]):
            total += A[a, c] * A[a, c]
    return np.sqrt(total)


@numba.njit(cache=True, fastmath=True, error_model="numpy")
def quad_gradient(A: np.ndarray, b: np.ndarray, x: np.ndarray, g: np.ndarray) -> None:
    """``g = A x - b``."""
    r = x.shape[0]
    for a in range(r):
        s = -b[a]
        for c in range(r):
            s += A[a, c] * x[c]
        g[a] = s


@numba.njit(cache=True, parallel=True, fastmath=True, error_model="numpy")
def residual_sums(
    indptr: np.ndarray,
    indices: np.ndarray,
    values: np.ndarray,
    U: np.ndarray,
    V: np.ndarray,
    mean: float,
    scale: float,
    lo: float,
    hi: float,
) -> tuple[float, float, float]:
    """Sums over all ratings of the prediction ``U[t] . V[j]``.

    Returns ``(sum z-residual^2, sum residual^2, sum |residual|)``: the first on the normalized
    scale, the other two on the original scale after mapping the prediction back
    (``z * scale + mean``) and clipping it to ``[lo, hi]``. Per-row partial sums make the result
    independent of thread scheduling.
    """
    m = indptr.shape[0] - 1
    part = np.zeros((m, 3))
    for t in numba.prange(m):
        u = U[t]
        s0 = 0.0
        s1 = 0.0
        s2 = 0.0
        for q in range(indptr[t], indptr[t + 1]):
            z = dot(u, V[indices[q]])
            rz = z - values[q]
            s0 += rz * rz
            pred = min(max(z * scale + mean, lo), hi)
            e = pred - (values[q] * scale + mean)
            s1 += e * e
            s2 += abs(e)
        part[t, 0] = s0
        part[t, 1] = s1
        part[t, 2] = s2
    tot = part.sum(axis=0)
    return tot[0], tot[1], tot[2]


@numba.njit(cache=True, parallel=True, fastmath=True, error_model="numpy")
def predict_pairs(users: np.ndarray, items: np.ndarray, U: np.ndarray, V: np.ndarray) -> np.ndarray:
    """``U[users[k]] . V[items[k]]`` for every pair ``k``."""
    out = np.empty(users.shape[0])
    for k in numba.prange(users.shape[0]):
        out[k] = dot(U[users[k]], V[items[k]])
    return out

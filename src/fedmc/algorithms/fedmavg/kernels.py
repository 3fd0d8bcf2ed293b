"""Numba kernels of FedMAvg: the local gradient steps on ``U_i`` and on the copy ``W_i`` for a
batch of clients (section 5.2 of ``fedmc-admm.md`` and the poster's Algorithm 1).

Storage is item-major: ``V`` and ``W`` are ``(n, r)``, the transposes of the paper's matrices.
"""

from __future__ import annotations

import numba
import numpy as np

from fedmc.core.kernels import normal_equations, quad_gradient, scratch_matrix, scratch_vector
from fedmc.core.parallel import parallel_for
from fedmc.core.prox import prox_scalar


@numba.njit(nogil=True, cache=True)
def gram_lambda_max(X: np.ndarray) -> float:
    """``lambda_max(X^T X)`` of a ``(k, r)`` array (an ``r x r`` eigenvalue problem)."""
    return np.linalg.eigvalsh(X.T @ X)[-1]


@numba.njit(nogil=True, cache=True)
def u_gradient_steps(indptr, indices, values, row0, row1, U, V, n_steps, c, lam, proj, ones_col,
                      token):
    """``n_steps`` steps ``U_i <- P(U_i - [P_Omega_i(U_i V - M_i) V^T + lam U_i] / c)``.

    The gradient of row ``t`` is ``(A_t + lam I) u_t - b_t``
    (:func:`fedmc.core.kernels.normal_equations`), so rows are stepped one at a time. ``P`` is
    the projection ``proj`` (packed :class:`fedmc.core.prox.Regularizer` of an indicator kind, or
    ``none``) followed by setting column ``ones_col`` to 1 (when ``>= 0``).
    """
    r = len(token)
    A = scratch_matrix(token)
    b = scratch_vector(token)
    g = scratch_vector(token)
    for t in range(row0, row1):
        normal_equations(indptr, indices, values, t, V, A, b, token)
        u = U[t]
        for _ in range(n_steps):
            quad_gradient(A, b, u, g, token)
            for a in range(r):
                u[a] = prox_scalar(u[a] - (g[a] + lam * u[a]) / c, 0.0, proj)
            if ones_col >= 0:
                u[ones_col] = 1.0


@numba.njit(nogil=True, cache=True)
def w_gradient_steps(g0, g1, g_item, g_ptr, g_row, g_vals, row0, row1, U, V, n_steps, f_scale,
                      gamma, gamma2, shift, W, token):
    """``W = V``, then ``n_steps`` steps ``W <- W - [f_scale U_i^T P_Omega_i(U_i W - M_i)
    + gamma W] / d`` with ``d = gamma2 (lambda_max(U_i^T U_i) + shift)``.

    The client's ratings come grouped by item (groups ``g0:g1`` of
    :class:`~fedmc.core.shard.ItemMajor`); column ``j``'s data gradient is
    ``B_j w_j - c_j`` (:func:`fedmc.core.kernels.normal_equations`). A column the client did not
    rate only shrinks, ``w <- (1 - gamma/d)^n_steps w``, applied in closed form. If ``d = 0``
    (``U_i = 0`` and ``shift = 0``) the step is undefined and ``W`` stays ``V``.
    """
    n = V.shape[0]
    r = len(token)
    W[:] = V
    d = gamma2 * (gram_lambda_max(U[row0:row1]) + shift)
    if d <= 0.0:
        return
    rho = (1.0 - gamma / d) ** n_steps
    B = scratch_matrix(token)
    cv = scratch_vector(token)
    g = scratch_vector(token)
    next_j = 0
    for k in range(g0, g1):
        j = g_item[k]
        W[next_j:j] *= rho
        next_j = j + 1
        normal_equations(g_ptr, g_row, g_vals, k, U, B, cv, token)
        w = W[j]
        for _ in range(n_steps):
            quad_gradient(B, cv, w, g, token)
            for e in range(r):
                w[e] -= (f_scale * g[e] + gamma * w[e]) / d
    W[next_j:n] *= rho


def u_updates(clients, client_ptr, indptr, indices, values, U, V, n_steps, c, lam, proj,
               ones_col, token):
    """:func:`u_gradient_steps` for every client of ``clients``, in parallel over clients."""
    parallel_for(_u_updates_range, clients.shape[0], clients, client_ptr, indptr, indices, values,
                 U, V, n_steps, c, lam, proj, ones_col, token)


@numba.njit(cache=True, nogil=True)
def _u_updates_range(start, stop, clients, client_ptr, indptr, indices, values, U, V, n_steps, c,
                     lam, proj, ones_col, token):
    """:func:`u_updates` over ``start:stop`` of its parallel loop."""
    for s in range(start, stop):
        i = clients[s]
        u_gradient_steps(indptr, indices, values, client_ptr[i], client_ptr[i + 1], U, V,
                          n_steps, c, lam, proj, ones_col, token)


def w_updates(clients, client_ptr, cols, U, V, n_steps, f_scale, gamma, gamma2, shift, W_out,
               token):
    """:func:`w_gradient_steps` for every client of ``clients`` into ``W_out[s]``, in
    parallel over clients; ``cols`` is the item-major layout ``(client_ptr, item, ptr, row,
    values)`` of the training ratings."""
    parallel_for(_w_updates_range, clients.shape[0], clients, client_ptr, cols, U, V, n_steps,
                 f_scale, gamma, gamma2, shift, W_out, token)


@numba.njit(cache=True, nogil=True)
def _w_updates_range(start, stop, clients, client_ptr, cols, U, V, n_steps, f_scale, gamma, gamma2,
                     shift, W_out, token):
    """:func:`w_updates` over ``start:stop`` of its parallel loop."""
    g_client, g_item, g_ptr, g_row, g_vals = cols
    for s in range(start, stop):
        i = clients[s]
        w_gradient_steps(g_client[i], g_client[i + 1], g_item, g_ptr, g_row, g_vals,
                          client_ptr[i], client_ptr[i + 1], U, V, n_steps, f_scale, gamma,
                          gamma2, shift, W_out[s], token)

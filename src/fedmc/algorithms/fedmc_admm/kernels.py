"""Numba kernels of FedMC-ADMM (Algorithm 1 of ``fedmc-admm.md``): the client's steps (13)-(15)
over a batch of clients, the initial duals and the server's prox (16).

Storage is item-major: ``W[c]`` and ``Y[c]`` are ``(n, r)``, the transposes of the paper's
``W_i, Y_i``; ``c`` is a client's position in the batch the kernels are handed.
"""

from __future__ import annotations

import numba
import numpy as np

from fedmc.core.kernels import (
    cholesky_solve_upper,
    dot,
    fro_norm,
    gram_fro,
    normal_equations,
    quad_gradient,
    scratch_matrix,
    scratch_vector,
)
from fedmc.core.parallel import parallel_for
from fedmc.core.prox import prox_scalar


@numba.njit(inline="always", nogil=True, fastmath=True, error_model="numpy")
def u_steps(indptr, indices, values, row0, row1, U, Wc, n_inner, reg, ones_col, per_row, token):
    """(14) for every user row of one client: ``N`` prox-gradient steps with ``W_i`` fixed.

    ``f_i`` is a sum over rows, each quadratic in its ``u_t`` with gradient ``A_t u_t - b_t``
    (:func:`fedmc.core.kernels.normal_equations`), so the ``N`` steps are taken row by row.
    """
    r = len(token)
    A = scratch_matrix(token)
    b = scratch_vector(token)
    g = scratch_vector(token)
    u = scratch_vector(token)
    L_client = 0.0 if per_row else gram_fro(Wc, token)  # ||W_i W_i^T||_F
    for t in range(row0, row1):
        normal_equations(indptr, indices, values, t, Wc, A, b, token)
        L = fro_norm(A, token) if per_row else L_client
        if L == 0.0:  # no curvature and a zero gradient: the step is the prox of R_i alone
            L = 1e-300
        for a in range(r):
            u[a] = U[t, a]
        for _ in range(n_inner):
            quad_gradient(A, b, u, g, token)
            for a in range(r):
                u[a] = prox_scalar(u[a] - g[a] / L, 1.0 / L, reg)
            if ones_col >= 0:
                u[ones_col] = 1.0
        for a in range(r):
            U[t, a] = u[a]


@numba.njit(nogil=True, cache=True, fastmath=True, error_model="numpy")
def fold_in_steps(indptr, indices, values, U, V, n_inner, reg, ones_col, per_row, token):
    """(14) on every row of ``U`` against ``W_i = V``: new users' fold-in
    (:mod:`~fedmc.algorithms.fedmc_admm.fold_in`). The kernel Python calls; :func:`u_steps` is
    compiled into each kernel that calls it."""
    u_steps(indptr, indices, values, 0, U.shape[0], U, V, n_inner, reg, ones_col, per_row, token)


@numba.njit(inline="always", nogil=True, fastmath=True, error_model="numpy")
def w_steps(g0, g1, g_item, g_ptr, g_row, g_vals, row0, row1, U, Wc, Yc, V, n_inner, beta, p,
             per_row, token):
    """(15): ``N`` linearized steps on ``W_i`` with ``U_i^{k+1}`` fixed.

    The client's ratings come grouped by item (groups ``g0:g1`` of an
    :class:`~fedmc.core.shard.ItemMajor` layout). Column ``j``'s gradient is
    ``B_j w_j - c_j`` (:func:`fedmc.core.kernels.normal_equations`), and for fixed ``B_j``
    each step of (15) is the affine map ``w <- M w + k`` with
    ``M = (a I - B_j / p) / (a + beta)``, ``k = (beta v_j + c_j / p - y_j) / (a + beta)``.
    Columns the client did not rate have a zero gradient: their ``N`` steps are
    ``w <- c w + (1 - c)(v - y / beta)``, ``c = a / (a + beta)``, applied in closed form. The
    cost is that of the client's ratings plus one pass over the ``n`` items.
    """
    n = Wc.shape[0]
    r = len(token)
    a_client = 0.0 if per_row else gram_fro(U[row0:row1], token) / p  # ||U_i^T U_i||_F / p
    c_n = (a_client / (a_client + beta)) ** n_inner  # 0 in per-row mode (no curvature)
    B = scratch_matrix(token)
    cv = scratch_vector(token)
    M = scratch_matrix(token)
    kv = scratch_vector(token)
    w = scratch_vector(token)
    w_new = scratch_vector(token)
    next_j = np.int64(0)  # int64 like j and n: relax_unrated compiles once, not four times
    for g in range(g0, g1):
        j = np.int64(g_item[g])
        relax_unrated(Wc, Yc, V, next_j, j, c_n, beta, token)
        next_j = j + 1
        if g_ptr[g + 1] - g_ptr[g] == 1:  # a third of the columns on ML-1M
            q = g_ptr[g]
            rated_once(U[g_row[q]], g_vals[q], V[j], Yc[j], Wc[j], a_client, beta, p, n_inner,
                        per_row, token)
            continue
        normal_equations(g_ptr, g_row, g_vals, g, U, B, cv, token)
        a = fro_norm(B, token) / p if per_row else a_client
        inv = 1.0 / (a + beta)
        for e in range(r):
            for f in range(r):
                M[e, f] = -B[e, f] / p * inv
            M[e, e] += a * inv
            kv[e] = (beta * V[j, e] + cv[e] / p - Yc[j, e]) * inv
            w[e] = Wc[j, e]
        for _ in range(n_inner):
            for e in range(r):
                acc = kv[e]
                for f in range(r):
                    acc += M[e, f] * w[f]
                w_new[e] = acc
            for e in range(r):
                w[e] = w_new[e]
        for e in range(r):
            Wc[j, e] = w[e]
    relax_unrated(Wc, Yc, V, next_j, n, c_n, beta, token)


@numba.njit(nogil=True, fastmath=True, error_model="numpy")
def rated_once(x, m, v, y, w, a_client, beta, p, n_inner, per_row, token):
    """``N`` steps of (15) in closed form on a column rated by one user row ``x`` (rating
    ``m``).

    Then ``B = x x^T`` and ``c = m x``, so ``M = rho I - sigma x x^T`` with
    ``rho = a / (a + beta)``, ``sigma = 1 / (p (a + beta))``: ``M`` scales by ``rho`` across
    ``x`` and by ``lam = rho - sigma |x|^2`` along it. Hence
    ``w_N = rho^N w + S(rho) k + [(lam^N - rho^N) x.w + (S(lam) - S(rho)) x.k] x / |x|^2``
    with ``S(z) = sum_{t<N} z^t`` — the ``N`` affine steps of :func:`w_steps` without the
    ``r x r`` matrix.
    """
    r = len(token)
    xx = dot(x, x, token)
    a = xx / p if per_row else a_client  # ||x x^T||_F = |x|^2
    inv = 1.0 / (a + beta)
    rho = a * inv
    lam = rho - xx / p * inv
    rho_n = 1.0
    lam_n = 1.0
    s_rho = 0.0
    s_lam = 0.0
    for _ in range(n_inner):
        s_rho += rho_n
        s_lam += lam_n
        rho_n *= rho
        lam_n *= lam
    xw = 0.0
    xk = 0.0
    for e in range(r):
        k = (beta * v[e] + m * x[e] / p - y[e]) * inv
        xw += x[e] * w[e]
        xk += x[e] * k
        w[e] = rho_n * w[e] + s_rho * k
    if xx > 0.0:
        coef = ((lam_n - rho_n) * xw + (s_lam - s_rho) * xk) / xx
        for e in range(r):
            w[e] += coef * x[e]


@numba.njit(nogil=True, fastmath=True, error_model="numpy")
def relax_unrated(Wc, Yc, V, j0, j1, c_n, beta, token):
    """``N`` steps of (15) in closed form on the unrated columns ``j0:j1``."""
    for j in range(j0, j1):
        for e in range(len(token)):
            Wc[j, e] = c_n * Wc[j, e] + (1.0 - c_n) * (V[j, e] - Yc[j, e] / beta)


def user_steps(clients, client_ptr, ratings, U, W, n_inner, reg, ones_col, per_row, token):
    """Step 4(a) of Algorithm 1, (14), for the clients at positions ``clients``, in parallel
    (:func:`fedmc.core.parallel.parallel_for`); ``ratings`` are their ratings
    (:class:`~fedmc.core.shard.CSR`).

    A round is this, then :func:`item_steps`: two kernels that share no compiled code, so that a
    first run compiles them in two processes at once (:mod:`fedmc.run.precompile`).
    """
    parallel_for(_user_steps_range, clients.shape[0], clients, client_ptr, ratings, U, W,
                 n_inner, reg, ones_col, per_row, token)


@numba.njit(cache=True, nogil=True, fastmath=True, error_model="numpy")
def _user_steps_range(lo, hi, clients, client_ptr, ratings, U, W, n_inner, reg, ones_col,
                      per_row, token):
    """:func:`user_steps` for the clients at positions ``clients[lo:hi]``."""
    indptr, indices, values = ratings
    for s in range(lo, hi):
        c = clients[s]
        u_steps(indptr, indices, values, client_ptr[c], client_ptr[c + 1], U, W[c], n_inner,
                reg, ones_col, per_row, token)


def item_steps(clients, client_ptr, cols, U, W, Y, V, n_inner, beta, p, per_row, token, delta):
    """Steps 4(b)-(c) of Algorithm 1, (15) and (13), for the clients at positions ``clients``
    once :func:`user_steps` has updated their ``U_i``, in parallel.

    ``cols`` is the clients' item-major layout ``(client_ptr, item, ptr, row, values)``
    (:class:`~fedmc.core.shard.ItemMajor`). ``delta[s]`` receives the change of
    ``beta W_i + Y_i`` of client ``clients[s]``, its upload:
    ``beta (W^+ - W) + (Y^+ - Y) = beta (2 W^+ - W - V)`` by (13).
    """
    parallel_for(_item_steps_range, clients.shape[0], clients, client_ptr, cols, U, W, Y, V,
                 n_inner, beta, p, per_row, token, delta)


@numba.njit(cache=True, nogil=True, fastmath=True, error_model="numpy")
def _item_steps_range(lo, hi, clients, client_ptr, cols, U, W, Y, V, n_inner, beta, p, per_row,
                      token, delta):
    """:func:`item_steps` for the clients at positions ``clients[lo:hi]``."""
    g_client, g_item, g_ptr, g_row, g_vals = cols
    n, r = V.shape
    Vf = V.reshape(n * r)
    for s in range(lo, hi):
        c = clients[s]
        Wc = W[c].reshape(n * r)
        Yc = Y[c].reshape(n * r)
        D = delta[s].reshape(n * r)
        for q in range(n * r):
            D[q] = -beta * Wc[q]
        w_steps(g_client[c], g_client[c + 1], g_item, g_ptr, g_row, g_vals, client_ptr[c],
                client_ptr[c + 1], U, W[c], Y[c], V, n_inner, beta, p, per_row, token)
        for q in range(n * r):  # (13) and the upload, over the flat n x r arrays
            step = beta * (Wc[q] - Vf[q])
            Yc[q] += step
            D[q] += beta * Wc[q] + step


@numba.njit(nogil=True, cache=True, fastmath=True, error_model="numpy")
def initial_duals(clients, client_ptr, ratings, U, W, Y, scale, token):
    """``Y_i^0 = Y_i - scale * grad_V f_i(U_i^0, W_i^0)`` for the clients at positions
    ``clients`` (input of Algorithm 1, with ``Y_i = 0`` on entry; ``ratings``: a
    :class:`~fedmc.data.federated.CSR`).

    ``grad_V f_i`` is accumulated from the residuals, ``sum_t (u_t . w_j - m_tj) u_t``: one
    pass at ``O(r)`` per rating.
    """
    indptr, indices, values = ratings
    r = len(token)
    for c in clients:  # once per run; a serial loop compiles much faster than a prange
        Wc = W[c]
        Yc = Y[c]
        for t in range(client_ptr[c], client_ptr[c + 1]):
            u = U[t]
            for q in range(indptr[t], indptr[t + 1]):
                j = indices[q]
                res = dot(u, Wc[j], token) - values[q]
                for e in range(r):
                    Yc[j, e] -= scale * res * u[e]


@numba.njit(nogil=True, cache=True, fastmath=True, error_model="numpy")
def server_prox(total, scale, step, params, ones_col):
    """(16): ``V = prox_{step R}(total * scale)``, with column ``ones_col`` fixed to 1."""
    n, r = total.shape
    V = np.empty((n, r))
    for j in range(n):
        for k in range(r):
            V[j, k] = 1.0 if k == ones_col else prox_scalar(total[j, k] * scale, step, params)
    return V


# ------------------------------------------------- consensus on rated items (cross-device)


@numba.njit(nogil=True, fastmath=True, error_model="numpy")
def _group(one_user, g, t0, g_ptr):
    """Ratings ``q0:q1`` of group ``g`` (one client's ratings of one item) and the row of its
    first rating: with one user per client a group is one rating of that user."""
    if one_user:
        return g, g + 1, t0
    return g_ptr[g], g_ptr[g + 1], -1


@numba.njit(nogil=True, cache=True)
def group_rows(clients, client_ptr, indptr, indices, groups, one_user):
    """Where the groups of ``clients`` go in their upload: ``ptr[k]:ptr[k+1]`` for the ``k``-th
    client, and the item of every group (the rows of a
    :class:`~fedmc.core.uploads.RowPatch`)."""
    g_client, g_item = groups[0], groups[1]
    ptr = np.zeros(clients.shape[0] + 1, dtype=np.int64)
    for k in range(clients.shape[0]):
        c = clients[k]
        if one_user:
            ptr[k + 1] = ptr[k] + indptr[client_ptr[c + 1]] - indptr[client_ptr[c]]
        else:
            ptr[k + 1] = ptr[k] + g_client[c + 1] - g_client[c]
    items = np.empty(ptr[-1], dtype=np.int64)
    for k in range(clients.shape[0]):
        c = clients[k]
        g0 = indptr[client_ptr[c]] if one_user else g_client[c]
        for i in range(ptr[k + 1] - ptr[k]):
            items[ptr[k] + i] = indices[g0 + i] if one_user else g_item[g0 + i]
    return ptr, items


def rated_visits(clients, client_ptr, indptr, indices, values, groups, one_user, U, U_prev, e,
                 e_prev, V, V_seen, seen, n_inner, beta, reg, ones_col, per_row, token, out0,
                 delta):
    """One visit of every client at positions ``clients`` (consensus on rated items).

    Per client: (14) ``N`` prox-gradient steps on its user rows against ``V^k``; the exact
    W-step (11) on every rated item, ``(sum_t u_t u_t^T + beta I) w = sum_t m_t u_t + beta v_j
    - y_j``; the dual (13), ``y_j^+ = y_j + beta (w - v_j) = sum_t e_t^+ u_t`` with
    ``e_t^+ = m_t - u_t . w``; and the upload row of each rated item, the change of
    ``beta W_ij + Y_ij``: ``beta (v_j - v_j') + 2 y^+ - 3 y + y'`` (``v'``: the ``V`` of the
    client's last visit, ``V_seen[seen[c]]``; ``y'``: its dual before that visit).

    Duals are kept as one scalar per rating: ``y_j = sum_t e_t u_t`` with the rows ``U`` of
    the last visit, ``y_j' = sum_t e'_t u'_t`` with ``U_prev``. Groups (one client's ratings
    of one item) are the ratings themselves with ``one_user``, else ``groups = (client_ptr,
    item, ptr, row, values)`` of :class:`~fedmc.core.shard.ItemMajor`, in whose order
    ``e`` is stored; ``delta`` rows follow the groups of ``clients`` in order, from
    ``out0`` (:func:`group_rows`).
    """
    parallel_for(_rated_visits_range, clients.shape[0], clients, client_ptr, indptr, indices,
                 values, groups, one_user, U, U_prev, e, e_prev, V, V_seen, seen, n_inner, beta,
                 reg, ones_col, per_row, token, out0, delta)


@numba.njit(cache=True, nogil=True, fastmath=True, error_model="numpy")
def _rated_visits_range(start, stop, clients, client_ptr, indptr, indices, values, groups, one_user,
                        U, U_prev, e, e_prev, V, V_seen, seen, n_inner, beta, reg, ones_col,
                        per_row, token, out0, delta):
    """:func:`rated_visits` over ``start:stop`` of its parallel loop."""
    g_client, g_item, g_ptr, g_row, g_vals = groups
    r = len(token)
    for k in range(start, stop):
        c = clients[k]
        t0, t1 = client_ptr[c], client_ptr[c + 1]
        m = t1 - t0
        U_old = np.empty((m, r))
        P_old = np.empty((m, r))
        for t in range(t0, t1):
            for a in range(r):
                U_old[t - t0, a] = U[t, a]
                P_old[t - t0, a] = U_prev[t, a]
                U_prev[t, a] = U[t, a]
        u_steps(indptr, indices, values, t0, t1, U, V, n_inner, reg, ones_col, per_row, token)
        g0 = indptr[t0] if one_user else g_client[c]
        g1 = indptr[t1] if one_user else g_client[c + 1]
        v_old = V_seen[seen[c]]
        A = scratch_matrix(token)
        b = scratch_vector(token)
        y = scratch_vector(token)
        y2 = scratch_vector(token)
        for g in range(g0, g1):
            q0, q1, t_one = _group(one_user, g, t0, g_ptr)
            j = indices[g] if one_user else g_item[g]
            for a in range(r):
                y[a] = 0.0
                y2[a] = 0.0
                b[a] = beta * V[j, a]
                for f in range(r):
                    A[a, f] = 0.0
            for q in range(q0, q1):
                t = t_one if one_user else g_row[q]
                m_q = values[q] if one_user else g_vals[q]
                for a in range(r):
                    y[a] += e[q] * U_old[t - t0, a]
                    y2[a] += e_prev[q] * P_old[t - t0, a]
                    b[a] += m_q * U[t, a]
                    for f in range(r):
                        A[a, f] += U[t, a] * U[t, f]
            for a in range(r):
                b[a] -= y[a]
                A[a, a] += beta
            cholesky_solve_upper(A, b)  # b <- w
            row = out0[k] + g - g0
            for a in range(r):
                y2[a] = y2[a] - 3.0 * y[a] + beta * (V[j, a] - v_old[j, a])
                y[a] = 0.0  # y^+ from here on
            for q in range(q0, q1):
                t = t_one if one_user else g_row[q]
                m_q = values[q] if one_user else g_vals[q]
                resid = m_q - dot(U[t], b, token)
                e_prev[q] = e[q]
                e[q] = resid
                for a in range(r):
                    y[a] += resid * U[t, a]
            for a in range(r):
                delta[row, a] = y2[a] + 2.0 * y[a]


@numba.njit(nogil=True, cache=True, fastmath=True, error_model="numpy")
def rated_initial_duals(clients, client_ptr, indptr, indices, values, groups, one_user, U, V,
                        scale, e, e_prev):
    """``Y_ij^0 = -scale * grad_{w_j} f_i(U_i^0, V^0)``, the input line of Algorithm 1 on the
    rated items, as one scalar per rating: ``e_t = scale (m_t - u_t . v_j)``; ``e' = e`` (with
    ``U_prev = U``), so that ``W^0 = V^0``."""
    g_client, g_item, g_ptr, g_row, g_vals = groups
    for c in clients:
        t0, t1 = client_ptr[c], client_ptr[c + 1]
        g0 = indptr[t0] if one_user else g_client[c]
        g1 = indptr[t1] if one_user else g_client[c + 1]
        for g in range(g0, g1):
            q0, q1, t_one = _group(one_user, g, t0, g_ptr)
            j = indices[g] if one_user else g_item[g]
            for q in range(q0, q1):
                t = t_one if one_user else g_row[q]
                m_q = values[q] if one_user else g_vals[q]
                e[q] = scale * (m_q - np.dot(U[t], V[j]))
                e_prev[q] = e[q]


@numba.njit(nogil=True, cache=True, fastmath=True, error_model="numpy")
def rated_contributions(clients, client_ptr, indptr, groups, one_user, U, V, e, beta, items,
                        out):
    """Row per group of ``clients`` (items ``items``, :func:`group_rows`):
    ``beta V_j^0 + Y_ij^0``, their set-up upload."""
    g_client, g_ptr, g_row = groups[0], groups[2], groups[3]
    r = V.shape[1]
    row = 0
    for c in clients:
        t0, t1 = client_ptr[c], client_ptr[c + 1]
        g0 = indptr[t0] if one_user else g_client[c]
        g1 = indptr[t1] if one_user else g_client[c + 1]
        for g in range(g0, g1):
            q0, q1, t_one = _group(one_user, g, t0, g_ptr)
            j = items[row]
            for a in range(r):
                out[row, a] = beta * V[j, a]
            for q in range(q0, q1):
                t = t_one if one_user else g_row[q]
                for a in range(r):
                    out[row, a] += e[q] * U[t, a]
            row += 1


@numba.njit(nogil=True, cache=True, fastmath=True, error_model="numpy")
def item_prox(total, counts, beta, params, ones_col):
    """The V-step with consensus on rated items: ``v_j = prox_{R/(beta n_j)}(T_j / (beta
    n_j))`` with ``n_j`` raters (``prox_R(0)`` for an item nobody rated), column ``ones_col``
    fixed to 1."""
    n, r = total.shape
    V = np.empty((n, r))
    for j in range(n):
        bn = beta * counts[j]
        for a in range(r):
            if a == ones_col:
                V[j, a] = 1.0
            elif bn > 0.0:
                V[j, a] = prox_scalar(total[j, a] / bn, 1.0 / bn, params)
            else:
                V[j, a] = prox_scalar(0.0, 1.0, params)
    return V

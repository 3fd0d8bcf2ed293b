"""Numba kernels of RFRec and RFRecF (``rfrec.md``): the local steps of a batch of clients on
their sparse local models (user rows, per-(client, rated item) slots) and the slot sums of the
objective and of the uploads.

Storage is item-major: ``V̄``, ``Z`` and the slots are ``(., d)`` arrays, the transposes of the
paper's ``d x m`` matrices; ``clients`` are positions in the batch.
"""

from __future__ import annotations

import numba
import numpy as np

from fedmc.core.kernels import dot
from fedmc.core.parallel import ordered_sum, parallel_for


@numba.njit(nogil=True, cache=True, inline="always")
def _descend(X, M, S, k, a, g, alpha, adam, hyper):
    """``X[k, a] -= alpha g`` (gradient descent) or one Adam step on it (moments ``M``, ``S``).

    ``hyper = (beta1, beta2, eps, 1 - beta1^t, 1 - beta2^t)``.
    """
    if adam:
        M[k, a] = hyper[0] * M[k, a] + (1.0 - hyper[0]) * g
        S[k, a] = hyper[1] * S[k, a] + (1.0 - hyper[1]) * g * g
        X[k, a] -= alpha * (M[k, a] / hyper[3]) / (np.sqrt(S[k, a] / hyper[4]) + hyper[2])
    else:
        X[k, a] -= alpha * g


def gradient_step(
    clients, client_ptr, indptr, rating_slot, values, slot_ptr, slot_item, U, V_loc, V_bar,
    alpha, lam_u, lam, adam, hyper_u, hyper_v, M_u, S_u, M_v, S_v, token,
):
    """``x_i <- x_i - alpha (grad f_i(x_i) + lam (V_(i) - V̄))`` on the rated columns of the
    clients at positions ``clients``, in parallel over them.

    Both gradients are taken at the old point (Eq. 6): with ``e_tj = r_tj - u_t^T v_(i)j``,
    ``grad_{u_t} f_i = -2 sum_j e_tj v_(i)j + 2 lambda_u u_t`` (Eq. 3) and
    ``grad_{v_(i)j} f_i = -2 sum_t e_tj u_t``. ``lam = 0`` gives RFRecF's main update. With
    ``adam`` the gradient feeds an Adam step instead (the notebooks' optimizer, an option).
    """
    parallel_for(_gradient_step_range, clients.shape[0], clients, client_ptr, indptr, rating_slot,
                 values, slot_ptr, slot_item, U, V_loc, V_bar, alpha, lam_u, lam, adam, hyper_u,
                 hyper_v, M_u, S_u, M_v, S_v, token)


@numba.njit(cache=True, nogil=True)
def _gradient_step_range(start, stop, clients, client_ptr, indptr, rating_slot, values, slot_ptr,
                         slot_item, U, V_loc, V_bar, alpha, lam_u, lam, adam, hyper_u, hyper_v, M_u,
                         S_u, M_v, S_v, token):
    """:func:`gradient_step` over ``start:stop`` of its parallel loop."""
    d = len(token)
    for k in range(start, stop):
        c = clients[k]
        row0 = client_ptr[c]
        s0 = slot_ptr[c]
        g_u = np.zeros((client_ptr[c + 1] - row0, d))
        g_v = np.zeros((slot_ptr[c + 1] - s0, d))
        for t in range(row0, client_ptr[c + 1]):
            u = U[t]
            for q in range(indptr[t], indptr[t + 1]):
                s = rating_slot[q]
                v = V_loc[s]
                e = values[q] - dot(u, v, token)
                for a in range(d):
                    g_u[t - row0, a] -= 2.0 * e * v[a]
                    g_v[s - s0, a] -= 2.0 * e * u[a]
        for t in range(row0, client_ptr[c + 1]):
            for a in range(d):
                g = g_u[t - row0, a] + 2.0 * lam_u * U[t, a]
                _descend(U, M_u, S_u, t, a, g, alpha, adam, hyper_u)
        for s in range(s0, slot_ptr[c + 1]):
            j = slot_item[s]
            for a in range(d):
                g = g_v[s - s0, a] + lam * (V_loc[s, a] - V_bar[j, a])
                _descend(V_loc, M_v, S_v, s, a, g, alpha, adam, hyper_v)


def pull_slots(clients, slot_ptr, slot_item, V_loc, V_bar, step, lam, adam, hyper, M, S):
    """A step of size ``step`` on ``lam (v - V̄_j)`` for every slot of the clients at positions
    ``clients`` (the psi part of a step on rated columns): ``v <- v - step lam (v - V̄_j)``, or
    an Adam step on that gradient."""
    parallel_for(_pull_slots_range, clients.shape[0], clients, slot_ptr, slot_item, V_loc, V_bar,
                 step, lam, adam, hyper, M, S)


@numba.njit(cache=True, nogil=True)
def _pull_slots_range(start, stop, clients, slot_ptr, slot_item, V_loc, V_bar, step, lam, adam,
                      hyper, M, S):
    """:func:`pull_slots` over ``start:stop`` of its parallel loop."""
    d = V_loc.shape[1]
    for k in range(start, stop):
        c = clients[k]
        for s in range(slot_ptr[c], slot_ptr[c + 1]):
            j = slot_item[s]
            for a in range(d):
                g = lam * (V_loc[s, a] - V_bar[j, a])
                _descend(V_loc, M, S, s, a, g, step, adam, hyper)


@numba.njit(nogil=True, cache=True)
def clipped_slot_rows(clients, slot_ptr, slot_item, V_loc, Zc, delta):
    """What each client of ``clients`` adds to the shared columns ``Clip(Z)`` to make its
    upload ``Clip(V_(i), delta)``: ``Clip(v_s) - Clip(Z_j)`` on its slots, as sparse rows
    ``(ptr, item, values)`` (``delta = inf``: no clipping)."""
    d = V_loc.shape[1]
    ptr = np.zeros(clients.shape[0] + 1, dtype=np.int64)
    for k in range(clients.shape[0]):
        c = clients[k]
        ptr[k + 1] = ptr[k] + slot_ptr[c + 1] - slot_ptr[c]
    index = np.empty(ptr[-1], dtype=np.int64)
    rows = np.empty((ptr[-1], d))
    for k in range(clients.shape[0]):
        c = clients[k]
        q = ptr[k]
        for s in range(slot_ptr[c], slot_ptr[c + 1]):
            j = slot_item[s]
            index[q] = j
            for a in range(d):
                rows[q, a] = min(max(V_loc[s, a], -delta), delta) - Zc[j, a]
            q += 1
    return ptr, index, rows


def slot_deviation_sums(slot_item, V_loc, Z, V_bar):
    """``sum_s (||v_s - V̄_j||^2 - ||Z_j - V̄_j||^2)`` over all slots (the slot part of psi):
    each slot's term in parallel, then added in slot order."""
    terms = np.empty(V_loc.shape[0])
    parallel_for(_slot_deviations, V_loc.shape[0], slot_item, V_loc, Z, V_bar, terms)
    return float(ordered_sum(terms))


@numba.njit(cache=True, nogil=True)
def _slot_deviations(s0, s1, slot_item, V_loc, Z, V_bar, terms):
    """The terms of :func:`slot_deviation_sums` of the slots ``s0:s1``, into ``terms``."""
    d = V_loc.shape[1]
    for s in range(s0, s1):
        j = slot_item[s]
        acc = 0.0
        for a in range(d):
            x = V_loc[s, a] - V_bar[j, a]
            z = Z[j, a] - V_bar[j, a]
            acc += x * x - z * z
        terms[s] = acc

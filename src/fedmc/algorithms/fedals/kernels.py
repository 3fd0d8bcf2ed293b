"""Numba kernels of federated ALS: the clients' user steps, the terms of their statistics, the
server's item step, and the implicit loss (``docs/fedals.md`` has the math).

An entry of a user row is a rating (explicit) or an interaction of strength ``r`` (implicit).
In the normal equations of :mod:`fedmc.core.ridge` it weighs ``w`` in the Gram matrix and
``y`` in the right-hand side: explicit ``w = 1``, ``y`` = the rating less the fixed columns'
share (the biases); implicit ``w = c - 1 = alpha r`` and ``y = c p`` with ``p = [r > 0]``
(:func:`implicit_weights`), the all-items part ``G0 = F^T F`` being added once per row.
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np

from fedmc.core.kernels import SUM_BLOCKS, cholesky_solve_upper
from fedmc.core.parallel import ordered_sum, parallel_for
from fedmc.core.ridge import cg_steps, fixed_targets, solve_row


@numba.njit(nogil=True)
def implicit_weights(values, alpha, w, y):
    """``w = alpha r`` and ``y = (1 + alpha r) [r > 0]`` of interactions of strength ``r``
    (Hu et al. 2008, Eq. (1)-(2): preference ``p = [r > 0]``, confidence ``c = 1 + alpha r``)."""
    for q in range(values.shape[0]):
        r = values[q]
        w[q] = alpha * r
        y[q] = (1.0 + alpha * r) if r > 0.0 else 0.0


@numba.njit(nogil=True, cache=True)
def gram(F):
    """``F^T F`` of an ``(n, d)`` array, in one pass over its rows (no BLAS call: waking BLAS
    threads between Numba's parallel kernels costs more than the product)."""
    d = F.shape[1]
    G = np.zeros((d, d))
    for j in range(F.shape[0]):
        f = F[j]
        for a in range(d):
            fa = f[a]
            for c in range(a, d):
                G[a, c] += fa * f[c]
    for a in range(d):
        for c in range(a):
            G[a, c] = G[c, a]
    return G


def user_solves(rows, indptr, indices, values, U, F, free, fixed, Y_fixed, G0, lam, alpha,
                implicit, steps):
    """The user step of every row ``t`` in ``rows``: ``U[t, free]`` solves its ridge problem
    against the regressors ``F`` (``V[:, free]``), in parallel over rows.

    Explicit: ``(sum_q f_q f_q^T + lam I) x = sum_q (m_q - U[t, fixed] . Y_fixed[j_q]) f_q``
    (``Y_fixed = V[:, fixed]``, the item biases); implicit: Hu et al.'s Eq. (4),
    ``(G0 + sum_q (c_q - 1) f_q f_q^T + lam I) x = sum_q c_q p_q f_q`` with ``G0 = F^T F``.
    ``steps = 0``: exactly (Cholesky); else ``steps`` conjugate-gradient steps from the row's
    current ``U[t, free]`` (:func:`fedmc.core.ridge.cg_steps`), the system never formed.
    """
    parallel_for(_user_solves_range, rows.shape[0], rows, indptr, indices, values, U, F, free,
                 fixed, Y_fixed, G0, lam, alpha, implicit, steps)


@numba.njit(cache=True, nogil=True)
def _user_solves_range(start, stop, rows, indptr, indices, values, U, F, free, fixed, Y_fixed, G0,
                       lam, alpha, implicit, steps):
    """:func:`user_solves` over ``start:stop`` of its parallel loop."""
    k = free.shape[0]
    none = np.zeros((0, 0))
    A0 = np.zeros((k, k))  # the conjugate-gradient steps' G0 + lam I
    for a in range(k):
        if implicit:
            for c in range(k):
                A0[a, c] = G0[a, c]
        A0[a, a] += lam
    for i in range(start, stop):
        t = rows[i]
        q0, q1 = indptr[t], indptr[t + 1]
        cols = indices[q0:q1]
        y = np.empty(q1 - q0)
        if implicit:
            w = np.empty(q1 - q0)
            implicit_weights(values[q0:q1], alpha, w, y)
            base = G0
        else:
            w = np.empty(0)
            x_fixed = np.empty(fixed.shape[0])
            for a in range(fixed.shape[0]):
                x_fixed[a] = U[t, fixed[a]]
            fixed_targets(values[q0:q1], cols, x_fixed, Y_fixed, y)
            base = none
        x = np.empty(k)
        if steps == 0:
            solve_row(F, cols, y, w, base, lam, x)
        else:
            b = np.zeros(k)
            for q in range(q1 - q0):
                f = F[cols[q]]
                for a in range(k):
                    b[a] += y[q] * f[a]
            for a in range(k):
                x[a] = U[t, free[a]]
            cg_steps(A0, F, cols, w, b, steps, x)
        for a in range(k):
            U[t, free[a]] = x[a]


@numba.njit(nogil=True, cache=True, inline="always")
def _mix(z):
    """SplitMix64's finalizer of the ``uint64`` ``z``: a bijection whose outputs look
    independent and uniform for neighbouring inputs."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def kept_entries(indptr, indices, keys, k, keep):
    """``keep[q]`` for the entries ``q`` of each row ``t`` that it contributes: all of them
    when it has at most ``k``, else the ``k`` whose items come first in the row's own
    random order (items ranked by a hash of the row's random ``keys[t]`` and the item, so
    the ``k`` are a uniform draw from the row's items, and the same on every party that
    holds the row, whatever the other rows)."""
    parallel_for(_kept_entries_range, indptr.shape[0] - 1, indptr, indices, keys, k, keep)


@numba.njit(cache=True, nogil=True)
def _kept_entries_range(start, stop, indptr, indices, keys, k, keep):
    """:func:`kept_entries` over ``start:stop`` of its parallel loop."""
    for t in range(start, stop):
        q0, q1 = indptr[t], indptr[t + 1]
        if q1 - q0 <= k:
            for q in range(q0, q1):
                keep[q] = True
            continue
        rank = np.empty(q1 - q0, dtype=np.uint64)
        key = np.uint64(keys[t])
        for q in range(q0, q1):
            rank[q - q0] = _mix(key ^ _mix(np.uint64(indices[q]) + np.uint64(1)))
        first = np.argsort(rank)
        for i in range(k):
            keep[q0 + first[i]] = True


@numba.njit(nogil=True, cache=True)
def group_counts(compute, client_ptr, indptr, groups, one_user, copies, gram):
    """Groups and terms of the clients ``compute`` (:func:`item_terms`): ``ptr`` (groups of
    client ``k`` at ``ptr[k]:ptr[k+1]``) and ``term_ptr`` (terms of group ``g``)."""
    g_client, g_ptr = groups.client_ptr, groups.ptr
    s = compute.shape[0]
    ptr = np.zeros(s + 1, dtype=np.int64)
    for k in range(s):
        c = compute[k]
        if one_user:
            groups = indptr[client_ptr[c + 1]] - indptr[client_ptr[c]]
        else:
            groups = g_client[c + 1] - g_client[c]
        ptr[k + 1] = ptr[k] + groups + (1 if gram else 0)
    term_ptr = np.zeros(ptr[s] + 1, dtype=np.int64)
    for k in range(s):
        c = compute[k]
        g = ptr[k]
        if one_user:
            for _ in range(indptr[client_ptr[c]], indptr[client_ptr[c + 1]]):
                term_ptr[g + 1] = term_ptr[g] + copies
                g += 1
        else:
            for h in range(g_client[c], g_client[c + 1]):
                term_ptr[g + 1] = term_ptr[g] + copies * (g_ptr[h + 1] - g_ptr[h])
                g += 1
        if gram:
            term_ptr[g + 1] = term_ptr[g] + copies * (client_ptr[c + 1] - client_ptr[c])
    return ptr, term_ptr


class Terms(NamedTuple):
    """Where :func:`item_terms` writes: the fields of a :class:`fedmc.core.uploads.OuterRows`
    but its rows' vectors, in its order (``row`` is its ``index``: a tuple's own method has
    that name)."""

    ptr: np.ndarray  # int64, groups of client k at ptr[k]:ptr[k+1]
    row: np.ndarray  # int64, the row (item) of every group
    term_ptr: np.ndarray  # int64, terms of group g at term_ptr[g]:term_ptr[g+1]
    vec: np.ndarray  # int64, the vector of every term
    a: np.ndarray  # float64, its weight in the Gram matrix
    b: np.ndarray  # float64, its weight in the right-hand side


@numba.njit(nogil=True, cache=True, inline="always")
def _term(q, vec_id, sign, r, x_fixed, v_fixed, alpha, implicit, vec, a, b):
    """Term ``q``: the vector ``vec_id`` with the statistics of an entry of value ``r`` (times
    ``sign``): ``a = w``, ``b = y`` of the item step's normal equations."""
    vec[q] = vec_id
    if implicit:
        a[q] = sign * alpha * r
        b[q] = sign * (1.0 + alpha * r) if r > 0.0 else 0.0
    else:
        target = r
        for e in range(x_fixed.shape[0]):
            target -= x_fixed[e] * v_fixed[e]
        a[q] = sign
        b[q] = sign * target


def item_terms(compute, client_ptr, row_start, ratings, groups, one_user, X_fixed, V_fixed,
               n_rows, alpha, implicit, with_old, gram_row, terms):
    """The terms of the item-step statistics of the clients ``compute``, in parallel over
    clients, into ``terms`` (:class:`Terms`, sized by :func:`group_counts`).

    Client ``k`` (id ``compute[k]``) has one group per rated item ``j`` (row ``j``), whose terms
    are, for each of its users ``t`` who rated ``j``, the entry's statistics with ``t``'s
    new item-step vector (vector ``row_start[k] + i`` for the client's ``i``-th user) and,
    with ``with_old``, minus those with its vector at the client's last upload (vector
    ``n_rows`` further on): the change of the client's contribution. With ``gram_row >= 0``
    (implicit) one more group adds, to that row, ``x x^T`` of each user's new vector and minus
    its old one: the change of the client's share of the Gramian ``sum_t x_t x_t^T``.
    ``X_fixed`` (``2 n_rows`` rows, new then old) and ``V_fixed`` are the fixed columns of
    ``U`` and ``V`` whose product the explicit targets leave out (the user bias). Ratings come
    from the user CSR ``ratings`` with one user per client (``one_user``), else from the
    item-major ``groups`` (:class:`fedmc.core.shard.ItemMajor`).
    """
    parallel_for(_item_terms_range, compute.shape[0], compute, client_ptr, row_start, ratings,
                 groups, one_user, X_fixed, V_fixed, n_rows, alpha, implicit, with_old, gram_row,
                 terms)


@numba.njit(cache=True, nogil=True)
def _item_terms_range(start, stop, compute, client_ptr, row_start, ratings, groups, one_user,
                      X_fixed, V_fixed, n_rows, alpha, implicit, with_old, gram_row, terms):
    """:func:`item_terms` over ``start:stop`` of its parallel loop."""
    indptr, indices, values = ratings
    g_client, g_item, g_ptr, g_row, g_vals = groups
    ptr, index, term_ptr, vec, a, b = terms
    for k in range(start, stop):
        c = compute[k]
        r0 = client_ptr[c]
        g = ptr[k]
        if one_user:
            for q in range(indptr[r0], indptr[r0 + 1]):
                j = indices[q]
                index[g] = j
                t0 = term_ptr[g]
                i = row_start[k]
                _term(t0, i, 1.0, values[q], X_fixed[i], V_fixed[j], alpha, implicit, vec, a,
                      b)
                if with_old:
                    _term(t0 + 1, n_rows + i, -1.0, values[q], X_fixed[n_rows + i], V_fixed[j],
                          alpha, implicit, vec, a, b)
                g += 1
        else:
            for h in range(g_client[c], g_client[c + 1]):
                j = g_item[h]
                index[g] = j
                t = term_ptr[g]
                for p in range(g_ptr[h], g_ptr[h + 1]):
                    i = row_start[k] + g_row[p] - r0
                    _term(t, i, 1.0, g_vals[p], X_fixed[i], V_fixed[j], alpha, implicit, vec,
                          a, b)
                    t += 1
                    if with_old:
                        _term(t, n_rows + i, -1.0, g_vals[p], X_fixed[n_rows + i], V_fixed[j],
                              alpha, implicit, vec, a, b)
                        t += 1
                g += 1
        if gram_row >= 0:
            index[g] = gram_row
            t = term_ptr[g]
            for i in range(row_start[k], row_start[k + 1]):
                vec[t] = i
                a[t] = 1.0
                b[t] = 0.0
                t += 1
                if with_old:
                    vec[t] = n_rows + i
                    a[t] = -1.0
                    b[t] = 0.0
                    t += 1


def product_terms(index, term_ptr, vec, a, b, vectors, M, residual):
    """The weights ``b`` of the terms of :func:`item_terms` (each group ``g`` on item
    ``j = index[g]``, each term a user vector ``x = vectors[vec[q]]`` with the entry's ``w =
    a[q]`` and ``y = b[q]``), rewritten in place for the item step's conjugate-gradient
    exchanges (``item_step="exchanges"``): with ``residual``, ``y - w x . M[j]`` (``M = V``:
    the group's share of the residual ``b_j - S_j v_j``), else ``w x . M[j]`` (``M``: the
    directions ``P``, the share of ``S_j p_j``); the row a group sends is then
    ``sum_q b[q] x_q``. In parallel over groups."""
    parallel_for(_product_terms_range, index.shape[0], index, term_ptr, vec, a, b, vectors, M,
                 residual)


@numba.njit(cache=True, nogil=True, fastmath=True)
def _product_terms_range(start, stop, index, term_ptr, vec, a, b, vectors, M, residual):
    """:func:`product_terms` over ``start:stop`` of its parallel loop."""
    d = vectors.shape[1]
    for g in range(start, stop):  # indexed in place: no view made per group
        j = index[g]
        for q in range(term_ptr[g], term_ptr[g + 1]):
            v = vec[q]
            dot = 0.0
            for i in range(d):
                dot += vectors[v, i] * M[j, i]
            b[q] = b[q] - a[q] * dot if residual else a[q] * dot


def one_user_products(compute, client_ptr, ratings, X, X_fixed, V_fixed, M, alpha, implicit,
                      residual, start, b):
    """:func:`item_terms` and :func:`product_terms` at once for one-user clients: client ``k``
    (id ``compute[k]``; its user's item-step vector ``X[k]``, fixed columns ``X_fixed[k]``)
    writes, for its ``i``-th rating (item ``j``, value ``r``), ``b[start[k] + i]`` =
    ``y - w X[k] . M[j]`` (``residual``) or ``w X[k] . M[j]``, with the entry's ``w`` and
    ``y`` of :func:`_term`. In parallel over clients."""
    parallel_for(_one_user_products_range, compute.shape[0], compute, client_ptr, ratings, X,
                 X_fixed, V_fixed, M, alpha, implicit, residual, start, b)


@numba.njit(cache=True, nogil=True, fastmath=True)
def _one_user_products_range(k0, k1, compute, client_ptr, ratings, X, X_fixed, V_fixed, M, alpha,
                             implicit, residual, start, b):
    """:func:`one_user_products` of the clients at positions ``compute[k0:k1]``."""
    indptr, indices, values = ratings
    d = X.shape[1]
    for k in range(k0, k1):
        t = client_ptr[compute[k]]
        o = start[k]
        for q in range(indptr[t], indptr[t + 1]):
            j = indices[q]
            r = values[q]
            if implicit:
                w = alpha * r
                y = (1.0 + alpha * r) if r > 0.0 else 0.0
            else:
                w = 1.0
                y = r
                for e in range(X_fixed.shape[1]):
                    y -= X_fixed[k, e] * V_fixed[j, e]
            dot = 0.0
            for i in range(d):
                dot += X[k, i] * M[j, i]
            b[o] = y - w * dot if residual else w * dot
            o += 1


@numba.njit(nogil=True, cache=True)
def _floored_solve(A, b, floor):
    """``x`` of ``A x = b`` with the eigenvalues of the symmetric ``A`` (upper triangle given)
    raised to at least ``floor``, into ``b``."""
    k = b.shape[0]
    S = np.empty((k, k))
    for i in range(k):
        for j in range(i, k):
            S[i, j] = A[i, j]
            S[j, i] = A[i, j]
    lam, Q = np.linalg.eigh(S)
    z = Q.T @ b
    for i in range(k):
        z[i] /= max(lam[i], floor)
    x = Q @ z
    for i in range(k):
        b[i] = x[i]


@numba.njit(nogil=True, cache=True)
def _add_row(total, added, keep, j):
    """``total[j] = keep total[j] + added[j]`` (nothing when ``added`` has no rows)."""
    if added.shape[0] == 0:
        return
    for e in range(total.shape[1]):
        total[j, e] = keep * total[j, e] + added[j, e]


def item_solves(total, added, keep, n_items, gram_row, lam, s_row, s_col, divisor, steps, X):
    """The item step: ``X[j] = (unpack(S_j) + G + diag(lam))^{-1} b_j`` for every item ``j``,
    in parallel over items, where row ``j`` of ``total`` divided by ``divisor`` (entrywise)
    is ``[svec(S_j) | b_j]`` (the summed statistics, :class:`fedmc.core.uploads.OuterRows`:
    ``divisor`` holds the packing's coefficients, times whatever scale the sums carry), ``G``
    the unpacked Gramian of row ``gram_row`` (none when ``gram_row < 0``) and ``lam`` the
    ridge weight of each column (Hu et al. 2008, Eq. (5)). The sums are updated in place
    first, row by row in the same pass as the solves (one pass over them a round, not two):
    ``total = keep total + added`` (the round's sum onto the running sums, or onto the earlier
    rounds' times ``memory``; ``added`` with no rows: none).
    ``steps = 0``: exactly (Cholesky, below); else ``steps`` conjugate-gradient steps on the
    same system from ``X[j]`` as given (the item's last solution; Takacs et al. 2011,
    :func:`fedmc.core.ridge.cg_steps`), in place.

    ``S_j + G + diag(lam)`` has every eigenvalue ``>= min(lam)`` when the sums are exact;
    noise added to them (user-level DP) may break that, and then Cholesky fails (a NaN): that
    item is solved with the eigenvalues floored at ``min(lam)`` instead (the noisy Gram matrix
    projected onto the semidefinite cone, plus the ridge).
    """
    d = X.shape[1]
    G = np.zeros((d, d))
    if gram_row >= 0:
        _unpack_gram(total, added, keep, gram_row, s_row, s_col, divisor, G)
    if steps > 0:
        _item_cg(total, added, keep, n_items, G, lam, divisor, steps, X)
        return
    parallel_for(_item_solves_range, n_items, total, added, keep, G, lam, s_row, s_col,
                 divisor, X)


@numba.njit(nogil=True, cache=True)
def _unpack_gram(total, added, keep, gram_row, s_row, s_col, divisor, G):
    """Row ``gram_row`` of the sums updated (:func:`_add_row`), then unpacked into ``G``."""
    _add_row(total, added, keep, gram_row)
    for e in range(s_row.shape[0]):
        G[s_row[e], s_col[e]] = total[gram_row, e] / divisor[e]


@numba.njit(cache=True, nogil=True)
def _item_solves_range(j0, j1, total, added, keep, G, lam, s_row, s_col, divisor, X):
    """:func:`item_solves` by Cholesky on the items ``j0:j1`` (``G``: the unpacked Gramian)."""
    d = X.shape[1]
    floor = lam.min()
    for j in range(j0, j1):
        _add_row(total, added, keep, j)
        A = np.empty((d, d))
        x = np.empty(d)
        _item_system(A, x, total[j], G, lam, s_row, s_col, divisor)
        cholesky_solve_upper(A, x)
        if not np.all(np.isfinite(x)):  # rare: formed again rather than copied every time
            _item_system(A, x, total[j], G, lam, s_row, s_col, divisor)
            _floored_solve(A, x, floor)
        X[j] = x


def _item_cg(total, added, keep, n_items, G, lam, divisor, steps, X):
    """:func:`item_solves` by ``steps`` conjugate-gradient steps per item from ``X[j]``
    (:func:`fedmc.core.ridge.cg_steps`), in parallel over :data:`SUM_BLOCKS` blocks of items.
    Each item's row of the sums is updated, then unpacked once, divided out and with
    ``G + diag(lam)`` added, into its block's dense ``d x d`` buffer (both triangles: each of
    the steps' products is then ``d`` whole-row multiply-adds), indexed in place: no view of
    the shared arrays is made per item (a view counts a reference to its parent atomically,
    which threads doing it per item contend for)."""
    parallel_for(_item_cg_range, SUM_BLOCKS, total, added, keep, n_items, G, lam, divisor, steps, X)


@numba.njit(cache=True, nogil=True)
def _item_cg_range(start, stop, total, added, keep, n_items, G, lam, divisor, steps, X):
    """:func:`_item_cg` over ``start:stop`` of its parallel loop."""
    d = X.shape[1]
    n_packed = d * (d + 1) // 2
    base = G.copy()  # G + diag(lam)
    for i in range(d):
        base[i, i] += lam[i]
    scale = 1.0 / divisor
    no_rows = np.zeros((0, d))
    no_cols = np.zeros(0, dtype=np.int64)
    no_weights = np.zeros(0)
    for blk in range(start, stop):
        A = np.empty((d, d))
        b = np.empty(d)
        x = np.empty(d)
        for j in range(blk * n_items // SUM_BLOCKS, (blk + 1) * n_items // SUM_BLOCKS):
            _add_row(total, added, keep, j)
            e = 0  # the packing of svec_pairs: the upper triangle row by row
            for i in range(d):
                for c in range(i, d):
                    v = total[j, e] * scale[e] + base[i, c]
                    A[i, c] = v
                    A[c, i] = v
                    e += 1
            for i in range(d):
                b[i] = total[j, n_packed + i] * scale[n_packed + i]
                x[i] = X[j, i]
            cg_steps(A, no_rows, no_cols, no_weights, b, steps, x)
            for i in range(d):
                X[j, i] = x[i]


@numba.njit(nogil=True, cache=True)
def _item_system(A, x, row, G, lam, s_row, s_col, divisor):
    """The upper triangle of item ``j``'s ``S_j + G + diag(lam)`` into ``A`` and its ``b_j``
    into ``x``, from its row of the sums (:func:`item_solves`)."""
    n_packed = s_row.shape[0]
    for e in range(n_packed):
        A[s_row[e], s_col[e]] = row[e] / divisor[e] + G[s_row[e], s_col[e]]
    for i in range(A.shape[0]):
        A[i, i] += lam[i]
        x[i] = row[n_packed + i] / divisor[n_packed + i]


def implicit_losses(indptr, indices, values, U, V, G, alpha):
    """``sum_t sum_j c_tj (p_tj - u_t . v_j)^2`` over every row ``t`` and *every* item ``j``,
    from the observed entries only: ``u^T G u + sum_q [c_q (p_q - s_q)^2 - s_q^2]`` with
    ``G = V^T V`` and ``s_q = u . v_{j_q}``; the rows are cut into :data:`SUM_BLOCKS` fixed
    blocks, each summed in order, and the blocks' sums added in order (the result does not
    depend on the threads)."""
    part = np.zeros(SUM_BLOCKS)
    parallel_for(_implicit_loss_blocks, SUM_BLOCKS, indptr, indices, values, U, V, G, alpha,
                 part)
    return float(ordered_sum(part))


@numba.njit(cache=True, nogil=True)
def _implicit_loss_blocks(blk0, blk1, indptr, indices, values, U, V, G, alpha, part):
    """:func:`implicit_losses` of the blocks ``blk0:blk1``, block ``blk``'s into ``part``."""
    m = indptr.shape[0] - 1
    d = U.shape[1]
    for blk in range(blk0, blk1):
        s_blk = 0.0
        for t in range(blk * m // SUM_BLOCKS, (blk + 1) * m // SUM_BLOCKS):
            u = U[t]
            total = 0.0
            for a in range(d):
                ga = 0.0
                for c in range(d):
                    ga += G[a, c] * u[c]
                total += u[a] * ga
            for q in range(indptr[t], indptr[t + 1]):
                v = V[indices[q]]
                s = 0.0
                for a in range(d):
                    s += u[a] * v[a]
                r = values[q]
                p = 1.0 if r > 0.0 else 0.0
                total += (1.0 + alpha * r) * (p - s) ** 2 - s * s
            s_blk += total
        part[blk] = s_blk

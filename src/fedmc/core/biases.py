"""Biases-only statistics shared by the item-bias baseline and FedMC-ADMM's item-bias offset.

A user ``t`` with normalized ratings ``z_tj`` on its items ``Omega_t`` has, against item biases
``b``, its own bias (the ridge solution, computed on its device)

    c_t(b) = sum_{j in Omega_t} (z_tj - b_j) / (|Omega_t| + lam_user);                  (1)

a client uploads per rated item the sum of its users' residuals ``z_tj - c_t`` and the server,
holding the sums ``T_j`` and the (weighted) rater counts ``n_j``, sets

    mu = sum_j T_j / sum_j n_j,      b_j = (T_j + lam_item mu) / (n_j + lam_item),         (2)

the minimizer of ``sum (z_tj - c_t - b_j)^2 / 2 + lam_item / 2 sum_j (b_j - mu)^2`` over ``b``
(a noised count below zero counts as zero). Everything here works on whole batches of clients
with array operations.
"""

from __future__ import annotations

import numpy as np


def user_biases(indptr: np.ndarray, indices: np.ndarray, values: np.ndarray, b: np.ndarray,
                lam_user: float) -> np.ndarray:
    """(1) for every row of the CSR ``(indptr, indices, values)``."""
    n = np.diff(indptr)
    rows = np.repeat(np.arange(len(n)), n)
    residual = np.bincount(rows, weights=values - b[indices], minlength=len(n))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n + lam_user > 0, residual / (n + lam_user), 0.0)


def item_biases(total: np.ndarray, counts: np.ndarray, lam_item: float) -> np.ndarray:
    """(2) from the residual sums ``T`` and the rater counts ``n``."""
    n = np.maximum(counts, 0.0)
    mu = float(total.sum() / n.sum()) if n.sum() > 0 else 0.0
    denominator = n + lam_item
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denominator > 0, (total + lam_item * mu) / denominator, mu)


def ranges(starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """The concatenation of ``arange(starts[k], stops[k])`` over ``k``, without a loop."""
    lengths = stops - starts
    offsets = np.repeat(starts - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
    return (np.arange(int(lengths.sum())) + offsets).astype(np.int64)


def batch_ratings(compute: np.ndarray, client_ptr: np.ndarray, indptr: np.ndarray,
                  indices: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, ...]:
    """The training ratings of the clients at positions ``compute`` (users grouped by client,
    ``client_ptr``; ratings a CSR ``(indptr, indices, values)`` over the users): their user
    rows, a CSR over just those rows (``ptr``, items, values) and the batch position of the
    client owning each rating."""
    rows = ranges(client_ptr[compute], client_ptr[compute + 1])
    held = ranges(indptr[rows], indptr[rows + 1])
    counts = np.diff(indptr)[rows]
    ptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    owner = np.repeat(np.repeat(np.arange(len(compute)), np.diff(client_ptr)[compute]), counts)
    return rows, ptr, indices[held], values[held], owner


def client_item_sums(owner: np.ndarray, items: np.ndarray, x: np.ndarray, n_clients: int,
                     n_items: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per (client, item) the sum of ``x`` and the number of entries, for ratings owned by
    batch positions ``owner`` on ``items``: ``ptr`` (client ``k``'s groups are
    ``ptr[k]:ptr[k+1]``, by increasing item), the groups' items, sums and counts."""
    key = owner.astype(np.int64) * np.int64(n_items) + items
    groups, inverse = np.unique(key, return_inverse=True)
    sums = np.bincount(inverse, weights=x, minlength=len(groups))
    counts = np.bincount(inverse, minlength=len(groups)).astype(np.float64)
    ptr = np.searchsorted(groups // n_items, np.arange(n_clients + 1)).astype(np.int64)
    return ptr, (groups % n_items).astype(np.int64), sums, counts


def sqrt_item_weights(ptr: np.ndarray) -> np.ndarray:
    """``a_i = |J_i|^(-1/2)`` of the clients whose rated items ``ptr`` delimits (a client
    with none weighs 1)."""
    return 1.0 / np.sqrt(np.maximum(np.diff(ptr), 1))

"""An upload form for item-item Gram matrices, kept by the sparse user rows they are made of.

Client ``k`` of a batch uploads the ``n x n`` matrix

    G_k = sum_{t in k} x_t x_t^T                                                        (1)

over its users' sparse interaction rows ``x_t`` (the item-item Gram matrix of EASE, Steck
2019, Eq. (1)'s ``X^T X`` restricted to the client's users). :class:`GramRows` keeps the rows
``x_t`` themselves (a CSR over the batch's users, each client's users contiguous), never a
dense ``n x n`` matrix per client: the summed array is formed only where it is summed
(:meth:`GramRows.add_to`, one pass over every user's pairs of items, ``sum_t |x_t|^2``
operations: the cost follows the data of the clients that take part).

As a row form (:mod:`fedmc.core.uploads`) its stored rows are those ``G_k`` has: one per item
``j`` one of the client's users holds, ``G_k[j] = sum_{t: j in x_t} x_tj x_t``. What a client
sends is its Gram's packed upper triangle (per stored row its index and count, then each
entry ``l >= j`` with its column: :meth:`GramRows.upper_triangle`, :meth:`GramRows.numbers`),
not its users' rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numba
import numpy as np

from fedmc.core.parallel import parallel_for, threads


@dataclass(frozen=True)
class GramRows:
    """The Gram matrices (1) of a batch of ``s`` clients (module docstring).

    Client ``k``'s users are the rows ``users[k]:users[k+1]`` of the CSR ``(entry_ptr, items,
    x)`` (items distinct within a row; no ``values``: this form's rows are formed only where
    they are summed); its stored rows are ``index[ptr[k]:ptr[k+1]]``,
    the distinct items of those rows in increasing order (:meth:`of` finds them). ``width``
    is the catalogue's size ``n``.
    """

    ptr: np.ndarray  # int64, s + 1: stored rows of each client
    index: np.ndarray  # int64, one per stored row: its item
    users: np.ndarray  # int64, s + 1: user rows of each client
    entry_ptr: np.ndarray  # int64, users + 1: entries of each user
    items: np.ndarray  # integers: the item of every entry
    x: np.ndarray  # float64: x_tj of every entry
    width: int

    @classmethod
    def of(cls, users: np.ndarray, indptr: np.ndarray, indices: np.ndarray,
           values: np.ndarray, n_items: int) -> GramRows:
        """The Gram matrices of the clients whose users are ``users[k]:users[k+1]`` of the
        CSR ``(indptr, indices, values)`` over ``n_items`` items (stored rows found here)."""
        counts = np.diff(indptr)
        owner = np.repeat(np.repeat(np.arange(len(users) - 1), np.diff(users)), counts)
        key = np.unique(owner.astype(np.int64) * np.int64(n_items) + indices)
        ptr = np.searchsorted(key // n_items, np.arange(len(users))).astype(np.int64)
        return cls(ptr, (key % n_items).astype(np.int64), np.asarray(users, dtype=np.int64),
                   np.asarray(indptr, dtype=np.int64), indices,
                   np.asarray(values, dtype=np.float64), int(n_items))

    @property
    def n_clients(self) -> int:
        """Number of clients ``s`` in the batch."""
        return len(self.ptr) - 1

    @property
    def values(self) -> np.ndarray:
        """The stored rows themselves, ``(rows, n)``: what a server that checks one client's
        upload reads (formed anew on every access, as the sparse product ``L X``, where ``L``
        puts entry ``x_tj`` of user ``t`` on its client's row of item ``j``)."""
        import scipy.sparse as sp  # here: every upload module loads this one, few read rows

        n_users = len(self.entry_ptr) - 1
        user = np.repeat(np.arange(n_users), np.diff(self.entry_ptr))
        owner = np.repeat(np.arange(self.n_clients), np.diff(self.users))[user]
        row_keys = np.repeat(np.arange(self.n_clients), np.diff(self.ptr)) * self.width
        row = np.searchsorted(row_keys + self.index, owner * self.width + self.items)
        L = sp.csr_matrix((self.x, (row, user)), shape=(len(self.index), n_users))
        X = sp.csr_matrix((self.x, self.items, self.entry_ptr), shape=(n_users, self.width))
        return (L @ X).toarray()

    @cached_property
    def _row_stats(self) -> tuple[np.ndarray, np.ndarray]:
        """Every stored row's squared norm and its number of entries ``l >= j`` (one pass,
        kept: a private exchange reads both, the clipping the norms and the count of bytes
        the entries)."""
        norms = np.zeros(len(self.index))
        upper = np.zeros(len(self.index), dtype=np.int64)
        _gram_row_stats(norms, upper, self.ptr, self.index, self.users, self.entry_ptr,
                        self.items, self.x, self.width)
        return norms, upper

    def numbers(self) -> int:
        """Numbers the batch's clients send: the packed upper triangle of each one's Gram
        (:meth:`upper_triangle`), per stored row its index and its count of entries
        ``l >= j``, and each entry with its column."""
        return 2 * len(self.index) + 2 * int(self._row_stats[1].sum())

    def upper_triangle(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """What a client sends (Flower's wire, :mod:`fedmc.flower.wire`): per stored row its
        count of nonzero entries ``l >= j``, and those entries' columns (increasing within a
        row) and values, row by row."""
        values = self.values
        mask = (values != 0) & (np.arange(self.width)[None, :] >= self.index[:, None])
        rows, cols = np.nonzero(mask)
        return mask.sum(axis=1), cols.astype(np.int64), values[rows, cols]

    def squared_norms(self) -> np.ndarray:
        """The squared L2 norm of every stored row ``G_k[j]`` (their sum over a client is
        ``||G_k||_F^2``)."""
        return self._row_stats[0]

    def add_to(self, flat: np.ndarray, weights: np.ndarray) -> None:
        """``flat += sum_k weights[k] G_k`` (``flat``: the summed ``n x n`` array), user by
        user in client order (:func:`_add_grams`)."""
        _add_grams(flat, self.users, self.entry_ptr, self.items, self.x,
                   weights.astype(np.float64), threads())


def _add_grams(total, users, indptr, indices, values, weights, blocks):
    """``total[j, l] += weights[k] x_tj x_tl`` for every pair of entries of every user ``t``
    of every client ``k``: the rows of ``total`` cut into ``blocks`` ranges, in parallel, each
    block reading every user and adding its rows' products, clients and users in order (the
    same result whatever the blocks)."""
    parallel_for(_add_grams_range, blocks, total, users, indptr, indices, values, weights, blocks)


@numba.njit(cache=True, nogil=True)
def _add_grams_range(blk0, blk1, total, users, indptr, indices, values, weights, blocks):
    """:func:`_add_grams` of the blocks ``blk0:blk1``."""
    n_rows = total.shape[0]
    for blk in range(blk0, blk1):
        lo, hi = blk * n_rows // blocks, (blk + 1) * n_rows // blocks
        for k in range(users.shape[0] - 1):
            w = weights[k]
            for t in range(users[k], users[k + 1]):
                for q in range(indptr[t], indptr[t + 1]):
                    j = indices[q]
                    if j < lo or j >= hi:
                        continue
                    wx = w * values[q]
                    for p in range(indptr[t], indptr[t + 1]):
                        total[j, indices[p]] += wx * values[p]


def _gram_row_stats(norms, upper, ptr, index, users, indptr, indices, values, n):
    """``norms[g]``: the squared norm of stored row ``g`` (item ``j``) of client ``k``,
    ``||sum_{t in k} x_tj x_t||^2``; ``upper[g]``: its entries ``l >= j``. In parallel over
    clients, each forming its rows one at a time in a scratch row: the client's entries are
    ordered by item (a stable sort), so the entries of item ``j`` are one run."""
    parallel_for(_gram_row_stats_range, ptr.shape[0] - 1, norms, upper, ptr, index, users,
                 indptr, indices, values, n)


@numba.njit(cache=True, nogil=True)
def _gram_row_stats_range(k0, k1, norms, upper, ptr, index, users, indptr, indices, values,
                          n):
    """:func:`_gram_row_stats` of the clients ``k0:k1``."""
    for k in range(k0, k1):
        e0, e1 = indptr[users[k]], indptr[users[k + 1]]
        if e0 == e1:
            continue
        row_of = np.empty(e1 - e0, dtype=np.int64)
        for t in range(users[k], users[k + 1]):
            for q in range(indptr[t], indptr[t + 1]):
                row_of[q - e0] = t
        order = np.argsort(indices[e0:e1], kind="mergesort")
        scratch = np.zeros(n)
        marked = np.zeros(n, dtype=np.bool_)
        touched = np.empty(n, dtype=np.int64)
        o = 0
        for g in range(ptr[k], ptr[k + 1]):
            j = index[g]
            n_touched = 0
            while o < order.shape[0] and indices[e0 + order[o]] == j:
                q = e0 + order[o]
                t = row_of[q - e0]
                xj = values[q]
                for p in range(indptr[t], indptr[t + 1]):
                    col = indices[p]
                    if not marked[col]:
                        marked[col] = True
                        touched[n_touched] = col
                        n_touched += 1
                    scratch[col] += xj * values[p]
                o += 1
            total = 0.0
            above = 0
            for c in range(n_touched):
                col = touched[c]
                total += scratch[col] * scratch[col]
                if col >= j and scratch[col] != 0.0:
                    above += 1
                scratch[col] = 0.0
                marked[col] = False
            norms[g] = total
            upper[g] = above

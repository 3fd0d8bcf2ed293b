"""The data layouts of small data in NumPy: the same arrays as the Numba kernels build
(:func:`fedmc.data.federated._counting_sort`, :func:`fedmc.core.shard._item_major`), without
compiling them. On the offline default's 200,000 ratings their compiling (about 1.5 s on a
2-core machine) is most of what a first run spends on them; both run in milliseconds either
way. ``tests/test_small_data.py`` checks each against its kernel.
"""

from __future__ import annotations

import numpy as np

SMALL = 300_000
"""The most ratings laid out here (above: the compiled kernels, which also keep memory at the
output's size)."""


def rows_by_counting(users: np.ndarray, items: np.ndarray, values: np.ndarray,
                     mask: np.ndarray, want: bool, row_of_user: np.ndarray, mean: float,
                     scale: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What :func:`fedmc.data.federated._counting_sort` returns: CSR rows
    ``row_of_user[users]`` (stable within a row) of the ratings ``q`` with ``mask[q] ==
    want`` (all when ``mask`` is empty), values normalized."""
    taken = slice(None) if mask.shape[0] == 0 else mask == want
    rows = row_of_user[users[taken]]
    order = np.argsort(rows, kind="stable")
    indptr = np.zeros(len(row_of_user) + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=len(row_of_user)), out=indptr[1:])
    return (indptr, items[taken][order].astype(np.int32),
            (values[taken][order] - mean) / scale)


def by_client_and_item(indptr: np.ndarray, indices: np.ndarray, values: np.ndarray,
                       client_ptr: np.ndarray, n_items: int
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """What :func:`fedmc.core.shard._item_major` returns: every client's ratings grouped by
    item (ascending), each group in the ratings' order."""
    n_clients = len(client_ptr) - 1
    row = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    client = np.repeat(np.arange(n_clients), np.diff(client_ptr))[row]
    key = client * np.int64(n_items) + indices
    order = np.argsort(key, kind="stable")
    key = key[order]
    starts = np.flatnonzero(np.diff(key, prepend=-1) != 0)
    group_ptr = np.zeros(n_clients + 1, dtype=np.int64)
    np.cumsum(np.bincount(key[starts] // n_items, minlength=n_clients), out=group_ptr[1:])
    ptr = np.append(starts, len(key)).astype(np.int64)
    return (group_ptr, (key[starts] % n_items).astype(np.int32), ptr,
            row[order].astype(np.int32), values[order])

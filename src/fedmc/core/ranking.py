"""Top-N lists and ranking metrics of ``U V^T`` models, batched over users in Numba kernels.

:func:`top_n` ranks, for every user row at once, the items the user has not rated in training
by their score ``U[t] . V[j]`` (on the normalized scale, which orders items as the original
scale does; clipping is left out because it would only create ties). :func:`ranking_sums`
scores those lists against the rows' test items and returns *sums* over users plus counts,
the shape of the protocol's client-side evaluation (:mod:`fedmc.core.protocol`): each client
can compute the sums of its own users, the driver adds them, :func:`ranking_metrics` divides.

Definitions, as LensKit's (``lenskit.metrics``), for a user with test items ``T`` (all of them
relevant) and a list ``L`` of the top ``min(K, candidates)`` items, ``rel_i = 1`` when the
item at rank ``i`` (from 1) is in ``T``:

* ``precision@K = |L & T| / |L|``
* ``recall@K = |L & T| / min(|T|, K)``
* ``ndcg@K = DCG / ideal DCG``, ``DCG = sum_i rel_i / max(1, log2 i)`` (both of the first two
  ranks undiscounted, LensKit's default ``LogRankWeight``); the ideal list has
  ``min(|T|, K)`` relevant items
* ``map@K``: the mean over users of ``AP = sum_i rel_i P@i / min(|T|, |L|)``
* ``hit_rate@K``: the share of users with ``|L & T| > 0``

averaged over the users with at least one test item and a non-empty list; and
``coverage@K``: the share of the catalogue that appears in at least one user's list (every
user with a non-empty list counts, test items or not).
"""

from __future__ import annotations

from collections.abc import Mapping

import numba
import numpy as np

from fedmc.core.kernels import heap_sort
from fedmc.core.parallel import parallel_for
from fedmc.errors import ConfigError

_COLUMNS = ("precision", "recall", "ndcg", "map", "hit_rate")


SCORE_BLOCK = 1 << 22
"""Scores formed at a time by :func:`top_n` (32 MB): as many rows as hold that many."""


def top_n(U: np.ndarray, V: np.ndarray, seen_ptr: np.ndarray, seen_idx: np.ndarray,
          n: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``n`` best unseen items of every row of ``U``.

    Row ``t``'s candidates are the items not in row ``t`` of the CSR ``(seen_ptr, seen_idx)``;
    it gets ``items[t]`` (``int64``, best first, ``-1`` where fewer than ``n`` candidates
    exist) and ``scores[t]`` (``U[t] . V[j]``, ``-inf`` in the padding). Ties go to the smaller
    item index. The scores of a block of rows are one matrix product (BLAS; a Python loop over
    blocks of :data:`SCORE_BLOCK` scores, not over rows), then one pass over each row's
    scores keeps the best ``n`` by insertion (:func:`_best_of_block`).
    """
    m, n_items = U.shape[0], V.shape[0]
    items = np.full((m, n), -1, dtype=np.int64)
    scores = np.full((m, n), -np.inf)
    rows = max(1, SCORE_BLOCK // max(n_items, 1))
    Vt = np.asarray(V, dtype=np.float64).T
    for t0 in range(0, m, rows):
        block = np.asarray(U[t0:t0 + rows], dtype=np.float64) @ Vt
        _best_of_block(block, t0, seen_ptr, seen_idx, items, scores)
    return items, scores


def _best_of_block(block, t0, seen_ptr, seen_idx, items, scores):
    """Rows ``t0 + i`` of ``items, scores`` from ``block[i]``, the scores of every item
    (:func:`top_n`): one pass over the items, the seen ones skipped, the best kept by
    insertion."""
    parallel_for(_best_of_block_range, block.shape[0], block, t0, seen_ptr, seen_idx, items, scores)


@numba.njit(cache=True, nogil=True)
def _best_of_block_range(start, stop, block, t0, seen_ptr, seen_idx, items, scores):
    """:func:`_best_of_block` over ``start:stop`` of its parallel loop."""
    n_items = block.shape[1]
    n = items.shape[1]
    for i in range(start, stop):
        t = t0 + i
        seen = seen_idx[seen_ptr[t] : seen_ptr[t + 1]].copy()
        heap_sort(seen)
        s_pos = 0
        count = 0
        best_j = items[t]
        best_s = scores[t]
        for j in range(n_items):
            while s_pos < seen.shape[0] and seen[s_pos] < j:
                s_pos += 1
            if s_pos < seen.shape[0] and seen[s_pos] == j:
                continue
            s = block[i, j]
            if count < n:
                pos = count
                count += 1
            elif s > best_s[n - 1]:
                pos = n - 1
            else:
                continue
            while pos > 0 and best_s[pos - 1] < s:
                best_s[pos] = best_s[pos - 1]
                best_j[pos] = best_j[pos - 1]
                pos -= 1
            best_s[pos] = s
            best_j[pos] = j


@numba.njit(nogil=True, cache=True)
def _rank_weight(rank):
    """LensKit's ``LogRankWeight``: ``1 / max(1, log2 rank)`` for ranks from 1."""
    return 1.0 / max(1.0, np.log2(rank))


def list_metrics(items, test_ptr, test_idx):
    """Per-row ``[precision, recall, ndcg, ap, hit, scored]`` of the lists ``items`` (rows of
    :func:`top_n`, cut-off ``K`` = their width) against the test items of each row.

    ``scored`` is 1 for a row with at least one test item and a non-empty list, else the row
    is all zeros.
    """
    out = np.zeros((items.shape[0], 6))
    parallel_for(_list_metrics_range, items.shape[0], items, test_ptr, test_idx, out)
    return out


@numba.njit(cache=True, nogil=True)
def _list_metrics_range(t0, t1, items, test_ptr, test_idx, out):
    """:func:`list_metrics` of the rows ``t0:t1``, into ``out``."""
    k = items.shape[1]
    for t in range(t0, t1):
        n_test = test_ptr[t + 1] - test_ptr[t]
        n_rec = 0
        while n_rec < k and items[t, n_rec] >= 0:
            n_rec += 1
        if n_test == 0 or n_rec == 0:
            continue
        hits = 0
        dcg = 0.0
        ap = 0.0
        for i in range(n_rec):
            j = items[t, i]
            for q in range(test_ptr[t], test_ptr[t + 1]):
                if test_idx[q] == j:
                    hits += 1
                    dcg += _rank_weight(i + 1)
                    ap += hits / (i + 1)
                    break
        ideal = 0.0
        for i in range(min(n_test, k)):
            ideal += _rank_weight(i + 1)
        out[t, 0] = hits / n_rec
        out[t, 1] = hits / min(n_test, k)
        out[t, 2] = dcg / ideal
        out[t, 3] = ap / min(n_test, n_rec)
        out[t, 4] = 1.0 if hits > 0 else 0.0
        out[t, 5] = 1.0


def ranking_sums(shard, U: np.ndarray, V: np.ndarray, k: int) -> dict[str, float | np.ndarray]:
    """A batch of users' ranking sums at cut-off ``k`` (``U``: the shard's rows, in order).

    Every row's list excludes its training items (``shard.train``) and is scored against its
    test items (``shard.test``). Returns ``rank_<metric>`` (the sum over the scored users of
    precision, recall, ndcg, ap and hit), ``rank_users`` (how many users were scored) and
    ``rank_items`` (``int64`` per item: in how many lists it appears), all of which add up
    over clients.
    """
    if k < 1:
        raise ConfigError(f"the ranking cut-off K must be at least 1, got {k}")
    tr, te = shard.train, shard.test
    U = np.ascontiguousarray(U, dtype=np.float64)
    V = np.ascontiguousarray(V, dtype=np.float64)
    # a list never holds more than every item, and for k >= n_items every metric is the same
    items, _ = top_n(U, V, tr.indptr, tr.indices, min(k, max(len(V), 1)))
    per_row = list_metrics(items, te.indptr, te.indices)
    scored = per_row[:, 5] > 0
    sums: dict[str, float | np.ndarray] = {
        f"rank_{name}": float(per_row[scored, c].sum()) for c, name in enumerate(_COLUMNS)
    }
    sums["rank_users"] = float(np.count_nonzero(scored))
    listed = items[items >= 0]
    sums["rank_items"] = np.bincount(listed, minlength=V.shape[0]).astype(np.int64)
    return sums


def ranking_metrics(sums: Mapping[str, float | np.ndarray], k: int) -> dict[str, float]:
    """History columns ``precision@K``, ``recall@K``, ``ndcg@K``, ``map@K``,
    ``hit_rate@K`` and ``coverage@K`` from the added-up :func:`ranking_sums`."""
    users = float(sums["rank_users"])
    out = {f"{name}@{k}": float(sums[f"rank_{name}"]) / users if users else float("nan")
           for name in _COLUMNS}
    counts = np.asarray(sums["rank_items"])
    out[f"coverage@{k}"] = float(np.count_nonzero(counts)) / max(len(counts), 1)
    return out


def top_k_metrics(data, U: np.ndarray, V: np.ndarray, k: int) -> dict[str, float]:
    """The ranking metrics at ``k`` (:func:`ranking_metrics`) of every row of ``data`` (its
    ``train`` excluded, its ``test`` scored; ``U``: its rows, in order) in one batch."""
    return ranking_metrics(ranking_sums(data, U, V, k), k)

"""Helpers every algorithm's fold-in uses: a new user's factor from the published item model,
computed with the algorithm's own user step, as a client that joins after training would on its
device.

A fold-in is a function ``fold_in(cfg, V, items, values) -> u``:

* ``cfg``: the algorithm's ``Config`` the model was trained with;
* ``V``: the item factors ``(n_items, width)`` (item-major, the bias layout of
  :mod:`fedmc.core.factors`);
* ``items``: the user's rated items as dense indices (``int64``, distinct, already checked);
* ``values``: the user's ratings on the normalized scale (``float64``, finite);
* ``u``: the user's row of ``U`` (``width`` entries, constraint sets applied: the all-ones
  column set with biases).

It solves the same problem the algorithm's clients solve for their own rows in training (same
regularizer, constraint sets and solver), with ``V`` fixed; each algorithm's spec
names its own (:mod:`fedmc.algorithms.spec`), and may name a batched form
``fold_in_rows(cfg, V, R) -> U`` (``R`` a CSR of many users' ratings, one row per user: the same
kernel over all rows, :func:`converge_rows`), which ``fedmc evaluate`` uses to fold in every
test user at once. Helpers: :func:`user_row` (the user's ratings as a one-row CSR, what the
algorithms' row kernels take), :func:`run_to_convergence` and :func:`converge_rows` (repeat an
iterative step until it stops moving).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fedmc.core.shard import CSR

FoldIn = Callable[[Any, np.ndarray, np.ndarray, np.ndarray], np.ndarray]
FoldInRows = Callable[[Any, np.ndarray, CSR], np.ndarray]


def user_row(items: np.ndarray, values: np.ndarray) -> CSR:
    """One user's ratings as a one-row CSR (``int32`` item indices, ``float64`` values)."""
    return CSR(indptr=np.array([0, len(items)], dtype=np.int64),
               indices=np.asarray(items, dtype=np.int32),
               values=np.asarray(values, dtype=np.float64))


def run_to_convergence(steps: Callable[[np.ndarray], None], U: np.ndarray,
                       max_calls: int = 1000, tolerance: float = 1e-12) -> np.ndarray:
    """Call ``steps(U)`` (a batch of in-place steps on the one-row ``U``) until a call changes
    no entry by more than ``tolerance`` relative to the largest entry (at most ``max_calls``
    calls); returns the row."""
    return converge_rows(steps, U, max_calls, tolerance)[0]


def converge_rows(steps: Callable[[np.ndarray], None], U: np.ndarray, max_calls: int = 1000,
                  tolerance: float = 1e-12) -> np.ndarray:
    """Call ``steps(U)`` (in-place steps on every row of ``U``) until a call changes no row's
    entries by more than ``tolerance`` relative to that row's largest entry (at most
    ``max_calls`` calls); returns ``U``."""
    for _ in range(max_calls):
        before = U.copy()
        steps(U)
        change = np.max(np.abs(U - before), axis=1, initial=0.0)
        if np.all(change <= tolerance * np.maximum(1.0, np.max(np.abs(U), axis=1,
                                                                 initial=0.0))):
            break
    return U

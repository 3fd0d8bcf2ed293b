"""Each algorithm's fold-in: a new user's factor from the published item model, computed with
the algorithm's own user step, as a client that joins after training would on its device.

A fold-in is a function ``fold_in(cfg, V, items, values) -> u``:

* ``cfg``: the algorithm's ``Config`` the model was trained with;
* ``V``: the item factors ``(n_items, width)`` (item-major, the bias layout of
  :mod:`fedmc.core.factors`);
* ``items``: the user's rated items as dense indices (``int64``, distinct, already checked);
* ``values``: the user's ratings on the normalized scale (``float64``, finite);
* ``u``: the user's row of ``U`` (``width`` entries, constraint sets applied: the all-ones
  column set with biases).

It solves the same problem the algorithm's clients solve for their own rows in training (same
regularizer, constraint sets and solver), with ``V`` fixed. Registered by algorithm name here,
imported on first use. Two helpers serve the implementations: :func:`user_row` (the user's
ratings as a one-row CSR, what the algorithms' row kernels take) and :func:`run_to_convergence`
(repeat an iterative user step until it stops moving).
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any

import numpy as np

from fedmc.data.federated import CSR
from fedmc.errors import ConfigError

FoldIn = Callable[[Any, np.ndarray, np.ndarray, np.ndarray], np.ndarray]

_REGISTRY: dict[str, str] = {
    "fedmc-admm": "fedmc.algorithms.fedmc_admm.fold_in:fold_in",
    "fedmavg": "fedmc.algorithms.fedmavg.fold_in:fold_in",
    "fedmavg-poster": "fedmc.algorithms.fedmavg.fold_in:fold_in",
    "rfrec": "fedmc.algorithms.rfrec.fold_in:fold_in",
    "rfrecf": "fedmc.algorithms.rfrec.fold_in:fold_in",
    "als": "fedmc.algorithms.als:fold_in",
    "fedals": "fedmc.algorithms.fedals.fold_in:fold_in",
}


def fold_in_algorithms() -> list[str]:
    """The algorithms whose models can fold in a new user."""
    return list(_REGISTRY)


def get_fold_in(algorithm: str) -> FoldIn:
    """The fold-in of ``algorithm``.

    Raises
    ------
    ConfigError
        When ``algorithm`` has none yet.
    """
    try:
        module, name = _REGISTRY[algorithm].split(":")
    except KeyError:
        raise ConfigError(
            f"folding in a new user is not available for {algorithm} models (it is for "
            f"{', '.join(fold_in_algorithms())})"
        ) from None
    return getattr(import_module(module), name)


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
    for _ in range(max_calls):
        before = U[0].copy()
        steps(U)
        if np.max(np.abs(U[0] - before)) <= tolerance * max(1.0, np.max(np.abs(U[0]))):
            break
    return U[0]

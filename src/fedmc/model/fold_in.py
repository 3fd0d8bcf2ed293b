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
imported on first use.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any

import numpy as np

from fedmc.errors import ConfigError

FoldIn = Callable[[Any, np.ndarray, np.ndarray, np.ndarray], np.ndarray]

_REGISTRY: dict[str, str] = {
    "fedmc-admm": "fedmc.algorithms.fedmc_admm.fold_in:fold_in",
    "als": "fedmc.algorithms.als:fold_in",
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

"""Centralized ALS's fold-in: the exact user half-sweep for one new user."""

from __future__ import annotations

import numpy as np

from fedmc.algorithms.als.config import ALSConfig
from fedmc.algorithms.als.kernels import half_sweep
from fedmc.algorithms.fold_in import user_row


def fold_in(cfg: ALSConfig, V: np.ndarray, items: np.ndarray, values: np.ndarray) -> np.ndarray:
    """A new user's row of ``U`` from the item factors ``V``: the user half-sweep on that
    user's ratings alone, i.e. the exact solution of its ridge problem with training's
    ``lam`` and weighting.

    Parameters
    ----------
    cfg
        The settings the model was trained with.
    V
        Item factors ``(n, width)``.
    items, values
        The user's rated items (dense indices, checked by the caller) and ratings on the
        normalized scale.
    """
    layout = cfg.layout
    u = np.zeros((1, layout.width))
    layout.project_u(u)
    half_sweep(u, V, layout.free_mask_u(), user_row(items, values), cfg)
    return u[0]

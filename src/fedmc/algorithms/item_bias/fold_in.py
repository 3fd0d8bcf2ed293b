"""The item-bias baseline's fold-in (:mod:`fedmc.algorithms.fold_in`): a user's own bias (1) of
:mod:`fedmc.algorithms.item_bias.client` against the published item biases, on the device."""

from __future__ import annotations

import numpy as np

from fedmc.algorithms.fold_in import user_row
from fedmc.algorithms.item_bias.client import user_biases
from fedmc.algorithms.item_bias.config import ItemBiasConfig
from fedmc.core.shard import CSR


def fold_in(cfg: ItemBiasConfig, V: np.ndarray, items: np.ndarray,
            values: np.ndarray) -> np.ndarray:
    """A new user's row ``[c | 1]`` from its ratings (normalized scale) and ``V = [1 | b]``."""
    return fold_in_rows(cfg, V, user_row(items, values))[0]


def fold_in_rows(cfg: ItemBiasConfig, V: np.ndarray, R: CSR) -> np.ndarray:
    """:func:`fold_in` for every row of ``R`` at once."""
    c = user_biases(cfg, R, np.asarray(V, dtype=np.float64)[:, 1])
    return np.column_stack([c, np.ones_like(c)])

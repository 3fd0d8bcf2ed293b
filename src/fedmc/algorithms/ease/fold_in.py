"""EASE's fold-in (:mod:`fedmc.algorithms.fold_in`): a user's row of ``U`` is its own history
``x`` (the items it interacted with, at their strengths), so that its scores ``U V^T = x B``
are computed on its device from the published ``V = B^T`` (Steck 2019: the prediction of a
user's scores is ``x_u B``); nothing is solved."""

from __future__ import annotations

import numpy as np

from fedmc.algorithms.ease.config import EaseConfig
from fedmc.algorithms.fold_in import user_row
from fedmc.core.shard import CSR


def dense_rows(R: CSR, n_items: int) -> np.ndarray:
    """The rows of ``R`` as a dense ``(rows, n_items)`` array."""
    out = np.zeros((len(R.indptr) - 1, n_items))
    out[R.rows(), R.indices] = R.values
    return out


def fold_in(cfg: EaseConfig, V: np.ndarray, items: np.ndarray,
            values: np.ndarray) -> np.ndarray:
    """A new user's row: its interactions ``values`` on ``items``, zero elsewhere."""
    return fold_in_rows(cfg, V, user_row(items, values))[0]


def fold_in_rows(cfg: EaseConfig, V: np.ndarray, R: CSR) -> np.ndarray:
    """:func:`fold_in` for every row of ``R`` at once."""
    return dense_rows(R, V.shape[0])

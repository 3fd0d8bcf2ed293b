"""Federated ALS's fold-in (:mod:`fedmc.algorithms.fold_in`): a new user's row from the published
``V`` by the clients' own user step, on the user's device.

Ratings (explicit): the exact ridge solution of the user's row, centralized ALS's fold-in.
Interactions (implicit): Hu et al.'s Eq. (4) for the user's clicked items, every other item a
zero of confidence 1 through ``V^T V``; ``values`` are the interactions' strengths (1 for a
click).
"""

from __future__ import annotations

import numpy as np

from fedmc.algorithms.fedals.client import user_step
from fedmc.algorithms.fedals.config import FedALSConfig
from fedmc.algorithms.fold_in import user_row
from fedmc.core.shard import CSR


def fold_in(cfg: FedALSConfig, V: np.ndarray, items: np.ndarray,
            values: np.ndarray) -> np.ndarray:
    """The row ``u`` of a user with ``values`` on ``items`` (dense indices; ratings on the
    normalized scale, or interaction strengths), solved exactly with ``V`` fixed."""
    return fold_in_rows(cfg, V, user_row(items, values))[0]


def fold_in_rows(cfg: FedALSConfig, V: np.ndarray, R: CSR) -> np.ndarray:
    """:func:`fold_in` for every row of ``R`` at once (one user step over all of them: the
    implicit Gramian ``V^T V`` formed once)."""
    U = np.zeros((len(R.indptr) - 1, cfg.layout.width))
    cfg.layout.project_u(U)
    user_step(cfg, R, np.arange(len(U), dtype=np.int64), U,
              np.ascontiguousarray(V, dtype=np.float64))
    return U

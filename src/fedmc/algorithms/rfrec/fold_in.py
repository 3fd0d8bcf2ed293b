"""RFRec's fold-in (:mod:`fedmc.algorithms.fold_in`): a new user's ``u`` minimizes its part of
``f_i``, ``||P(m - V̄ u)||^2 + lambda_u ||u||^2`` with ``V̄`` fixed: a ridge solve."""

from __future__ import annotations

import numpy as np

from fedmc.algorithms.fold_in import user_row
from fedmc.algorithms.rfrec.config import RFRecConfig
from fedmc.core.ridge import ridge_rows


def fold_in(cfg: RFRecConfig, V: np.ndarray, items: np.ndarray,
            values: np.ndarray) -> np.ndarray:
    """A new user's ``u`` from the published ``V̄`` (module docstring; least squares when
    ``lambda_u = 0``)."""
    V = np.ascontiguousarray(V, dtype=np.float64)
    if cfg.lam_u == 0.0:
        return np.linalg.lstsq(V[items], values, rcond=None)[0]
    R = user_row(items, values)
    u = np.empty((1, cfg.rank))
    ridge_rows(R.indptr, R.indices, R.values, V, np.zeros((1, 0)), np.zeros((len(V), 0)),
               cfg.lam_u, False, u)
    return u[0]

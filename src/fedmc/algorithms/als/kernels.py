"""Centralized ALS's half-sweep: every row's ridge problem (:func:`fedmc.core.ridge.ridge_rows`,
one Numba kernel parallel over rows; :mod:`fedmc.algorithms.als`)."""

from __future__ import annotations

import numpy as np

from fedmc.algorithms.als.config import ALSConfig
from fedmc.core.ridge import ridge_rows
from fedmc.core.shard import CSR


def half_sweep(X: np.ndarray, Y: np.ndarray, free: np.ndarray, R: CSR, cfg: ALSConfig) -> None:
    """Solve for ``X[:, free]`` with ``Y`` fixed on the ratings ``R`` (rows of ``X``), in
    place: every row's ridge problem (:func:`fedmc.core.ridge.ridge_rows`)."""
    fixed = ~free
    F = np.ascontiguousarray(Y[:, free])
    out = np.empty((len(X), F.shape[1]))
    ridge_rows(R.indptr, R.indices, R.values, F, np.ascontiguousarray(X[:, fixed]),
               np.ascontiguousarray(Y[:, fixed]), cfg.lam, cfg.weighted, out)
    X[:, free] = out

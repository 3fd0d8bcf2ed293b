"""A new user's factor, computed on the user's device from the published item model: the
client's U-step (14) of Algorithm 1 (``fedmc-admm.md``) run to convergence for one row.

A client that joins after training holds ``V`` (what the server publishes) and its own
ratings ``m`` on items ``Omega``; with ``W_i = V`` the U-step minimizes

    1/2 ||P_Omega(m - V u)||^2 + R_i(u)        subject to the constraint sets of ``u``

(the all-ones column with biases), the problem every client solves in training, with ``R_i``'s
weight ``fold_lam`` where the model sets one (chosen after training by a private search,
:mod:`fedmc.tune.private`), else the training's ``lam``. The same
kernel takes the steps (:func:`~fedmc.algorithms.fedmc_admm.kernels.fold_in_steps`, with the
configured step bounds and prox of ``R_i``), batch after batch until ``u`` stops moving.
"""

from __future__ import annotations

import numpy as np

from fedmc.algorithms.fedmc_admm.config import FedMCADMMConfig
from fedmc.algorithms.fedmc_admm.kernels import fold_in_steps
from fedmc.algorithms.fold_in import converge_rows, user_row
from fedmc.core.shard import CSR

STEPS_PER_CALL = 1000  # steps between two looks at the change (converge_rows)


def fold_in(cfg: FedMCADMMConfig, V: np.ndarray, items: np.ndarray,
            values: np.ndarray) -> np.ndarray:
    """The row ``u`` of a user who rated ``items`` with ``values``, by (14) to convergence.

    Parameters
    ----------
    cfg
        The settings the model was trained with (``R_i``, step bounds, biases).
    V
        Item factors ``(n, width)``.
    items, values
        The user's rated items (dense indices, checked by the caller) and ratings on the
        normalized scale.

    Returns
    -------
    numpy.ndarray
        ``u`` in the factor layout (the all-ones column set), from zero, after batches of
        ``STEPS_PER_CALL`` steps until a batch leaves it unchanged
        (:func:`fedmc.algorithms.fold_in.converge_rows`).
    """
    return fold_in_rows(cfg, V, user_row(items, values))[0]


def fold_in_rows(cfg: FedMCADMMConfig, V: np.ndarray, R: CSR) -> np.ndarray:
    """:func:`fold_in` for every row of ``R`` at once (one user per row): the same kernel over
    all rows, batch after batch until no row moves (:func:`fedmc.algorithms.fold_in.
    converge_rows`)."""
    layout = cfg.layout
    U = np.zeros((len(R.indptr) - 1, layout.width))
    layout.project_u(U)
    V = np.ascontiguousarray(V, dtype=np.float64)
    reg = cfg.fold_in_regularizer().params
    token = np.zeros(layout.width)  # the generic kernel: one compilation serves every rank

    def steps(U: np.ndarray) -> None:
        fold_in_steps(R.indptr, R.indices, R.values, U, V, STEPS_PER_CALL, reg,
                      layout.ones_col_u, cfg.steps == "per-row", token)

    return converge_rows(steps, U)

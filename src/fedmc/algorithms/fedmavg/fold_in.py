"""FedMAvg's fold-in (:mod:`fedmc.algorithms.fold_in`): its U step, projected gradient steps with
step ``1/c`` on ``1/2 ||P(m - V u)||^2 + lambda/2 ||u||^2`` over the constraint sets, run to
convergence with ``V`` fixed."""

from __future__ import annotations

import numpy as np

from fedmc.algorithms.fedmavg.client import step_c
from fedmc.algorithms.fedmavg.config import ModelAveragingConfig
from fedmc.algorithms.fedmavg.kernels import u_gradient_steps
from fedmc.algorithms.fold_in import run_to_convergence, user_row

STEPS_PER_CALL = 1000


def fold_in(cfg: ModelAveragingConfig, V: np.ndarray, items: np.ndarray,
            values: np.ndarray) -> np.ndarray:
    """A new user's row of ``U`` from the published ``V`` (module docstring)."""
    layout = cfg.layout
    U = np.zeros((1, layout.width))
    layout.project_u(U)
    R, V = user_row(items, values), np.ascontiguousarray(V, dtype=np.float64)
    c = step_c(cfg, V)
    if c == 0.0:  # V = 0 and lambda = 0: every u is optimal
        return U[0]
    proj, token = cfg.projection().params, np.zeros(layout.width)

    def steps(U: np.ndarray) -> None:
        u_gradient_steps(R.indptr, R.indices, R.values, 0, 1, U, V, STEPS_PER_CALL, c, cfg.lam,
                         proj, layout.ones_col_u, token)

    return run_to_convergence(steps, U)

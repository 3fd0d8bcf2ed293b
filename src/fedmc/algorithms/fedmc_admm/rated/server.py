"""The server side of FedMC-ADMM with consensus on rated items: ``V``, the totals ``T_j`` and
the raters ``n_j``, and the V-step on them (:mod:`fedmc.algorithms.fedmc_admm.rated`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from fedmc.algorithms.fedmc_admm.config import FedMCADMMConfig
from fedmc.algorithms.fedmc_admm.kernels import item_prox
from fedmc.algorithms.fedmc_admm.rated.client import COUNT, UPLOAD
from fedmc.core.factors import factor_metrics
from fedmc.core.protocol import FederationInfo, Message
from fedmc.core.uploads import Summed
from fedmc.errors import ConfigError


@dataclass
class RatedServerState:
    """``V^k``, ``T_j = sum_i (beta W_ij + Y_ij)`` and the raters ``n_j`` of every item."""

    V: np.ndarray
    total: np.ndarray
    counts: np.ndarray


def init_server(cfg: FedMCADMMConfig, info: FederationInfo,
                draws: Mapping[str, np.ndarray]) -> RatedServerState:
    """``V^0``; the totals and counts arrive in the set-up exchange."""
    if cfg.consensus != "rated":
        raise ConfigError(f"consensus={cfg.consensus} runs fedmc_admm.PAPER, not this algorithm")
    V = np.array(draws["V"])
    return RatedServerState(V, np.zeros_like(V), np.zeros(info.n_items))


def setup(cfg: FedMCADMMConfig, server: RatedServerState, info: FederationInfo) -> Message:
    """Send ``V^0`` to every client; each uploads a count per rated item (and, with the
    paper's duals, its contributions)."""
    everyone = np.arange(info.n_clients, dtype=np.int64)
    return Message(0, "setup", everyone, everyone, {"V": server.V})


def server_step(cfg: FedMCADMMConfig, server: RatedServerState, summed: Summed,
                msg: Message) -> RatedServerState:
    """Add the cohort's summed contributions (and, at set-up, the counts, with zero duals
    also ``beta n_j V_j^0``); after a round the V-step ``v_j = prox_{R/(beta n_j)}(T_j / (beta
    n_j))``."""
    server.total += summed[UPLOAD]
    server.counts += summed[COUNT][:, 0]
    if msg.phase == "setup" and cfg.dual_init == "zeros":
        server.total += cfg.beta * summed[COUNT] * server.V
    if msg.phase == "round":
        server.V = item_prox(server.total, server.counts, cfg.beta,
                             cfg.regularizers()[1].params, cfg.layout.ones_col_v)
    return server


def upload_shapes(cfg: FedMCADMMConfig, info: FederationInfo) -> dict[str, tuple[int, ...]]:
    """The contributions' changes ``(n, r)`` and the rater counts ``(n, 1)``, both as sparse
    rows on the client's rated items."""
    return {UPLOAD: (info.n_items, cfg.layout.width), COUNT: (info.n_items, 1)}


def metrics(cfg: FedMCADMMConfig, server: RatedServerState, sums: Mapping[str, float],
            info: FederationInfo) -> dict[str, float]:
    """Errors and sparsity of ``(U, V)``; the objective is ``sum_i [f_i + R_i] + R(V)``."""
    reg_v = cfg.regularizers()[1]
    out = factor_metrics(sums, server.V, info, reg_v, cfg.layout)
    out["objective"] = (0.5 * sums["sse_z"] + sums["reg_u"]
                        + reg_v.value(server.V[:, cfg.layout.free_mask_v()]))
    return out

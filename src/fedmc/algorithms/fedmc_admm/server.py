"""The server side of FedMC-ADMM: ``V`` and ``sum_i (beta W_i + Y_i)``; step (16) of
Algorithm 1 (``fedmc-admm.md``).

The server never holds one client's variables: it starts from ``sum_i beta W_i^0 = p beta V^0``
and adds the summed changes of ``beta W_i + Y_i`` that each round's cohort uploads
(:mod:`fedmc.algorithms.fedmc_admm.client`). Its cost per round is ``O(n r)`` whatever the
number of clients.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from fedmc.algorithms.fedmc_admm.client import UPLOAD
from fedmc.algorithms.fedmc_admm.config import FedMCADMMConfig
from fedmc.algorithms.fedmc_admm.kernels import server_prox
from fedmc.core.factors import factor_metrics
from fedmc.core.protocol import FederationInfo, Message
from fedmc.core.uploads import Summed
from fedmc.errors import ConfigError


@dataclass
class ServerState:
    """``V^k`` ``(n, r)`` item-major, the running ``sum_i (beta W_i + Y_i)`` and ``p``."""

    V: np.ndarray
    total: np.ndarray
    n_clients: int


def init_server(cfg: FedMCADMMConfig, info: FederationInfo,
                draws: Mapping[str, np.ndarray]) -> ServerState:
    """``V^0`` from the server's draws; every ``W_i^0 = V^0``, so the total starts at
    ``p beta V^0`` (the duals ``Y_i^0`` arrive in the set-up exchange)."""
    if cfg.consensus != "all":
        raise ConfigError(f"consensus={cfg.consensus} runs fedmc_admm.RATED, not this algorithm")
    V = np.array(draws["V"])
    return ServerState(V, info.n_clients * cfg.beta * V, info.n_clients)


def setup(cfg: FedMCADMMConfig, server: ServerState, info: FederationInfo) -> Message:
    """Send ``V^0`` to every client; with the paper's duals each uploads ``Y_i^0``."""
    everyone = np.arange(info.n_clients, dtype=np.int64)
    uploaders = everyone if cfg.dual_init == "paper" else everyone[:0]
    return Message(0, "setup", everyone, uploaders, {"V": server.V})


def message(cfg: FedMCADMMConfig, server: ServerState, k: int, sampled: np.ndarray,
            rng: np.random.Generator) -> Message:
    """Step 3: ``V^k`` to the sampled clients ``S_k``, who all compute and upload."""
    return Message(k, "round", sampled, sampled, {"V": server.V})


def server_step(cfg: FedMCADMMConfig, server: ServerState, summed: Summed,
                msg: Message) -> ServerState:
    """Add the cohort's summed changes; after a round solve (16):
    ``V = prox_{R/(p beta)}(sum_i (beta W_i + Y_i) / (p beta))`` ((68) for l2, (73) for l1)."""
    server.total += summed[UPLOAD]
    if msg.phase == "round":
        pb = server.n_clients * cfg.beta
        server.V = server_prox(server.total, 1.0 / pb, 1.0 / pb, cfg.regularizers()[1].params,
                               cfg.layout.ones_col_v)
    return server


def upload_shapes(cfg: FedMCADMMConfig, info: FederationInfo) -> dict[str, tuple[int, ...]]:
    """One ``(n, r)`` array: the change of ``beta W_i + Y_i``."""
    return {UPLOAD: (info.n_items, cfg.layout.width)}


def model(cfg: FedMCADMMConfig, server: ServerState) -> dict[str, np.ndarray]:
    """The published item factors ``V``."""
    return {"V": server.V}


def metrics(cfg: FedMCADMMConfig, server: ServerState, sums: Mapping[str, float],
            info: FederationInfo) -> dict[str, float]:
    """Objective (17), errors and sparsity of the current ``(U, V)``."""
    return factor_metrics(sums, server.V, info, cfg.regularizers()[1], cfg.layout)

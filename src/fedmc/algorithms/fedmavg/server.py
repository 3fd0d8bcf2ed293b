"""The server side of FedMAvg: ``V``, the average of the uploaded copies, projected.

``V^{k+1} = P((1/m) sum_{i in S_k} W_i^{k+1})`` over the ``m`` uploads of the round (a client
drawn twice counts twice); ``V`` is unchanged when nothing came.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from fedmc.algorithms.fedmavg.client import UPLOAD
from fedmc.algorithms.fedmavg.config import FedMAvgPosterConfig, ModelAveragingConfig
from fedmc.core.factors import factor_metrics, uniform_draws
from fedmc.core.protocol import FederationInfo, InitialDraws, Message
from fedmc.core.uploads import Summed


@dataclass
class ServerState:
    """``V`` ``(n, r)`` item-major, ``p``, and the last round's ``Q2`` (a history column of the
    poster's variant)."""

    V: np.ndarray
    n_clients: int
    q2: int = 0


def draws(cfg: ModelAveragingConfig, info: FederationInfo, rng: np.random.Generator,
          ) -> InitialDraws:
    """``U^0, V^0`` uniform on ``[0, init_scale]`` (:func:`fedmc.core.factors.uniform_draws`),
    projected onto the constraint sets (the poster's set-up, the server step with ``A^0``)."""
    out = uniform_draws(cfg, info, rng)
    proj = cfg.projection()
    layout = cfg.layout
    U, V = proj.prox(out.rows["U"], 0.0), proj.prox(out.server["V"], 0.0)
    layout.project_u(U)
    layout.project_v(V)
    return InitialDraws(server={"V": V}, rows={"U": U})


def init_server(cfg: ModelAveragingConfig, info: FederationInfo,
                draws: Mapping[str, np.ndarray]) -> ServerState:
    """``V^0``; it reaches the clients with the first round."""
    return ServerState(np.array(draws["V"]), info.n_clients)


def message(cfg: ModelAveragingConfig, server: ServerState, k: int, sampled: np.ndarray,
            rng: np.random.Generator) -> Message:
    """``V^k`` with the round's step counts to every client that computes (all of them, or the
    sampled ones with ``u_update="sampled"``); the sampled clients upload."""
    q1, q2 = cfg.local_steps(k)
    compute = (np.arange(server.n_clients, dtype=np.int64) if cfg.everyone_computes()
               else np.unique(sampled))
    return Message(k, "round", compute, sampled, {"V": server.V}, {"q1": q1, "q2": q2})


def server_step(cfg: ModelAveragingConfig, server: ServerState, summed: Summed,
                msg: Message) -> ServerState:
    """``V = P(sum / count)``; unchanged if nothing came."""
    server.q2 = int(msg.flags["q2"])
    if summed.count:
        V = cfg.projection().prox(summed[UPLOAD] / summed.count, 0.0)
        cfg.layout.project_v(V)
        server.V = V
    return server


def upload_shapes(cfg: ModelAveragingConfig, info: FederationInfo) -> dict[str, tuple[int, ...]]:
    """One ``(n, r)`` array: the client's ``W_i``."""
    return {UPLOAD: (info.n_items, cfg.layout.width)}


def model(cfg: ModelAveragingConfig, server: ServerState) -> dict[str, np.ndarray]:
    """The published item factors ``V``."""
    return {"V": server.V}


def metrics(cfg: ModelAveragingConfig, server: ServerState, sums: Mapping[str, float],
            info: FederationInfo) -> dict[str, float]:
    """Objective (17) with the l2 terms of section 5.2, errors, sparsity; the poster's variant
    adds the last ``Q2^s`` (``q2``)."""
    out = factor_metrics(sums, server.V, info, cfg.regularizers()[1], cfg.layout)
    if isinstance(cfg, FedMAvgPosterConfig):
        out["q2"] = float(server.q2)
    return out

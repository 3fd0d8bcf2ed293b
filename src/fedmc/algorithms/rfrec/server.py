"""The server side of RFRec and RFRecF: only ``V̄``, the average of the uploads it receives,
and (RFRecF) the last coin.

RFRec (Algorithm 1): every iteration sends ``V̄^k`` to every client, every client takes its
local step (Eq. 6), the clients whose upload arrives send ``Clip(V_(i)) (+ noise)`` and the
server averages them: two communication rounds per iteration. RFRecF (Algorithm 2): a coin
``zeta_k ~ Bernoulli(p)`` per iteration; on ``zeta_k = 0`` the clients step locally (the main
update after a 0, the moving to average after a 1, when ``V̄`` was sent down), on
``zeta_k = 1`` after a 0 the clients upload and the server aggregates; communication happens
only when the coin changes side (in expectation ``2 p (1-p)`` rounds per iteration,
Lemma 3.9). The coin is drawn from the server's stream right after the round's sampling.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from fedmc.algorithms.rfrec.client import UPLOAD
from fedmc.algorithms.rfrec.config import RFRecConfig, RFRecFConfig
from fedmc.core.factors import factor_metrics
from fedmc.core.protocol import FederationInfo, InitialDraws, Message, NoiseOnSum
from fedmc.core.prox import Regularizer
from fedmc.core.uploads import Summed

_COMMUNICATION = {"round": 2, "average": 1, "aggregate": 1}  # rounds each phase costs


@dataclass
class ServerState:
    """``V̄`` ``(m, d)``, ``p``, the communication rounds so far (Definition 3.8) and the
    last coin ``zeta_{k-1}`` (RFRecF; ``zeta_{-1} = 0``)."""

    V_bar: np.ndarray
    n_clients: int
    comm_rounds: int = 0
    zeta: bool = False


def draws(cfg: RFRecConfig, info: FederationInfo, rng: np.random.Generator) -> InitialDraws:
    """``u_t, V̄^0 ~ N(0, init_scale^2)``, the users' rows first."""
    cfg.check_rank(info.n_users, info.n_items)
    U = cfg.init_scale * rng.standard_normal((info.n_users, cfg.rank))
    V = cfg.init_scale * rng.standard_normal((info.n_items, cfg.rank))
    return InitialDraws(server={"V": V}, rows={"U": U})


def init_server(cfg: RFRecConfig, info: FederationInfo,
                draws: Mapping[str, np.ndarray]) -> ServerState:
    """``V̄^0`` from the server's draws."""
    return ServerState(np.array(draws["V"]), info.n_clients)


def setup(cfg: RFRecConfig, server: ServerState, info: FederationInfo) -> Message:
    """``V̄^0`` to every client, which sets ``V_(i)^0 = V̄^0``."""
    everyone = np.arange(info.n_clients, dtype=np.int64)
    return Message(0, "setup", everyone, everyone[:0], {"V": server.V_bar})


def message(cfg: RFRecConfig, server: ServerState, k: int, sampled: np.ndarray,
            rng: np.random.Generator) -> Message:
    """RFRec: ``V̄^k`` to everyone, who steps; the sampled clients' uploads reach the server.
    RFRecF: the phase of iteration ``k`` from the coin (module docstring)."""
    everyone = np.arange(server.n_clients, dtype=np.int64)
    if not isinstance(cfg, RFRecFConfig):
        return Message(k, "round", everyone, sampled, {"V": server.V_bar})
    zeta = bool(rng.random() < cfg.p)
    flags = {"zeta": float(zeta)}
    if not zeta and not server.zeta:  # main update (also k = 0)
        return Message(k, "main", everyone, everyone[:0], {}, flags)
    if not zeta:  # 1 -> 0: V̄ is sent down; moving to average
        return Message(k, "average", everyone, everyone[:0], {"V": server.V_bar}, flags)
    if not server.zeta:  # 0 -> 1: the clients upload, the server aggregates
        return Message(k, "aggregate", sampled, sampled, {}, flags)
    return Message(k, "idle", everyone[:0], everyone[:0], {}, flags)  # 1 -> 1: nothing


def server_step(cfg: RFRecConfig, server: ServerState, summed: Summed,
                msg: Message) -> ServerState:
    """``V̄ <- (1/n_t) sum_i Ṽ_(i)`` over the ``n_t`` uploads received (unchanged if none);
    count the communication rounds; remember the coin."""
    if msg.phase in ("round", "aggregate") and summed.count:
        server.V_bar = summed[UPLOAD] / summed.count
    server.comm_rounds += _COMMUNICATION.get(msg.phase, 0)
    server.zeta = bool(msg.flags.get("zeta", 0.0))
    return server


def local_noise(cfg: RFRecConfig, info: FederationInfo) -> dict[str, NoiseOnSum]:
    """Eq. (9)'s Laplace noise, which every uploading client adds to ``Clip(V_(i))``."""
    mechanism = cfg.mechanism()
    return {} if mechanism is None else {UPLOAD: mechanism}


def upload_shapes(cfg: RFRecConfig, info: FederationInfo) -> dict[str, tuple[int, ...]]:
    """One ``(m, d)`` array: the client's ``Clip(V_(i))``."""
    return {UPLOAD: (info.n_items, cfg.rank)}


def model(cfg: RFRecConfig, server: ServerState) -> dict[str, np.ndarray]:
    """The published item factors ``V̄`` (predictions are ``u_t^T V̄``)."""
    return {"V": server.V_bar}


def metrics(cfg: RFRecConfig, server: ServerState, sums: Mapping[str, float],
            info: FederationInfo) -> dict[str, float]:
    """Errors of ``u_t^T V̄``, the objective ``F`` of (5) on the local models,
    ``comm_rounds`` and, with LDP, ``epsilon``."""
    none = Regularizer("none")
    out = factor_metrics(sums, server.V_bar, info, none, cfg.layout)
    out["objective"] = (sums["sse_local"] + cfg.lam_u * sums["u_squares"]
                        + cfg.lam * sums["psi"])
    out["comm_rounds"] = server.comm_rounds
    mechanism = cfg.mechanism()
    if mechanism is not None:
        out["epsilon"] = mechanism.epsilon
    return out

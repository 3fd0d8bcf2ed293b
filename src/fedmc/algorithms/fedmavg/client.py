"""The client side of FedMAvg: private ratings and ``U_i``; the local gradient steps.

Every client that computes takes ``Q1`` (projected) gradient steps on ``U_i`` with ``V^k``
fixed; every uploader then starts a copy ``W_i`` from ``V^k``, takes ``Q2`` gradient steps on it
and uploads it. ``W_i`` restarts from ``V`` every round, so a client keeps only ``U_i``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from fedmc.algorithms.fedmavg.config import ModelAveragingConfig
from fedmc.algorithms.fedmavg.kernels import gram_lambda_max, u_updates, w_updates
from fedmc.core.factors import error_sums
from fedmc.core.kernels import rank_token
from fedmc.core.protocol import FederationInfo, InitialDraws, Message
from fedmc.core.shard import RatingsShard
from fedmc.core.uploads import Stacked, Uploads

UPLOAD = "W"


@dataclass
class ClientState:
    """The user rows ``U`` of a batch of clients, and ``p`` (public)."""

    U: np.ndarray
    n_clients: int


def init_clients(cfg: ModelAveragingConfig, shard: RatingsShard, draws: InitialDraws,
                 info: FederationInfo) -> ClientState:
    """``U_i^0`` from the client's draws (already projected)."""
    return ClientState(np.array(draws.rows["U"]), info.n_clients)


def step_c(cfg: ModelAveragingConfig, V: np.ndarray) -> float:
    """``c^k = (gamma1/2) (lambda_max(V^k (V^k)^T) + lambda)``, a function of ``V^k`` only, so
    each client computes it from the message."""
    return 0.5 * cfg.gamma1 * (gram_lambda_max(V) + cfg.lam)


def client_step(cfg: ModelAveragingConfig, shard: RatingsShard, state: ClientState,
                msg: Message, compute: np.ndarray, upload: np.ndarray,
                ) -> tuple[ClientState, Uploads]:
    """``Q1`` steps on ``U_i`` for ``compute``, then ``Q2`` steps on ``W_i`` (from ``V^k``) for
    ``upload``, whose ``W_i`` are the uploads."""
    tr = shard.train
    V = msg.arrays["V"]
    token = rank_token(V.shape[1])
    q1, q2 = int(msg.flags["q1"]), int(msg.flags["q2"])
    c = step_c(cfg, V)
    if c > 0.0:  # c = 0 only if V = 0 and lambda = 0: a zero gradient, nothing to do
        u_updates(compute, shard.client_ptr, tr.indptr, tr.indices, tr.values, state.U, V, q1, c,
                  cfg.lam, cfg.projection().params, cfg.layout.ones_col_u, token)
    f_scale, shift = cfg.w_objective(state.n_clients)
    W = np.empty((len(upload), *V.shape))
    im = shard.item_major
    w_updates(upload, shard.client_ptr, (im.client_ptr, im.item, im.ptr, im.row, im.values),
              state.U, V, q2, f_scale, cfg.gamma, cfg.gamma2, shift, W, token)
    return state, {UPLOAD: Stacked(V.shape, dense=W)}


def evaluate(cfg: ModelAveragingConfig, shard: RatingsShard, state: ClientState,
             model: Mapping[str, np.ndarray]) -> dict[str, float]:
    """Error, regularizer and sparsity sums of the batch under the published ``V``."""
    return error_sums(shard, state.U, model["V"], cfg.clip_range(shard.value_range),
                      cfg.regularizers()[0], cfg.layout)


def user_factors(cfg: ModelAveragingConfig, shard: RatingsShard,
                 state: ClientState) -> np.ndarray:
    """The batch's ``U`` rows (simulation only: they never leave a client)."""
    return state.U

"""The server side of the item-bias baseline: item biases from the summed residuals.

The server keeps ``T_j = sum_i s_ij`` and ``n_j = sum_i m_ij / kappa`` (sums of uploads,
:mod:`fedmc.algorithms.item_bias.client`; with user-level DP, noised sums) and publishes

    mu  = sum_j T_j / sum_j n_j,       b_j = (T_j + lam_item mu) / (n_j + lam_item),        (2)

the minimizer over ``b`` of ``sum_i a_i sum_{t in i} sum_{j in Omega_t} (z_tj - c_t - b_j)^2 / 2
+ lam_item / 2 sum_j (b_j - mu)^2``: each item's weighted mean residual shrunk towards the
mean residual of all items (a noised count below zero counts as zero). With
``signal="counts"`` the item score is its weighted rater count ``b_j = n_j`` (the popularity
list). The published model is ``V = [1 | b]``; ``b^0 = 0``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from fedmc.algorithms.item_bias.client import COUNT, SUM
from fedmc.algorithms.item_bias.config import ItemBiasConfig
from fedmc.core import biases
from fedmc.core.factors import factor_metrics
from fedmc.core.protocol import FederationInfo, InitialDraws, Message
from fedmc.core.prox import Regularizer
from fedmc.core.uploads import Summed


@dataclass
class ServerState:
    """The running sums ``T`` and ``n`` and the item biases ``b`` (2)."""

    total: np.ndarray
    counts: np.ndarray
    b: np.ndarray


def draws(cfg: ItemBiasConfig, data, rng: np.random.Generator) -> InitialDraws:
    """Nothing random: the biases start at zero."""
    return InitialDraws()


def init_server(cfg: ItemBiasConfig, info: FederationInfo,
                draws: Mapping[str, np.ndarray]) -> ServerState:
    """``b^0 = 0``; the sums arrive in the set-up exchange."""
    zeros = np.zeros(info.n_items)
    return ServerState(zeros.copy(), zeros.copy(), zeros.copy())


def setup(cfg: ItemBiasConfig, server: ServerState, info: FederationInfo) -> Message:
    """Every client uploads its residual sums and counts (against ``b^0 = 0``)."""
    everyone = np.arange(info.n_clients, dtype=np.int64)
    return Message(0, "setup", everyone, everyone, {"b": server.b})


def message(cfg: ItemBiasConfig, server: ServerState, k: int, sampled: np.ndarray,
            rng: np.random.Generator) -> Message:
    """``b^k`` to the sampled clients, who refresh their biases and upload the change."""
    return Message(k, "round", sampled, sampled, {"b": server.b})


def item_biases(cfg: ItemBiasConfig, total: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """(2) from the sums ``T`` and the counts ``n`` (the counts themselves with
    ``signal="counts"``)."""
    if cfg.signal == "counts":
        return counts.copy()
    return biases.item_biases(total, counts, cfg.lam_item)


def server_step(cfg: ItemBiasConfig, server: ServerState, summed: Summed,
                msg: Message) -> ServerState:
    """Add the cohort's sums (counts at set-up only) and publish (2)."""
    if cfg.signal == "ratings":
        server.total += summed[SUM][:, 0]
    if msg.phase == "setup":
        server.counts += summed[COUNT][:, 0] / cfg.count_scale
    server.b = item_biases(cfg, server.total, server.counts)
    return server


def upload_shapes(cfg: ItemBiasConfig, info: FederationInfo) -> dict[str, tuple[int, ...]]:
    """Sparse rows on the rated items: the counts and (with ratings) the residual sums."""
    shapes: dict[str, tuple[int, ...]] = {COUNT: (info.n_items, 1)}
    if cfg.signal == "ratings":
        shapes[SUM] = (info.n_items, 1)
    return shapes


def model(cfg: ItemBiasConfig, server: ServerState) -> dict[str, np.ndarray]:
    """``V = [1 | b]``: the bias layout of rank 0."""
    return {"V": np.column_stack([np.ones_like(server.b), server.b])}


def metrics(cfg: ItemBiasConfig, server: ServerState, sums: Mapping[str, float],
            info: FederationInfo) -> dict[str, float]:
    """Errors of the model (each user's bias folded in) and the ridge objective; none for a
    popularity list (``signal="counts"``: its scores are counts, not ratings, and its lists
    are judged by ranking metrics)."""
    if cfg.signal == "counts":
        return {}
    return factor_metrics(sums, model(cfg, server)["V"], info,
                          Regularizer("l2", cfg.lam_item), cfg.layout)

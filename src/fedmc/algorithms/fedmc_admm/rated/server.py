"""The server side of FedMC-ADMM with consensus on rated items: ``V``, the totals ``T_j``, the
raters ``n_j`` and the item-bias offset ``b0``, and the V-step on them
(:mod:`fedmc.algorithms.fedmc_admm.rated`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from fedmc.algorithms.fedmc_admm.config import FedMCADMMConfig
from fedmc.algorithms.fedmc_admm.kernels import item_prox
from fedmc.algorithms.fedmc_admm.rated.client import COUNT, OFFSET, UPLOAD
from fedmc.core import biases
from fedmc.core.factors import RANK_BOOST, factor_metrics
from fedmc.core.protocol import FederationInfo, Message
from fedmc.core.uploads import Summed
from fedmc.errors import ConfigError


@dataclass
class RatedServerState:
    """``V^k``, ``T_j = sum_i (beta W_ij + Y_ij)``, the raters ``n_j`` of every item and the
    item-bias offset ``b0`` (zero without one)."""

    V: np.ndarray
    total: np.ndarray
    counts: np.ndarray
    b0: np.ndarray


def init_server(cfg: FedMCADMMConfig, info: FederationInfo,
                draws: Mapping[str, np.ndarray]) -> RatedServerState:
    """``V^0``; the totals and counts arrive in the set-up exchange."""
    if cfg.consensus != "rated":
        raise ConfigError(f"consensus={cfg.consensus} runs fedmc_admm.PAPER, not this algorithm")
    V = np.array(draws["V"])
    return RatedServerState(V, np.zeros_like(V), np.zeros(info.n_items), np.zeros(info.n_items))


def setup(cfg: FedMCADMMConfig, server: RatedServerState, info: FederationInfo) -> Message:
    """Send ``V^0`` to every client; each uploads a count per rated item (and, with the
    paper's duals, its contributions; with an item-bias offset, its residual sums)."""
    everyone = np.arange(info.n_clients, dtype=np.int64)
    return Message(0, "setup", everyone, everyone, {"V": server.V})


def message(cfg: FedMCADMMConfig, server: RatedServerState, k: int, sampled: np.ndarray,
            rng: np.random.Generator) -> Message:
    """``V^k`` (with an item-bias offset, also the offset ``b0``) to the sampled clients, who
    all compute and upload."""
    arrays = {"V": server.V}
    if cfg.offset != "none":
        arrays["b0"] = server.b0
    return Message(k, "round", sampled, sampled, arrays)


def server_step(cfg: FedMCADMMConfig, server: RatedServerState, summed: Summed,
                msg: Message) -> RatedServerState:
    """Add the cohort's summed contributions (and, at set-up, the counts, with zero duals
    ``beta n_j V_j^0`` instead of the contributions); after a round the V-step ``v_j =
    prox_{R/(beta n_j)}(T_j / (beta n_j))``.

    The server reads only the sums an exchange of its phase can carry: the counts (and the
    offset's sums) at set-up, the contributions in a round and, with the paper's duals, at
    set-up. The others hold no client's data (every client uploads no rows there), only the
    noise of a DP run, which reading them would add to ``n_j`` and ``T_j`` for nothing.
    """
    counts = summed[COUNT] / cfg.count_scale
    if msg.phase != "setup" or cfg.dual_init == "paper":
        server.total += summed[UPLOAD]
    if msg.phase == "setup":
        server.counts += counts[:, 0]
    if msg.phase == "setup" and cfg.dual_init == "zeros":
        server.total += cfg.beta * counts * server.V
    if msg.phase == "setup" and cfg.offset != "none":
        server.b0 = biases.item_biases(summed[OFFSET][:, 0], counts[:, 0], cfg.offset_lam)
    if msg.phase == "round":
        server.V = item_prox(server.total, server.counts, cfg.beta,
                             cfg.regularizers()[1].params, cfg.layout.ones_col_v)
    return server


def upload_shapes(cfg: FedMCADMMConfig, info: FederationInfo) -> dict[str, tuple[int, ...]]:
    """The contributions' changes ``(n, r)``, the rater counts ``(n, 1)`` and, with an
    item-bias offset, the residual sums ``(n, 1)``, all as sparse rows on the client's rated
    items."""
    shapes: dict[str, tuple[int, ...]] = {UPLOAD: (info.n_items, cfg.layout.width),
                                          COUNT: (info.n_items, 1)}
    if cfg.offset != "none":
        shapes[OFFSET] = (info.n_items, 1)
    return shapes


def model(cfg: FedMCADMMConfig, server: RatedServerState) -> dict[str, np.ndarray]:
    """The published ``V``: the factors, with an item-bias offset ``b0`` added to the item
    biases; with ``rank_popularity`` ``w``, also ``rank_boost``: ``w sqrt(max(n_j, 0))`` of the
    rater counts ``n_j`` (the set-up release, noised under DP, so publishing a function of
    them is post-processing), which top-N lists add to the predicted rating
    (:meth:`fedmc.model.FactorModel.ranking_factors`)."""
    V = server.V
    if cfg.offset != "none":
        V = V.copy()
        V[:, cfg.layout.rank + 1] += server.b0
    if cfg.rank_popularity > 0:
        return {"V": V, RANK_BOOST: cfg.rank_popularity * np.sqrt(np.maximum(server.counts, 0))}
    return {"V": V}


def metrics(cfg: FedMCADMMConfig, server: RatedServerState, sums: Mapping[str, float],
            info: FederationInfo) -> dict[str, float]:
    """Errors and sparsity of ``(U, V)``; the objective is ``sum_i [f_i + R_i] + R(V)``."""
    reg_v = cfg.regularizers()[1]
    out = factor_metrics(sums, server.V, info, reg_v, cfg.layout)
    out["objective"] = (0.5 * sums["sse_z"] + sums["reg_u"]
                        + reg_v.value(server.V[:, cfg.layout.free_mask_v()]))
    return out

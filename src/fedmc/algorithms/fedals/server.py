"""The server side of federated ALS: ``V`` and the running sums of every client's item-step
statistics; the item step.

The server holds, for every item ``j``, ``S_j = sum_t w_tj x_t x_t^T`` and
``b_j = sum_t y_tj x_t`` over all raters ``t`` of the federation, and with implicit feedback
the Gramian ``G = sum_t x_t x_t^T`` over all users, each as of the user factors of the
clients' latest uploads: it starts from the sums of the initial rows (zero without biases;
with biases the set-up exchange brings them) and adds each round's summed changes. After a
round every item solves its ridge problem (Hu et al. 2008, Eq. (5), explicit ALS's item
half-sweep)

    (G + S_j + lam I) v_j = b_j          (G = 0 for ratings)

for ``V[j, free]``: exactly, or with ``solver="cg"`` by a few conjugate-gradient steps from
``V^k``'s row (Takacs, Pilaszy and Tikk 2011). Its cost per round is ``O(n d^3)`` for exact
solves (``O(n d^2)`` for CG's) plus the cohort's terms, whatever the number of clients.

With ``sums="fresh"`` (user-level DP) the sums it solves from are the round's cohort's
statistics alone, or with ``memory`` the mean of every round's so far, each earlier round
weighted ``memory`` times the next (``docs/fedals.md``): the noise of a round is not carried
whole into the next as running sums carry it. With ``item_step="exchanges"`` it keeps no sums
and takes the item step's conjugate-gradient steps one exchange each (:func:`exchange_step`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from fedmc.algorithms.fedals.client import GRAM, PRODUCTS, STATS, upload_shape
from fedmc.algorithms.fedals.config import FedALSConfig
from fedmc.algorithms.fedals.kernels import item_solves
from fedmc.core.factors import factor_metrics, uniform_draws
from fedmc.core.protocol import FederationInfo, InitialDraws, Message
from fedmc.core.prox import Regularizer
from fedmc.core.threads import one_blas_thread
from fedmc.core.uploads import Summed, svec_pairs
from fedmc.errors import ConfigError


@dataclass
class ItemCG:
    """The item step's conjugate-gradient state between exchanges
    (``item_step="exchanges"``): the unpacked Gramian ``G``, and per item (rows) the residual
    ``R`` and the direction ``P`` (zero once the item's steps have stopped)."""

    G: np.ndarray
    R: np.ndarray
    P: np.ndarray


@dataclass
class ServerState:
    """``V`` ``(n, width)`` item-major, the running statistics (rows of
    :func:`~fedmc.algorithms.fedals.client.upload_shape`); with fresh sums,
    ``total`` is the rounds' sums weighted by powers of ``memory`` and ``weight`` the sum of
    those weights. With ``item_step="exchanges"``: no statistics (``total`` empty), the
    number of clients (each exchange is every client's) and the item step's ``cg``."""

    V: np.ndarray
    total: np.ndarray
    weight: float = 0.0
    n_clients: int = 0
    cg: ItemCG | None = None


def draws(cfg: FedALSConfig, info: FederationInfo, rng: np.random.Generator) -> InitialDraws:
    """``V^0`` as the other algorithms and centralized ALS draw it
    (:func:`fedmc.core.factors.uniform_draws`, same seed, same ``V^0``); the clients' initial
    rows are not random (:func:`~fedmc.algorithms.fedals.client.init_clients`). With
    ``max_items``, then a key per user row: the draw of the ratings it contributes."""
    V = uniform_draws(cfg, info, rng).server["V"]
    if cfg.max_items is None:
        return InitialDraws(server={"V": V})
    # after V^0 (unchanged): each user's key of its contributed ratings (client.contributed)
    return InitialDraws(server={"V": V},
                        rows={"key": rng.integers(0, 2**63 - 1, size=info.n_users)})


def init_server(cfg: FedALSConfig, info: FederationInfo,
                draws: Mapping[str, np.ndarray]) -> ServerState:
    """``V^0`` and zero sums (none with ``item_step="exchanges"``)."""
    shape = (0, 0) if cfg.item_step == "exchanges" else upload_shape(cfg, info.n_items)
    return ServerState(np.array(draws["V"]), np.zeros(shape), n_clients=info.n_clients)


def setup(cfg: FedALSConfig, server: ServerState, info: FederationInfo) -> Message | None:
    """With biases and running sums, every client uploads the statistics of its initial rows
    (their all-ones bias carrier makes them nonzero); without biases they are zero, and fresh
    sums keep nothing from before a round: no set-up (nor with ``item_step="exchanges"``,
    which keeps no sums)."""
    if not cfg.layout.biases or cfg.sums == "fresh" or cfg.item_step == "exchanges":
        return None
    everyone = np.arange(info.n_clients, dtype=np.int64)
    return Message(0, "setup", everyone, everyone, {"V": server.V})


def message(cfg: FedALSConfig, server: ServerState, k: int, sampled: np.ndarray,
            rng: np.random.Generator) -> Message:
    """``V^k`` to the sampled clients, who all compute and upload; a client drawn twice takes
    part once (its upload is a change: counted twice it would be added twice).

    With ``item_step="exchanges"`` every client takes part in every exchange: ``V^k`` in the
    first of each ``cg_steps + 1`` (phase ``round``), then the directions ``P`` (phase
    ``cg``), one exchange per conjugate-gradient step.

    Raises
    ------
    fedmc.errors.ConfigError
        ``item_step="exchanges"`` with a sample that leaves a client out.
    """
    clients = np.unique(sampled).astype(np.int64)
    if cfg.item_step != "exchanges":
        return Message(k, "round", clients, clients, {"V": server.V})
    if len(clients) < server.n_clients:
        raise ConfigError("item_step=exchanges needs every client in every round: use "
                          "--active all, without --participation or --dropout")
    if server.cg is None or (k - 1) % (cfg.cg_steps + 1) == 0:
        return Message(k, "round", clients, clients, {"V": server.V})
    return Message(k, "cg", clients, clients, {"P": server.cg.P})


def server_step(cfg: FedALSConfig, server: ServerState, summed: Summed,
                msg: Message) -> ServerState:
    """Add the cohort's summed changes (running sums) or its summed statistics to the
    earlier rounds' times ``memory`` (fresh sums); after a round, the item step on the
    running sums or on the weighted mean of the rounds' sums (module docstring); with
    ``item_step="exchanges"``, :func:`exchange_step`."""
    if cfg.item_step == "exchanges":
        return exchange_step(cfg, server, summed, msg)
    keep = cfg.memory if cfg.sums == "fresh" else 1.0
    if cfg.sums == "fresh":
        server.weight = cfg.memory * server.weight + 1.0
    if msg.phase != "round":  # set-up: the sums only
        server.total *= keep
        server.total += summed[STATS]
    else:  # the sums updated in the item step's own pass over them
        free = cfg.free_v
        n = server.V.shape[0]
        X = np.ascontiguousarray(server.V[:, free])  # a copy: the solves' warm start
        rows, cols, coef = svec_pairs(len(free))
        item_solves(server.total, summed[STATS], keep, n, n if cfg.implicit else -1,
                    cfg.item_ridge, rows, cols, divisor(cfg, server, coef), cfg.solve_steps, X)
        V = server.V.copy()
        V[:, free] = X
        server.V = V
    return server


def exchange_step(cfg: FedALSConfig, server: ServerState, summed: Summed,
                  msg: Message) -> ServerState:
    """The item step of ``item_step="exchanges"``: ``cg_steps`` conjugate-gradient steps on
    every item's ``(G + S_j + lam I) v_j = b_j`` from ``V^k``'s row (Takacs et al. 2011, as
    :func:`fedmc.core.ridge.cg_steps` takes them, row by row), one per exchange, the system
    never formed: after a ``round`` exchange the summed residuals give
    ``R = (b - S V) - V G - V diag(lam)`` and ``P = R``; after each ``cg`` exchange the summed
    ``S_j p_j`` give ``A P`` and one step. An item whose residual is zero or whose direction
    has no positive curvature stops (its ``P`` zero), as the row-by-row steps do.

    Its products with ``G`` run on one BLAS thread: BLAS's threads wait spinning after a
    call and would take the cores from the clients' parallel kernels that come next."""
    with one_blas_thread():
        return _exchange_step(cfg, server, summed, msg)


def _exchange_step(cfg: FedALSConfig, server: ServerState, summed: Summed,
                   msg: Message) -> ServerState:
    """:func:`exchange_step`'s arithmetic."""
    free = cfg.free_v
    ridge = cfg.item_ridge
    X = server.V[:, free]
    if msg.phase == "round":
        d = len(free)
        G = np.zeros((d, d))
        if cfg.implicit:
            rows, cols, coef = svec_pairs(d)
            G[rows, cols] = summed[GRAM][0, : len(rows)] / coef
            G[cols, rows] = G[rows, cols]
        R = summed[PRODUCTS] - X @ G - X * ridge
        server.cg = ItemCG(G, R, R.copy())
        return server
    cg = server.cg
    assert cg is not None  # message: the first exchange of a run is a round
    AP = summed[PRODUCTS] + cg.P @ cg.G + cg.P * ridge
    curvature = np.einsum("jd,jd->j", cg.P, AP)
    rs = np.einsum("jd,jd->j", cg.R, cg.R)
    moves = (rs > 0.0) & (curvature > 0.0)
    step = np.divide(rs, curvature, out=np.zeros_like(rs), where=moves)
    V = server.V.copy()
    V[:, free] = X + step[:, None] * cg.P
    R = cg.R - step[:, None] * AP
    rs_next = np.einsum("jd,jd->j", R, R)
    beta = np.divide(rs_next, rs, out=np.zeros_like(rs), where=moves)
    P = np.where(moves[:, None], R + beta[:, None] * cg.P, 0.0)
    server.V = V
    server.cg = ItemCG(cg.G, R, P)
    return server


def divisor(cfg: FedALSConfig, server: ServerState, coef: np.ndarray) -> np.ndarray:
    """What each column of the server's sums is divided by to give the item step's ``[svec(S_j)
    | b_j]``: the packing's coefficients ``coef`` on the Gram part, divided out of the
    ``gram_scale`` it was uploaded at; with fresh sums, everything by the rounds' weight (the
    weighted mean)."""
    weight = server.weight if cfg.sums == "fresh" else 1.0
    return np.concatenate([coef * (cfg.gram_scale * weight), np.full(len(cfg.free_v), weight)])


def upload_shapes(cfg: FedALSConfig, info: FederationInfo) -> dict[str, tuple[int, ...]]:
    """One array: the statistics' rows (sparse: the client's rated items, and the Gramian's
    row with implicit feedback); with ``item_step="exchanges"`` the products' rows (``d``
    numbers per rated item) and with implicit feedback the Gramian's share."""
    if cfg.item_step == "exchanges":
        products: dict[str, tuple[int, ...]] = {PRODUCTS: (info.n_items, len(cfg.free_v))}
        return {**products, GRAM: upload_shape(cfg, 0)} if cfg.implicit else products
    return {STATS: upload_shape(cfg, info.n_items)}


def model(cfg: FedALSConfig, server: ServerState) -> dict[str, np.ndarray]:
    """The published item factors ``V``."""
    return {"V": server.V}


def metrics(cfg: FedALSConfig, server: ServerState, sums: Mapping[str, float],
            info: FederationInfo) -> dict[str, float]:
    """The objective ``J(U, V)`` of the current factors (the sum over clients, ALS's), and
    with ratings the errors of :func:`fedmc.core.factors.factor_metrics`.

    Explicit: ``J = 1/2 sum_Omega (m - U V^T)^2 + lam/2 (||U_free||^2 + ||V_free||^2)``;
    implicit (Hu et al.'s Eq. (3), halved): ``J = 1/2 sum_{t, j} c_tj (p_tj - u_t . v_j)^2
    + lam/2 (||U||^2 + ||V||^2)`` over every (user, item) pair, and its first part as
    ``loss``; ranking metrics are added after training (``--ranking-k``).
    """
    reg_v = 0.5 * float(cfg.item_ridge @ (server.V[:, cfg.free_v] ** 2).sum(axis=0))
    if cfg.implicit:
        return {"objective": 0.5 * sums["loss"] + sums["reg_u"] + reg_v, "loss": sums["loss"]}
    out = factor_metrics(sums, server.V, info, Regularizer("none"), cfg.layout)
    out["objective"] = 0.5 * sums["sse_z"] + sums["reg_u"] + reg_v
    return out

"""The client side of FedMC-ADMM: private ratings and ``U_i, W_i, Y_i``; steps 4(a)-(c) of
Algorithm 1 (``fedmc-admm.md``).

A client uploads the change of ``beta W_i + Y_i`` since its last upload: the server's
variable (16) depends on the clients only through ``sum_i (beta W_i + Y_i)``, so summed changes
keep that total exact without the server ever holding one client's ``W_i`` or ``Y_i``. A
client's ``W_i, Y_i`` change only when it computes and uploads, so the change is taken against
the state the step starts from and nothing more is stored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from fedmc.algorithms.fedmc_admm.config import FedMCADMMConfig
from fedmc.algorithms.fedmc_admm.kernels import initial_duals, item_steps, user_steps
from fedmc.core.factors import error_sums
from fedmc.core.kernels import rank_token
from fedmc.core.protocol import FederationInfo, InitialDraws, Message
from fedmc.core.shard import RatingsShard
from fedmc.core.uploads import Stacked, Uploads

if TYPE_CHECKING:
    from fedmc.algorithms.fedmc_admm.rated.client import RatedState

UPLOAD = "delta"  # the change of beta W_i + Y_i


@dataclass
class ClientState:
    """The private variables of a batch of clients (one, or all of them in simulation).

    ``U``: the batch's user rows ``(rows, r)``; ``W``, ``Y``: ``(clients, n, r)``, item-major
    (``W[c]`` is the transpose of the paper's ``W_i``); ``n_clients``: ``p``.
    """

    U: np.ndarray
    W: np.ndarray
    Y: np.ndarray
    n_clients: int


def init_clients(cfg: FedMCADMMConfig, shard: RatingsShard, draws: InitialDraws,
                 info: FederationInfo) -> ClientState:
    """``U_i^0`` from the client's draws; ``W_i, Y_i`` are set by the set-up exchange."""
    shape = (shard.n_clients, info.n_items, cfg.layout.width)
    return ClientState(np.array(draws.rows["U"]), np.zeros(shape), np.zeros(shape),
                       info.n_clients)


def client_step(cfg: FedMCADMMConfig, shard: RatingsShard, state: ClientState, msg: Message,
                compute: np.ndarray, upload: np.ndarray) -> tuple[ClientState, Uploads]:
    """Set-up: ``W_i^0 = V^0`` and ``Y_i^0``; a round: steps 4(a)-(c) given ``V^k``.

    Every client that computes uploads (``compute`` equals ``upload``).
    """
    if msg.phase == "setup":
        return _setup(cfg, shard, state, msg.arrays["V"], compute, upload)
    V = msg.arrays["V"]
    delta = np.empty((len(compute), *V.shape))
    for step in local_steps(cfg, shard, state, V, compute, delta):
        step()
    return state, round_upload(delta)


def local_steps(cfg: FedMCADMMConfig, shard: RatingsShard, state: ClientState, V: np.ndarray,
                compute: np.ndarray, delta: np.ndarray) -> tuple[Callable[[], None], ...]:
    """Steps 4(a)-(c) of Algorithm 1 for the clients at positions ``compute`` given ``V^k``,
    as the two calls to make in order: (14) (:func:`~.kernels.user_steps`), then (15) and (13)
    (:func:`~.kernels.item_steps`), which writes the upload into ``delta``
    (``(len(compute), n, r)``)."""
    per_row = cfg.steps == "per-row"
    token = rank_token(V.shape[1])
    return (
        partial(user_steps, compute, shard.client_ptr, shard.train, state.U, state.W, cfg.inner,
                cfg.regularizers()[0].params, cfg.layout.ones_col_u, per_row, token),
        partial(item_steps, compute, shard.client_ptr, shard.item_major, state.U, state.W,
                state.Y, V, cfg.inner, cfg.beta, state.n_clients, per_row, token, delta),
    )


def round_upload(delta: np.ndarray) -> Uploads:
    """A round's upload: the changes ``delta`` of ``beta W_i + Y_i``, one per client."""
    return {UPLOAD: Stacked(delta.shape[1:], dense=delta)}


def _setup(cfg: FedMCADMMConfig, shard: RatingsShard, state: ClientState, V0: np.ndarray,
           compute: np.ndarray, upload: np.ndarray) -> tuple[ClientState, Uploads]:
    """``W_i^0 = V^0``, ``Y_i^0 = -(1/n) grad_V f_i(U_i^0, W_i^0)`` (the input line of
    Algorithm 1; zero with ``dual_init="zeros"``). The server starts from
    ``sum_i beta W_i^0 = p beta V^0``, so the upload is ``Y_i^0``."""
    state.W[compute] = V0
    state.Y[compute] = 0.0
    if cfg.dual_init == "paper":
        initial_duals(compute, shard.client_ptr, shard.train, state.U, state.W, state.Y,
                      1.0 / V0.shape[0], rank_token(V0.shape[1]))
    if len(upload) == 0:
        return state, {}
    return state, {UPLOAD: Stacked(V0.shape, dense=_rows(state.Y, upload))}


def _rows(X: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """``X[positions]``, as a view when the positions are one contiguous run."""
    if len(positions) and positions[-1] - positions[0] == len(positions) - 1:
        return X[positions[0] : positions[-1] + 1]
    return X[positions]


def evaluate(cfg: FedMCADMMConfig, shard: RatingsShard, state: ClientState | RatedState,
             model: Mapping[str, np.ndarray]) -> dict[str, float]:
    """Error, regularizer and sparsity sums of the batch under the published ``V`` (under
    either consensus)."""
    return error_sums(shard, state.U, model["V"], cfg.clip_range(shard.value_range),
                      cfg.regularizers()[0], cfg.layout)


def user_factors(cfg: FedMCADMMConfig, shard: RatingsShard,
                 state: ClientState | RatedState) -> np.ndarray:
    """The batch's ``U`` rows under either consensus (simulation only: they never leave a
    client)."""
    return state.U

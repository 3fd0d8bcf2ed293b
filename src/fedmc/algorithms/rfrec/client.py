"""The client side of RFRec and RFRecF: private ratings, user factors ``U_i`` and local item
matrices ``V_(i)``; the local steps of Algorithms 1 and 2 and the uploads ``Clip(V_(i))``.

Storage (exact, never a dense ``d x m`` matrix per client). A column ``j`` that client ``i``
never rated gets no gradient from ``f_i``, so its local copy only follows
``v <- v - c (v - V̄_j)`` with the same ``c`` and ``V̄`` for every client: all clients start
from ``V_(i)^0 = V̄^0`` and receive every ``V̄``, hence those columns are equal across clients
at every iteration. A state keeps them once, in ``Z``; the columns a client rated are stored
per client, one row per (client, rated item) "slot". In the batched simulation one state holds
every client, so ``Z`` (and its Adam moments) is shared by all of them: a simulation
specialisation that holds because they all step together. A state of one client (the
reference driver, a real federation) holds its own ``Z``. Memory is ``d`` floats per slot plus
one ``m x d`` array per state, instead of ``m d`` per client.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from fedmc.algorithms.rfrec.config import RFRecConfig, RFRecFConfig
from fedmc.algorithms.rfrec.kernels import (
    clipped_slot_rows,
    gradient_step,
    pull_slots,
    slot_deviation_sums,
)
from fedmc.core.factors import error_sums
from fedmc.core.kernels import rank_token, residual_sums
from fedmc.core.protocol import FederationInfo, InitialDraws, Message
from fedmc.core.prox import Regularizer
from fedmc.core.shard import RatingsShard
from fedmc.core.uploads import RowPatch, Stacked, Uploads

UPLOAD = "V"
ADAM_BETAS = (0.9, 0.999)  # torch defaults, as in the authors' notebooks
ADAM_EPS = 1e-8


@dataclass
class ClientState:
    """Local models of a batch of clients.

    ``U``: user rows; ``V_loc[s]``: the slots, ``slot_ptr[c]:slot_ptr[c+1]`` for client ``c``
    (items ``slot_item[s]``); ``rating_slot[q]``: the slot of training rating ``q``; ``Z``: the
    columns shared by the batch's clients; Adam's moments and step counters.
    """

    U: np.ndarray
    slot_ptr: np.ndarray
    slot_item: np.ndarray
    rating_slot: np.ndarray
    V_loc: np.ndarray
    Z: np.ndarray
    adam: bool
    moments: list[np.ndarray] = field(default_factory=list)  # M_u, S_u, M_v, S_v
    Z_moments: list[np.ndarray] = field(default_factory=list)  # M_z, S_z
    t_u: int = 0
    t_v: int = 0


def init_clients(cfg: RFRecConfig, shard: RatingsShard, draws: InitialDraws,
                 info: FederationInfo) -> ClientState:
    """``u_t^0`` from the client's draws and the slots of its rated items; ``V_(i)`` is set
    from ``V̄^0`` in the set-up exchange."""
    tr = shard.train
    m, d = info.n_items, cfg.rank
    client = shard.client_of_row().astype(np.int64)[tr.rows()]
    keys, rating_slot = np.unique(client * m + tr.indices, return_inverse=True)
    # int32 like the item indices where the slots fit: the kernels that read the ratings by
    # slot or by item (the training loss's residual_sums) then compile once for both
    slot_type = np.int32 if len(keys) <= np.iinfo(np.int32).max else np.int64
    slot_ptr = np.searchsorted(keys // m, np.arange(shard.n_clients + 1)).astype(np.int64)
    U = np.array(draws.rows["U"])
    V_loc, Z = np.zeros((len(keys), d)), np.zeros((m, d))
    adam = cfg.optimizer == "adam"
    size = (lambda X: X.shape) if adam else (lambda X: (0, X.shape[1]))
    return ClientState(
        U, slot_ptr, (keys % m).astype(np.int64), rating_slot.astype(slot_type), V_loc, Z, adam,
        [np.zeros(size(X)) for X in (U, U, V_loc, V_loc)],
        [np.zeros(size(Z)) for _ in range(2)],
    )


def _hyper(t: int) -> np.ndarray:
    """Adam's ``(beta1, beta2, eps, 1 - beta1^t, 1 - beta2^t)`` at step ``t``."""
    b1, b2 = ADAM_BETAS
    return np.array([b1, b2, ADAM_EPS, 1.0 - b1**t, 1.0 - b2**t])


def _step_Z(state: ClientState, g: np.ndarray, step: float, hyper: np.ndarray,
            adam: bool) -> None:
    """The shared columns' step on gradient ``g`` (every client of the batch sees ``g``)."""
    if adam:
        b1, b2 = ADAM_BETAS
        M, S = state.Z_moments
        M *= b1
        M += (1.0 - b1) * g
        S *= b2
        S += (1.0 - b2) * g * g
        g = (M / hyper[3]) / (np.sqrt(S / hyper[4]) + ADAM_EPS)
    state.Z -= step * g


def _gradient_step(shard: RatingsShard, state: ClientState, clients: np.ndarray,
                   V_bar: np.ndarray, alpha: float, lam_u: float, lam: float) -> None:
    """``x_i <- x_i - alpha (grad f_i + lam grad psi_i)`` (Eq. 6; ``lam = 0``: RFRecF's main
    update, Eq. 7). The shared columns ``Z`` get the same step with gradient
    ``lam (Z - V̄)``; under Adam their moments are shared too."""
    tr = shard.train
    state.t_u += 1
    state.t_v += 1
    hyper_v = _hyper(state.t_v)
    M_u, S_u, M_v, S_v = state.moments
    gradient_step(
        clients, shard.client_ptr, tr.indptr, state.rating_slot, tr.values, state.slot_ptr,
        state.slot_item, state.U, state.V_loc, V_bar, alpha, lam_u, lam, state.adam,
        _hyper(state.t_u), hyper_v, M_u, S_u, M_v, S_v, rank_token(state.U.shape[1]),
    )
    _step_Z(state, lam * (state.Z - V_bar), alpha, hyper_v, state.adam)


def _move_to_average(state: ClientState, clients: np.ndarray, V_bar: np.ndarray, step: float,
                     lam: float, adam: bool) -> None:
    """A step of size ``step`` on ``lam grad psi_i = lam (V_(i) - V̄)`` (Alg. 2 line 11 with
    ``step = alpha / p``); with ``adam`` the gradient feeds the clients' Adam state of
    ``V_(i)``, shared with the main update."""
    adam = adam and state.adam
    hyper = np.zeros(5)
    if adam:
        state.t_v += 1
        hyper = _hyper(state.t_v)
    pull_slots(clients, state.slot_ptr, state.slot_item, state.V_loc, V_bar, step, lam, adam,
               hyper, *state.moments[2:])
    _step_Z(state, lam * (state.Z - V_bar), step, hyper, adam)


def client_step(cfg: RFRecConfig, shard: RatingsShard, state: ClientState, msg: Message,
                compute: np.ndarray, upload: np.ndarray) -> tuple[ClientState, Uploads]:
    """The phase the message names, then the uploads of ``upload``.

    ``setup``: ``V_(i)^0 = V̄^0``; ``round`` (RFRec, Algorithm 1 line 7): the step of Eq. 6;
    ``main`` (RFRecF, Eq. 7): ``x_i <- x_i - alpha/(1-p) grad f_i``; ``average`` (RFRecF line
    11): the moving-to-average step; ``aggregate`` (RFRecF): no step, only the uploads.
    Each call steps the batch's shared ``Z`` once, so a batch must hold every client that
    computes (every client, in these phases).
    """
    if msg.phase == "setup":
        state.V_loc[:] = msg.arrays["V"][state.slot_item]
        state.Z[:] = msg.arrays["V"]
    elif msg.phase == "round":
        _gradient_step(shard, state, compute, msg.arrays["V"], cfg.alpha, cfg.lam_u, cfg.lam)
    elif msg.phase == "main":
        assert isinstance(cfg, RFRecFConfig)  # a phase of RFRecF alone
        _gradient_step(shard, state, compute, state.Z, cfg.alpha / (1.0 - cfg.p), cfg.lam_u,
                       0.0)
    elif msg.phase == "average":
        assert isinstance(cfg, RFRecFConfig)
        _move_to_average(state, compute, msg.arrays["V"], cfg.alpha / cfg.p, cfg.lam,
                         cfg.average_step == "optimizer")
    if len(upload) == 0:
        return state, {}
    return state, {UPLOAD: _uploads(cfg, state, upload)}


def _uploads(cfg: RFRecConfig, state: ClientState, clients: np.ndarray) -> Stacked:
    """``Clip(V_(i), delta)`` of each client of ``clients`` (Eq. 9 before the noise, which the
    driver adds to the sum in simulation): the shared clipped columns, stacked without a copy,
    plus each client's slot corrections."""
    delta = np.inf if cfg.delta is None else cfg.delta
    Zc = np.clip(state.Z, -delta, delta)
    ptr, index, rows = clipped_slot_rows(clients, state.slot_ptr, state.slot_item, state.V_loc,
                                         Zc, delta)
    return Stacked(Zc.shape, dense=np.broadcast_to(Zc, (len(clients), *Zc.shape)),
                   rows=RowPatch(ptr, index, rows))


def evaluate(cfg: RFRecConfig, shard: RatingsShard, state: ClientState,
             model: Mapping[str, np.ndarray]) -> dict[str, float]:
    """Errors of ``u_t^T V̄`` and the client terms of problem (5) on the local models:
    ``sse_local`` (``sum ||P(R - U V_(i)^T)||^2``), ``u_squares`` (``||U||^2``) and ``psi``
    (``1/2 sum_i ||V_(i) - V̄||^2``)."""
    V_bar = model["V"]
    none = Regularizer("none")
    out = error_sums(shard, state.U, V_bar, cfg.clip_range(shard.value_range), none, cfg.layout)
    tr = shard.train
    out["sse_local"] = residual_sums(tr.indptr, state.rating_slot, tr.values, state.U,
                                     state.V_loc, 0.0, 1.0, -np.inf, np.inf,
                                     rank_token(state.U.shape[1]))[0]
    out["u_squares"] = float(np.sum(state.U**2))
    dev = slot_deviation_sums(state.slot_item, state.V_loc, state.Z, V_bar)
    out["psi"] = 0.5 * (dev + shard.n_clients * float(np.sum((state.Z - V_bar) ** 2)))
    return out


def shared_uploads(cfg: RFRecConfig, broadcasts: Sequence[np.ndarray]) -> list[np.ndarray]:
    """``Clip(Z)`` after each RFRec (Algorithm 1) round whose message carried ``broadcasts[k]``
    (from the first round's ``V̄^0``, which the set-up sent before): what every client uploads
    on the items it did not rate. Only the public ``V̄`` history moves ``Z``, so the server
    can compute it (the audit's reference, :mod:`fedmc.audit.attacks`)."""
    Z = np.array(broadcasts[0])
    empty = np.zeros((0, Z.shape[1]))
    state = ClientState(empty, np.zeros(1, np.int64), np.zeros(0, np.int64),
                        np.zeros(0, np.int64), empty, Z, cfg.optimizer == "adam",
                        Z_moments=[np.zeros_like(Z), np.zeros_like(Z)])
    delta = np.inf if cfg.delta is None else cfg.delta
    out = []
    for t, V_bar in enumerate(broadcasts, 1):
        _step_Z(state, cfg.lam * (state.Z - V_bar), cfg.alpha, _hyper(t), state.adam)
        out.append(np.clip(state.Z, -delta, delta))
    return out


def dense(state: ClientState, client: int) -> np.ndarray:
    """Client ``client``'s ``V_(i)`` (a position in the batch) as a dense ``(m, d)`` array,
    for tests and inspection."""
    V = state.Z.copy()
    sl = slice(state.slot_ptr[client], state.slot_ptr[client + 1])
    V[state.slot_item[sl]] = state.V_loc[sl]
    return V


def user_factors(cfg: RFRecConfig, shard: RatingsShard, state: ClientState) -> np.ndarray:
    """The batch's ``U`` rows (simulation only: they never leave a client)."""
    return state.U

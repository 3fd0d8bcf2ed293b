"""The client side of FedMC-ADMM with consensus on rated items: its state, one visit (the
U-steps (14), the exact W-step (11) on its rated items, the dual step (13)) and its uploads on
its rated items, with the item-bias offset's set-up sums (:mod:`fedmc.algorithms.fedmc_admm.
rated`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedmc.algorithms.fedmc_admm.config import FedMCADMMConfig
from fedmc.algorithms.fedmc_admm.kernels import (
    group_rows,
    rated_contributions,
    rated_initial_duals,
    rated_visits,
)
from fedmc.core import biases
from fedmc.core.biases import sqrt_item_weights
from fedmc.core.kernels import rank_token
from fedmc.core.protocol import FederationInfo, InitialDraws, Message
from fedmc.core.shard import RatingsShard
from fedmc.core.uploads import RowPatch, Stacked, Uploads

UPLOAD = "delta"  # the change of beta W_ij + Y_ij on the rated items
COUNT = "count"  # 1 per rated item, in the set-up exchange: the raters n_j
OFFSET = "offset"  # the item-bias residual sums per rated item, in the set-up exchange


class Snapshots:
    """The item matrices ``V^k`` that some client saw last, each kept once with the number of
    clients pointing at it; slots are reused when nobody points at them any more."""

    def __init__(self, n_items: int, width: int, capacity: int = 4) -> None:
        self.arrays = np.zeros((capacity, n_items, width))
        self.refs = np.zeros(capacity, dtype=np.int64)
        self.rounds = np.full(capacity, -1, dtype=np.int64)

    def put(self, V: np.ndarray, k: int) -> int:
        """The slot holding ``V^k`` (stored on first use)."""
        held = np.flatnonzero(self.rounds == k)
        if len(held):
            return int(held[0])
        free = np.flatnonzero(self.refs == 0)
        if len(free) == 0:
            grow = len(self.refs)
            self.arrays = np.concatenate([self.arrays, np.zeros_like(self.arrays)])
            self.refs = np.concatenate([self.refs, np.zeros(grow, dtype=np.int64)])
            self.rounds = np.concatenate([self.rounds, np.full(grow, -1, dtype=np.int64)])
            free = np.arange(grow, 2 * grow)
        slot = int(free[0])
        self.arrays[slot] = V
        self.rounds[slot] = k
        return slot

    def move(self, old: np.ndarray, new: int, count: int) -> None:
        """``count`` clients leave the slots ``old`` (``-1``: none) for ``new``."""
        held = old[old >= 0]
        self.refs -= np.bincount(held, minlength=len(self.refs))
        self.refs[new] += count
        self.rounds[self.refs == 0] = -1


@dataclass
class RatedState:
    """A batch of clients' private variables: user rows ``U`` and those of the last visit
    (``U_prev``), residual scalars ``e``, ``e_prev`` per rating (their duals), the snapshot
    slot of each client's last visit, whether each client holds one user and, with an
    item-bias offset, its ratings less the offset (CSR and item-major order)."""

    U: np.ndarray
    U_prev: np.ndarray
    e: np.ndarray
    e_prev: np.ndarray
    seen: np.ndarray
    snapshots: Snapshots
    one_user: bool
    offset_values: tuple[np.ndarray, np.ndarray] | None = None


def init_clients(cfg: FedMCADMMConfig, shard: RatingsShard, draws: InitialDraws,
                 info: FederationInfo) -> RatedState:
    """``U_i^0`` from the client's draws; the rest is set by the set-up exchange."""
    U = np.array(draws.rows["U"])
    nnz = shard.train.nnz
    return RatedState(U, U.copy(), np.zeros(nnz), np.zeros(nnz),
                      np.full(shard.n_clients, -1, dtype=np.int64),
                      Snapshots(info.n_items, cfg.layout.width),
                      bool(np.all(np.diff(shard.client_ptr) == 1)))


def groups_of(shard: RatingsShard, state: RatedState) -> tuple:
    """The item-major layout of the shard's ratings (not needed, and not built, with one user
    per client)."""
    if state.one_user:
        empty = np.zeros(0, dtype=np.int64)
        return (empty, empty.astype(np.int32), empty, empty.astype(np.int32), np.zeros(0))
    im = shard.item_major
    return (im.client_ptr, im.item, im.ptr, im.row, im.values)


def client_weights(cfg: FedMCADMMConfig, ptr: np.ndarray) -> np.ndarray | None:
    """``a_i`` of the clients whose rated items ``ptr`` delimits (:func:`group_rows`):
    ``|J_i|^(-1/2)`` with ``weights="sqrt-items"``; None (every ``a_i = 1``) otherwise."""
    return None if cfg.weights == "equal" else sqrt_item_weights(ptr)


def client_step(cfg: FedMCADMMConfig, shard: RatingsShard, state: RatedState, msg: Message,
                compute: np.ndarray, upload: np.ndarray) -> tuple[RatedState, Uploads]:
    """Set-up: ``W_ij^0 = V_j^0``, ``Y_ij^0`` (paper or zero), upload a count per rated item
    and, with the paper's duals, ``beta V_j^0 + Y_ij^0``; a round: one visit (module
    docstring). Uploads carry the client weights ``a_i`` as their scale."""
    V = msg.arrays["V"]
    tr = shard.train
    groups = groups_of(shard, state)
    values = tr.values
    if "b0" in msg.arrays:  # fit the factors to the ratings less the offset
        values, group_values = _offset_values(shard, state, groups, msg.arrays["b0"])
        groups = (*groups[:4], group_values)
    ptr, items = group_rows(compute, shard.client_ptr, tr.indptr, tr.indices, groups,
                            state.one_user)
    rows = np.empty((len(items), V.shape[1]))
    slot = state.snapshots.put(V, msg.round)
    contributed = RowPatch(ptr, items, rows)
    if msg.phase == "setup":
        if cfg.dual_init == "paper":
            rated_initial_duals(compute, shard.client_ptr, tr.indptr, tr.indices, tr.values,
                                groups, state.one_user, state.U, V, 1.0 / V.shape[0],
                                state.e, state.e_prev)
            rated_contributions(compute, shard.client_ptr, tr.indptr, groups, state.one_user,
                                state.U, V, state.e, cfg.beta, items, rows)
        else:  # beta V_j^0 each: the server adds beta n_j V_j^0 from the counts
            contributed = RowPatch(np.zeros_like(ptr), items[:0], rows[:0])
        counted = RowPatch(ptr, items, np.full((len(items), 1), cfg.count_scale))
    else:
        visit(cfg, shard, state, V, compute, values, groups, ptr, rows)
        counted = RowPatch(np.zeros_like(ptr), items[:0], np.zeros((0, 1)))
        if cfg.layout.ones_col_v >= 0:  # V's column fixed to 1: the V-step never reads T there
            rows[:, cfg.layout.ones_col_v] = 0.0
    state.snapshots.move(state.seen[compute], slot, len(compute))
    state.seen[compute] = slot
    weights = client_weights(cfg, ptr)
    uploads = {UPLOAD: Stacked(V.shape, rows=contributed, scale=weights),
               COUNT: Stacked((V.shape[0], 1), rows=counted, scale=weights)}
    if cfg.offset != "none":
        uploads[OFFSET] = Stacked((V.shape[0], 1), rows=_offset_sums(cfg, shard, compute, msg),
                                  scale=weights)
    return state, uploads


def visit(cfg: FedMCADMMConfig, shard: RatingsShard, state: RatedState, V: np.ndarray,
          compute: np.ndarray, values: np.ndarray, groups: tuple, ptr: np.ndarray,
          rows: np.ndarray) -> None:
    """A round's visit of the clients at positions ``compute`` given ``V^k`` (module
    docstring), on their ratings ``values`` (less the offset, if any) grouped by
    :func:`groups_of`; the rows of their upload go to ``rows`` (``ptr``: where each client's
    begin, :func:`~fedmc.algorithms.fedmc_admm.kernels.group_rows`)."""
    tr = shard.train
    rated_visits(compute, shard.client_ptr, tr.indptr, tr.indices, values, groups,
                 state.one_user, state.U, state.U_prev, state.e, state.e_prev, V,
                 state.snapshots.arrays, state.seen, cfg.inner, cfg.beta,
                 cfg.regularizers()[0].params, cfg.layout.ones_col_u, cfg.steps == "per-row",
                 rank_token(V.shape[1]), ptr, rows)


def _offset_sums(cfg: FedMCADMMConfig, shard: RatingsShard, compute: np.ndarray,
                 msg: Message) -> RowPatch:
    """At set-up, each client's mean residual ``z_tj - c_t`` over its users who rated item
    ``j``, per rated item (``c_t`` the user's own bias (1) of :mod:`fedmc.core.biases`, against
    zero item biases; a mean, since the counts weigh each client once per item); no rows in a
    round."""
    tr = shard.train
    if msg.phase != "setup":
        return RowPatch(np.zeros(len(compute) + 1, dtype=np.int64), np.zeros(0, np.int64),
                        np.zeros((0, 1)))
    _, indptr, items, z, owner = biases.batch_ratings(compute, shard.client_ptr, tr.indptr,
                                                      tr.indices, tr.values)
    c = biases.user_biases(indptr, items, z, np.zeros(shard.n_items), cfg.offset_lam_user)
    residual = z - np.repeat(c, np.diff(indptr))
    ptr, item, sums, raters = biases.client_item_sums(owner, items, residual, len(compute),
                                                      shard.n_items)
    return RowPatch(ptr, item, (sums / raters)[:, None])


def _offset_values(shard: RatingsShard, state: RatedState, groups: tuple,
                   b0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ratings less the offset ``b0`` in CSR and item-major order, computed on first use
    (``b0`` is fixed after the set-up)."""
    if state.offset_values is None:
        tr = shard.train
        g_item, g_ptr, g_vals = groups[1], groups[2], groups[4]
        state.offset_values = (tr.values - b0[tr.indices],
                               g_vals - b0[np.repeat(g_item, np.diff(g_ptr))])
    return state.offset_values

"""FedMC-ADMM with consensus on rated items (``consensus="rated"``): the cross-device mode.

The paper's constraint ``W_i = V`` asks every client to keep a copy of the whole item matrix,
and its V-step (16) averages over all ``p`` copies, most of which, for a client holding one
user, are stale copies of an old ``V``. Here client ``i`` keeps the constraint only on the
items it rated, ``W_ij = V_j`` for ``j in J_i``, so ``V_j`` averages over the clients that
rated ``j``. With ``f_i = 1/2 ||P_Omega_i(M_i - U_i W_i)||^2`` the augmented Lagrangian is

    L = sum_i [f_i(U_i, W_i) + R_i(U_i)] + R(V)
        + sum_i sum_{j in J_i} [<Y_ij, W_ij - V_j> + beta/2 ||W_ij - V_j||^2],

(objective (17) times ``p``: ``beta`` and ``R`` are per rated (client, item) pair and per item,
so their values do not depend on the number of clients). A visit of client ``i`` in round
``k`` (``docs/algorithms.md`` has the derivation):

* (14) ``N`` prox-gradient steps on ``U_i`` against the consensus ``V^k`` (the paper steps
  against ``W_i^k``, the client's copies from its last visit, often many rounds old);
* (11) the exact W-step (the paper's Remark 4.1) on every rated item:
  ``(sum_t u_t u_t^T + beta I) w_j = sum_t m_tj u_t + beta v_j - y_j``, an ``r x r`` solve
  (Sherman-Morrison-sized for one user);
* (13) ``Y_ij <- Y_ij + beta (W_ij - V_j^k)``; by the optimality of the W-step this is
  ``sum_t e_tj u_t`` with the residuals ``e_tj = m_tj - u_t . w_j``, so a client stores one
  scalar per rating for its duals, not a vector;
* it uploads, on its rated items only, the change of ``beta W_ij + Y_ij`` (sparse rows).

The server keeps ``T_j = sum_i (beta W_ij + Y_ij)`` and the raters ``n_j`` (both sums of
uploads; the counts come once, in the set-up exchange, and reveal each item's number of raters
over the whole federation) and sets ``V_j = prox_{R/(beta n_j)}(T_j / (beta n_j))``. With
``dual_init="zeros"`` every contribution starts at ``beta V_j^0``, so the set-up upload is the
counts alone and the server sets ``T_j^0 = beta n_j V_j^0`` itself.

**Item-bias offset** (``offset="item-bias"``, with zero duals). The set-up upload also carries,
per rated item, the client's mean residual ``a_i mean_t (z_tj - c_t)`` of the item-bias
baseline (:mod:`fedmc.core.biases`: ``c_t`` the user's own bias, computed on the device), so
the server forms the ridge item biases ``b0`` (2) from the same release as the counts, and
sends ``b0`` with every round. Each client then fits the factors to its ratings less the
offset, ``z_tj - b0_j`` (computed once, at its first visit), and the published model adds
``b0`` to ``V``'s item-bias column: the factors and the learned bias start from the DP item
biases instead of from zero, at the cost of the set-up upload's norm only.

**Client weights** (``weights="sqrt-items"``). Client ``i`` weighs ``a_i = |J_i|^(-1/2)``
(``|J_i|``: its number of rated items), fixed by its own data, and the problem becomes
``sum_i a_i [f_i + R_i + sum_{j in J_i} (<Y_ij, W_ij - V_j> + beta/2 ||W_ij - V_j||^2)]
+ R(V)`` with the duals of the weighted problem ``a_i Y_ij``. Scaling a client's whole term by
``a_i > 0`` leaves its U-, W- and dual steps unchanged, so the client computes exactly as
before and only multiplies what it uploads, contributions and counts, by ``a_i``: the server
keeps ``T_j = sum_i a_i (beta W_ij + Y_ij)`` and ``n_j = sum_i a_i`` and its V-step is the same
formula, a consensus in which heavy raters weigh less. The point is user-level DP
(``docs/privacy.md``): a client's counts then have L2 norm exactly 1 and its uploads scale with
``a_i``, so one clip norm fits every client and rarely binds, instead of scaling each client by
its own clip factor (which biases ``T_j / n_j``).

A client's state is its user rows, two residual scalars per rating (its last two duals) and
the ``V`` it saw at its last visit (for the change of its contribution). In the batched
simulation the population keeps each distinct ``V^k`` once, with a reference count, instead of
once per client (:class:`Snapshots`): a simulation specialisation, exact because every
client of a round receives the same ``V^k``. Memory: ``O(ratings + users r + items r)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from fedmc.algorithms.fedmc_admm.config import FedMCADMMConfig
from fedmc.algorithms.fedmc_admm.kernels import (
    group_rows,
    item_prox,
    rated_contributions,
    rated_initial_duals,
    rated_visits,
)
from fedmc.core import biases
from fedmc.core.biases import sqrt_item_weights
from fedmc.core.factors import factor_metrics
from fedmc.core.kernels import rank_token
from fedmc.core.protocol import FederationInfo, InitialDraws, Message
from fedmc.core.uploads import RowPatch, Stacked, Summed, Uploads
from fedmc.data.federated import FederatedData

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


def init_clients(cfg: FedMCADMMConfig, shard: FederatedData, draws: InitialDraws,
                 info: FederationInfo) -> RatedState:
    """``U_i^0`` from the client's draws; the rest is set by the set-up exchange."""
    U = np.array(draws.rows["U"])
    nnz = shard.train.nnz
    return RatedState(U, U.copy(), np.zeros(nnz), np.zeros(nnz),
                      np.full(shard.n_clients, -1, dtype=np.int64),
                      Snapshots(info.n_items, cfg.layout.width),
                      bool(np.all(np.diff(shard.client_ptr) == 1)))


def _groups(shard: FederatedData, state: RatedState) -> tuple:
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


def client_step(cfg: FedMCADMMConfig, shard: FederatedData, state: RatedState, msg: Message,
                compute: np.ndarray, upload: np.ndarray) -> tuple[RatedState, Uploads]:
    """Set-up: ``W_ij^0 = V_j^0``, ``Y_ij^0`` (paper or zero), upload a count per rated item
    and, with the paper's duals, ``beta V_j^0 + Y_ij^0``; a round: one visit (module
    docstring). Uploads carry the client weights ``a_i`` as their scale."""
    V = msg.arrays["V"]
    tr = shard.train
    groups = _groups(shard, state)
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
        rated_visits(compute, shard.client_ptr, tr.indptr, tr.indices, values, groups,
                     state.one_user, state.U, state.U_prev, state.e, state.e_prev, V,
                     state.snapshots.arrays, state.seen, cfg.inner, cfg.beta,
                     cfg.regularizers()[0].params, cfg.layout.ones_col_u,
                     cfg.steps == "per-row", rank_token(V.shape[1]), ptr, rows)
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


def _offset_sums(cfg: FedMCADMMConfig, shard: FederatedData, compute: np.ndarray,
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


def _offset_values(shard: FederatedData, state: RatedState, groups: tuple,
                   b0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ratings less the offset ``b0`` in CSR and item-major order, computed on first use
    (``b0`` is fixed after the set-up)."""
    if state.offset_values is None:
        tr = shard.train
        g_item, g_ptr, g_vals = groups[1], groups[2], groups[4]
        state.offset_values = (tr.values - b0[tr.indices],
                               g_vals - b0[np.repeat(g_item, np.diff(g_ptr))])
    return state.offset_values


def user_factors(cfg: FedMCADMMConfig, shard: FederatedData, state: RatedState) -> np.ndarray:
    """The batch's ``U`` rows (simulation only: they never leave a client)."""
    return state.U


# --------------------------------------------------------------------------------- server


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
    V = np.array(draws["V"])
    return RatedServerState(V, np.zeros_like(V), np.zeros(info.n_items), np.zeros(info.n_items))


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
    shapes = {UPLOAD: (info.n_items, cfg.layout.width), COUNT: (info.n_items, 1)}
    if cfg.offset != "none":
        shapes[OFFSET] = (info.n_items, 1)
    return shapes


def model(cfg: FedMCADMMConfig, server: RatedServerState) -> dict[str, np.ndarray]:
    """The published ``V``: the factors, with the offset ``b0`` added to the item biases."""
    V = server.V.copy()
    V[:, cfg.layout.rank + 1] += server.b0
    return {"V": V}


def metrics(cfg: FedMCADMMConfig, server: RatedServerState, sums: Mapping[str, float],
            info: FederationInfo) -> dict[str, float]:
    """Errors and sparsity of ``(U, V)``; the objective is ``sum_i [f_i + R_i] + R(V)``."""
    reg_v = cfg.regularizers()[1]
    out = factor_metrics(sums, server.V, info, reg_v, cfg.layout)
    out["objective"] = (0.5 * sums["sse_z"] + sums["reg_u"]
                        + reg_v.value(server.V[:, cfg.layout.free_mask_v()]))
    return out

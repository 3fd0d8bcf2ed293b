"""The client side of the item-bias baseline: a user's own bias and the item residual sums.

A user ``t`` holds its normalized ratings ``z_tj`` on its items ``Omega_t``. Against item
biases ``b`` its own bias is the ridge solution

    c_t(b) = sum_{j in Omega_t} (z_tj - b_j) / (|Omega_t| + lam_user)                (1)

computed on the device and never sent. Client ``i`` (weight ``a_i``) uploads, on the items its
users rated, the residual sums and the counts

    s_ij = a_i sum_{t in i: j in Omega_t} (z_tj - c_t),    m_ij = kappa a_i #{t in i: j in Omega_t}

in the set-up exchange (``c_t`` against ``b = 0``), and in a round the change of ``s_ij`` after
recomputing ``c_t`` against the broadcast ``b^k`` (``-a_i sum_t (c_t^new - c_t^old)``; the counts
do not change). With ``signal="counts"`` only the counts are uploaded. The batch is handled
with array operations over its ratings: no loop over clients.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from fedmc.algorithms.item_bias.config import ItemBiasConfig
from fedmc.core import biases
from fedmc.core.factors import error_sums
from fedmc.core.protocol import FederationInfo, InitialDraws, Message
from fedmc.core.prox import Regularizer
from fedmc.core.shard import CSR, RatingsShard
from fedmc.core.uploads import RowPatch, Stacked, Uploads

SUM = "sum"  # the residual sums s_ij
COUNT = "count"  # kappa times the rater counts


@dataclass
class ClientState:
    """The user biases ``c_t`` of a batch of clients' users (their last ones, in row order)."""

    c: np.ndarray


def init_clients(cfg: ItemBiasConfig, shard: RatingsShard, draws: InitialDraws,
                 info: FederationInfo) -> ClientState:
    """No user bias yet: the set-up exchange computes the first."""
    return ClientState(np.zeros(shard.n_users))


def user_biases(cfg: ItemBiasConfig, R: CSR, b: np.ndarray) -> np.ndarray:
    """(1) for every row of ``R``: each user's own bias against the item biases ``b``."""
    return biases.user_biases(R.indptr, R.indices, R.values, b, cfg.lam_user)


def client_step(cfg: ItemBiasConfig, shard: RatingsShard, state: ClientState, msg: Message,
                compute: np.ndarray, upload: np.ndarray) -> tuple[ClientState, Uploads]:
    """Recompute the users' biases against ``msg.arrays["b"]`` and upload the residual sums
    (at set-up, and the counts) or their change (a round) on the rated items."""
    tr = shard.train
    n_items = shard.n_items
    rows, *arrays, owner = biases.batch_ratings(compute, shard.client_ptr, tr.indptr,
                                                tr.indices, tr.values)
    block = CSR(*arrays)
    c = user_biases(cfg, block, msg.arrays["b"])
    row_of = block.rows()
    if msg.phase == "setup":
        x = block.values - c[row_of]
    else:
        x = -(c - state.c[rows])[row_of]
    state.c[rows] = c
    # group the batch's ratings by (client, item): client k's rows, sorted by item
    ptr, items, sums, counts = biases.client_item_sums(owner, block.indices, x, len(compute),
                                                       n_items)
    keep = np.isin(compute, upload)
    mine = np.repeat(keep, np.diff(ptr))
    ptr = np.concatenate(([0], np.cumsum(np.diff(ptr)[keep]))).astype(np.int64)
    items, sums, counts = items[mine], sums[mine], counts[mine]
    weights = None if cfg.weights == "equal" else biases.sqrt_item_weights(ptr)
    if msg.phase != "setup":  # the counts do not change
        counts = counts[:0]
    counted = RowPatch(ptr if len(counts) else np.zeros_like(ptr), items[: len(counts)],
                       cfg.count_scale * counts[:, None])
    uploads = {COUNT: Stacked((n_items, 1), rows=counted, scale=weights)}
    if cfg.signal == "ratings":
        uploads[SUM] = Stacked((n_items, 1), rows=RowPatch(ptr, items, sums[:, None]),
                               scale=weights)
    return state, uploads


def user_factors(cfg: ItemBiasConfig, shard: RatingsShard, state: ClientState) -> np.ndarray:
    """The rows ``[c_t | 1]`` of the users' last biases (simulation only)."""
    return np.column_stack([state.c, np.ones_like(state.c)])


def evaluate(cfg: ItemBiasConfig, shard: RatingsShard, state: ClientState,
             model: Mapping[str, np.ndarray]) -> dict[str, float]:
    """Error sums under the published model, each user's bias folded in against it (1): what
    the device computes at prediction time."""
    V = model["V"]
    c = user_biases(cfg, shard.train, V[:, 1])
    U = np.column_stack([c, np.ones_like(c)])
    return error_sums(shard, U, V, cfg.clip_range(shard.value_range),
                      Regularizer("l2", cfg.lam_user), cfg.layout)

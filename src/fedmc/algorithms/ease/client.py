"""The client side of federated EASE: each client's share of the item-item Gram matrix.

Client ``i`` holds its users' interaction rows ``x_t`` (binary for clicks: ``--implicit``
reads every rating as an interaction of strength 1) and uploads, in the one set-up exchange,

    G_i = sum_{t in i} x_t x_t^T,                                                       (1)

its part of Steck (2019)'s Gram matrix ``G = X^T X`` (the sum over every client is ``G``),
as a :class:`~fedmc.core.gram_rows.GramRows` (kept by the sparse rows ``x_t``; no dense
``n x n`` matrix per client). With ``max_items`` each user contributes at most that many of
its items (a uniform draw made from its own key), so a binary row's ``||x_t x_t^T||_F`` is at
most ``max_items``: the bound user-level DP clips to. A user's scores are ``x_t B`` on its
device (:mod:`fedmc.algorithms.ease.fold_in`): its row of ``U`` is ``x_t`` itself. The batch is
handled with array operations and one Numba kernel: no loop over clients or ratings in Python.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from fedmc.algorithms.ease.config import EaseConfig
from fedmc.algorithms.ease.fold_in import dense_rows
from fedmc.algorithms.fedals.client import contributed
from fedmc.core import biases
from fedmc.core.gram_rows import GramRows
from fedmc.core.protocol import FederationInfo, InitialDraws, Message
from fedmc.core.shard import RatingsShard
from fedmc.core.uploads import Stacked, Uploads
from fedmc.errors import ConfigError

GRAM = "gram"  # the Gram matrix G (1)


@dataclass
class ClientState:
    """The ratings a batch's users contribute to the Gram matrix (all of them without
    ``max_items``)."""

    contributed: RatingsShard


def init_clients(cfg: EaseConfig, shard: RatingsShard, draws: InitialDraws,
                 info: FederationInfo) -> ClientState:
    """The contributed ratings: with ``max_items``, a draw from each user's own key
    (``draws.rows["key"]``); interaction strengths must be ``>= 0``."""
    if shard.train.nnz and shard.train.values.min() < 0:
        raise ConfigError("ease takes interaction strengths >= 0; these values are negative "
                          "(normalized ratings?): read ratings as interactions (`implicit=true`)")
    if cfg.max_items is None:
        return ClientState(shard)
    return ClientState(contributed(shard, draws.rows["key"], cfg.max_items))


def client_step(cfg: EaseConfig, shard: RatingsShard, state: ClientState, msg: Message,
                compute: np.ndarray, upload: np.ndarray) -> tuple[ClientState, Uploads]:
    """The uploading clients' Gram matrices (1) (the set-up exchange's: a round names no
    client)."""
    tr = state.contributed.train
    _, indptr, items, x, _ = biases.batch_ratings(upload, shard.client_ptr, tr.indptr,
                                                  tr.indices, tr.values)
    sizes = np.diff(shard.client_ptr)[upload]
    users = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    n = shard.n_items
    return state, {GRAM: Stacked((n, n), rows=GramRows.of(users, indptr, items, x, n))}


def user_factors(cfg: EaseConfig, shard: RatingsShard, state: ClientState) -> np.ndarray:
    """Every user's row of ``U``: its own training interactions, dense (simulation only)."""
    return dense_rows(shard.train, shard.n_items)


def evaluate(cfg: EaseConfig, shard: RatingsShard, state: ClientState,
             model: Mapping[str, np.ndarray]) -> dict[str, float]:
    """No error sums: EASE's scores rank items, they are no ratings (its lists are judged by
    ranking metrics)."""
    return {}


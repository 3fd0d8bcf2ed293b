"""Federated ALS's round compiled in two parts on a user made by hand (:mod:`fedmc.run.precompile`).

The first run of federated ALS compiles its kernels in two processes at once, beside the run
loading its data: a child compiles the user step (:func:`~fedmc.algorithms.fedals.kernels.
user_solves`: ALS's user half-sweep, or Hu et al.'s Eq. (4) on interactions, the largest of its
kernels); the run, its data loaded, compiles the set-up exchange, the evaluation and, where the
item step is a sequence of exchanges (``item_step="exchanges"``), a round's shares after the
user step (:func:`~fedmc.algorithms.fedals.client.exchange_shares`) and their sum. Both run on
one user holding one rating, whose arrays are built here of the types a real shard holds
(:class:`~fedmc.core.shard.CSR`). ``tests/test_precompile.py`` checks that the two leave
nothing for a run to compile.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from types import SimpleNamespace
from typing import Any

import numpy as np

from fedmc.algorithms.fedals.client import ClientState, client_rows, exchange_shares, user_step
from fedmc.algorithms.fedals.config import FedALSConfig
from fedmc.core.protocol import Message
from fedmc.core.shard import CSR
from fedmc.core.uploads import sum_uploads


def round_step(cfg: FedALSConfig) -> tuple[Callable[[], None], Callable[[], None]]:
    """The compile of one round of ``cfg`` in two parts: the child's (the user step) and the
    run's (the round's shares and their sum, with the item step by exchanges)."""
    return partial(_one_user, cfg, True), partial(_one_user, cfg, False)


def _one_user(cfg: FedALSConfig, child: bool) -> None:
    """The child's part of :func:`round_step` or the run's, on one user (a client of its own)
    holding one rating of one item."""
    width = cfg.layout.width
    ptr = np.array([0, 1], dtype=np.int64)
    train = CSR(ptr, np.zeros(1, dtype=np.int32), np.ones(1))
    U, V = np.zeros((1, width)), np.zeros((1, width))
    client = np.zeros(1, dtype=np.int64)
    if child:
        user_step(cfg, train, client, U, V, cfg.solve_steps)
        return
    if cfg.item_step != "exchanges":  # a round's statistics are the set-up exchange's
        return
    shard: Any = SimpleNamespace(client_ptr=ptr, train=train)  # the fields a share reads
    msg = Message(1, "round", client, client, {"V": V})
    uploads = exchange_shares(cfg, shard, ClientState(U, one_user=True), msg, client,
                              *client_rows(ptr, client))
    sum_uploads([(uploads, np.ones(1, dtype=np.int64))],
                {name: upload.shape for name, upload in uploads.items()})

"""FedMC-ADMM's round compiled on a client made by hand (:mod:`fedmc.run.precompile`).

The first run of FedMC-ADMM compiles its generic kernels in two processes at once, beside the
run loading its data: the run itself, once its data are loaded, runs a tiny federation's set-up
exchange and evaluation; a child compiles a round: the client step, steps 4(a)-(c) of
Algorithm 1 (``fedmc-admm.md``), with the steps (14) and (15) it calls (more than half of the
compiling, which would otherwise come after the set-up's kernels in one process), and the
server's prox (16). To reach it without compiling the data's layout kernels first,
:func:`round_step` runs :func:`fedmc.algorithms.fedmc_admm.client.client_step` on a client of
one rating whose arrays are built here, of the types a real shard holds
(:class:`~fedmc.core.shard.CSR`, :class:`~fedmc.core.shard.ItemMajor`).
``tests/test_precompile.py`` checks that the two leave nothing for a run to compile.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from types import SimpleNamespace
from typing import Any

import numpy as np

from fedmc.algorithms.fedmc_admm.client import ClientState, client_step
from fedmc.algorithms.fedmc_admm.config import FedMCADMMConfig
from fedmc.algorithms.fedmc_admm.server import ServerState, server_step
from fedmc.core.protocol import Message
from fedmc.core.shard import CSR, ItemMajor
from fedmc.core.uploads import sum_uploads


def round_step(cfg: FedMCADMMConfig) -> Callable[[], None] | None:
    """The compile of one round of ``cfg`` (a call that runs its client step on a client of
    one rating, then the server step (16) on that upload), or None for the consensus on rated
    items, whose state is built by kernels of its own (its first run compiles in one
    process)."""
    if cfg.consensus != "all":
        return None
    return partial(_one_rating_round, cfg)


def _one_rating_round(cfg: FedMCADMMConfig) -> None:
    """One round of one client holding one rating of one item."""
    width = cfg.layout.width
    ptr = np.array([0, 1], dtype=np.int64)
    first = np.zeros(1, dtype=np.int32)
    rating = np.zeros(1)
    # the fields a client step reads
    shard: Any = SimpleNamespace(client_ptr=ptr, train=CSR(ptr, first, rating),
                                 item_major=ItemMajor(ptr, first, ptr, first, rating))
    state = ClientState(np.zeros((1, width)), np.zeros((1, 1, width)), np.zeros((1, 1, width)),
                        n_clients=1)
    client = np.zeros(1, dtype=np.int64)
    V = np.zeros((1, width))
    msg = Message(1, "round", client, client, {"V": V})
    _, uploads = client_step(cfg, shard, state, msg, client, client)
    summed = sum_uploads([(uploads, np.ones(1, dtype=np.int64))],
                         {name: upload.shape for name, upload in uploads.items()})
    server_step(cfg, ServerState(V, np.zeros_like(V), 1), summed, msg)

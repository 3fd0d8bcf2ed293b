"""FedMC-ADMM's round compiled on a client made by hand, in two parts (:mod:`fedmc.run.precompile`).

The first run of FedMC-ADMM compiles its generic kernels in two processes at once, beside the
run loading its data. A round's client step, steps 4(a)-(c) of Algorithm 1 (``fedmc-admm.md``),
is most of the compiling; it is two kernels that share no compiled code (a helper is compiled
into each kernel that calls it, :mod:`fedmc.core.kernels`): a child compiles steps (15) and
(13) (:func:`~fedmc.algorithms.fedmc_admm.kernels.item_steps`, the larger) while the run loads
its data; the run, its data loaded, compiles the set-up exchange, the evaluation, step (14)
(:func:`~fedmc.algorithms.fedmc_admm.kernels.user_steps`) and the server's prox (16). To reach the
kernels without compiling the data's layout kernels first, :func:`round_step` runs them on a
client of one rating whose arrays are built here, of the types a real shard holds
(:class:`~fedmc.core.shard.CSR`, :class:`~fedmc.core.shard.ItemMajor`), through the client's
own :func:`~fedmc.algorithms.fedmc_admm.client.local_steps`. With the consensus on rated
items (one user a client, ``--partition user``) a round is one kernel, a visit: the child
compiles it, the run its set-up exchange. ``tests/test_precompile.py`` checks that the two
processes leave nothing for a run to compile.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from types import SimpleNamespace
from typing import Any

import numpy as np

from fedmc.algorithms.fedmc_admm.client import ClientState, local_steps, round_upload
from fedmc.algorithms.fedmc_admm.config import FedMCADMMConfig
from fedmc.algorithms.fedmc_admm.rated import client as rated_client
from fedmc.algorithms.fedmc_admm.rated import server as rated_server
from fedmc.algorithms.fedmc_admm.server import ServerState, server_step
from fedmc.core.protocol import Message
from fedmc.core.shard import CSR, ItemMajor
from fedmc.core.uploads import sum_uploads


def round_step(cfg: FedMCADMMConfig) -> tuple[Callable[[], None], Callable[[], None]]:
    """The compile of one round of ``cfg`` in its two parts, each a call on a client of one
    rating: the child's (steps (15) and (13)) and the run's (step (14), then the server step (16)
    on the client's upload). With the consensus on rated items, the child's is a visit
    (:func:`~fedmc.algorithms.fedmc_admm.rated.client.visit`, the kernels of (14), (11) and
    (13) in one) and the run's the server's V-step on one item (the set-up exchange runs the
    rest)."""
    if cfg.consensus != "all":
        return partial(_one_rating_visit, cfg), partial(_one_item_v_step, cfg)
    return partial(_one_rating_round, cfg, True), partial(_one_rating_round, cfg, False)


def _one_rating_client() -> Any:
    """The fields a client step reads of a shard of one client holding one rating of one item,
    of the types a real shard holds."""
    ptr = np.array([0, 1], dtype=np.int64)
    first = np.zeros(1, dtype=np.int32)
    rating = np.zeros(1)
    return SimpleNamespace(client_ptr=ptr, train=CSR(ptr, first, rating),
                           item_major=ItemMajor(ptr, first, ptr, first, rating))


def _one_rating_round(cfg: FedMCADMMConfig, child: bool) -> None:
    """The child's part of :func:`round_step` or the run's: one client holding one rating of
    one item."""
    width = cfg.layout.width
    shard = _one_rating_client()
    state = ClientState(np.zeros((1, width)), np.zeros((1, 1, width)), np.zeros((1, 1, width)),
                        n_clients=1)
    client = np.zeros(1, dtype=np.int64)
    V = np.zeros((1, width))
    delta = np.zeros((1, 1, width))
    user_step, item_step = local_steps(cfg, shard, state, V, client, delta)
    if child:
        item_step()
        return
    user_step()
    uploads = round_upload(delta)
    summed = sum_uploads([(uploads, np.ones(1, dtype=np.int64))],
                         {name: upload.shape for name, upload in uploads.items()})
    server_step(cfg, ServerState(V, np.zeros_like(V), 1), summed,
                Message(1, "round", client, client, {"V": V}))


def _one_rating_visit(cfg: FedMCADMMConfig) -> None:
    """A visit of one client, one user holding one rating of one item (the consensus on rated
    items)."""
    width = cfg.layout.width
    shard = _one_rating_client()
    U, V = np.zeros((1, width)), np.zeros((1, width))
    state = rated_client.RatedState(U, U.copy(), np.zeros(1), np.zeros(1),
                                    np.zeros(1, dtype=np.int64),
                                    rated_client.Snapshots(1, width), one_user=True)
    state.seen[0] = state.snapshots.put(V, 0)
    client = np.zeros(1, dtype=np.int64)
    rated_client.visit(cfg, shard, state, V, client, shard.train.values,
                       rated_client.groups_of(shard, state), shard.client_ptr,
                       np.zeros((1, width)))


def _one_item_v_step(cfg: FedMCADMMConfig) -> None:
    """The server's round step of the consensus on rated items, on one item (a round nobody
    uploaded in)."""
    width = cfg.layout.width
    V = np.zeros((1, width))
    client = np.zeros(1, dtype=np.int64)
    rated_server.server_step(
        cfg, rated_server.RatedServerState(V, np.zeros_like(V), np.ones(1), np.zeros(1)),
        sum_uploads([], {rated_client.UPLOAD: (1, width), rated_client.COUNT: (1, 1)}),
        Message(1, "round", client, client, {"V": V}))

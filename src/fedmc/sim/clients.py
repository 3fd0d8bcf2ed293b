"""Where the clients of a simulation live, and how a message reaches them.

Both populations run the algorithm's own client step (:mod:`fedmc.core.protocol`), have each
batch's uploads prepared by the run's aggregator (:mod:`fedmc.federation.aggregator`: clipped
under DP) and return them unsummed (:meth:`SimulatedClients.run`); :meth:`exchange` has the
aggregator add them up for the round loop (:mod:`fedmc.federation.loop`), which sees only the
:class:`fedmc.federation.population.Exchange`. They differ only in how clients are grouped:

* :class:`BatchedClients`: every client in one stacked state, so a message is one call of the
  client step over all the clients it names (one Numba kernel): the fast simulation.
* :class:`PerClientClients`: every client in its own state, built from its own shard, and one
  call per client with a batch of one: the reference that the conformance suite
  (:mod:`fedmc.testing`) holds the batched simulation to, and the shape a real federation has.

These classes are the only code of the simulation that touches client state. A real
federation is another population behind the same interface (``fedmc.flower``): its clients
live in other processes, some replies may never come, and with secure aggregation the server
receives only the sum.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from fedmc.core.protocol import Algorithm, FederationInfo, InitialDraws, Message
from fedmc.core.uploads import upload_nbytes
from fedmc.federation.aggregator import Aggregator, Batch
from fedmc.federation.population import SIMULATED, Exchange

CHUNK_RATINGS = 2**22  # ratings per client step of a large message (see BatchedClients.run)


def multiplicities(msg: Message) -> tuple[np.ndarray, np.ndarray]:
    """Distinct uploading clients and how many times each counts."""
    ids, counts = np.unique(msg.upload, return_counts=True)
    return ids.astype(np.int64), counts


def add_up(parts: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """Evaluation sums of several groups of clients, added up in the order given."""
    total: dict[str, float] = {}
    for part in parts:
        for key, value in part.items():
            total[key] = total.get(key, 0.0) + value
    return total


class SimulatedClients:
    """A population in this process: every client named by a message answers; every noise is
    drawn on the sum (:data:`fedmc.federation.population.SIMULATED`)."""

    folds_evaluation = False  # an exchange costs what the clients compute: nothing to save
    placement = SIMULATED

    def run(self, msg: Message, aggregator: Aggregator) -> Iterable[Batch]:
        """Run the client step of the clients ``msg`` names; their uploads as they leave the
        clients (:meth:`Aggregator.prepare`), unsummed, batch by batch."""
        raise NotImplementedError

    def exchange(self, msg: Message, aggregator: Aggregator,
                 evaluate: Mapping[str, np.ndarray] | None = None) -> Exchange:
        """:meth:`run` and the aggregator's sum of the uploads (each batch summed as it comes,
        so the uploads of one batch at a time are held), after :meth:`evaluate` of
        ``evaluate``."""
        sums = None if evaluate is None else self.evaluate(evaluate)
        nbytes = 0

        def counted(batches: Iterable[Batch]) -> Iterator[Batch]:
            nonlocal nbytes
            for uploads, weights in batches:
                nbytes += upload_nbytes(uploads)
                yield uploads, weights

        return Exchange(aggregator.sum(counted(self.run(msg, aggregator)), msg), nbytes, msg,
                        sums=sums)

    def evaluate(self, model: Mapping[str, np.ndarray]) -> dict[str, float]:
        """Every client's evaluation sums under ``model``, added up."""
        raise NotImplementedError


class BatchedClients(SimulatedClients):
    """All clients in one stacked state; a message is one client step over its clients."""

    def __init__(self, algorithm: Algorithm, cfg: Any, data: Any, draws: InitialDraws,
                 info: FederationInfo) -> None:
        self.algorithm = algorithm
        self.cfg = cfg
        self.shard = data
        self.state = algorithm.init_clients(cfg, data, draws, info)

    def run(self, msg: Message, aggregator: Aggregator) -> Iterator[Batch]:
        """One client step over ``msg.compute`` (client ids are positions in the stack), or,
        for an algorithm whose clients share nothing in the batched state
        (``Algorithm.split_batches``), one per chunk of at most :data:`CHUNK_RATINGS` ratings,
        so that a message to every client of a large federation (a set-up exchange) never
        holds all their uploads at once."""
        uploaders, counts = multiplicities(msg)
        yield from self.step(msg, aggregator, msg.compute.astype(np.int64), uploaders, counts)

    def step(self, msg: Message, aggregator: Aggregator, compute: np.ndarray,
             uploaders: np.ndarray, counts: np.ndarray) -> Iterator[Batch]:
        """:meth:`run` of the clients at positions ``compute`` of the stack, of which
        ``uploaders`` upload, each counted ``counts`` times."""
        for chunk in self._chunks(compute):
            mine = np.isin(uploaders, chunk)
            self.state, uploads = self.algorithm.client_step(
                self.cfg, self.shard, self.state, msg, chunk, uploaders[mine]
            )
            if mine.any():
                yield aggregator.prepare(msg, uploads), counts[mine]

    def _chunks(self, clients: np.ndarray) -> Iterator[np.ndarray]:
        """``clients`` in consecutive chunks (all of them at once when the algorithm's clients
        share state in a batch, or the data are not ratings)."""
        if len(clients) == 0:
            return
        train = getattr(self.shard, "train", None)
        if not self.algorithm.split_batches or train is None:
            yield clients
            return
        ptr = self.shard.client_ptr
        held = np.cumsum(train.indptr[ptr[clients + 1]] - train.indptr[ptr[clients]])
        starts = np.searchsorted(held, np.arange(CHUNK_RATINGS, held[-1], CHUNK_RATINGS),
                                 side="right")
        yield from (part for part in np.split(clients, starts) if len(part))

    def evaluate(self, model: Mapping[str, np.ndarray]) -> dict[str, float]:
        """One evaluation call over every client."""
        return dict(self.algorithm.evaluate(self.cfg, self.shard, self.state, model))

    def user_factors(self) -> np.ndarray:
        """The stacked state's user factors."""
        return self.algorithm.user_factors(self.cfg, self.shard, self.state)

    def snapshot(self) -> Any:
        """The stacked state."""
        return self.state

    def restore(self, snapshot: Any) -> None:
        """Take up a stacked state."""
        self.state = snapshot


class PerClientClients(SimulatedClients):
    """Every client with its own shard and state; a message is a loop over its clients."""

    def __init__(self, algorithm: Algorithm, cfg: Any, data: Any, draws: InitialDraws,
                 info: FederationInfo) -> None:
        self.algorithm = algorithm
        self.cfg = cfg
        self.shards = [data.client_shard(c) for c in range(data.n_clients)]
        self.states = [
            algorithm.init_clients(
                cfg, shard, draws.take(np.array([c]), data.client_rows(c)), info
            )
            for c, shard in enumerate(self.shards)
        ]

    def run(self, msg: Message, aggregator: Aggregator) -> list[Batch]:
        """The client step of each client of ``msg.compute``, one at a time."""
        uploaders, counts = multiplicities(msg)
        weight = dict(zip(uploaders.tolist(), counts.tolist(), strict=True))
        me = np.zeros(1, dtype=np.int64)
        out = []
        for c in msg.compute.tolist():
            up = me if c in weight else me[:0]
            self.states[c], uploads = self.algorithm.client_step(
                self.cfg, self.shards[c], self.states[c], msg, me, up
            )
            if len(up):
                out.append((aggregator.prepare(msg, uploads), np.array([weight[c]])))
        return out

    def evaluate(self, model: Mapping[str, np.ndarray]) -> dict[str, float]:
        """Each client's sums, added up in client order."""
        return add_up(self.algorithm.evaluate(self.cfg, shard, state, model)
                      for shard, state in zip(self.shards, self.states, strict=True))

    def snapshot(self) -> Any:
        """Every client's state."""
        return self.states

    def restore(self, snapshot: Any) -> None:
        """Take up every client's state."""
        self.states = list(snapshot)

    def user_factors(self) -> np.ndarray:
        """Every client's user factors, stacked in client order."""
        return np.concatenate([
            self.algorithm.user_factors(self.cfg, shard, state)
            for shard, state in zip(self.shards, self.states, strict=True)
        ])

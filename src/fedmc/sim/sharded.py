"""A simulation's clients split into shards: each a stack of consecutive clients, living in this
process or in a Ray actor (:mod:`fedmc.sim.ray_shards`), summing its own clients' uploads.

pfl-research's pattern: a worker sums its users' uploads and the sums are reduced. Each shard is
a :class:`fedmc.sim.clients.BatchedClients` on its clients' data
(:meth:`fedmc.data.FederatedData.clients_shard`) and their initial draws, built once. A message
goes to every shard unchanged (clients are named by their ids in the whole population); a shard
runs the client step of the clients it holds, prepares their uploads with the run's aggregator
(clipping under user-level DP, as a batched run's) and sums them
(:meth:`fedmc.federation.aggregator.Aggregator.sum`); the driver adds the shards' sums
(:func:`fedmc.core.uploads.add_sums`) and the round loop hands them to the aggregator's release
as it does a batched run's. Sampling, the noise on the sums and every release stay with the
driver (:data:`fedmc.federation.population.SIMULATED`): the history equals the batched run's up
to the order of the floating-point additions (the conformance suite, :mod:`fedmc.testing`,
holds every algorithm to it at 1e-10).

Shards hold about equal numbers of training ratings (rows of Boolean data).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial
from typing import Any, Protocol

import numpy as np

from fedmc.core.protocol import Algorithm, FederationInfo, InitialDraws, Message
from fedmc.core.uploads import add_sums
from fedmc.federation.aggregator import Aggregator, Batch
from fedmc.federation.population import Exchange
from fedmc.federation.settings import Backend
from fedmc.sim.clients import BatchedClients, SimulatedClients, add_up, multiplicities


class Shard(BatchedClients):
    """The clients ``first`` onwards of a population, stacked: :class:`BatchedClients` on their
    data, to which a message names clients by their ids in the whole population."""

    def __init__(self, algorithm: Algorithm, cfg: Any, data: Any, draws: InitialDraws,
                 info: FederationInfo, first: int) -> None:
        super().__init__(algorithm, cfg, data, draws, info)
        self.first = first
        self.stop = first + data.n_clients

    def run(self, msg: Message, aggregator: Aggregator) -> Iterator[Batch]:
        """The client step of the clients of ``msg`` this shard holds."""
        uploaders, counts = multiplicities(msg)
        held = (uploaders >= self.first) & (uploaders < self.stop)
        compute = msg.compute.astype(np.int64)
        compute = compute[(compute >= self.first) & (compute < self.stop)] - self.first
        yield from self.step(msg, aggregator, compute, uploaders[held] - self.first,
                             counts[held])

    def partial(self, msg: Message, aggregator: Aggregator,
                evaluate: Mapping[str, np.ndarray] | None = None,
                ) -> tuple[dict[str, np.ndarray], int, int, dict[str, float] | None]:
        """This shard's share of an exchange: the sum of its clients' prepared uploads, their
        number (with multiplicity), the bytes they uploaded and, with ``evaluate``, its
        clients' evaluation sums of that model (on their states before the step)."""
        exchange = self.exchange(msg, aggregator, evaluate)
        return (dict(exchange.summed.arrays), exchange.summed.count, exchange.bytes_up,
                exchange.sums)


class Workers(Protocol):
    """Where the shards live: :class:`InProcess` or Ray's actors."""

    def start(self, *args: Any) -> Any:
        """A shard built from ``args`` (:class:`Shard`'s), as a handle :meth:`call` takes."""
        ...

    def call(self, shards: Sequence[Any], method: str, args: Sequence[tuple[Any, ...]],
             ) -> list[Any]:
        """``method`` of each shard with its ``args``; the results in the shards' order."""
        ...


class InProcess:
    """Shards in this process, called one after the other."""

    def start(self, *args: Any) -> Shard:
        return Shard(*args)

    def call(self, shards: Sequence[Any], method: str, args: Sequence[tuple[Any, ...]],
             ) -> list[Any]:
        return [getattr(shard, method)(*a) for shard, a in zip(shards, args, strict=True)]


def shard_bounds(data: Any, shards: int) -> np.ndarray:
    """Where ``shards`` runs of consecutive clients of ``data`` begin (and the last ends),
    each holding about the same number of training ratings (rows of Boolean data), none
    empty: as many as there are clients where there are fewer."""
    ptr, n = data.client_ptr, data.n_clients
    count = min(shards, n)
    train = getattr(data, "train", None)
    held = ptr if train is None else train.indptr[ptr]  # cumulative, at client boundaries
    bounds = np.zeros(count + 1, dtype=np.int64)
    bounds[1:count] = np.searchsorted(held, held[-1] * np.arange(1, count) / count)
    bounds[count] = n
    for k in range(1, count):  # one client at least in each, before and after
        bounds[k] = min(max(bounds[k], bounds[k - 1] + 1), n - (count - k))
    return bounds


class ShardedClients(SimulatedClients):
    """The population in ``shards`` shards on ``workers`` (module docstring). A round's
    evaluation goes with the next round's message (``folds_evaluation``): one call of each
    shard a round, not two; the history is the same."""

    folds_evaluation = True

    def __init__(self, algorithm: Algorithm, cfg: Any, data: Any, draws: InitialDraws,
                 info: FederationInfo, *, shards: int = 2,
                 workers: Workers | None = None) -> None:
        self.workers = InProcess() if workers is None else workers
        bounds = shard_bounds(data, shards)
        ptr = data.client_ptr
        self.shards = [
            self.workers.start(algorithm, cfg, data.clients_shard(a, b),
                               draws.take(np.arange(a, b), slice(int(ptr[a]), int(ptr[b]))),
                               info, int(a))
            for a, b in zip(bounds[:-1], bounds[1:], strict=True)]

    def _each(self, method: str, *args: Any) -> list[Any]:
        return self.workers.call(self.shards, method, [args] * len(self.shards))

    def exchange(self, msg: Message, aggregator: Aggregator,
                 evaluate: Mapping[str, np.ndarray] | None = None) -> Exchange:
        """Every shard's sum of its clients' uploads, added up, and with ``evaluate`` its
        clients' evaluation sums of that model, added up in the shards' order."""
        parts = self._each("partial", msg, aggregator, evaluate)
        return Exchange(add_sums(((arrays, count) for arrays, count, _, _ in parts),
                                 aggregator.shapes),
                        sum(nbytes for _, _, nbytes, _ in parts), msg,
                        sums=None if evaluate is None else add_up(p[3] for p in parts))

    def evaluate(self, model: Mapping[str, np.ndarray]) -> dict[str, float]:
        """Every shard's evaluation sums, added up in the shards' order."""
        return add_up(self._each("evaluate", model))

    def user_factors(self) -> np.ndarray:
        """The shards' user factors, in client order."""
        return np.concatenate(self._each("user_factors"))

    def snapshot(self) -> Any:
        """Every shard's stacked state."""
        return self._each("snapshot")

    def restore(self, snapshot: Any) -> None:
        """Take up every shard's stacked state."""
        self.workers.call(self.shards, "restore", [(state,) for state in snapshot])


def population(backend: Backend) -> Callable[..., ShardedClients] | None:
    """The population a run's ``backend`` places its clients in: None for the batched
    simulation (:class:`fedmc.sim.clients.BatchedClients`), else its shards as Ray actors
    (Ray started, or joined, here)."""
    if backend.kind == "batched":
        return None
    from fedmc.sim.ray_shards import RayActors

    return partial(ShardedClients, shards=backend.workers, workers=RayActors(backend.address))

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

Shards hold about equal numbers of training ratings (rows of Boolean data). A shard lives in a
:class:`ShardHost`, which holds its data: cut by the driver from the whole set and sent once,
or generated there (a synthetic set's users: :mod:`fedmc.run.shard_load`), so that no process
holds the whole set.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, Protocol

import numpy as np

from fedmc.core.protocol import Algorithm, FederationInfo, InitialDraws, Message
from fedmc.core.scale import Normalizer
from fedmc.core.uploads import add_sums
from fedmc.data.federated import DataOutline
from fedmc.data.shard_source import LoadingShard, ShardSource, ValueFacts, balanced_bounds
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


class ShardHost:
    """Where a shard lives (an object of this process, or a Ray actor): its clients' data,
    loaded once (:meth:`load` and :meth:`settle`: generated here; :meth:`hold`: sent by the
    driver), and the :class:`Shard` of its clients that a simulation starts on them
    (:meth:`start`, again for a second simulation on the same data) and calls (:meth:`call`)."""

    def __init__(self) -> None:
        self.data: Any = None
        self.loading: LoadingShard | None = None
        self.clients: Shard | None = None

    def load(self, source: ShardSource) -> ValueFacts:
        """Generate the shard's ratings; the facts of their training values, for the driver
        to fit the normalizer on."""
        self.loading = LoadingShard(source)
        return self.loading.facts()

    def settle(self, normalizer: Normalizer, value_range: tuple[float, float]) -> None:
        """Build the shard's data with the driver's normalizer and rating range."""
        assert self.loading is not None, "settle follows load"
        self.data = self.loading.build(normalizer, value_range)
        self.loading = None

    def hold(self, data: Any) -> None:
        """Keep ``data``, the shard's data as the driver cut them."""
        self.data = data

    def start(self, algorithm: Algorithm, cfg: Any, draws: InitialDraws, info: FederationInfo,
              first: int) -> None:
        """The shard's clients, from their initial ``draws``: their first is ``first``."""
        self.clients = Shard(algorithm, cfg, self.data, draws, info, first)

    def call(self, method: str, *args: Any) -> Any:
        """``method`` of the shard's clients."""
        assert self.clients is not None, "a call follows start"
        return getattr(self.clients, method)(*args)


class Workers(Protocol):
    """Where the shards live: :class:`InProcess` or Ray's actors."""

    def host(self) -> Any:
        """A new :class:`ShardHost`, as a handle :meth:`call` takes."""
        ...

    def call(self, hosts: Sequence[Any], method: str, args: Sequence[tuple[Any, ...]],
             ) -> list[Any]:
        """``method`` of each host with its ``args``; the results in the hosts' order."""
        ...


class InProcess:
    """Shards in this process, called one after the other."""

    def host(self) -> ShardHost:
        return ShardHost()

    def call(self, hosts: Sequence[Any], method: str, args: Sequence[tuple[Any, ...]],
             ) -> list[Any]:
        return [getattr(host, method)(*a) for host, a in zip(hosts, args, strict=True)]


@dataclass(frozen=True, kw_only=True)
class ShardedData(DataOutline):
    """Data whose shards loaded their own ratings (:mod:`fedmc.run.shard_load`): what the
    driver knows of them, the hosts that hold them and where their clients begin
    (``bounds``, as :func:`shard_bounds`)."""

    hosts: tuple[Any, ...]
    bounds: np.ndarray


def shard_bounds(data: Any, shards: int) -> np.ndarray:
    """Where ``shards`` runs of consecutive clients of ``data`` begin (and the last ends),
    each holding about the same number of training ratings (rows of Boolean data), none
    empty: as many as there are clients where there are fewer."""
    ptr = data.client_ptr
    train = getattr(data, "train", None)
    return balanced_bounds(ptr if train is None else train.indptr[ptr], shards)


class ShardedClients(SimulatedClients):
    """The population in ``shards`` shards on ``workers`` (module docstring). A round's
    evaluation goes with the next round's message (``folds_evaluation``): one call of each
    shard a round, not two; the history is the same."""

    folds_evaluation = True

    def __init__(self, algorithm: Algorithm, cfg: Any, data: Any, draws: InitialDraws,
                 info: FederationInfo, *, shards: int = 2,
                 workers: Workers | None = None) -> None:
        self.workers = InProcess() if workers is None else workers
        if isinstance(data, ShardedData):  # each host loaded its own
            bounds, self.hosts = data.bounds, list(data.hosts)
        else:
            bounds = shard_bounds(data, shards)
            self.hosts = [self.workers.host() for _ in bounds[1:]]
            self.workers.call(self.hosts, "hold", [(data.clients_shard(a, b),)
                                                   for a, b in pairwise(bounds)])
        ptr = data.client_ptr
        self.workers.call(self.hosts, "start", [
            (algorithm, cfg, draws.take(np.arange(a, b), slice(int(ptr[a]), int(ptr[b]))),
             info, int(a))
            for a, b in pairwise(bounds)])

    def _each(self, method: str, *args: Any) -> list[Any]:
        return self.workers.call(self.hosts, "call", [(method, *args)] * len(self.hosts))

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
        self.workers.call(self.hosts, "call", [("restore", state) for state in snapshot])


@dataclass(frozen=True)
class ShardedPopulation:
    """Clients in ``shards`` shards on ``workers``: a population factory (:func:`fedmc.sim.
    simulate`'s ``driver``) whose shards may also load their own data first
    (:func:`fedmc.run.shard_load.load_on_shards`)."""

    workers: Workers
    shards: int

    def __call__(self, algorithm: Algorithm, cfg: Any, data: Any, draws: InitialDraws,
                 info: FederationInfo) -> ShardedClients:
        return ShardedClients(algorithm, cfg, data, draws, info, shards=self.shards,
                              workers=self.workers)


def population(backend: Backend) -> ShardedPopulation | None:
    """The population a run's ``backend`` places its clients in: None for the batched
    simulation (:class:`fedmc.sim.clients.BatchedClients`), else its shards as Ray actors
    (Ray started, or joined, here)."""
    if backend.kind == "batched":
        return None
    from fedmc.sim.ray_shards import RayActors

    return ShardedPopulation(RayActors(backend.address, backend.workers), backend.workers)

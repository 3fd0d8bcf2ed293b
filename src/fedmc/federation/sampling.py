"""Client selection per round: which clients take part in round ``k``.

A sampler draws round ``k``'s clients from the server's stream (:meth:`Sampler.sample`). One
with a memory across rounds (cyclic participation: every client once in every cycle of rounds)
is :func:`started` once a run, which draws its secret (the order of the clients) from the same
stream; the started sampler is part of a checkpoint, so a resumed run keeps it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from fedmc.errors import ConfigError

if TYPE_CHECKING:
    from fedmc.federation.settings import SamplingKind


class Sampler(Protocol):
    """Anything that draws the clients of a round."""

    @property
    def n_clients(self) -> int:
        """Number of clients."""
        ...

    def sample(self, rng: np.random.Generator, round_: int = 1) -> np.ndarray:
        """Sorted ``int64`` ids of the clients taking part in round ``round_``."""
        ...


@dataclass(frozen=True)
class UniformSampler:
    """``active`` of ``n_clients`` clients uniformly without replacement (the paper: 10 of 100).

    Each client takes part with probability ``active / n_clients`` (Assumption 4.3).
    """

    n_clients: int
    active: int

    def __post_init__(self) -> None:
        if not 1 <= self.active <= self.n_clients:
            raise ConfigError(
                f"active clients per round must lie in [1, {self.n_clients}], got {self.active}"
            )

    def sample(self, rng: np.random.Generator, round_: int = 1) -> np.ndarray:
        """Sorted client ids of one round."""
        if self.active == self.n_clients:
            return np.arange(self.n_clients, dtype=np.int64)
        return np.sort(rng.choice(self.n_clients, size=self.active, replace=False)).astype(np.int64)

    @property
    def probabilities(self) -> np.ndarray:
        """Inclusion probability ``p_i`` of every client."""
        return np.full(self.n_clients, self.active / self.n_clients)


@dataclass(frozen=True)
class BernoulliSampler:
    """Every client ``i`` takes part independently with probability ``p_i`` (Assumption 4.3).

    A round in which no client is drawn is legal: the server's state does not change.
    """

    probabilities: np.ndarray

    def __post_init__(self) -> None:
        p = np.asarray(self.probabilities, dtype=float)
        if p.ndim != 1 or len(p) == 0 or np.any(p <= 0) or np.any(p > 1):
            raise ConfigError("participation probabilities must be a non-empty vector in (0, 1]")

    @property
    def n_clients(self) -> int:
        """Number of clients."""
        return len(self.probabilities)

    def sample(self, rng: np.random.Generator, round_: int = 1) -> np.ndarray:
        """Sorted client ids of one round."""
        return np.flatnonzero(rng.random(self.n_clients) < self.probabilities).astype(np.int64)


@dataclass(frozen=True)
class DropoutSampler:
    """Wrap a sampler: each drawn client drops out independently with probability ``rate``.

    Models devices that fail to report in a round (RFRec's robustness test, Table 3); the
    server aggregates over the clients that remain.
    """

    base: UniformSampler | BernoulliSampler | WithReplacementSampler | CyclicSampler
    rate: float

    def __post_init__(self) -> None:
        if not 0.0 <= self.rate < 1.0:
            raise ConfigError(f"dropout rate must lie in [0, 1), got {self.rate}")

    @property
    def n_clients(self) -> int:
        """Number of clients."""
        return self.base.n_clients

    def sample(self, rng: np.random.Generator, round_: int = 1) -> np.ndarray:
        """Sorted ids of the drawn clients that did not drop out."""
        drawn = self.base.sample(rng, round_)
        return drawn[rng.random(len(drawn)) >= self.rate]


@dataclass(frozen=True)
class WithReplacementSampler:
    """``m`` draws with replacement, uniform over ``n_clients`` (``omega_p = 1/p`` in the
    FedMAvg poster). Returns a sorted multiset; a client drawn twice uploads once and counts
    twice in the sum."""

    n_clients: int
    m: int

    def __post_init__(self) -> None:
        if self.n_clients < 1 or self.m < 1:
            raise ConfigError(f"need n_clients >= 1 and m >= 1, got {self.n_clients}, {self.m}")

    def sample(self, rng: np.random.Generator, round_: int = 1) -> np.ndarray:
        """Sorted client ids of one round, repeats included."""
        return np.sort(rng.integers(0, self.n_clients, size=self.m)).astype(np.int64)


@dataclass(frozen=True)
class CyclicSampler:
    """Cyclic participation: a secret random order of the clients is cut into ``cycle``
    bands of (nearly) equal size, and round ``k`` takes band ``(k - 1) mod cycle``: every
    client takes part in exactly one of every ``cycle`` consecutive rounds, so in ``K``
    rounds at most ``ceil(K / cycle)`` times, whoever samples. The bound on participation is
    what user-level DP against the server, which knows the cohorts, composes
    (:class:`fedmc.privacy.accounting.Plan` ``cycle``): no secret of the sampling is needed
    for it. The order is drawn once a run (:func:`started`); before that the sampler has none.
    """

    n_clients: int
    cycle: int
    order: np.ndarray | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.cycle <= self.n_clients:
            raise ConfigError(f"a cycle of participation must lie in [1, {self.n_clients}] "
                              f"rounds (the clients), got {self.cycle}")

    def started(self, rng: np.random.Generator) -> CyclicSampler:
        """The sampler of one run: its secret order of the clients drawn from ``rng``."""
        return CyclicSampler(self.n_clients, self.cycle, rng.permutation(self.n_clients))

    def sample(self, rng: np.random.Generator, round_: int = 1) -> np.ndarray:
        """Sorted ids of round ``round_``'s band (no draw: the order is the run's)."""
        if self.order is None:
            raise ValueError("a cyclic sampler draws its order once a run: sampling.started")
        return np.sort(self.order[(round_ - 1) % self.cycle::self.cycle]).astype(np.int64)


def started(sampler: Sampler, rng: np.random.Generator) -> Sampler:
    """``sampler`` as one run uses it: a cyclic sampler (also under dropout) with its order
    drawn from ``rng``; any other as it is (nothing drawn)."""
    if isinstance(sampler, CyclicSampler):
        return sampler.started(rng)
    if isinstance(sampler, DropoutSampler) and isinstance(sampler.base, CyclicSampler):
        return DropoutSampler(sampler.base.started(rng), sampler.rate)
    return sampler


def cycle_of(sampler: Sampler) -> int:
    """The rounds of ``sampler``'s cycle of participation (:class:`CyclicSampler`; 1 for any
    other: a client may take part in every round)."""
    base = sampler.base if isinstance(sampler, DropoutSampler) else sampler
    return base.cycle if isinstance(base, CyclicSampler) else 1


def make_sampler(
    n_clients: int,
    active: int | None = None,
    sampling: SamplingKind = "uniform",
    *,
    participation: float | None = None,
    dropout: float = 0.0,
):
    """The client sampler of a run.

    Parameters
    ----------
    n_clients
        ``p``.
    active
        Clients per round: the fixed size of uniform sampling (all when None), the number of
        draws with replacement, and the default ``participation = active / p`` of Bernoulli
        sampling.
    sampling
        ``uniform`` (``active`` distinct clients), ``bernoulli`` (each client independently
        with probability ``participation``), ``replacement`` (``active`` draws) or
        ``cyclic`` (every client once in every ``round(1 / participation)`` rounds, or
        ``ceil(p / active)``: :class:`CyclicSampler`).
    dropout
        Share of the drawn clients that drop out of a round (:class:`DropoutSampler`).
    """
    count = n_clients if active is None else active
    sampler: UniformSampler | BernoulliSampler | WithReplacementSampler | CyclicSampler
    if sampling == "cyclic":
        cycle = (max(1, round(1 / participation)) if participation is not None else
                 -(-n_clients // count))
        sampler = CyclicSampler(n_clients, min(cycle, n_clients))
    elif sampling == "bernoulli":
        prob = participation or min(count, n_clients) / n_clients
        sampler = BernoulliSampler(np.full(n_clients, prob))
    elif sampling == "replacement":
        sampler = WithReplacementSampler(n_clients, count)
    elif sampling == "uniform":
        if count > n_clients:
            raise ConfigError(f"`active={count}` exceeds the {n_clients} clients")
        sampler = UniformSampler(n_clients, count)
    else:
        raise ConfigError(f"unknown sampling {sampling!r}: use "
                          "uniform|bernoulli|replacement|cyclic")
    return DropoutSampler(sampler, dropout) if dropout > 0 else sampler


def poisson_rate(sampler: Sampler) -> float:
    """The rate ``q`` at which ``sampler`` includes each client independently (Poisson
    sampling, which the accountant amplifies); 1 when every client takes part in every round.

    Dropout after Poisson sampling leaves each client's inclusion independent at a lower rate,
    so ``q`` (the rate before dropout) bounds it. Cyclic participation is accounted without
    amplification (rate 1), over the rounds a client can take part in (:func:`cycle_of`).
    """
    base = sampler.base if isinstance(sampler, DropoutSampler) else sampler
    if (isinstance(base, UniformSampler) and base.active == base.n_clients
            or isinstance(base, CyclicSampler)):
        return 1.0
    if isinstance(base, BernoulliSampler):
        rates = np.unique(base.probabilities)
        if len(rates) == 1:
            return float(rates[0])
    raise ConfigError("user-level DP needs Poisson sampling (`sampling='bernoulli'`, one rate "
                      "for every client), cyclic participation (`sampling='cyclic'`) or "
                      "every client in every round")

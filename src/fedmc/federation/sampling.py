"""Client selection per round: which clients take part in round ``k``."""

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

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        """Sorted ``int64`` ids of the clients taking part."""
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

    def sample(self, rng: np.random.Generator) -> np.ndarray:
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

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        """Sorted client ids of one round."""
        return np.flatnonzero(rng.random(self.n_clients) < self.probabilities).astype(np.int64)


@dataclass(frozen=True)
class DropoutSampler:
    """Wrap a sampler: each drawn client drops out independently with probability ``rate``.

    Models devices that fail to report in a round (RFRec's robustness test, Table 3); the
    server aggregates over the clients that remain.
    """

    base: UniformSampler | BernoulliSampler | WithReplacementSampler
    rate: float

    def __post_init__(self) -> None:
        if not 0.0 <= self.rate < 1.0:
            raise ConfigError(f"dropout rate must lie in [0, 1), got {self.rate}")

    @property
    def n_clients(self) -> int:
        """Number of clients."""
        return self.base.n_clients

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        """Sorted ids of the drawn clients that did not drop out."""
        drawn = self.base.sample(rng)
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

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        """Sorted client ids of one round, repeats included."""
        return np.sort(rng.integers(0, self.n_clients, size=self.m)).astype(np.int64)


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
        with probability ``participation``) or ``replacement`` (``active`` draws).
    dropout
        Share of the drawn clients that drop out of a round (:class:`DropoutSampler`).
    """
    count = n_clients if active is None else active
    sampler: UniformSampler | BernoulliSampler | WithReplacementSampler
    if sampling == "bernoulli":
        prob = participation or min(count, n_clients) / n_clients
        sampler = BernoulliSampler(np.full(n_clients, prob))
    elif sampling == "replacement":
        sampler = WithReplacementSampler(n_clients, count)
    elif sampling == "uniform":
        if count > n_clients:
            raise ConfigError(f"`active={count}` exceeds the {n_clients} clients")
        sampler = UniformSampler(n_clients, count)
    else:
        raise ConfigError(f"unknown sampling {sampling!r}: use uniform|bernoulli|replacement")
    return DropoutSampler(sampler, dropout) if dropout > 0 else sampler


def poisson_rate(sampler: Sampler) -> float:
    """The rate ``q`` at which ``sampler`` includes each client independently (Poisson
    sampling, which the accountant amplifies); 1 when every client takes part in every round.

    Dropout after Poisson sampling leaves each client's inclusion independent at a lower rate,
    so ``q`` (the rate before dropout) bounds it.
    """
    base = sampler.base if isinstance(sampler, DropoutSampler) else sampler
    if isinstance(base, UniformSampler) and base.active == base.n_clients:
        return 1.0
    if isinstance(base, BernoulliSampler):
        rates = np.unique(base.probabilities)
        if len(rates) == 1:
            return float(rates[0])
    raise ConfigError("user-level DP needs Poisson sampling (`sampling='bernoulli'`, one rate "
                      "for every client) or every client in every round")

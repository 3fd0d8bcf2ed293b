"""The server's side of a simulation: sample, send, sum, step, evaluate, record.

:func:`simulate` runs any :class:`fedmc.core.protocol.Algorithm` on any client population
(:mod:`fedmc.sim.clients`). Each exchange is: the algorithm's message, the clients' steps, the
sum of their uploads (:func:`fedmc.core.uploads.sum_uploads`, plus the simulated local noise
of algorithms that have some), the algorithm's server step on that sum. The server step never
sees anything else.

Randomness: one seed gives two streams, the initial draws (:attr:`Algorithm.draws`) and the
server's stream (client sampling, coins, simulated noise, in that order within a round), so
every client population produces the same history bit for bit (``seconds`` aside).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np

from fedmc.core.compile_time import compile_seconds
from fedmc.core.protocol import Algorithm, FederationInfo, InitialDraws, Message
from fedmc.core.uploads import Summed
from fedmc.errors import ConfigError
from fedmc.privacy.accounting import Plan, Spent, UserDP
from fedmc.privacy.gaussian import add_noise, with_clipping
from fedmc.sim.clients import BatchedClients, ClientPopulation, PerClientClients
from fedmc.sim.history import History
from fedmc.sim.sampling import BernoulliSampler, DropoutSampler, UniformSampler

RoundCallback = Callable[[int, dict[str, float] | None], None]
Driver = Literal["batched", "per-client"]
PopulationFactory = Callable[[Algorithm, Any, Any, InitialDraws, FederationInfo],
                             ClientPopulation]
"""Builds the clients of a run from ``(algorithm, cfg, data, draws, info)``, as the classes of
:mod:`fedmc.sim.clients` do."""


class Sampler(Protocol):
    """Anything that draws the clients of a round (see :mod:`fedmc.sim.sampling`)."""

    n_clients: int

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        """Sorted ``int64`` ids of the clients taking part."""
        ...


@dataclass
class Simulation:
    """What a simulation leaves: the history, the server's final state, the clients."""

    history: History
    server: Any
    clients: ClientPopulation
    info: FederationInfo


class _Server:
    """The server's loop state: its algorithm state, byte counters and random stream."""

    def __init__(self, algorithm: Algorithm, cfg: Any, info: FederationInfo,
                 state: Any, clients: ClientPopulation, rng: np.random.Generator,
                 dp_std: Callable[[Message], float] | None = None) -> None:
        self.algorithm = algorithm
        self.cfg = cfg
        self.state = state
        self.clients = clients
        self.rng = rng
        self.shapes = algorithm.upload_shapes(cfg, info)
        self.noise = algorithm.local_noise(cfg, info)
        self.dp_std = dp_std
        self.bytes_up = 0
        self.bytes_down = 0

    def exchange(self, msg: Message, evaluate: _Evaluation | None = None) -> None:
        """Send ``msg``, take the sum of what comes back, run the server step on the sum (with
        the message as it was carried out: only the clients whose replies were included).
        With ``evaluate``, the exchange also carries that evaluation, which is finished
        before the server step (the state is still the one it evaluates)."""
        std = 0.0 if self.dp_std is None else self.dp_std(msg)
        done = self.clients.exchange(msg, self.shapes,
                                     None if evaluate is None else evaluate.model, std)
        if evaluate is not None:
            evaluate.finish(done.sums or {})
        summed = done.summed if done.noised else self._noised(done.summed)
        if std > 0 and done.dp_share < 1.0:  # user-level DP: the server step never sees the
            # sum without the noise (the rest of it, when the clients added shares)
            summed = add_noise(summed, std * np.sqrt(1.0 - done.dp_share), self.rng)
        self.bytes_up += done.bytes_up
        self.bytes_down += len(msg.recipients) * msg.nbytes
        self.state = self.algorithm.server_step(self.cfg, self.state, summed, done.message)

    def _noised(self, summed: Summed) -> Summed:
        """The sum with the noise its clients would have added (local DP), if any."""
        if not self.noise:
            return summed
        arrays = dict(summed.arrays)
        for name, mechanism in self.noise.items():
            arrays[name] = mechanism.perturb_sum(arrays[name], summed.count, self.rng)
        return summed.with_arrays(arrays)


@dataclass
class _Evaluation:
    """A round's evaluation: its model, and what to do with the clients' sums once they come
    (write the round's history row and report it)."""

    model: dict[str, np.ndarray]
    finish: Callable[[dict[str, float]], None]


class _TrainingClock:
    """Seconds of training so far, without the time Numba spent compiling kernels in them
    (the first run at a new rank compiles; that is reported on its own, not as training)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.start()

    def start(self) -> None:
        self._t0 = time.perf_counter()
        self._c0 = compile_seconds()

    def stop(self) -> None:
        elapsed = time.perf_counter() - self._t0
        self.seconds += elapsed - (compile_seconds() - self._c0)


def simulate(
    algorithm: Algorithm,
    cfg: Any,
    data: Any,
    sampler: Sampler,
    rounds: int,
    seed: int | np.random.Generator = 0,
    eval_every: int = 1,
    callback: RoundCallback | None = None,
    driver: Driver | PopulationFactory = "batched",
    dp: UserDP | None = None,
) -> Simulation:
    """Run ``rounds`` rounds of ``algorithm`` with settings ``cfg`` on ``data``.

    Parameters
    ----------
    algorithm, cfg
        The algorithm's functions and a validated instance of its ``Config``.
    data
        The federated data (:class:`fedmc.data.FederatedData` or Boolean data).
    sampler
        Draws the clients of each round.
    rounds
        Number of rounds ``K``.
    seed
        Seed of the initial draws and the server's stream (two independent streams); or one
        generator that serves as both, in that order (how the Felb benchmarks were recorded).
    eval_every
        Evaluate after every ``eval_every`` rounds (and always after the last one).
    callback
        Called after each round with ``(round, row or None)``; for progress display.
    driver
        ``"batched"`` (all clients stacked, the fast path), ``"per-client"`` (the reference
        loop over clients), or a factory of another population (a real federation:
        ``fedmc.flower``).
    dp
        User-level differential privacy (:mod:`fedmc.privacy.gaussian`): every upload clipped,
        Gaussian noise on every sum, the budget of the set-up and the rounds accounted
        (:mod:`fedmc.privacy.accounting`); needs Poisson sampling (``BernoulliSampler`` with
        one rate) or every client in every round.

    Returns
    -------
    Simulation
        The history has rows with ``round``, the algorithm's metrics, cumulative
        ``bytes_up``/``bytes_down``, ``seconds`` (cumulative training time; evaluation and
        kernel compilation excluded) and ``clients`` (clients sampled in that round); with
        ``dp``, ``epsilon`` (spent so far at ``dp.delta``) and ``dp_noise`` (the multiplier).
    """
    if rounds < 0:
        raise ConfigError(f"rounds must be >= 0, got {rounds}")
    if eval_every < 1:
        raise ConfigError(f"eval-every must be >= 1, got {eval_every}")
    if sampler.n_clients != data.n_clients:
        raise ConfigError(
            f"the sampler draws from {sampler.n_clients} clients, the data has {data.n_clients}"
        )
    population = (driver if callable(driver)
                  else {"batched": BatchedClients, "per-client": PerClientClients}[driver])
    if isinstance(seed, np.random.Generator):
        init_rng = server_rng = seed
    else:
        init_rng, server_rng = map(np.random.default_rng, np.random.SeedSequence(seed).spawn(2))
    info = data.federation_info()
    history = History()

    clock = _TrainingClock()
    draws = algorithm.draws(cfg, data, init_rng)
    state = algorithm.init_server(cfg, info, draws.server)
    setup = algorithm.setup(cfg, state, info)
    dp_std = None
    if dp is not None:
        plan = Plan(rounds, poisson_rate(sampler), setup is not None and len(setup.upload) > 0,
                    dp.setup_scale)
        noise = dp.multiplier(plan)
        spent = Spent(plan, noise, dp.delta)
        algorithm = with_clipping(algorithm, dp.clip_of)

        def dp_std(msg: Message) -> float:
            """Noise of an exchange; none on a set-up exchange that nobody uploads in."""
            if msg.phase != "setup":
                return noise * dp.clip
            return noise * dp.clip_of("setup") * dp.setup_scale if plan.setup else 0.0

    clients = population(algorithm, cfg, data, draws, info)
    server = _Server(algorithm, cfg, info, state, clients, server_rng, dp_std)
    if setup is not None:
        server.exchange(setup)
    clock.stop()

    def evaluation(k: int, n_clients: int) -> _Evaluation:
        """Round ``k``'s evaluation: its row is written (and reported) once the sums come."""
        row: dict[str, float] = {"bytes_up": server.bytes_up, "bytes_down": server.bytes_down,
                                 "seconds": clock.seconds, "clients": n_clients}
        if dp is not None:
            row.update(epsilon=spent(k), dp_noise=noise)

        def finish(sums: dict[str, float]) -> None:
            history.append({"round": k, **algorithm.metrics(cfg, server.state, sums, info),
                            **row})
            if callback is not None and k > 0:
                callback(k, history.rows[-1])

        return _Evaluation(algorithm.model(cfg, server.state), finish)

    # A population that folds evaluations sends each with the next round's message; the last
    # one (and every one, otherwise) is an exchange of its own.
    waiting: _Evaluation | None = evaluation(0, 0)
    for k in range(1, rounds + 1):
        if waiting is not None and not clients.folds_evaluation:
            waiting.finish(clients.evaluate(waiting.model))
            waiting = None
        clock.start()
        sampled = sampler.sample(server.rng)
        server.exchange(algorithm.message(cfg, server.state, k, sampled, server.rng), waiting)
        clock.stop()
        waiting = evaluation(k, len(sampled)) if (k % eval_every == 0 or k == rounds) else None
        if waiting is None and callback is not None:
            callback(k, None)
    if waiting is not None:
        waiting.finish(clients.evaluate(waiting.model))
    return Simulation(history, server.state, clients, info)


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
    raise ConfigError("user-level DP needs Poisson sampling (--sampling bernoulli, one rate "
                      "for every client) or every client in every round")

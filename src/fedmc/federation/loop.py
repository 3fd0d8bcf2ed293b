"""The round, shared by every driver: sample, send, release the sum, step, evaluate, record.

:func:`run_rounds` runs any :class:`fedmc.core.protocol.Algorithm` over any client population
(:class:`fedmc.federation.population.ClientPopulation`): the simulation's
(:func:`fedmc.sim.simulate`) and a real federation's (``fedmc.flower.server_app``). Each
exchange is: the algorithm's message, the population's exchange (the clients' steps and the
sum of their uploads), the aggregator's release of that sum (:mod:`fedmc.federation.
aggregator`: any noise the clients did not add), the algorithm's server step on it. The server
step never sees anything else.

Randomness: one seed gives two streams (:func:`streams`), the initial draws
(:attr:`Algorithm.draws`, taken by the driver) and the server's stream (client sampling,
coins, simulated noise, in that order within a round), so every population produces the same
history bit for bit (``seconds`` aside).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedmc.core.compile_time import compile_seconds
from fedmc.core.protocol import Algorithm, FederationInfo, Message
from fedmc.errors import ConfigError
from fedmc.federation.aggregator import Aggregator
from fedmc.federation.callbacks import RoundCallback, RoundEnd, callbacks_of
from fedmc.federation.history import History
from fedmc.federation.population import ClientPopulation
from fedmc.federation.sampling import Sampler, cycle_of, poisson_rate, started
from fedmc.federation.settings import Schedule
from fedmc.federation.validation import EarlyStop
from fedmc.privacy.accounting import Plan, UserDP

__all__ = ["Checkpoint", "Outcome", "RoundCallback", "Rounds", "TrainingClock", "run_rounds",
           "streams"]


@dataclass
class Outcome:
    """What a run of the rounds leaves: the history, the server's final state, the clients,
    the federation's facts and what its DP guarantees
    (:meth:`fedmc.federation.aggregator.Aggregator.guarantee`)."""

    history: History
    server: Any
    clients: ClientPopulation
    info: FederationInfo
    guarantee: dict[str, Any]

    def model(self, algorithm: Algorithm, cfg: Any,
              stop: EarlyStop | None = None) -> dict[str, np.ndarray]:
        """The model the run publishes: with early stopping (``stop``, the run's watcher),
        its best round's, else its last."""
        if stop is not None and stop.best is not None:
            return dict(stop.best.model)
        return dict(algorithm.model(cfg, self.server))


def streams(seed: int | np.random.Generator, secret: bool = False,
            ) -> tuple[np.random.Generator, np.random.Generator]:
    """The two streams of a run: the initial draws' and the server's (independent children of
    ``seed``); or one generator that serves as both, in that order (how the Felb benchmarks
    were recorded). With ``secret`` (a private DP run) the server's stream, which samples the
    clients and draws the noise, is seeded from the operating system's entropy instead: the
    published seed gives no way to remove the noise or to know who was sampled."""
    if isinstance(seed, np.random.Generator):
        return seed, seed
    init, server = np.random.SeedSequence(seed).spawn(2)
    if secret:
        server = np.random.SeedSequence()  # fresh entropy, never written anywhere
    return np.random.default_rng(init), np.random.default_rng(server)


class TrainingClock:
    """Seconds of training so far, without the time Numba spent compiling kernels in them
    (the first run at a new rank compiles; that is reported on its own, not as training).
    Running from its creation until the first :meth:`stop`."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.start()

    def start(self) -> None:
        self._t0 = time.perf_counter()
        self._c0 = compile_seconds()

    def stop(self) -> None:
        elapsed = time.perf_counter() - self._t0
        self.seconds += elapsed - (compile_seconds() - self._c0)


class _Server:
    """The server's loop state: its algorithm state, the aggregator, byte counters and random
    stream."""

    def __init__(self, algorithm: Algorithm, cfg: Any, state: Any,
                 clients: ClientPopulation, aggregator: Aggregator,
                 rng: np.random.Generator) -> None:
        self.algorithm = algorithm
        self.cfg = cfg
        self.state = state
        self.clients = clients
        self.aggregator = aggregator
        self.rng = rng
        self.bytes_up = 0
        self.bytes_down = 0

    def exchange(self, msg: Message, evaluate: _Evaluation | None = None) -> None:
        """Send ``msg``, have the aggregator release the sum of what came back, run the server
        step on it (with the message as it was carried out: only the clients whose replies
        were included). With ``evaluate``, the exchange also carries that evaluation, which
        is finished before the server step (the state is still the one it evaluates)."""
        done = self.clients.exchange(msg, self.aggregator,
                                     None if evaluate is None else evaluate.model)
        if evaluate is not None:
            evaluate.finish(done.sums or {})
        summed = self.aggregator.release(done, msg, self.rng)
        self.bytes_up += done.bytes_up
        self.bytes_down += len(msg.recipients) * msg.nbytes
        self.state = self.algorithm.server_step(self.cfg, self.state, summed, done.message)


@dataclass
class _Evaluation:
    """A round's evaluation: its model, and what to do with the clients' sums once they come
    (write the round's history row and report it); ``row``: what the row holds already."""

    model: Mapping[str, np.ndarray]
    finish: Callable[[dict[str, float]], None]
    round: int
    row: dict[str, float]


@dataclass
class Checkpoint:
    """Everything the round loop needs to go on after round ``round`` as if it had not
    stopped (what :meth:`~fedmc.federation.callbacks.Callback.after_exchange` may take, and
    :func:`run_rounds`' ``resume``): the server's state, its random
    stream's state, the history so far, the counters, the row of the evaluation still waiting
    for the next message (a population that folds evaluations), and the population's own
    (:meth:`snapshot`; None for one that has none). It holds the server's secrets (the random
    stream of a private run's noise and sampling, who took part): it is the server's, not a
    published output."""

    round: int
    server: Any
    rng: Mapping[str, Any]
    history: list[dict[str, float]]
    bytes_up: int
    bytes_down: int
    seconds: float
    waiting: tuple[int, dict[str, float]] | None
    population: Any
    sampler: Sampler | None = None  # the run's (started: a cyclic one's secret order)


@dataclass(frozen=True)
class Rounds:
    """What the round loop needs of a run's schedule: who is sampled, how many rounds, how
    often the model is evaluated, and user-level DP (early stopping is a callback:
    :class:`fedmc.federation.validation.EarlyStop`).

    Parameters
    ----------
    sampler
        Draws the clients of each round.
    count
        Number of rounds ``K``.
    eval_every
        Evaluate after every ``eval_every`` rounds (and always after the last one).
    dp
        User-level differential privacy (:mod:`fedmc.federation.aggregator`): every upload
        clipped, Gaussian noise on every sum, the budget of the set-up and the rounds
        accounted; needs Poisson sampling (``BernoulliSampler`` with one rate) or every client
        in every round.
    """

    sampler: Sampler
    count: int
    eval_every: int = 1
    dp: UserDP | None = None

    @classmethod
    def of(cls, schedule: Schedule, n_clients: int) -> Rounds:
        """The rounds of ``schedule`` over ``n_clients`` clients (its sampler and DP)."""
        return cls(schedule.sampler(n_clients), schedule.rounds, schedule.eval_every,
                   schedule.dp)


def privacy_plan(setup: Message | None, rounds: Rounds, info: FederationInfo) -> Plan:
    """The exchanges a run releases under user-level DP (``rounds.dp``, given), which the
    accountant charges: the algorithm's ``setup`` exchange if it has uploads, then
    ``rounds.count`` rounds at the sampler's Poisson rate.

    Raises
    ------
    ConfigError
        A guarantee per user (``dp.unit``) asked of clients of several users: the unit the
        clipping bounds is the client.
    """
    dp = rounds.dp
    if dp is None:
        raise ValueError("privacy_plan needs the rounds' user-level DP (rounds.dp)")
    if dp.unit == "user" and info.client_rows is not None and np.any(info.client_sizes > 1):
        raise ConfigError(
            "user-level DP bounds what one client uploads: with clients of several users the "
            "guarantee is per client, not per user; use one user per client "
            "(`partition='user'`) or ask for it with `dp_unit='client'`")
    return Plan(rounds.count, poisson_rate(rounds.sampler),
                setup is not None and len(setup.upload) > 0, dp.setup_scale,
                cycle_of(rounds.sampler))


def run_rounds(
    algorithm: Algorithm,
    cfg: Any,
    info: FederationInfo,
    clients: ClientPopulation,
    rounds: Rounds,
    *,
    server_draws: Mapping[str, np.ndarray],
    rng: np.random.Generator,
    callbacks: RoundCallback | None = None,
    clock: TrainingClock | None = None,
    resume: Checkpoint | None = None,
) -> Outcome:
    """Run the set-up exchange (if the algorithm has one) and ``rounds.count`` rounds.

    Parameters
    ----------
    algorithm, cfg
        The algorithm's functions and a validated instance of its ``Config``.
    info
        The federation's facts.
    clients
        The client population (built by the driver with the clients' draws).
    rounds
        The sampler, the number of rounds, how often to evaluate, user-level DP.
    server_draws
        The server's initial draws (``V^0``, say: :attr:`fedmc.core.protocol.InitialDraws.
        server`).
    rng
        The server's stream (:func:`streams`).
    callbacks
        Told of every round (:mod:`fedmc.federation.callbacks`: progress, early stopping,
        checkpoints, pruning), in their order; any may stop the loop.
    clock
        The training clock, if the driver started it before its own set-up.
    resume
        Go on after the round of this checkpoint instead of starting (the set-up exchange and
        the rounds up to it are not run again; the server's initial draws are not used).

    Returns
    -------
    Outcome
        The history has rows with ``round``, the algorithm's metrics, cumulative
        ``bytes_up``/``bytes_down``, ``seconds`` (cumulative training time; evaluation and
        kernel compilation excluded) and ``clients`` (clients sampled in that round); with
        ``rounds.dp``, ``epsilon`` (spent so far at ``dp.delta``) and ``dp_noise`` (the
        multiplier).
    """
    sampler, eval_every, dp = rounds.sampler, rounds.eval_every, rounds.dp
    watchers = callbacks_of(callbacks)
    if rounds.count < 0:
        raise ConfigError(f"rounds must be >= 0, got {rounds.count}")
    if eval_every < 1:
        raise ConfigError(f"eval-every must be >= 1, got {eval_every}")
    if sampler.n_clients != info.n_clients:
        raise ConfigError(
            f"the sampler draws from {sampler.n_clients} clients, the data has {info.n_clients}"
        )
    clock = TrainingClock() if clock is None else clock
    history = History()
    state = algorithm.init_server(cfg, info, server_draws) if resume is None else resume.server
    setup = algorithm.setup(cfg, state, info)
    plan = None if dp is None else privacy_plan(setup, rounds, info)
    aggregator = Aggregator(algorithm, cfg, info, dp=dp, plan=plan,
                            placement=clients.placement, rng=rng)
    sampler = (started(sampler, rng) if resume is None or resume.sampler is None else
               resume.sampler)
    server = _Server(algorithm, cfg, state, clients, aggregator, rng)
    if resume is None and setup is not None:
        server.exchange(setup)
    clock.stop()

    def evaluation(k: int, row: dict[str, float]) -> _Evaluation | None:
        """Round ``k``'s evaluation: its row is written (and reported) once the sums come; in
        a private run there is none, the row holds what it publishes and is written now."""

        model = {} if aggregator.private else algorithm.model(cfg, server.state)

        def finish(sums: dict[str, float]) -> None:
            # no sums: every client was lost in the evaluation (a federation's), no metrics
            metrics = {} if aggregator.private or not sums else algorithm.metrics(
                cfg, server.state, sums, info)
            history.append(aggregator.published({"round": k, **metrics, **row}))
            told(RoundEnd(k, history.rows[-1], model, answered=bool(sums)))

        if aggregator.private:
            finish({})
            return None
        return _Evaluation(model, finish, k, row)

    def row(k: int, n_clients: int) -> dict[str, float]:
        """What round ``k``'s row holds before its evaluation."""
        return {"bytes_up": server.bytes_up, "bytes_down": server.bytes_down,
                "seconds": clock.seconds, "clients": n_clients, **aggregator.columns(k)}

    start = 1 if resume is None else resume.round + 1
    stopping = any([watcher.begin(start) for watcher in watchers])

    def told(end: RoundEnd) -> None:
        """Tell the callbacks, in their order, that a round's row is final."""
        nonlocal stopping
        for watcher in watchers:
            stopping = watcher.after_round(end) or stopping

    # A population that folds evaluations sends each with the next round's message; the last
    # one (and every one, otherwise) is an exchange of its own.
    if resume is None:
        waiting = evaluation(0, row(0, 0))
    else:
        history.rows.extend(resume.history)
        server.rng.bit_generator.state = resume.rng
        server.bytes_up, server.bytes_down = resume.bytes_up, resume.bytes_down
        clock.seconds = resume.seconds
        clients.restore(resume.population)
        waiting = None if resume.waiting is None else evaluation(*resume.waiting)
    for k in range(start, rounds.count + 1):
        if waiting is not None and not clients.folds_evaluation:
            waiting.finish(clients.evaluate(waiting.model))
            waiting = None
        if stopping:
            break
        clock.start()
        sampled = sampler.sample(server.rng, k)
        server.exchange(algorithm.message(cfg, server.state, k, sampled, server.rng), waiting)
        clock.stop()
        evaluated = k % eval_every == 0 or k == rounds.count
        waiting = evaluation(k, row(k, len(sampled))) if evaluated else None
        if not evaluated:
            told(RoundEnd(k, None, {}, answered=False))

        def checkpoint(k: int = k, waiting: _Evaluation | None = waiting) -> Checkpoint:
            return Checkpoint(
                k, server.state, server.rng.bit_generator.state, list(history.rows),
                server.bytes_up, server.bytes_down, clock.seconds,
                None if waiting is None else (waiting.round, waiting.row),
                clients.snapshot(), sampler)

        for watcher in watchers:
            watcher.after_exchange(k, checkpoint)
    if waiting is not None and not stopping:
        # (a population that folds evaluations learns of a stop one round late: that round's
        # evaluation is not asked for, so the history ends where a simulation's ends)
        waiting.finish(clients.evaluate(waiting.model))
    return Outcome(history, server.state, clients, info, aggregator.guarantee())

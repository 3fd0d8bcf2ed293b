"""Training a run's spec on its data: the one road from a :class:`~fedmc.run.spec.RunSpec` to the
round loop.

:func:`train` validates the algorithm's parameters, builds the rounds of the spec's schedule
and runs them (:func:`fedmc.sim.simulate`: the clients stacked in this process, or the
population handed in, Ray shards say), or a centralized algorithm's sweeps; it returns one typed
:class:`Trained`. ``fedmc run`` (:mod:`fedmc.run.runner`), searches, experiments, the audit's
runs and the scikit-learn estimators (:mod:`fedmc.estimators`, a facade over it) all train
through it; a real federation's ServerApp hands the same round loop its grid of clients
(:mod:`fedmc.flower.server_app`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fedmc.algorithms.als import run_sweeps
from fedmc.algorithms.registry import AlgorithmSpec, spec
from fedmc.core.protocol import FederationInfo
from fedmc.errors import ConfigError
from fedmc.federation.callbacks import RoundCallback, RoundEnd, callbacks_of
from fedmc.federation.history import History
from fedmc.federation.loop import Outcome, Rounds
from fedmc.federation.settings import Schedule
from fedmc.federation.validation import EarlyStop, with_validation
from fedmc.run.spec import RunSpec
from fedmc.sim import PopulationFactory, simulate

NO_DP: dict[str, Any] = {"private": False, "dp": None}
"""The privacy of a run without user-level DP (what ``summary.json`` says)."""


@dataclass
class Trained:
    """What training left.

    Attributes
    ----------
    history
        One row per evaluated round of the training that produced the model (after a refit:
        the refit's).
    config, info
        The algorithm's validated ``Config`` and the federation's facts.
    privacy
        What its user-level DP guarantees (:meth:`fedmc.federation.aggregator.Aggregator.
        guarantee`; :data:`NO_DP` without).
    model
        The published arrays (``V`` of a factor model, ``V_hat`` of Felb's): with early
        stopping, the best round's.
    user_factors
        The users' factors in federated row order (a simulation's; in a federation they stay
        on the clients); with an early stop that publishes an earlier round's ``V``, every
        user folded in from it.
    data
        The data the model was trained on (after a refit: every training rating).
    stopped, validation_history
        With early stopping, its report (``summary.json``'s ``early_stopping``), and, where it
        refitted, the first pass's whole curve.
    """

    history: History
    config: Any
    info: FederationInfo
    privacy: dict[str, Any]
    model: dict[str, np.ndarray]
    user_factors: np.ndarray
    data: Any
    stopped: dict[str, Any] | None = None
    validation_history: History | None = None


def train(run: RunSpec, data: Any, *, population: PopulationFactory | None = None,
          callbacks: RoundCallback | None = None) -> Trained:
    """Train ``run``'s algorithm with its parameters and schedule on ``data`` (loaded: a
    :class:`fedmc.data.FederatedData`, or Boolean data for the Boolean algorithms; ``run.data``
    is not read here).

    With early stopping the rounds stop on the validation cut of ``data``; with its ``refit``
    a second pass then trains on every training rating, the cut put back
    (:meth:`fedmc.data.FederatedData.every_training_rating`), for the best round's number of
    rounds, and its model is the result (the callbacks hear both passes, the second counting
    from round 1 again). ``population``: where the clients live (:func:`fedmc.sim.simulate`'s
    ``driver``; None: stacked in this process). ``callbacks``: told of every round
    (:mod:`fedmc.federation.callbacks`).
    """
    entry = spec(run.algorithm)
    cfg = run.config()
    if entry.data_kind == "ratings" and not hasattr(data, "n_train_ratings"):
        raise ConfigError(f"{run.algorithm} needs rating data (fedmc.load_federated)")
    if not entry.federated:
        return _sweeps(cfg, run.schedule, data, callbacks)
    schedule = run.schedule
    first, stop = _simulate(entry, cfg, schedule, data, callbacks, population)
    stopping = schedule.early_stopping
    if stopping is None or not stopping.refit or stop is None or stop.best is None:
        return _learned(entry, cfg, first, stop, data, schedule.rounds)
    report = {**stop.report(schedule.rounds), "refit_rounds": stop.best.round}
    every = data.every_training_rating()
    again = schedule.model_copy(update={"rounds": stop.best.round,
                                        "early_stopping": None, "eval_k": None})
    final = _learned(entry, cfg, *_simulate(entry, cfg, again, every, callbacks, population),
                     every, again.rounds)
    final.stopped, final.validation_history = report, first.history
    return final


def _simulate(entry: AlgorithmSpec, cfg: Any, schedule: Schedule, data: Any,
              callbacks: RoundCallback | None,
              population: PopulationFactory | None) -> tuple[Outcome, EarlyStop | None]:
    """One simulation of ``cfg`` on ``data`` under ``schedule`` (batched, or on
    ``population``), and its early stopping's watcher (told of each round before the
    callbacks)."""
    algorithm = with_validation(entry.algorithm_for(cfg), schedule.eval_k)
    stop = EarlyStop.of(schedule)
    watchers = ([] if stop is None else [stop]) + callbacks_of(callbacks)
    sim = simulate(algorithm, cfg, data, rounds=Rounds.of(schedule, data.n_clients),
                   seed=schedule.seed, driver="batched" if population is None else population,
                   callback=watchers)
    return sim, stop


def _learned(entry: AlgorithmSpec, cfg: Any, sim: Outcome, stop: EarlyStop | None, data: Any,
             rounds: int) -> Trained:
    """What a finished simulation leaves (its early stop reported over ``rounds``)."""
    stopped = None if stop is None else stop.report(rounds)
    model = sim.model(entry.algorithm_for(cfg), cfg, stop)
    users = sim.clients.user_factors()
    if entry.data_kind == "ratings" and stopped is not None \
            and stopped["round"] not in (None, stopped["stopped_at"]):
        # the published V is an earlier round's: every user folded in from it, as fedmc
        # evaluate does (the clients' own rows moved on with later rounds; no best round: the
        # last round's V, which they match)
        users = entry.fold_in_users(cfg, model["V"], data.train)
    return Trained(sim.history, cfg, sim.info, sim.guarantee, model, users, data, stopped)


def _sweeps(cfg: Any, schedule: Schedule, data: Any,
            callbacks: RoundCallback | None) -> Trained:
    """A centralized algorithm's sweeps on every training rating (ALS:
    :func:`fedmc.algorithms.als.run_sweeps`), each told to the callbacks as a round."""
    watchers = callbacks_of(callbacks)

    def told(k: int, row: dict[str, float] | None) -> bool:
        return any([w.after_round(RoundEnd(k, row, {}, True)) for w in watchers])

    U, V, rows = run_sweeps(cfg, data, schedule.seed, schedule.eval_every, told)
    return Trained(History(rows), cfg, data.federation_info(), NO_DP, {"V": V}, U, data)

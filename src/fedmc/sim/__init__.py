"""The simulation: every client in this process, the round loop of a federation around them.

:func:`simulate` is :func:`fedmc.federation.loop.run_rounds` with one of the populations of
:mod:`fedmc.sim.clients`: all clients stacked (the fast path) or one at a time (the reference).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import numpy as np

from fedmc.core.protocol import Algorithm, FederationInfo, InitialDraws
from fedmc.federation.loop import (
    Outcome,
    RoundCallback,
    Rounds,
    TrainingClock,
    run_rounds,
    streams,
)
from fedmc.federation.population import ClientPopulation
from fedmc.sim.clients import BatchedClients, PerClientClients
from fedmc.sim.sharded import ShardedClients

Driver = Literal["batched", "per-client", "sharded"]
PopulationFactory = Callable[[Algorithm, Any, Any, InitialDraws, FederationInfo],
                             ClientPopulation]
"""Builds the clients of a run from ``(algorithm, cfg, data, draws, info)``, as the classes of
:mod:`fedmc.sim.clients` do."""

def simulate(
    algorithm: Algorithm,
    cfg: Any,
    data: Any,
    *,
    rounds: Rounds,
    seed: int | np.random.Generator = 0,
    driver: Driver | PopulationFactory = "batched",
    callback: RoundCallback | None = None,
) -> Outcome:
    """Run ``rounds`` of ``algorithm`` with settings ``cfg`` on ``data``.

    Parameters
    ----------
    algorithm, cfg
        The algorithm's functions and a validated instance of its ``Config``.
    data
        The federated data (:class:`fedmc.data.FederatedData` or Boolean data).
    rounds
        The sampler, the number of rounds, how often to evaluate, user-level DP
        (:class:`fedmc.federation.loop.Rounds`).
    seed
        Seed of the initial draws and the server's stream
        (:func:`fedmc.federation.loop.streams`).
    driver
        ``"batched"`` (all clients stacked, the fast path), ``"per-client"`` (the reference
        loop over clients), ``"sharded"`` (two stacks of clients in this process, each summing
        its uploads: :mod:`fedmc.sim.sharded`), or a factory of another population.
    callback
        Told of every round: a :class:`fedmc.federation.callbacks.Callback` (which may stop
        the run: a search's pruning), several, or a function of ``(round, row or None)``
        (progress).

    Returns
    -------
    Outcome
        The history, the server's final state and the clients
        (:func:`fedmc.federation.loop.run_rounds` for the history's columns).
    """
    named: dict[str, PopulationFactory] = {
        "batched": BatchedClients, "per-client": PerClientClients, "sharded": ShardedClients}
    population = driver if callable(driver) else named[driver]
    clock = TrainingClock()
    init_rng, server_rng = streams(seed, secret=rounds.dp is not None and rounds.dp.private)
    info = data.federation_info()
    draws = algorithm.draws(cfg, info, init_rng)
    clients = population(algorithm, cfg, data, draws, info)
    return run_rounds(algorithm, cfg, info, clients, rounds, server_draws=draws.server,
                      rng=server_rng, callbacks=callback, clock=clock)

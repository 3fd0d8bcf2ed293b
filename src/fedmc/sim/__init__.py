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
    TrainingClock,
    run_rounds,
    streams,
)
from fedmc.federation.population import ClientPopulation
from fedmc.federation.sampling import Sampler
from fedmc.privacy.accounting import UserDP
from fedmc.sim.clients import BatchedClients, PerClientClients

Driver = Literal["batched", "per-client"]
PopulationFactory = Callable[[Algorithm, Any, Any, InitialDraws, FederationInfo],
                             ClientPopulation]
"""Builds the clients of a run from ``(algorithm, cfg, data, draws, info)``, as the classes of
:mod:`fedmc.sim.clients` do."""

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
) -> Outcome:
    """Run ``rounds`` rounds of ``algorithm`` with settings ``cfg`` on ``data``.

    Parameters
    ----------
    data
        The federated data (:class:`fedmc.data.FederatedData` or Boolean data).
    seed
        Seed of the initial draws and the server's stream
        (:func:`fedmc.federation.loop.streams`).
    driver
        ``"batched"`` (all clients stacked, the fast path), ``"per-client"`` (the reference
        loop over clients), or a factory of another population.

    The other parameters are :func:`fedmc.federation.loop.run_rounds`'s.

    Returns
    -------
    Outcome
        The history, the server's final state and the clients
        (:func:`fedmc.federation.loop.run_rounds` for the history's columns).
    """
    population = (driver if callable(driver)
                  else {"batched": BatchedClients, "per-client": PerClientClients}[driver])
    clock = TrainingClock()
    init_rng, server_rng = streams(seed, secret=dp is not None and dp.private)
    info = data.federation_info()
    draws = algorithm.draws(cfg, info, init_rng)
    clients = population(algorithm, cfg, data, draws, info)
    return run_rounds(algorithm, cfg, info, draws.server, clients, sampler, rounds, server_rng,
                      eval_every, callback, dp, clock)

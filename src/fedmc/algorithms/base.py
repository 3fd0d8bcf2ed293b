"""The contract every federated algorithm fulfils, so the engine can run any of them.

An algorithm module keeps two sides apart, as a real federation must:

* a **client side** holding each client's private data and private variables (ratings, user
  factors, local copies), whose update takes the server's message and returns only what the
  algorithm uploads;
* a **server side** holding only the global model and what clients uploaded.

In simulation both sides live in one process and the client side processes the whole batch of
sampled clients at once (stacked arrays, one kernel call); the class below glues the two
sides into one round. The engine (``fedmc.sim.engine``) samples clients, calls :meth:`round`,
evaluates every few rounds and records the history.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict

from fedmc.data.federated import FederatedData


@dataclass(frozen=True)
class Communication:
    """Bytes that crossed the network in one round (payload only, 8 bytes per float64)."""

    bytes_up: int = 0
    bytes_down: int = 0


class AlgorithmConfig(BaseModel):
    """Hyper-parameters of an algorithm; subclass it with typed, documented fields."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class FederatedAlgorithm(ABC):
    """Base class of the algorithms run by the engine (:mod:`fedmc.sim.engine`).

    Subclasses declare ``name`` (the ``--algorithm`` value) and ``Config`` (a pydantic model of
    their hyper-parameters). ``__init__`` only validates and stores the parameters, as in
    scikit-learn; state is allocated in :meth:`setup`; one communication round is
    :meth:`round`. Learned attributes end in an underscore.
    """

    name: ClassVar[str] = "algorithm"
    Config: ClassVar[type[AlgorithmConfig]] = AlgorithmConfig
    data_kind: ClassVar[str] = "ratings"  # or "boolean": which data layout ``setup`` takes

    def __init__(self, **params: Any) -> None:
        self.config = self.Config(**params)

    def get_params(self) -> dict[str, Any]:
        """All hyper-parameters, defaults included."""
        return self.config.model_dump()

    def fit(
        self,
        data: Any,
        rounds: int = 100,
        active: int | None = None,
        seed: int = 0,
        eval_every: int = 1,
        sampler: Any = None,
        callback: Any = None,
    ) -> FederatedAlgorithm:
        """Train for ``rounds`` rounds with ``active`` clients per round (all when omitted).

        Sets ``history_`` (a :class:`fedmc.sim.engine.History`) and returns ``self``.
        """
        from fedmc.sim import engine
        from fedmc.sim.sampling import UniformSampler

        if sampler is None:
            sampler = UniformSampler(data.n_clients, active or data.n_clients)
        self.history_ = engine.run(self, data, sampler, rounds, seed, eval_every, callback)
        return self

    @abstractmethod
    def setup(self, data: FederatedData, rng: np.random.Generator) -> Communication:
        """Allocate and initialise all client and server state; return the set-up traffic."""

    @abstractmethod
    def round(self, clients: np.ndarray, rng: np.random.Generator) -> Communication:
        """Run one round with the sampled ``clients`` (sorted ``int64`` client ids)."""

    @abstractmethod
    def evaluate(self, data: FederatedData) -> dict[str, float]:
        """Metrics of the current model (history columns), vectorized over all clients."""

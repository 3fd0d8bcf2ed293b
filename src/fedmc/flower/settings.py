"""The run configuration of a federated run: what ``flwr run --run-config`` carries to the
ServerApp and to every ClientApp (``context.run_config``).

Flower's run configuration is flat (TOML scalars), so the algorithm's parameters travel as a
JSON string and ``0`` stands for "unset" in ``active`` and ``participation``. The keys and
their defaults are the ``[tool.flwr.app.config]`` table of the app (:mod:`fedmc.flower.app`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from fedmc.algorithms import get_algorithm
from fedmc.core.protocol import Algorithm
from fedmc.errors import ConfigError
from fedmc.runner import RunSettings

DEFAULT_TIMEOUT = 120.0
RUN_CONFIG_DEFAULTS: dict[str, Any] = {
    "algorithm": "fedmc-admm",
    "params": "{}",
    "rounds": 100,
    "active": 10,
    "sampling": "uniform",
    "participation": 0.0,
    "dropout": 0.0,
    "eval-every": 1,
    "seed": 0,
    "secagg": False,
    "timeout": DEFAULT_TIMEOUT,
    "manifest": "manifest.json",
    "out": "runs/federated",
}
"""Every key of the run configuration with its default (``active = 0``: every client)."""


@dataclass(frozen=True)
class FederatedRun:
    """A federated run's settings.

    Attributes
    ----------
    run
        Algorithm name, rounds, sampling and seed, as ``fedmc run`` takes them.
    params
        The algorithm's parameters (any field of its ``Config``).
    secagg
        Sum every upload and every evaluation with SecAgg+ (:mod:`fedmc.flower.secagg`).
    timeout
        Seconds the server waits for the replies of one exchange; a client that has not
        answered by then is left out of that exchange.
    manifest
        The federation's ``manifest.json`` as the server sees it (each client names its own
        copy in its node configuration).
    out
        Where the server writes ``config.json``, ``history.csv`` and ``summary.json``.
    """

    run: RunSettings
    params: dict[str, Any]
    secagg: bool = False
    timeout: float = DEFAULT_TIMEOUT
    manifest: Path = Path("manifest.json")
    out: Path = Path("runs/federated")

    @property
    def algorithm(self) -> Algorithm:
        """The protocol functions of the run's algorithm."""
        estimator = get_algorithm(self.run.algorithm)
        if not hasattr(estimator, "algorithm"):
            raise ConfigError(f"{self.run.algorithm} is not a federated algorithm")
        return estimator.algorithm

    def config(self) -> Any:
        """The algorithm's validated ``Config``."""
        return self.algorithm.Config(**self.params)

    def run_config(self) -> dict[str, Any]:
        """The flat run configuration (every key of :data:`RUN_CONFIG_DEFAULTS`)."""
        run = self.run
        return {
            "algorithm": run.algorithm,
            "params": json.dumps(self.params),
            "rounds": run.rounds,
            "active": run.active or 0,
            "sampling": run.sampling,
            "participation": run.participation or 0.0,
            "dropout": run.dropout,
            "eval-every": run.eval_every,
            "seed": run.seed,
            "secagg": self.secagg,
            "timeout": self.timeout,
            "manifest": str(self.manifest),
            "out": str(self.out),
        }

    @classmethod
    def from_run_config(cls, config: dict[str, Any]) -> FederatedRun:
        """Parse a run configuration (missing keys take their defaults)."""
        c = {**RUN_CONFIG_DEFAULTS, **config}
        unknown = sorted(set(c) - set(RUN_CONFIG_DEFAULTS))
        if unknown:
            raise ConfigError(f"unknown run configuration key(s): {', '.join(unknown)}")
        try:
            params = json.loads(c["params"])
            run = RunSettings(
                algorithm=c["algorithm"], rounds=c["rounds"], active=c["active"] or None,
                sampling=c["sampling"], participation=c["participation"] or None,
                dropout=c["dropout"], eval_every=c["eval-every"], seed=c["seed"],
            )
        except (ValueError, ValidationError) as exc:
            raise ConfigError(f"bad run configuration: {exc}") from None
        return cls(run, params, bool(c["secagg"]), float(c["timeout"]), Path(c["manifest"]),
                   Path(c["out"]))

"""The run configuration of a federated run: what ``flwr run --run-config`` carries to the
ServerApp and to every ClientApp (``context.run_config``).

Flower's run configuration is flat (TOML scalars), so the algorithm's parameters and the
run's schedule (:class:`fedmc.federation.settings.Schedule`) travel as JSON strings, each
parsed by its own pydantic model; the other keys are the federation's own. The keys and their
defaults are the ``[tool.flwr.app.config]`` table of the app (:mod:`fedmc.flower.app`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from fedmc.algorithms.registry import spec
from fedmc.core.protocol import Algorithm
from fedmc.errors import ConfigError
from fedmc.federation.settings import Schedule
from fedmc.privacy.accounting import UserDP

DEFAULT_TIMEOUT = 120.0
RUN_CONFIG_DEFAULTS: dict[str, Any] = {
    "algorithm": "fedmc-admm",
    "params": "{}",
    "schedule": "{}",
    "secagg": False,
    "timeout": DEFAULT_TIMEOUT,
    "manifest": "manifest.json",
    "out": "runs/federated",
    "run-key": "",
    "resume": False,
}
"""Every key of the run configuration with its default (``params`` and ``schedule``: JSON
objects of the algorithm's ``Config`` fields and of :class:`~fedmc.federation.settings.
Schedule` fields; an empty object takes every default; ``run-key``: the federated run's own
name, which a resumed run keeps (clients file their state under it); ``resume``: go on from
``out``'s checkpoint)."""


@dataclass(frozen=True)
class FederatedRun:
    """A federated run's settings.

    Attributes
    ----------
    algorithm_name
        The registered algorithm.
    params
        The algorithm's parameters (any field of its ``Config``).
    schedule
        Rounds, sampling, evaluation, seed and user-level DP, as ``fedmc run`` takes them.
    secagg
        Sum every upload and every evaluation with SecAgg+ (:mod:`fedmc.flower.secagg`).
    timeout
        Seconds the server waits for the replies of one exchange; a client that has not
        answered by then is left out of that exchange.
    manifest
        The federation's ``manifest.json`` as the server sees it (each client names its own
        copy in its node configuration).
    out
        Where the server writes ``config.json``, ``history.csv`` and ``summary.json``, and its
        checkpoint while the run is in progress.
    run_key
        The run's own name: the clients keep their state under it, so a run resumed (a new
        Flower run) finds the states of the one it continues; empty: Flower's run id.
    resume
        Go on from the checkpoint in ``out`` (``fedmc federate resume``).
    """

    algorithm_name: str = "fedmc-admm"
    params: dict[str, Any] = field(default_factory=dict)
    schedule: Schedule = field(default_factory=Schedule)
    secagg: bool = False
    timeout: float = DEFAULT_TIMEOUT
    manifest: Path = Path("manifest.json")
    out: Path = Path("runs/federated")
    run_key: str = ""
    resume: bool = False

    @classmethod
    def of(cls, settings: Any, params: dict[str, Any], **federation: Any) -> FederatedRun:
        """The run of ``fedmc run``'s ``settings`` (:class:`fedmc.run.settings.RunSettings`: the
        algorithm and the schedule) with ``params``, federated as ``federation`` says."""
        return cls(settings.algorithm, params, settings.schedule(), **federation)

    def config(self) -> Any:
        """The algorithm's validated ``Config``."""
        return spec(self.algorithm_name).Config(**self.params)

    @property
    def algorithm(self) -> Algorithm:
        """The protocol functions of the run's algorithm."""
        return spec(self.algorithm_name).algorithm_for(self.config())

    def privacy(self) -> UserDP | None:
        """The run's user-level DP (the clients clip; the server adds the noise to every sum,
        or with :attr:`secagg` the clients add it in shares), None when off."""
        return self.schedule.privacy()

    def run_config(self) -> dict[str, Any]:
        """The flat run configuration (every key of :data:`RUN_CONFIG_DEFAULTS`)."""
        return {
            "algorithm": self.algorithm_name,
            "params": json.dumps(self.params),
            "schedule": self.schedule.model_dump_json(),
            "secagg": self.secagg,
            "timeout": self.timeout,
            "manifest": str(self.manifest),
            "out": str(self.out),
            "run-key": self.run_key,
            "resume": self.resume,
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
            schedule = Schedule.model_validate_json(c["schedule"])
        except (ValueError, ValidationError) as exc:
            raise ConfigError(f"bad run configuration: {exc}") from None
        return cls(str(c["algorithm"]), params, schedule, bool(c["secagg"]),
                   float(c["timeout"]), Path(c["manifest"]), Path(c["out"]),
                   str(c["run-key"]), bool(c["resume"]))

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
from fedmc.privacy.accounting import UserDP, user_dp
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
    "dp-clip": 0.0,
    "dp-delta": 1e-6,
    "dp-epsilon": 0.0,
    "dp-noise": -1.0,
    "dp-setup-scale": 1.0,
    "dp-setup-clip": 0.0,
}
"""Every key of the run configuration with its default (``active = 0``: every client; the
user-level DP options of ``fedmc run``, ``0`` or, for the noise, ``-1``: not given)."""


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

    def privacy(self) -> UserDP | None:
        """The run's user-level DP (the clients clip; the server adds the noise to every sum,
        or with :attr:`secagg` the clients add it in shares), None when off."""
        r = self.run
        return user_dp(r.user_dp_clip, r.user_dp_delta, r.user_dp_epsilon, r.user_dp_noise,
                       r.user_dp_setup_scale, r.user_dp_setup_clip)

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
            "dp-clip": run.user_dp_clip or 0.0,
            "dp-delta": run.user_dp_delta,
            "dp-epsilon": run.user_dp_epsilon or 0.0,
            "dp-noise": -1.0 if run.user_dp_noise is None else run.user_dp_noise,
            "dp-setup-scale": run.user_dp_setup_scale,
            "dp-setup-clip": run.user_dp_setup_clip or 0.0,
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
                user_dp_clip=c["dp-clip"] or None, user_dp_delta=c["dp-delta"],
                user_dp_epsilon=c["dp-epsilon"] or None,
                user_dp_noise=None if c["dp-noise"] < 0 else c["dp-noise"],
                user_dp_setup_scale=c["dp-setup-scale"],
                user_dp_setup_clip=c["dp-setup-clip"] or None,
            )
        except (ValueError, ValidationError) as exc:
            raise ConfigError(f"bad run configuration: {exc}") from None
        return cls(run, params, bool(c["secagg"]), float(c["timeout"]), Path(c["manifest"]),
                   Path(c["out"]))

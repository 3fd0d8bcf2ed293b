"""The run configuration of a federated run: what ``flwr run --run-config`` carries to the
ServerApp and to every ClientApp (``context.run_config``).

A federated run is a :class:`fedmc.run.spec.RunSpec` (the algorithm, its parameters and the
schedule, as :func:`fedmc.run.settings.resolve` chose them) plus the federation's own options
(every other field of :class:`FederatedRun`). Flower's run configuration is flat (TOML scalars):
the spec travels as one JSON value under ``run``, each federation option as a key of its own
(its field name with dashes), so an operator edits ``manifest`` or ``out`` as plain TOML. The
keys and their defaults are :data:`RUN_CONFIG_DEFAULTS`, the ``[tool.flwr.app.config]`` table of
the app (:mod:`fedmc.deploy.app`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from fedmc.algorithms.registry import spec
from fedmc.core.protocol import Algorithm, FederationInfo
from fedmc.errors import ConfigError
from fedmc.federation.aggregator import Aggregator
from fedmc.federation.defaults import GROWTH
from fedmc.federation.loop import Rounds, privacy_plan
from fedmc.federation.population import federation_placement
from fedmc.federation.settings import Schedule
from fedmc.federation.validation import with_validation
from fedmc.flower.defaults import MAX_LOST_ROUNDS, REPLY_TIMEOUT
from fedmc.privacy.accounting import UserDP
from fedmc.run.data_settings import DataSettings
from fedmc.run.spec import RunSpec

"""How many exchanges in a row may lose every client before a run stops, unless the operator
says (``--max-lost-rounds``)."""

RUN = "run"
"""The run configuration's key of the :class:`~fedmc.run.spec.RunSpec` (one JSON value)."""


class FederatedRun(BaseModel):
    """A federated run's settings: its ``spec`` and the federation's own options (every other
    field)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    spec: RunSpec = Field(default_factory=RunSpec)
    secagg: bool = Field(False, description="sum every upload and every evaluation with "
                         "SecAgg+ (fedmc.flower.secagg)")
    timeout: float = Field(REPLY_TIMEOUT, gt=0, description="seconds the server waits for "
                           "the replies of one exchange; a client that has not answered by "
                           "then is left out of that exchange")
    manifest: Path = Field(Path("manifest.json"), description="the federation's manifest.json "
                           "as the server sees it (each client names its own copy in its node "
                           "configuration)")
    out: Path = Field(Path("runs/federated"), description="where the server writes "
                      "config.json, history.csv and summary.json, and its checkpoint while the "
                      "run is in progress")
    max_upload_norm: float | Literal["auto"] = Field(
        "auto", description="a bound on the L2 norm of one client's whole upload: clients clip "
        "to it as to DP's clip, the server refuses a plain upload above it; 0: none; auto: "
        f"the server refuses a plain upload above {GROWTH:g} times its phase's typical norm "
        "(fedmc.federation.bounds.NormReference) where no DP clip binds")
    max_lost_rounds: int = Field(
        MAX_LOST_ROUNDS, ge=1, description="how many exchanges in a row (one per round) may "
        "lose every client before the run stops (each is recorded and the run goes on until "
        "then; a stopped run keeps its checkpoint for fedmc federate resume)")
    overwrite: bool = Field(False, description="replace a run that out holds (its files are "
                            "removed first); without it such an out is refused")
    resume: bool = Field(False, description="go on from the checkpoint in out, under the run "
                         "key kept there (fedmc federate resume sets it; every other "
                         "submission is a new run with a fresh key)")

    @field_validator("max_upload_norm", mode="before")
    @classmethod
    def _norm_or_auto(cls, value: Any) -> Any:
        if value == "auto":
            return value
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = math.nan
        if isinstance(value, bool) or not number >= 0:
            raise ValueError(f"expected a number >= 0 (0: none) or \"auto\", not {value!r}")
        return number

    @property
    def upload_bound(self) -> float:
        """``max_upload_norm`` as the bound clients clip to: infinite where it is 0 (none) or
        ``auto`` (only the server applies it, :attr:`auto_bound`)."""
        return math.inf if self.max_upload_norm == "auto" else self.max_upload_norm or math.inf

    @property
    def auto_bound(self) -> bool:
        """Whether the server bounds plain uploads by their phase's typical norm
        (``max-upload-norm = "auto"``, :class:`fedmc.federation.bounds.NormReference`)."""
        return self.max_upload_norm == "auto"

    @model_validator(mode="after")
    def _no_refit(self) -> FederatedRun:
        stop = self.spec.schedule.early_stopping
        if stop is not None and stop.refit:
            raise ConfigError("`refit=true` trains a second run after early stopping; a "
                              "federation publishes its best round's model: `refit=false`")
        return self

    @property
    def algorithm_name(self) -> str:
        """The registered algorithm."""
        return self.spec.algorithm

    @property
    def params(self) -> dict[str, Any]:
        """The algorithm's parameters (any field of its ``Config``)."""
        return self.spec.params

    @property
    def schedule(self) -> Schedule:
        """Rounds, sampling, evaluation, seed and user-level DP."""
        return self.spec.schedule

    def config(self) -> Any:
        """The algorithm's validated ``Config``."""
        return self.spec.config()

    @property
    def algorithm(self) -> Algorithm:
        """The protocol functions of the run's algorithm, evaluating the clients' validation
        cut where they hold one (:func:`fedmc.federation.validation.with_validation`)."""
        return with_validation(spec(self.algorithm_name).algorithm_for(self.config()),
                               self.schedule.eval_k)

    def privacy(self) -> UserDP | None:
        """The run's user-level DP (the clients clip; the server adds the noise to every sum,
        or with ``secagg`` the clients add it in shares), None when off."""
        return self.schedule.dp

    def planned_aggregator(self, info: FederationInfo) -> Aggregator:
        """The run's aggregator as the settings alone make it, on the server and on every
        client alike: under user-level DP with its plan (the set-up exchange's uploads, the
        rounds, the sampling: :func:`fedmc.federation.loop.privacy_plan`) and the noise
        multiplier calibrated on it, so a client knows the multiplier of every exchange without
        the server's word (:meth:`fedmc.flower.client_app.Party.dp_noise`).

        Raises
        ------
        ConfigError
            The plan's or the mechanism's (a guarantee per user of clients of several users, a
            Gaussian share under secure aggregation).
        """
        algorithm, cfg = self.algorithm, self.config()
        rounds = Rounds.of(self.schedule, info.n_clients)
        plan = None
        if rounds.dp is not None:  # the set-up exchange's uploads decide whether it is charged
            draws = algorithm.draws(cfg, info, np.random.default_rng(self.schedule.seed))
            setup = algorithm.setup(cfg, algorithm.init_server(cfg, info, draws.server), info)
            plan = privacy_plan(setup, rounds, info)
        return Aggregator(algorithm, cfg, info, dp=rounds.dp, plan=plan,
                          placement=federation_placement(self.secagg),
                          max_norm=self.upload_bound)

    def run_config(self) -> dict[str, Any]:
        """The flat run configuration (every key of :data:`RUN_CONFIG_DEFAULTS`)."""
        options = self.model_dump(mode="json", exclude={"spec"})
        # of the data settings only the normalizer's kind (a DP spec is checked to publish no
        # fitted one): the manifest holds what the server may know of the data, and the
        # operator's file paths need not travel to every client
        spec = self.spec.model_dump_json(exclude={"data": _NOT_SENT})
        return {RUN: spec, **{_key(k): v for k, v in options.items()}}

    @classmethod
    def from_run_config(cls, config: dict[str, Any]) -> FederatedRun:
        """Parse a run configuration (missing keys take their defaults).

        Raises
        ------
        fedmc.errors.ConfigError
            An unknown key, or a value its field refuses.
        """
        c = {**RUN_CONFIG_DEFAULTS, **config}
        unknown = sorted(set(c) - set(RUN_CONFIG_DEFAULTS))
        if unknown:
            raise ConfigError(f"unknown run configuration key(s): {', '.join(unknown)} (the "
                              f"keys are {', '.join(RUN_CONFIG_DEFAULTS)})")
        try:
            spec = RunSpec.model_validate_json(c[RUN])
        except ValidationError as exc:  # the key `run`, a field inside its JSON, or its syntax
            raise ConfigError(_refusal(exc, [RUN])) from None
        try:
            return cls(spec=spec, **{name: c[_key(name)] for name in OPTIONS})
        except ValidationError as exc:  # one of the federation's own keys
            raise ConfigError(_refusal(exc, [])) from None


_NOT_SENT = set(DataSettings.model_fields) - {"normalize"}
"""The data settings a run configuration leaves out."""


def _refusal(exc: ValidationError, key: list[str]) -> str:
    """The first error of ``exc`` as a line naming the run configuration's key (with dashes,
    as ``run.toml`` spells it) and, within the ``run`` JSON object, the field."""
    first = exc.errors()[0]
    where = [*key, *(str(x) for x in first["loc"])]
    if not where:  # a rule between the federation's keys: no one key to name
        return f"bad run configuration: {first['msg']}"
    return f"bad run configuration: key {'.'.join([_key(where[0]), *where[1:]])}: " \
           f"{first['msg']}"


def _key(name: str) -> str:
    return name.replace("_", "-")


OPTIONS = tuple(name for name in FederatedRun.model_fields if name != "spec")
"""The federation's options: every field of :class:`FederatedRun` but its spec."""
RUN_CONFIG_DEFAULTS: dict[str, Any] = {RUN: "{}", **{
    _key(name): str(default) if isinstance(default, Path) else default
    for name, default in ((n, FederatedRun.model_fields[n].default) for n in OPTIONS)}}
"""Every key of the run configuration with its default: ``run``, the JSON object of a
:class:`~fedmc.run.spec.RunSpec` (an empty object takes every default), and the
federation's options (:data:`OPTIONS`, their names with dashes)."""

"""What a run is: :class:`RunSpec`, the one value every driver runs (``fedmc run``'s runner, the
estimators, experiments, searches and a federation's ServerApp and ClientApps,
:mod:`fedmc.flower.settings`). It holds the algorithm and its parameters, the data settings,
the schedule and what follows training, each with its default; which defaults depend on other
settings is chosen by :func:`fedmc.run.settings.resolve`. The client side of a federation
imports this module, not the command line's option model (:mod:`fedmc.run.options`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fedmc.algorithms.registry import default_algorithm, spec
from fedmc.errors import ConfigError
from fedmc.federation.settings import Backend, Schedule
from fedmc.run.data_settings import DataSettings

DEFAULT_ALGORITHM = default_algorithm("ratings")
FITTED_NORMALIZERS = ("center", "zscore")
"""The normalizers fitted on the training ratings, which a DP run may not publish."""


def check_normalizer(dp: bool, normalize: str | None) -> None:
    """Refuse a normalizer fitted on the training ratings in a run with user-level DP (``dp``):
    ``config.json`` and the model carry it, a release no budget accounts (``docs/privacy.md``).
    Every spec is checked (:class:`RunSpec`); :func:`fedmc.run.settings.resolve` asks first,
    to say it in the options' words.

    Raises
    ------
    fedmc.errors.ConfigError
        ``normalize`` is fitted and ``dp`` is on.
    """
    if dp and normalize in FITTED_NORMALIZERS:
        raise ConfigError(f"`normalize={normalize}` fits on the training ratings, which a DP "
                          "run may not publish: use `normalize=public` (the default with DP) "
                          "or `normalize=none`")


class RunSpec(BaseModel):
    """Everything that defines a run: the algorithm and its parameters, the data, the
    schedule, what follows training, and which of these :func:`resolve` chose (``defaulted``:
    the option names, listed in ``config.json`` as ``run.defaulted``; ``notes``: why, where
    the choice needs saying)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    algorithm: str = DEFAULT_ALGORITHM
    params: dict[str, Any] = Field(default_factory=dict, description="the algorithm's "
                                   "Config fields")
    data: DataSettings = Field(default_factory=DataSettings)
    schedule: Schedule = Field(default_factory=Schedule)
    ranking_k: int | None = Field(None, ge=1, description="cut-off K of the ranking metrics "
                                  "added after training")
    save_user_factors: bool = Field(False, description="save U, raw user ids and rated items "
                                    "with the model (simulation)")
    backend: Backend = Field(default_factory=Backend, description="where a simulation's "
                             "clients live")
    defaulted: tuple[str, ...] = ()
    notes: tuple[str, ...] = Field((), description="why a default was chosen, in the command "
                                   "line's words (config.json's run.notes; fedmc run prints "
                                   "them)")

    def config(self) -> Any:
        """The algorithm's validated ``Config``."""
        return spec(self.algorithm).Config(**self.params)

    @model_validator(mode="after")
    def _no_fitted_normalizer_under_dp(self) -> RunSpec:
        check_normalizer(self.schedule.dp is not None, self.data.normalize)
        return self

    def refit(self, rounds: int) -> RunSpec:
        """This run without its validation cut and early stopping, for ``rounds`` rounds: the
        refit of an early-stopped run (:func:`fedmc.run.runner.execute`)."""
        return self.model_copy(update={
            "data": self.data.model_copy(update={"validation_fraction": 0.0}),
            "schedule": self.schedule.model_copy(update={
                "rounds": rounds, "early_stopping": None, "eval_k": None})})

    def without_refit(self) -> RunSpec:
        """This run publishing its best round's model when it stops early, instead of
        training again on every rating: a trial of a search (scored, not refitted) and a
        federation (where a refit would be a second federated run)."""
        stop = self.schedule.early_stopping
        if stop is None or not stop.refit:
            return self
        return self.model_copy(update={"schedule": self.schedule.model_copy(
            update={"early_stopping": stop.model_copy(update={"refit": False})})})

    def settings(self) -> dict[str, Any]:
        """``config.json``'s ``run``: the schedule, the algorithm and what follows training."""
        ray = self.backend.kind != Backend().kind  # the default is not written
        return {"algorithm": self.algorithm, **self.schedule.model_dump(mode="json"),
                "ranking_k": self.ranking_k, "save_user_factors": self.save_user_factors,
                **({"backend": self.backend.model_dump(mode="json")} if ray else {}),
                "defaulted": list(self.defaulted), "notes": list(self.notes)}

"""What a run is: :class:`RunSpec`, the one value every driver runs (``fedmc run``'s runner, the
estimators, experiments, searches and a federation's ServerApp and ClientApps,
:mod:`fedmc.flower.settings`). It holds the algorithm and its parameters, the data settings,
the schedule and what follows training, each with its default; which defaults depend on other
settings is chosen by :func:`fedmc.run.settings.resolve`. The client side of a federation
imports this module, not the command line's option model (:mod:`fedmc.run.options`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from fedmc.algorithms.registry import default_algorithm, spec
from fedmc.federation.settings import Backend, Schedule
from fedmc.run.data_settings import DataSettings

DEFAULT_ALGORITHM = default_algorithm("ratings")
OWN_RUN_SETTINGS = ("ranking_k", "save_user_factors", "backend")
"""The settings of a run table (:meth:`RunSpec.of`) that are the spec's own, not the
schedule's."""


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

    @classmethod
    def of(cls, algorithm: str, params: dict[str, Any], data: dict[str, Any],
           run: dict[str, Any]) -> RunSpec:
        """The spec of a run given as tables (an experiment's ``params``, ``data`` and
        ``run``: :class:`~fedmc.federation.settings.Schedule` fields and
        :data:`OWN_RUN_SETTINGS`: ``ranking_k``, ``save_user_factors``, ``backend``, a table of
        :class:`~fedmc.federation.settings.Backend`), taken as they are: no default is chosen
        for it but the normalizer of a run with user-level DP, public (``none`` for
        interactions) where ``data`` names none, as ``fedmc run`` chooses it.

        Raises
        ------
        pydantic.ValidationError
            A value a field refuses, or a name that is no field (in ``run``: of the schedule).
        ValueError
            A normalizer fitted on the training ratings in a run with user-level DP.
        """
        own = {k: v for k, v in run.items() if k in OWN_RUN_SETTINGS}
        schedule = Schedule(**{k: v for k, v in run.items() if k not in own})
        if schedule.dp is not None:  # a DP run publishes no normalizer fitted on its ratings
            if data.get("normalize") is None:  # (config.json and the model carry it)
                data = {**data, "normalize": "none" if data.get("implicit") else "public"}
            elif data["normalize"] in ("center", "zscore"):
                raise ValueError(f"normalize={data['normalize']} fits on the training ratings, "
                                 "which a DP run may not publish: use normalize=public (the "
                                 "default with DP) or normalize=none")
        return cls(algorithm=algorithm, params=params, data=DataSettings(**data),
                   schedule=schedule, **own)

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

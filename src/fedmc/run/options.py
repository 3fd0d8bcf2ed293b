"""What the user asked of a run: :class:`RunOptions`, before any default is chosen
(:func:`fedmc.run.settings.resolve` chooses them). Light to import: the command line declares
its options from these fields."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from fedmc.federation.settings import Backend, BackendKind, SamplingKind, Schedule
from fedmc.privacy.accounting import UserDP
from fedmc.run.data_settings import DataSettings
from fedmc.run.spec import RunSpec

IMPLICIT_RANKING_K = 10
"""The ranking cut-off a run on interactions is judged by when none is given (``fedmc run
--implicit`` and ``fedmc evaluate`` of such a run)."""


def default_of(model: type[BaseModel], name: str) -> Any:
    """The default of ``model``'s field ``name``: an option that sets a field of a settings
    model takes its default from there, where it is written once
    (``tests/test_defaults.py``)."""
    return model.model_fields[name].default


class RunOptions(BaseModel):
    """What the user asked for: ``fedmc run``'s options by name, ``None`` (or absent) where
    the user gave nothing; :func:`resolve` chooses the rest. Options without a context-free
    default (clients, rounds, sampling, ...) default to ``None``; the others carry their one
    default here, which the command line shows."""

    # its validator is built on first use (as the other settings' models'): the command line's
    # help reads the fields alone
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    algorithm: str | None = None
    params: dict[str, Any] = Field(default_factory=dict, description="the algorithm's "
                                   "parameters the user gave")
    # the data
    dataset: str | None = None
    ratings: Path | None = None
    train: Path | None = None
    test: Path | None = None
    columns: tuple[str, str, str] | None = None
    data_dir: Path | None = None
    duplicates: Literal["error", "last", "mean"] = default_of(DataSettings, "duplicates")
    binary: Path | None = None
    binarize: float | None = None
    noise: float = default_of(DataSettings, "noise")
    rows: int | None = None
    normalize: Literal["none", "center", "zscore", "public"] | None = None
    rating_scale: tuple[float, float] | None = None
    implicit: bool = default_of(DataSettings, "implicit")
    implicit_threshold: float | None = None
    split: Literal["random", "user"] = default_of(DataSettings, "split")
    test_fraction: float = default_of(DataSettings, "test_fraction")
    validation_fraction: float | None = None
    # the federation
    clients: int | None = None
    partition: str | None = None
    active: int | Literal["all"] | None = None
    sampling: SamplingKind | None = None
    participation: float | None = None
    dropout: float = default_of(Schedule, "dropout")
    rounds: int | None = None
    eval_every: int = default_of(Schedule, "eval_every")
    seed: int = default_of(Schedule, "seed")
    backend: BackendKind = default_of(Backend, "kind")
    workers: int | None = None
    ray_address: str | None = None
    # user-level DP
    dp_epsilon: float | None = None
    dp_delta: float = default_of(UserDP, "delta")
    dp_noise: float | None = None
    dp_clip: float | None = None
    dp_setup_scale: float | None = None
    dp_setup_clip: float | None = None
    dp_unit: Literal["user", "client"] = default_of(UserDP, "unit")
    dp_against: Literal["server", "outsiders"] = default_of(UserDP, "against")
    dp_mechanism: Literal["gaussian", "skellam"] | None = default_of(UserDP, "mechanism")
    dp_reproducible: bool = default_of(UserDP, "reproducible")
    # choosing on the validation cut
    early_stopping: bool = False  # a switch: the EarlyStopping its other options make, or none
    patience: int | None = None
    min_delta: float | None = None
    refit: bool | None = None
    # after training
    ranking_k: int | None = None
    save_user_factors: bool = default_of(RunSpec, "save_user_factors")

    @property
    def dp(self) -> bool:
        """Whether the options ask for user-level DP (a budget or a noise multiplier)."""
        return self.dp_epsilon is not None or self.dp_noise is not None

    @property
    def private(self) -> bool:
        """Whether the options ask for user-level DP that is private (a budget or a noise
        multiplier, and not ``dp_reproducible``)."""
        return self.dp and not self.dp_reproducible

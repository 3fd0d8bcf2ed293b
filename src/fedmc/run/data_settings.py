"""Where a run's ratings come from and how they are split over clients: :class:`DataSettings`
(light to import: a run's spec holds them, and a ClientApp reads a spec without the data
pipeline of :mod:`fedmc.run.data`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from fedmc.core.scale import NormalizeKind, RatingScale, check_scale
from fedmc.data.catalog import SYNTHETIC_BOOLEAN, rating_scale
from fedmc.data.partition import PartitionKind
from fedmc.errors import ConfigError

DEFAULT_DATASET = "synthetic"
MAX_VALIDATION = 0.5
"""The largest validation cut: a run keeps back at most half of every client's training
ratings (more would train the model it chooses on the smaller part)."""


class DataSettings(BaseModel):
    """Where the ratings come from and how they are split over clients."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    dataset: str | None = Field(None, description="named data set (default: synthetic)")
    ratings: Path | None = Field(None, description="a CSV/TSV/Parquet file of ratings")
    train: Path | None = Field(None, description="a file of training ratings (with test)")
    test: Path | None = Field(None, description="a file of test ratings (with train)")
    columns: tuple[str, str, str] | None = None
    data_dir: Path | None = None
    duplicates: Literal["error", "last", "mean"] = "error"
    clients: int = Field(100, ge=1)
    partition: PartitionKind = "random"
    split: Literal["random", "user"] = "random"
    test_fraction: float = Field(0.2, ge=0, lt=1)
    validation_fraction: float = Field(
        0.0, ge=0, description="share of every client's training ratings it keeps back as its "
        f"validation cut (0: none; at most {MAX_VALIDATION:g}), split as the test split is, "
        "with its own seed")
    normalize: NormalizeKind | None = Field(None, description="zscore for ratings, none for "
                                            "interactions (the default)")
    rating_scale: tuple[float, float] | None = Field(
        None, description="the public rating scale LO,HI (default: the named set's)")
    implicit: bool = Field(False, description="read every rating as an interaction "
                           "(fedmc.data.interactions)")
    implicit_threshold: float | None = Field(None, description="with implicit: only ratings "
                                             ">= this count")
    binary: Path | None = Field(None, description="a 0/1 matrix or transaction file")
    binarize: float | None = Field(None, description="rating threshold that counts as 1")
    noise: float = Field(0.1, ge=0, le=1, description="XOR noise of synthetic-boolean")
    rows: int | None = Field(None, ge=1, description="rows of synthetic-boolean (500/client)")
    seed: int = Field(0, ge=0)

    def public_scale(self) -> tuple[float, float] | None:
        """The rating scale the user declared (``--rating-scale``), else the named data set's
        registry entry's (a ratings file has none unless declared)."""
        if self.rating_scale is not None:
            return self.rating_scale
        if self.ratings is None and self.train is None and self.binary is None:
            return rating_scale(self.dataset or DEFAULT_DATASET)
        return None

    @field_validator("validation_fraction")
    @classmethod
    def _cut(cls, fraction: float) -> float:
        if fraction > MAX_VALIDATION:
            raise ConfigError(f"{fraction:g} would keep back more than half of every client's "
                              f"training ratings and train on the rest: give at most "
                              f"{MAX_VALIDATION:g}")
        return fraction

    @field_validator("rating_scale")
    @classmethod
    def _scale(cls, scale: RatingScale | None) -> RatingScale | None:
        return None if scale is None else check_scale(scale)

    @model_validator(mode="after")
    def _implicit(self) -> DataSettings:
        if self.implicit_threshold is not None and not self.implicit:
            raise ConfigError("`implicit_threshold` needs `implicit=true`")
        if self.implicit and self.normalize not in (None, "none"):
            raise ConfigError(f"`implicit=true` reads interactions, whose strengths are not "
                              f"normalized: drop `normalize={self.normalize}`")
        if self.normalize is None:
            self.normalize = "none" if self.implicit else "zscore"
        return self

    @property
    def normalizer_kind(self) -> NormalizeKind:
        """``normalize`` as chosen (the validator fills it: never None after validation)."""
        if self.normalize is None:
            raise ConfigError("normalize is unset")
        return self.normalize

    @property
    def one_user(self) -> bool:
        """Whether every client holds one user (``partition="user"``)."""
        return self.partition == "user"

    @property
    def source(self) -> str:
        """A short label of the data source."""
        for path in (self.binary, self.ratings, self.train):
            if path is not None:
                return path.name
        return self.dataset or DEFAULT_DATASET


def is_boolean(settings: DataSettings | Any) -> bool:
    """Whether ``settings`` name Boolean data (a 0/1 file, binarized ratings or synthetic
    tiles), which ``fedmc run`` loads for the Felb algorithms (:func:`load_boolean_data`)."""
    return (settings.binary is not None or settings.binarize is not None
            or settings.dataset == SYNTHETIC_BOOLEAN)

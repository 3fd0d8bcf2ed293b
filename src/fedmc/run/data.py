"""From run settings to a federated data set: load, split, partition, normalize."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from fedmc.algorithms.registry import AlgorithmSpec, interactions_algorithms
from fedmc.core.scale import NormalizeKind
from fedmc.data import FederatedData, Ratings, partition_users
from fedmc.data.interactions import as_interactions
from fedmc.data.loaders import load_ratings_file
from fedmc.data.partition import PartitionKind
from fedmc.data.registry import load_dataset, rating_scale
from fedmc.data.split import fixed_split, random_test_mask, user_holdout_test_mask
from fedmc.errors import ConfigError

DEFAULT_DATASET = "synthetic"


class DataSettings(BaseModel):
    """Where the ratings come from and how they are split over clients."""

    model_config = ConfigDict(extra="forbid")

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

    @model_validator(mode="after")
    def _implicit(self) -> DataSettings:
        if self.implicit_threshold is not None and not self.implicit:
            raise ConfigError("implicit_threshold needs implicit=true")
        if self.implicit and self.normalize not in (None, "none"):
            raise ConfigError(f"implicit=true reads interactions, whose strengths are not "
                              f"normalized: drop normalize={self.normalize}")
        if self.normalize is None:
            self.normalize = "none" if self.implicit else "zscore"
        return self

    @property
    def source(self) -> str:
        """A short label of the data source."""
        for path in (self.binary, self.ratings, self.train):
            if path is not None:
                return path.name
        return self.dataset or DEFAULT_DATASET


def load_ratings(settings: DataSettings, progress: bool = False) -> Ratings:
    """Read the ratings named by ``settings`` (a file, a named set, or the default)."""
    if settings.ratings is not None and settings.dataset is not None:
        raise ConfigError("give either dataset=NAME or ratings=FILE, not both")
    if settings.ratings is not None:
        return _read_file(settings.ratings, settings)
    return load_dataset(
        settings.dataset or DEFAULT_DATASET,
        data_dir=settings.data_dir,
        duplicates=settings.duplicates,
        progress=progress,
        seed=settings.seed,
    )


def _read_file(path: Path, settings: DataSettings) -> Ratings:
    cols = tuple(_column_ref(c) for c in settings.columns) if settings.columns else None
    return load_ratings_file(path, columns=cols, duplicates=settings.duplicates)


def _column_ref(text: str) -> str | int:
    return int(text) if text.isdigit() else text


def federated_data(settings: DataSettings, progress: bool = False,
                   ) -> tuple[FederatedData, dict[str, int]]:
    """The federated data ``settings`` describe, and notes for ``config.json``.

    A named set or a ratings file is split by ``settings.split`` (:func:`federate`); a
    training file and a test file (``train``, ``test``) are used as they are, ids mapped
    with one vocabulary (:func:`fedmc.data.split.fixed_split`, whose counts of dropped test
    ratings of unseen users and items are the notes).
    """
    if settings.train is None and settings.test is None:
        return federate(as_read(load_ratings(settings, progress=progress), settings),
                        settings), {}
    if settings.train is None or settings.test is None:
        raise ConfigError("give train=FILE and test=FILE together")
    if settings.ratings is not None or settings.dataset is not None:
        raise ConfigError("give either train=FILE and test=FILE, or dataset=NAME or "
                          "ratings=FILE, not both")
    ratings, is_test, dropped = fixed_split(
        as_read(_read_file(settings.train, settings), settings),
        as_read(_read_file(settings.test, settings), settings))
    return _federate_split(ratings, is_test, settings), dropped


def as_read(ratings: Ratings, settings: DataSettings) -> Ratings:
    """``ratings`` as the run reads them: as they are, or as interactions with ``implicit``."""
    if not settings.implicit:
        return ratings
    return as_interactions(ratings, settings.implicit_threshold)


def implicit_params(entry: AlgorithmSpec, params: dict[str, Any],
                    settings: DataSettings) -> dict[str, Any]:
    """The algorithm parameters ``params`` with the settings by which ``entry`` fits
    interactions (its registry entry's ``interactions``: fedals's implicit mode, item-bias's
    counts) when the data are interactions (``settings.implicit``); an algorithm without
    them, a setting the user gave that contradicts them, and an implicit mode without
    interaction data are refused."""
    config = entry.Config
    if settings.implicit:
        if not entry.interactions:
            names = ", ".join(interactions_algorithms())
            raise ConfigError(f"implicit=true reads interactions, which need an algorithm for "
                              f"implicit feedback ({names})")
        given = config(**params)
        for key, value in entry.interactions.items():
            if params.get(key) is not None and getattr(given, key) != value:
                raise ConfigError(f"implicit=true contradicts {key}={params[key]}")
        return {**params, **entry.interactions}
    if entry.needs_interactions is not None and entry.needs_interactions(config(**params)):
        mode = ", ".join(f"{k}={json.dumps(v)}" for k, v in entry.interactions.items())
        raise ConfigError(f"the algorithm's {mode} needs interaction data: add implicit=true")
    return params


def federate(ratings: Ratings, settings: DataSettings) -> FederatedData:
    """Split into train/test, partition users into clients, normalize on training ratings.

    Pass the ratings without keeping another reference when memory matters: the federated
    layout is built straight from them (:meth:`FederatedData.from_split`), and they are
    released when this returns.
    """
    test_mask = random_test_mask if settings.split == "random" else user_holdout_test_mask
    return _federate_split(ratings, test_mask(ratings, settings.test_fraction, settings.seed),
                           settings)


def _federate_split(ratings: Ratings, is_test: np.ndarray,
                    settings: DataSettings) -> FederatedData:
    """Partition users into clients and build the layout of a split given by its test mask."""
    n_users = ratings.n_users
    if settings.partition != "user" and settings.clients > n_users:
        raise ConfigError(f"{settings.clients} clients but the data has only {n_users} users")
    if np.all(is_test):
        raise ConfigError("the training split is empty")
    client_of_user = partition_users(n_users, settings.clients, settings.partition, settings.seed)
    declared = settings.normalize == "public" or settings.rating_scale is not None
    return FederatedData.from_split(ratings, is_test, client_of_user, settings.normalize,
                                    settings.public_scale() if declared else None)


def is_boolean(settings: DataSettings) -> bool:
    """Whether ``settings`` name Boolean data (a 0/1 file, binarized ratings or synthetic
    tiles), which ``fedmc run`` loads for the Felb algorithms (:func:`load_boolean_data`)."""
    from fedmc.data.boolean import SYNTHETIC

    return (settings.binary is not None or settings.binarize is not None
            or settings.dataset == SYNTHETIC)


def load_boolean_data(settings: DataSettings):
    """Boolean data for Felb-type algorithms: a 0/1 file, binarized ratings, or synthetic tiles.

    Returns a :class:`fedmc.data.boolean.BooleanFederatedData` split by rows over the clients.
    """
    from fedmc.data.boolean import SYNTHETIC, load_boolean

    if settings.binarize is not None and settings.ratings is None and settings.dataset is None:
        raise ConfigError("binarize=T needs ratings=FILE or a rating dataset=NAME")
    common = {"noise": settings.noise, "n_clients": settings.clients, "seed": settings.seed}
    if settings.binary is not None:
        return load_boolean(binary_file=settings.binary, **common)
    if settings.binarize is not None:
        ratings = load_ratings(settings)
        return load_boolean(ratings=ratings, binarize=settings.binarize, **common)
    if settings.ratings is not None:
        raise ConfigError("Boolean algorithms need binarize=T with ratings=FILE")
    return load_boolean(dataset=settings.dataset or SYNTHETIC, rows=settings.rows, **common)

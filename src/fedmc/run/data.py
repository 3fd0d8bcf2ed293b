"""From run settings to a federated data set: load, split, partition, normalize."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np

from fedmc.data import FederatedData, Ratings, partition_users
from fedmc.data.interactions import as_interactions
from fedmc.data.loaders import load_ratings_file
from fedmc.data.registry import load_dataset
from fedmc.data.split import fixed_split, holdout_mask, random_mask
from fedmc.errors import ConfigError
from fedmc.run.data_settings import DEFAULT_DATASET, DataSettings


def load_ratings(settings: DataSettings, progress: bool = False) -> Ratings:
    """Read the ratings named by ``settings`` (a file, a named set, or the default)."""
    if settings.ratings is not None and settings.dataset is not None:
        raise ConfigError("give either `dataset=NAME` or `ratings=FILE`, not both")
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
    """The ratings of the file ``path``, each checked against the stated ``rating_scale``
    (one outside it is refused by file and line)."""
    cols = None
    if settings.columns is not None:
        user, item, rating = settings.columns
        cols = (_column_ref(user), _column_ref(item), _column_ref(rating))
    return load_ratings_file(path, columns=cols, duplicates=settings.duplicates,
                             value_range=settings.rating_scale)


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
        raise ConfigError("give `train=FILE` and `test=FILE` together")
    if settings.ratings is not None or settings.dataset is not None:
        raise ConfigError("give either `train=FILE` and `test=FILE`, or `dataset=NAME` or "
                          "`ratings=FILE`, not both")
    ratings, is_test, dropped = fixed_split(
        as_read(_read_file(settings.train, settings), settings),
        as_read(_read_file(settings.test, settings), settings))
    return _federate_split(ratings, is_test, settings), dropped


def enrolled_users(settings: DataSettings) -> int:
    """The number of users of the data ``settings`` name (with one user per client, the
    enrolled clients): a public size of a private run (``docs/privacy.md``), from which its DP
    defaults are chosen (:func:`fedmc.run.settings.resolve`)."""
    if settings.train is None and settings.test is None:
        return load_ratings(settings).n_users
    if settings.train is None:  # a test file alone: refused there
        return federated_data(settings)[0].n_users
    # a fixed split's users are its training file's (fixed_split drops test-only users)
    return as_read(_read_file(settings.train, settings), settings).n_users


def as_read(ratings: Ratings, settings: DataSettings) -> Ratings:
    """``ratings`` as the run reads them: as they are, or as interactions with ``implicit``."""
    if not settings.implicit:
        return ratings
    return as_interactions(ratings, settings.implicit_threshold)


def federate(ratings: Ratings, settings: DataSettings) -> FederatedData:
    """Split into train/test, partition users into clients, normalize on training ratings.

    Pass the ratings without keeping another reference when memory matters: the federated
    layout is built straight from them (:meth:`FederatedData.from_split`), and they are
    released when this returns.
    """
    return _federate_split(ratings, held_out_mask(ratings.n_ratings, lambda: ratings.users,
                                                  ratings.n_users, settings), settings)


UsersOf = Callable[[], np.ndarray]
"""The users of a data set's ratings, in their order, made when a split needs them (the user
holdout reads them; the random split only their number)."""


def held_out_mask(n_ratings: int, users: UsersOf, n_users: int,
                  settings: DataSettings) -> np.ndarray:
    """Which of ``n_ratings`` ratings (of ``n_users`` users) the split of ``settings`` holds
    out for testing."""
    return _split_mask(n_ratings, users, n_users, settings.test_fraction, settings.seed,
                       settings.split)


def validation_mask(ratings: Ratings, is_test: np.ndarray,
                    settings: DataSettings) -> np.ndarray | None:
    """Which training ratings the clients keep back as their validation cut: the share
    ``validation_fraction`` of the training ratings (not of the test ratings, which nothing
    chooses on), drawn as the test split is drawn (``split``) from a stream of its own (the
    seed's second child), or None without a cut."""
    return cut_mask(is_test, lambda: ratings.users, ratings.n_users, settings)


def cut_mask(is_test: np.ndarray, users: UsersOf, n_users: int,
             settings: DataSettings) -> np.ndarray | None:
    """:func:`validation_mask` of ratings known by their test mask and users alone."""
    if settings.validation_fraction == 0:
        return None
    training = np.flatnonzero(~is_test)
    own_seed = int(np.random.SeedSequence([settings.seed, 1]).generate_state(1)[0])
    held = _split_mask(len(training), lambda: users()[training], n_users,
                       settings.validation_fraction, own_seed, settings.split)
    is_validation = np.zeros(len(is_test), dtype=bool)
    is_validation[training[held]] = True
    return is_validation


def _split_mask(n: int, users: UsersOf, n_users: int, fraction: float, seed: int,
                split: str) -> np.ndarray:
    if split == "random":
        return random_mask(n, fraction, seed)
    return holdout_mask(users(), n_users, fraction, seed)


def check_split(settings: DataSettings, n_users: int, is_test: np.ndarray) -> None:
    """Refuse a partition into more clients than there are users, and an empty training
    split."""
    if settings.partition != "user" and settings.clients > n_users:
        raise ConfigError(f"{settings.clients} clients but the data has only {n_users} users")
    if np.all(is_test):
        raise ConfigError("the training split is empty")


def _federate_split(ratings: Ratings, is_test: np.ndarray,
                    settings: DataSettings) -> FederatedData:
    """Partition users into clients and build the layout of a split given by its test mask
    (and the validation cut of :func:`validation_mask`)."""
    n_users = ratings.n_users
    check_split(settings, n_users, is_test)
    client_of_user = partition_users(n_users, settings.clients, settings.partition, settings.seed)
    declared = settings.normalize == "public" or settings.rating_scale is not None
    return FederatedData.from_split(ratings, is_test, client_of_user, settings.normalizer_kind,
                                    settings.public_scale() if declared else None,
                                    is_validation=validation_mask(ratings, is_test, settings))


def load_boolean_data(settings: DataSettings):
    """Boolean data for Felb-type algorithms: a 0/1 file, binarized ratings, or synthetic tiles.

    Returns a :class:`fedmc.data.boolean.BooleanFederatedData` split by rows over the clients.
    """
    from fedmc.data.boolean import SYNTHETIC, load_boolean

    if settings.binarize is not None and settings.ratings is None and settings.dataset is None:
        raise ConfigError("`binarize=T` needs `ratings=FILE` or a rating `dataset=NAME`")
    common = partial(load_boolean, noise=settings.noise, n_clients=settings.clients,
                     seed=settings.seed)
    if settings.binary is not None:
        return common(binary_file=settings.binary)
    if settings.binarize is not None:
        return common(ratings=load_ratings(settings), binarize=settings.binarize)
    if settings.ratings is not None:
        raise ConfigError("Boolean algorithms need `binarize=T` with `ratings=FILE`")
    return common(dataset=settings.dataset or SYNTHETIC, rows=settings.rows)

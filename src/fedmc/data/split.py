"""Train/test splits: random per rating (the papers' 80/20), per-user holdout, and a split
given as two files."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from fedmc.data.ratings import Ratings
from fedmc.data.vocabulary import IdVocabulary
from fedmc.errors import ConfigError


def random_test_mask(ratings: Ratings, test_fraction: float = 0.2, seed: int = 0) -> np.ndarray:
    """Which ratings a uniformly random split holds out: ``round(test_fraction * n)`` of them.

    Parameters
    ----------
    ratings
        All observed ratings.
    test_fraction
        Fraction in ``[0, 1)`` held out for testing (0.2 in the FedMC-ADMM paper, section 5.1).
    seed
        Seed of the permutation; the same seed gives the same split.
    """
    return random_mask(ratings.n_ratings, test_fraction, seed)


def random_mask(n: int, test_fraction: float = 0.2, seed: int = 0) -> np.ndarray:
    """:func:`random_test_mask` of ``n`` ratings: it reads nothing else of them."""
    _check_fraction(test_fraction)
    rng = np.random.default_rng(seed)
    n_test = int(round(test_fraction * n))
    order = np.arange(n, dtype=np.int32 if n < 2**31 else np.int64)
    rng.shuffle(order)
    is_test = np.zeros(n, dtype=bool)
    is_test[order[:n_test]] = True
    return is_test


def random_split(
    ratings: Ratings, test_fraction: float = 0.2, seed: int = 0
) -> tuple[Ratings, Ratings]:
    """``(train, test)`` of :func:`random_test_mask`."""
    is_test = random_test_mask(ratings, test_fraction, seed)
    return ratings.subset(~is_test), ratings.subset(is_test)


def user_holdout_split(
    ratings: Ratings, test_fraction: float = 0.2, seed: int = 0
) -> tuple[Ratings, Ratings]:
    """``(train, test)`` of :func:`user_holdout_test_mask`."""
    is_test = user_holdout_test_mask(ratings, test_fraction, seed)
    return ratings.subset(~is_test), ratings.subset(is_test)


def _check_fraction(test_fraction: float) -> None:
    if not 0.0 <= test_fraction < 1.0:
        raise ConfigError(f"test fraction must lie in [0, 1), got {test_fraction}")


def user_holdout_test_mask(
    ratings: Ratings, test_fraction: float = 0.2, seed: int = 0
) -> np.ndarray:
    """Hold out ``floor(test_fraction * d_u)`` ratings of every user ``u`` with ``d_u`` ratings.

    Every user keeps at least one training rating, so each user can be fitted.
    """
    return holdout_mask(ratings.users, ratings.n_users, test_fraction, seed)


def holdout_mask(users: np.ndarray, n_users: int, test_fraction: float = 0.2,
                 seed: int = 0) -> np.ndarray:
    """:func:`user_holdout_test_mask` of ratings whose users are ``users`` (of ``n_users``):
    it reads nothing else of them."""
    _check_fraction(test_fraction)
    rng = np.random.default_rng(seed)
    n = len(users)
    # random order within users: sort by (user, random key)
    order = np.lexsort((rng.random(n), users))
    users_sorted = users[order]
    counts = np.bincount(users_sorted, minlength=n_users)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    rank_in_user = np.arange(n) - starts[users_sorted]
    n_test_user = np.minimum(np.floor(test_fraction * counts), np.maximum(counts - 1, 0))
    is_test = np.zeros(n, dtype=bool)
    is_test[order] = rank_in_user < n_test_user[users_sorted]
    return is_test


def fixed_split(train: Ratings, test: Ratings) -> tuple[Ratings, np.ndarray, dict[str, int]]:
    """Ratings read from a training file and a test file, as one :class:`Ratings` over the
    training file's id vocabulary and the mask of the test ratings.

    The test file's raw ids are mapped with the training vocabulary, so an id means the same
    user or item in both. A test rating whose user or item has no training rating cannot be
    predicted from the training data (the model has no factor for it): it is dropped, and
    counted in the returned dict as ``test_dropped_unseen_user`` (the user is unseen) or
    ``test_dropped_unseen_item`` (the user is known, the item unseen). This is what cornac's
    ``exclude_unknowns=True`` does; new users are the fold-in's job
    (:meth:`fedmc.model.FactorModel.fold_in`).
    """
    users, user_known = IdVocabulary(train.ids("user"), "user").lookup(test.ids("user")[test.users])
    items, item_known = IdVocabulary(train.ids("item"), "item").lookup(test.ids("item")[test.items])
    keep = user_known & item_known
    merged = replace(
        train,
        users=np.concatenate((train.users, users[keep].astype(np.int32))),
        items=np.concatenate((train.items, items[keep].astype(np.int32))),
        values=np.concatenate((train.values, test.values[keep])),
    )
    is_test = np.zeros(merged.n_ratings, dtype=bool)
    is_test[train.n_ratings :] = True
    dropped = {
        "test_dropped_unseen_user": int(np.count_nonzero(~user_known)),
        "test_dropped_unseen_item": int(np.count_nonzero(user_known & ~item_known)),
    }
    return merged, is_test, dropped

"""Ratings read as implicit feedback: which items a user interacted with, not how much they liked
them (``fedmc run --implicit``, ``docs/fedals.md``).

Every rating, or every rating of at least a threshold, becomes an interaction of strength 1
(a click); the others are dropped, from the training and the test ratings alike. The values are
then strengths, not ratings: they are not normalized, and a model of implicit feedback weighs
an interaction of strength ``r`` by its confidence ``1 + alpha r``.
"""

from __future__ import annotations

import numpy as np

from fedmc.data.ratings import Ratings
from fedmc.errors import DataError


def as_interactions(ratings: Ratings, threshold: float | None = None) -> Ratings:
    """The interactions of ``ratings``: every rating ``>= threshold`` (every rating when
    ``threshold`` is None) as strength 1, the same users, items and ids.

    Raises
    ------
    DataError
        When no rating reaches the threshold.
    """
    keep = (np.ones(ratings.n_ratings, dtype=bool) if threshold is None
            else ratings.values >= threshold)
    if ratings.n_ratings and not keep.any():
        raise DataError(f"no rating of {ratings.name} reaches the implicit threshold "
                        f"{threshold:g} (the largest is {ratings.values.max():g})")
    kept = ratings if threshold is None else ratings.subset(keep)  # no copy of every id
    return Ratings(kept.users, kept.items, np.ones(kept.n_ratings), kept.n_users, kept.n_items,
                   kept.user_ids, kept.item_ids, kept.name, kept.meta)

"""The ``Ratings`` container: a sparse set of (user, item, value) triples with id maps."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from fedmc.errors import DataError


@dataclass(frozen=True)
class Ratings:
    """Observed entries of an ``n_users x n_items`` matrix.

    Attributes
    ----------
    users, items
        ``int32`` arrays of dense indices in ``[0, n_users)`` and ``[0, n_items)``.
    values
        ``float64`` array of the observed values (ratings, or 0/1 for Boolean data).
    n_users, n_items
        Matrix shape. Users or items without any rating may exist (after a split).
    user_ids, item_ids
        The original identifiers, indexed by dense index (``user_ids[u]`` is the raw id of
        user ``u``).
    name
        A short label of where the data came from (data-set name or file name).
    """

    users: np.ndarray
    items: np.ndarray
    values: np.ndarray
    n_users: int
    n_items: int
    user_ids: np.ndarray | None = None
    item_ids: np.ndarray | None = None
    name: str = "ratings"
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.values)
        if len(self.users) != n or len(self.items) != n:
            raise DataError(
                f"users, items and values differ in length ({len(self.users)}, "
                f"{len(self.items)}, {n})"
            )
        if n and not np.all(np.isfinite(self.values)):
            bad = int(np.flatnonzero(~np.isfinite(self.values))[0])
            raise DataError(f"rating number {bad + 1} is not a finite number ({self.values[bad]})")
        if n and (self.users.min() < 0 or self.users.max() >= self.n_users):
            raise DataError("a user index lies outside [0, n_users)")
        if n and (self.items.min() < 0 or self.items.max() >= self.n_items):
            raise DataError("an item index lies outside [0, n_items)")

    @property
    def n_ratings(self) -> int:
        """Number of observed entries."""
        return int(len(self.values))

    def ids(self, kind: Literal["user", "item"]) -> np.ndarray:
        """The raw ids of the users or of the items, by dense index (the dense indices
        themselves where the data came without ids)."""
        ids = self.user_ids if kind == "user" else self.item_ids
        return np.arange(self.n_users if kind == "user" else self.n_items) if ids is None else ids

    @property
    def shape(self) -> tuple[int, int]:
        """``(n_users, n_items)``."""
        return (self.n_users, self.n_items)

    def subset(self, mask_or_index: np.ndarray) -> Ratings:
        """Return the ratings selected by a boolean mask or an index array (same shape, ids)."""
        return Ratings(
            users=self.users[mask_or_index],
            items=self.items[mask_or_index],
            values=self.values[mask_or_index],
            n_users=self.n_users,
            n_items=self.n_items,
            user_ids=self.user_ids,
            item_ids=self.item_ids,
            name=self.name,
            meta=self.meta,
        )

    @classmethod
    def from_raw(
        cls,
        raw_users: np.ndarray,
        raw_items: np.ndarray,
        values: np.ndarray,
        name: str = "ratings",
        meta: dict | None = None,
    ) -> Ratings:
        """Build from raw ids of any hashable dtype, mapping them to dense indices.

        Dense indices follow the sorted order of the raw ids, so the result does not depend
        on the order of the input rows.
        """
        user_ids, users = np.unique(np.asarray(raw_users), return_inverse=True)
        item_ids, items = np.unique(np.asarray(raw_items), return_inverse=True)
        return cls(
            users=users.astype(np.int32, copy=False).ravel(),
            items=items.astype(np.int32, copy=False).ravel(),
            values=np.asarray(values, dtype=np.float64),
            n_users=len(user_ids),
            n_items=len(item_ids),
            user_ids=user_ids,
            item_ids=item_ids,
            name=name,
            meta=dict(meta or {}),
        )

"""Ratings from a table in memory: a pandas or polars DataFrame, or a mapping of column names
to arrays (:func:`fedmc.load_federated` takes one in place of a file).

Nothing here imports pandas: a table is anything with named columns (a ``columns`` attribute
or a mapping's keys) that ``table[name]`` returns as an array-like, so pandas stays an
optional companion, not a dependency.
"""

from __future__ import annotations

from collections.abc import Mapping
from os import PathLike
from typing import Any

import numpy as np

from fedmc.data.loaders import Duplicates, ratings_from_columns
from fedmc.data.ratings import Ratings
from fedmc.errors import DataError

FRAME_NAME = "DataFrame"
"""The data's name (``Ratings.name``) when it came from a table."""


def is_frame(obj: Any) -> bool:
    """Whether ``obj`` is a table of named columns (not a path or a data set's name)."""
    if obj is None or isinstance(obj, str | bytes | PathLike):
        return False
    return isinstance(obj, Mapping) or (hasattr(obj, "columns") and hasattr(obj, "__getitem__"))


def ratings_from_frame(frame: Any, user: str = "user", item: str = "item",
                       rating: str | None = "rating", duplicates: Duplicates = "error",
                       ) -> Ratings:
    """The ratings of a table, one row per rating.

    Parameters
    ----------
    frame
        A pandas or polars DataFrame, or a mapping of column names to arrays.
    user, item
        The columns of raw user and item ids (any hashable values of one type).
    rating
        The column of ratings; None: every row is one interaction of value 1 (implicit
        feedback, as ``fedmc run --implicit`` reads it).
    duplicates
        What to do with several ratings of one (user, item) pair, as for a file:
        ``"error"``, ``"last"`` or ``"mean"``.

    Raises
    ------
    DataError
        A missing column, a missing id, a rating that is not a finite number, columns of
        different lengths, or a repeated pair under ``duplicates="error"``.
    """
    names = list(frame.keys() if isinstance(frame, Mapping) else frame.columns)
    wanted = {"user": user, "item": item, **({"rating": rating} if rating is not None else {})}
    for what, column in wanted.items():
        if column not in names:
            raise DataError(f"the DataFrame has no {what} column {column!r} (its columns: "
                            f"{', '.join(map(str, names))}); name it with {what}=")
    users, items = (_ids(frame[column], what) for what, column in
                    (("user", user), ("item", item)))
    if rating is None:
        values = np.ones(len(users))
    else:
        try:
            values = np.asarray(frame[rating], dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            raise DataError(f"the rating column {rating!r} holds a value that is not a "
                            "number") from None
    if not len(users) == len(items) == len(values):
        raise DataError(f"the columns differ in length ({len(users)}, {len(items)}, "
                        f"{len(values)})")
    if len(values) == 0:
        raise DataError("the DataFrame has no rows")
    return ratings_from_columns(users, items, values, duplicates, FRAME_NAME)


def _ids(column: Any, what: str) -> np.ndarray:
    """A column of raw ids as a NumPy array (whole floats as integers), refused when an id is
    missing (None, NaN) or the ids cannot be ordered (mixed types)."""
    ids = np.asarray(column).reshape(-1)
    if ids.dtype.kind == "f":
        if not np.all(np.isfinite(ids)):
            raise DataError(f"the {what} column has a missing id (row "
                            f"{int(np.flatnonzero(~np.isfinite(ids))[0]) + 1})")
        if np.all(ids == np.round(ids)) and np.all(np.abs(ids) < 2**53):
            return ids.astype(np.int64)  # integer ids a missing value once made floats
    if ids.dtype.kind == "O":
        missing = next((k for k, v in enumerate(ids.tolist()) if _missing(v)), None)
        if missing is not None:
            raise DataError(f"the {what} column has a missing id (row {missing + 1})")
        try:
            np.unique(ids)
        except TypeError:
            raise DataError(f"the {what} column mixes types of id (they cannot be "
                            "ordered)") from None
    return ids


def _missing(value: Any) -> bool:
    """Whether an id is a missing value: None, NaN, or pandas' NA (which has no truth
    value)."""
    try:
        return value is None or bool(value != value)
    except TypeError:
        return True

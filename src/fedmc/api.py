"""The Python entry points: load a federated data set in one call, then ``Model(...).fit``.

>>> from fedmc import FedMCADMM, load_federated
>>> data = load_federated("synthetic", clients=20)
>>> model = FedMCADMM(rank=5, rounds=10, active=5).fit(data)
>>> model.predict_indices([0, 1], [3, 4]).shape
(2,)

A pandas DataFrame (or any table of named columns, a dict of arrays too) in place of a file:

>>> table = {"user": [1, 1, 1, 2, 2, 2, 3, 3, 3], "movie": [10, 20, 30] * 3,
...          "stars": [5, 3, 4, 4, 2, 5, 1, 5, 3]}
>>> data = load_federated(table, clients=3, item="movie", rating="stars", test_fraction=0.3)
>>> data.n_users, data.n_items
(3, 3)
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from fedmc.data import FederatedData
from fedmc.data.frames import is_frame, ratings_from_frame
from fedmc.errors import ConfigError
from fedmc.run.data import DataSettings, as_read, federate, federated_data


def load_federated(
    dataset: Any = None,
    ratings: Any = None,
    clients: int = 100,
    *,
    train: str | Path | None = None,
    test: str | Path | None = None,
    user: str | None = None,
    item: str | None = None,
    rating: str | None = None,
    **settings: Any,
) -> FederatedData:
    """Load ratings, split them 80/20, partition users into ``clients`` clients and normalize.

    With ``train`` and ``test`` files the split is theirs: ids are mapped with the training
    file's vocabulary, and test ratings of users or items without a training rating are
    dropped with a warning (:func:`fedmc.data.split.fixed_split`).

    Parameters
    ----------
    dataset
        A named data set (``"ml-1m"``, ``"synthetic"``, ...), or a table of ratings: a pandas
        (or polars) DataFrame, or a mapping of column names to arrays, one row per rating
        (:func:`fedmc.data.frames.ratings_from_frame`); the synthetic default if neither this
        nor ``ratings`` is given.
    ratings
        A CSV/TSV/Parquet file of ratings (or a table) instead of a named set.
    user, item, rating
        A table's columns of raw user ids, raw item ids and ratings (default ``"user"``,
        ``"item"``, ``"rating"``; a file's are named by ``columns``). ``rating=""`` reads
        every row as one interaction (value 1), for ``implicit=True``.
    clients
        Number of clients ``p``.
    train, test
        A file of training ratings and one of test ratings, instead of ``dataset`` or
        ``ratings`` and a split.
    **settings
        Any other field of :class:`fedmc.run.data.DataSettings`: ``data_dir``, ``columns``,
        ``duplicates``, ``partition``, ``split``, ``test_fraction``, ``normalize``, ``seed``.
    """
    columns = {"user": user, "item": item, "rating": rating}
    frame = next((t for t in (dataset, ratings) if is_frame(t)), None)
    if frame is not None:
        other = {"dataset": dataset, "ratings": ratings, "train": train, "test": test}
        return _federated_frame(frame, columns, clients, **{
            k: v for k, v in other.items() if v is not frame}, **settings)
    named = [f"{k}=" for k, v in columns.items() if v is not None]
    if named:
        raise ConfigError(f"{named[0]} names a DataFrame's column; a file's are named by "
                          "`columns=(user, item, rating)`")
    cfg = DataSettings(dataset=dataset, ratings=ratings, clients=clients, train=train,
                       test=test, **settings)
    data, dropped = federated_data(cfg)
    if any(dropped.values()):
        warnings.warn(f"dropped test ratings the training file cannot predict: {dropped}",
                      stacklevel=2)
    return data


def _federated_frame(frame: Any, columns: dict[str, str | None], clients: int,
                     **settings: Any) -> FederatedData:
    """:func:`load_federated` of a table: its ratings split and partitioned as a file's."""
    wanted = DataSettings(clients=clients, **settings)
    for name in ("dataset", "ratings", "train", "test", "columns"):
        if getattr(wanted, name) is not None:
            raise ConfigError(f"{name}= and a DataFrame are two sources: give one")
    if wanted.normalize == "public" and wanted.rating_scale is None:
        raise ConfigError("`normalize='public'` of a DataFrame needs its `rating_scale=(LO, HI)`")
    rating = "rating" if columns["rating"] is None else columns["rating"] or None
    if rating is None and not wanted.implicit:
        raise ConfigError("rating='' reads interactions: it needs `implicit=True`")
    table = ratings_from_frame(frame, columns["user"] or "user", columns["item"] or "item",
                               rating, wanted.duplicates)
    return federate(as_read(table, wanted), wanted)

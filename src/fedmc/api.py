"""The Python entry points: load a federated data set in one call, then ``Model(...).fit``.

>>> from fedmc import FedMCADMM, load_federated
>>> data = load_federated("synthetic", clients=20)
>>> model = FedMCADMM(rank=5, rounds=10, active=5).fit(data)
>>> model.predict_indices([0, 1], [3, 4]).shape
(2,)
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from fedmc.data import FederatedData
from fedmc.run.data import DataSettings, federated_data


def load_federated(
    dataset: str | None = None,
    ratings: str | Path | None = None,
    clients: int = 100,
    *,
    train: str | Path | None = None,
    test: str | Path | None = None,
    **settings: Any,
) -> FederatedData:
    """Load ratings, split them 80/20, partition users into ``clients`` clients and normalize.

    With ``train`` and ``test`` files the split is theirs: ids are mapped with the training
    file's vocabulary, and test ratings of users or items without a training rating are
    dropped with a warning (:func:`fedmc.data.split.fixed_split`).

    Parameters
    ----------
    dataset
        A named data set (``"ml-1m"``, ``"synthetic"``, ...); the synthetic default if neither
        this nor ``ratings`` is given.
    ratings
        A CSV/TSV/Parquet file of ratings instead of a named set.
    clients
        Number of clients ``p``.
    train, test
        A file of training ratings and one of test ratings, instead of ``dataset`` or
        ``ratings`` and a split.
    **settings
        Any other field of :class:`fedmc.run.data.DataSettings`: ``data_dir``, ``columns``,
        ``duplicates``, ``partition``, ``split``, ``test_fraction``, ``normalize``, ``seed``.
    """
    cfg = DataSettings(dataset=dataset, ratings=ratings, clients=clients, train=train,
                       test=test, **settings)
    data, dropped = federated_data(cfg)
    if any(dropped.values()):
        warnings.warn(f"dropped test ratings the training file cannot predict: {dropped}",
                      stacklevel=2)
    return data

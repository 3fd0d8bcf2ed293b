"""The Python entry points: load a federated data set in one call, then ``Model(...).fit``.

>>> from fedmc import FedMCADMM, load_federated
>>> data = load_federated("synthetic", clients=20)
>>> model = FedMCADMM(rank=5).fit(data, rounds=10, active=5)
>>> model.predict([0, 1], [3, 4]).shape
(2,)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fedmc.data import FederatedData
from fedmc.pipeline import DataSettings, federate, load_ratings


def load_federated(
    dataset: str | None = None,
    ratings: str | Path | None = None,
    clients: int = 100,
    **settings: Any,
) -> FederatedData:
    """Load ratings, split them 80/20, partition users into ``clients`` clients and normalize.

    Parameters
    ----------
    dataset
        A named data set (``"ml-1m"``, ``"synthetic"``, ...); the synthetic default if neither
        this nor ``ratings`` is given.
    ratings
        A CSV/TSV/Parquet file of ratings instead of a named set.
    clients
        Number of clients ``p``.
    **settings
        Any other field of :class:`fedmc.pipeline.DataSettings`: ``data_dir``, ``columns``,
        ``duplicates``, ``partition``, ``split``, ``test_fraction``, ``normalize``, ``seed``.
    """
    cfg = DataSettings(dataset=dataset, ratings=ratings, clients=clients, **settings)
    return federate(load_ratings(cfg), cfg)

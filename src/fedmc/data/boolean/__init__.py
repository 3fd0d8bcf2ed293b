"""Boolean (binary) data and the building blocks of federated Boolean MF (Felb, Felb-MU)."""

from __future__ import annotations

from pathlib import Path

from fedmc.data.boolean.data import BooleanFederatedData
from fedmc.data.boolean.io import Missing, binarize_ratings, read_binary
from fedmc.data.boolean.synthetic import synthetic_tiles
from fedmc.data.catalog import SYNTHETIC_BOOLEAN as SYNTHETIC
from fedmc.data.ratings import Ratings
from fedmc.errors import ConfigError

ROWS_PER_CLIENT = 500


def load_boolean(
    dataset: str | None = None,
    binary_file: str | Path | None = None,
    ratings: Ratings | None = None,
    binarize: float | None = None,
    noise: float = 0.1,
    n_clients: int = 10,
    seed: int = 0,
    *,
    rows: int | None = None,
    cols: int = 1000,
    tiles: int = 10,
    missing: Missing = "error",
) -> BooleanFederatedData:
    """Boolean data split by rows over ``n_clients`` clients, from exactly one source.

    Parameters
    ----------
    dataset
        ``"synthetic-boolean"``: :func:`synthetic_tiles` with ``rows`` (default 500 per
        client) x ``cols``, ``tiles`` tiles and XOR ``noise``; the signal is kept.
    binary_file
        A dense 0/1 text matrix or a transaction file (:func:`read_binary`); ``missing`` says
        what ``nan`` entries become.
    ratings, binarize
        A rating set and the threshold at which a rating counts as 1 (the paper: 3.5).
    n_clients, seed
        Clients get near-equal random shards of the rows, drawn from ``seed``.
    """
    given = [dataset is not None, binary_file is not None, ratings is not None]
    if sum(given) != 1:
        raise ConfigError(
            f"give exactly one of --dataset {SYNTHETIC}, --binary FILE, or --ratings FILE "
            "--binarize T"
        )
    if dataset is not None:
        if dataset != SYNTHETIC:
            raise ConfigError(f"unknown Boolean data set {dataset!r}: use {SYNTHETIC}")
        n = rows if rows is not None else ROWS_PER_CLIENT * n_clients
        A, G = synthetic_tiles(n, cols, k=tiles, noise=noise, seed=seed)
        name = f"{SYNTHETIC}-noise{noise:g}"
        return BooleanFederatedData.build(A, n_clients, seed=seed, signal=G, name=name)
    if binary_file is not None:
        A = read_binary(binary_file, missing=missing)
        return BooleanFederatedData.build(A, n_clients, seed=seed, name=Path(binary_file).stem)
    if binarize is None:
        raise ConfigError("ratings need a threshold: --binarize T (the paper uses 3.5)")
    assert ratings is not None  # the one source given
    A = binarize_ratings(ratings, binarize)
    name = f"{ratings.name}>={binarize:g}"
    return BooleanFederatedData.build(A, n_clients, seed=seed, name=name)


__all__ = [
    "BooleanFederatedData",
    "binarize_ratings",
    "load_boolean",
    "read_binary",
    "synthetic_tiles",
]

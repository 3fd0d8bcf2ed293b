"""What one client holds: its own ratings files, read into a federation of one client.

The shard equals the simulation's ``FederatedData.client_shard(c)`` bit for bit when the
files come from ``fedmc federate split``: users in raw-id order (the federation's row order
within a client), each user's ratings in file order, items indexed by the manifest's item
vocabulary, values normalized with the manifest's normalizer.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from fedmc.data.federated import FederatedData
from fedmc.data.loaders import load_ratings_file
from fedmc.data.ratings import Ratings
from fedmc.errors import DataError
from fedmc.flower.manifest import Manifest

Columns = tuple[str | int, str | int, str | int] | None


def load_shard(manifest: Manifest, client: int, ratings: Path, test: Path | None,
               columns: Columns = None) -> FederatedData:
    """Client ``client``'s shard from its training ratings file and, if any, its held-out
    ratings file (any format :func:`fedmc.data.loaders.load_ratings_file` reads)."""
    train = load_ratings_file(ratings, columns=columns)
    held = load_ratings_file(test, columns=columns) if test is not None else None
    parts = [train] if held is None else [train, held]
    users = np.unique(np.concatenate([r.user_ids[r.users] for r in parts]))
    expected = manifest.rows_of(client)
    if len(users) != expected.stop - expected.start:
        raise DataError(f"client {client} has {len(users)} users in its files, the manifest "
                        f"gives it {expected.stop - expected.start}", ratings)
    train_r, test_r = (_indexed(r, users, manifest, path) for r, path in
                       ((train, ratings), (held, test)))
    shard = FederatedData.build(train_r, test_r, np.zeros(len(users), dtype=np.int32),
                                manifest.normalizer)
    return dataclasses.replace(shard, value_range=manifest.value_range, name=manifest.name)


def _indexed(r: Ratings | None, users: np.ndarray, manifest: Manifest,
             path: Path | None) -> Ratings:
    """``r`` with users indexed in ``users`` and items in the manifest's vocabulary (an empty
    set of ratings when ``r`` is None)."""
    shape = {"n_users": len(users), "n_items": manifest.n_items}
    if r is None:
        empty = np.zeros(0, dtype=np.int32)
        return Ratings(empty, empty, np.zeros(0), **shape)
    item_ids = r.item_ids[r.items]
    items = np.searchsorted(manifest.item_ids, item_ids)
    known = (items < manifest.n_items) & (manifest.item_ids[np.minimum(
        items, manifest.n_items - 1)] == item_ids)
    if not known.all():
        raise DataError(f"item {item_ids[~known][0]!r} is not in the manifest", path)
    return Ratings(np.searchsorted(users, r.user_ids[r.users]).astype(np.int32),
                   items.astype(np.int32), r.values, **shape)

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
import scipy.sparse as sp

from fedmc.data.boolean import BooleanFederatedData
from fedmc.data.federated import FederatedData
from fedmc.data.loaders import load_ratings_file
from fedmc.data.ratings import Ratings
from fedmc.errors import DataError
from fedmc.flower.manifest import Manifest

Columns = tuple[str | int, str | int, str | int] | None


def load_shard(manifest: Manifest, client: int, ratings: Path, test: Path | None,
               columns: Columns = None, validation: Path | None = None) -> FederatedData:
    """Client ``client``'s shard from its training ratings file and, if any, its held-out
    ratings file and its validation cut (any format :func:`fedmc.data.loaders.
    load_ratings_file` reads). A client whose file holds a header and no ratings (its user has
    rated nothing yet) has a shard of its manifest rows without ratings: it takes part with
    nothing to upload."""
    train = load_ratings_file(ratings, columns=columns, allow_empty=True)
    held = load_ratings_file(test, columns=columns) if test is not None else None
    cut = load_ratings_file(validation, columns=columns) if validation is not None else None
    parts = [r for r in (train, held, cut) if r is not None]
    users = np.unique(np.concatenate([r.ids("user")[r.users] for r in parts]))
    expected = manifest.rows_of(client)
    if len(users) == 0:  # ids of users the client's files do not name: never leave it
        users = np.arange(expected.stop - expected.start)
    if len(users) != expected.stop - expected.start:
        raise DataError(f"client {client} has {len(users)} users in its files, the manifest "
                        f"gives it {expected.stop - expected.start}", ratings)
    train_r, test_r = (_indexed(r, users, manifest, path) for r, path in
                       ((train, ratings), (held, test)))
    one_client = np.zeros(len(users), dtype=np.int32)
    shard = FederatedData.build(train_r, test_r, one_client, manifest.normalizer)
    kept_back = None if cut is None else FederatedData.build(
        train_r, _indexed(cut, users, manifest, validation), one_client,
        manifest.normalizer).test
    return dataclasses.replace(shard, value_range=manifest.value_range, name=manifest.name,
                               validation=kept_back)


def _indexed(r: Ratings | None, users: np.ndarray, manifest: Manifest,
             path: Path | None) -> Ratings:
    """``r`` with users indexed in ``users`` and items in the manifest's vocabulary (an empty
    set of ratings when ``r`` is None)."""
    n_users, n_items = len(users), manifest.n_items
    if r is None:
        empty = np.zeros(0, dtype=np.int32)
        return Ratings(empty, empty, np.zeros(0), n_users, n_items)
    item_ids = r.ids("item")[r.items]
    items = np.searchsorted(manifest.item_ids, item_ids)
    known = (items < manifest.n_items) & (manifest.item_ids[np.minimum(
        items, manifest.n_items - 1)] == item_ids)
    if not known.all():
        raise DataError(f"item {item_ids[~known][0]!r} is not in the manifest", path)
    return Ratings(np.searchsorted(users, r.ids("user")[r.users]).astype(np.int32),
                   items.astype(np.int32), r.values, n_users, n_items)


def load_boolean_shard(manifest: Manifest, client: int, ones: Path,
                       signal: Path | None) -> BooleanFederatedData:
    """Client ``client``'s rows of a Boolean federation from its ``row,cols`` file (and its
    rows of the ground truth, if any), as a federation of one client: equal to the
    simulation's ``BooleanFederatedData.client_shard(client)`` bit for bit."""
    expected = manifest.rows_of(client)
    A, sources = _read_rows(ones, manifest.n_items)
    if len(sources) != expected.stop - expected.start:
        raise DataError(f"client {client} has {len(sources)} rows in its file, the manifest "
                        f"gives it {expected.stop - expected.start}", ones)
    G = None
    if signal is not None:
        G, signal_sources = _read_rows(signal, manifest.n_items)
        if not np.array_equal(signal_sources, sources):
            raise DataError("the signal file's rows differ from the data file's", signal)
    return BooleanFederatedData(A=A, client_ptr=np.array([0, len(sources)], dtype=np.int64),
                                row_index=sources, signal=G, name=manifest.name)


def _read_rows(path: Path, n_cols: int) -> tuple[sp.csr_matrix, np.ndarray]:
    """A ``row,cols`` file (:mod:`fedmc.deploy.split`) as a binary CSR matrix and the source
    row of each line."""
    try:
        lines = path.read_text().splitlines()[1:]
    except OSError as exc:
        raise DataError(f"cannot read the client's rows ({exc.strerror})", path) from None
    try:
        pairs = [line.split(",", 1) for line in lines]
        sources = np.array([int(r) for r, _ in pairs], dtype=np.int64)
        cols = [np.array(c.split(), dtype=np.int64) for _, c in pairs]
    except ValueError:
        raise DataError("expected lines 'row,cols' (integers, cols separated by spaces)",
                        path) from None
    indices = np.concatenate(cols) if cols else np.zeros(0, dtype=np.int64)
    if indices.size and not 0 <= indices.min() <= indices.max() < n_cols:
        raise DataError(f"a column is outside the manifest's 0..{n_cols - 1}", path)
    indptr = np.concatenate([[0], np.cumsum([len(c) for c in cols])]).astype(np.int64)
    A = sp.csr_matrix((np.ones(len(indices)), indices, indptr), shape=(len(sources), n_cols))
    return A, sources

"""``fedmc federate split``: the files a real deployment hands out.

``DIR/manifest.json`` (the public facts, :mod:`fedmc.flower.manifest`) and, for every client
``c``, ``DIR/clients/client-C.csv`` (its users' training ratings) and, when it has any,
``DIR/clients/client-C.test.csv`` (its users' held-out ratings; clients evaluate on their own
held-out ratings, so the test split travels with them) and, with a validation cut
(``--validation-fraction``), ``DIR/clients/client-C.validation.csv`` (the training ratings it
keeps back for early stopping). Columns are ``user,item,rating`` with
the source's raw ids and ratings (with ``--implicit``, interactions: strength 1). The split,
partition and normalization are exactly those of ``fedmc run`` with the same data settings.

Boolean data (Felb's: ``--binary FILE``, ``--binarize T``, ``--dataset synthetic-boolean``)
are split by rows as ``fedmc run --algorithm felb`` splits them: ``client-C.csv`` holds the
client's rows of ``A``, one line ``row,cols`` per row (its source row, then the columns of its
ones separated by spaces, empty for a zero row), and, for synthetic data, ``client-C.test.csv``
the same rows of the ground truth ``signal`` (Felb's F1 against the signal).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.sparse as sp

from fedmc.core.scale import Normalizer
from fedmc.core.shard import CSR
from fedmc.data.boolean import BooleanFederatedData
from fedmc.data.federated import FederatedData
from fedmc.flower.manifest import Manifest
from fedmc.run.data import DataSettings, as_read, federate, load_boolean_data, load_ratings
from fedmc.run.data_settings import is_boolean

HEADER = "user,item,rating\n"
BOOLEAN_HEADER = "row,cols\n"


def client_files(folder: Path, client: int) -> tuple[Path, Path]:
    """Where the split puts ``client``'s training and held-out ratings."""
    stem = folder / "clients" / f"client-{client:04d}"
    return stem.with_suffix(".csv"), stem.with_suffix(".test.csv")


def validation_file(folder: Path, client: int) -> Path:
    """Where the split puts ``client``'s validation cut."""
    return folder / "clients" / f"client-{client:04d}.validation.csv"


def write_split(settings: DataSettings, out: Path, boolean: bool | None = None) -> Manifest:
    """Load and split the data of ``settings`` as ``fedmc run`` does; write the files.

    ``boolean`` says whether to load Boolean data (as ``fedmc run`` does for an algorithm of
    ``data_kind="boolean"``: then no data option means ``synthetic-boolean``); by default the
    data options decide (:func:`fedmc.run.data_settings.is_boolean`)."""
    if is_boolean(settings) if boolean is None else boolean:
        return _write_boolean_split(load_boolean_data(settings), settings, out)
    ratings = as_read(load_ratings(settings), settings)  # interactions with --implicit
    data = federate(ratings, settings)  # what fedmc run trains on (normalized values)
    original = federate(ratings, settings.model_copy(update={"normalize": "none"}))
    del ratings
    return write_shards(data, original, settings, out)


def write_shards(data: FederatedData, original: FederatedData, settings: DataSettings,
                 out: Path) -> Manifest:
    """The files of a federation of ``data`` (``original``: the same split and layout with the
    ratings on their original scale, which the files hold): each client's training and
    held-out ratings by raw ids, in the order ``fedmc run`` holds them, and the manifest."""
    (out / "clients").mkdir(parents=True, exist_ok=True)
    users, items = np.asarray(original.user_ids), np.asarray(original.item_ids)
    for c in range(data.n_clients):
        train_path, test_path = client_files(out, c)
        rows = data.client_rows(c)
        _write_ratings(train_path, original.train, rows, users, items)
        for path, held in ((test_path, original.test),
                           (validation_file(out, c), original.validation)):
            path.unlink(missing_ok=True)
            if held is not None and held.indptr[rows.stop] > held.indptr[rows.start]:
                _write_ratings(path, held, rows, users, items)
    manifest = _manifest(data, items, settings)
    manifest.write(out / "manifest.json")
    return manifest


def _write_ratings(path: Path, csr: CSR, rows: slice, users: np.ndarray,
                   items: np.ndarray) -> None:
    """The ratings of ``rows`` in row order, each row's ratings in stored order: a client
    that reads the file back gets the same order, hence bit-identical sums."""
    q0, q1 = int(csr.indptr[rows.start]), int(csr.indptr[rows.stop])
    row_of = np.repeat(np.arange(rows.start, rows.stop), np.diff(csr.indptr[rows.start:
                                                                            rows.stop + 1]))
    lines = [f"{u},{i},{v!r}" for u, i, v in zip(users[row_of].tolist(),
                                                 items[csr.indices[q0:q1]].tolist(),
                                                 csr.values[q0:q1].tolist(), strict=True)]
    path.write_text(HEADER + "\n".join(lines) + "\n")


def _manifest(data: FederatedData, item_ids: np.ndarray, settings: DataSettings) -> Manifest:
    return Manifest(
        name=data.name,
        client_rows=data.client_ptr,
        item_ids=item_ids,
        normalizer=data.normalizer,
        value_range=data.value_range,
        source=settings.model_dump(mode="json"),
    )


def _write_boolean_split(data: BooleanFederatedData, settings: DataSettings,
                         out: Path) -> Manifest:
    """Write every client's rows of ``A`` (and of ``signal``, if any) and the manifest."""
    (out / "clients").mkdir(parents=True, exist_ok=True)
    for c in range(data.n_clients):
        ones_path, signal_path = client_files(out, c)
        rows = data.client_rows(c)
        _write_rows(ones_path, data.A[rows], data.row_index[rows])
        signal_path.unlink(missing_ok=True)
        if data.signal is not None:
            _write_rows(signal_path, data.signal[rows], data.row_index[rows])
    manifest = Manifest(
        name=data.name,
        client_rows=np.asarray(data.client_ptr, dtype=np.int64),
        item_ids=np.arange(data.shape[1]),
        normalizer=Normalizer(),
        value_range=(0.0, 1.0),
        source=settings.model_dump(mode="json"),
        kind="boolean",
    )
    manifest.write(out / "manifest.json")
    return manifest


def _write_rows(path: Path, X: sp.csr_matrix, sources: np.ndarray) -> None:
    """One line ``row,cols`` per row of the binary ``X``: its source row and the columns of its
    ones in stored order."""
    lines = [f"{r},{' '.join(map(str, X.indices[X.indptr[i]:X.indptr[i + 1]].tolist()))}"
             for i, r in enumerate(sources.tolist())]
    path.write_text(BOOLEAN_HEADER + "\n".join(lines) + "\n")

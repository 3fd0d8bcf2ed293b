"""Readers of binary matrices: dense 0/1 text, transactions, and thresholded ratings."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
import scipy.sparse as sp

from fedmc.data.ratings import Ratings
from fedmc.errors import DataError

Missing = Literal["error", "zero"]
BinaryFormat = Literal["auto", "dense", "transactions"]


def read_dense_binary(path: str | Path, missing: Missing = "error") -> sp.csr_matrix:
    """Read a dense whitespace-separated 0/1 matrix, one row per line.

    ``nan`` marks a missing entry (as in the ``*_w_missing`` files of the UCI BMF sets);
    ``missing="zero"`` reads it as 0, the default refuses the file.
    """
    path = Path(path)
    rows: list[list[float]] = []
    with _open(path) as fh:
        for lineno, line in enumerate(fh, 1):
            tokens = line.split()
            if not tokens:
                continue
            try:
                row = [float(t) for t in tokens]
            except ValueError:
                raise DataError(f"not a number in {line.strip()[:40]!r}", path, lineno) from None
            if rows and len(row) != len(rows[0]):
                raise DataError(
                    f"{len(row)} columns where the first row has {len(rows[0])}", path, lineno
                )
            rows.append(row)
    if not rows:
        raise DataError("no rows", path)
    X = np.asarray(rows)
    nan = np.isnan(X)
    if nan.any():
        if missing == "error":
            raise DataError(
                f"{int(nan.sum())} missing entries (nan); read them as 0 with missing='zero'", path
            )
        X[nan] = 0.0
    if not np.isin(X, (0.0, 1.0)).all():
        raise DataError(f"not binary: holds the value {X[~np.isin(X, (0.0, 1.0))][0]}", path)
    return sp.csr_matrix(X)


def read_transactions(path: str | Path) -> tuple[sp.csr_matrix, np.ndarray]:
    """Read one transaction per line (space-separated integer item ids) as a binary matrix.

    Row ``i`` has a 1 in the column of every item of line ``i``; empty lines are empty rows.
    Columns are the distinct item ids in increasing order, returned as the second value.
    """
    path = Path(path)
    items: list[np.ndarray] = []
    with _open(path) as fh:
        for lineno, line in enumerate(fh, 1):
            try:
                items.append(np.unique(np.array(line.split(), dtype=np.int64)))
            except ValueError:
                raise DataError(
                    f"not an integer item id in {line.strip()[:40]!r}", path, lineno
                ) from None
    if not items:
        raise DataError("no transactions", path)
    flat = np.concatenate(items)
    item_ids, cols = np.unique(flat, return_inverse=True)
    indptr = np.concatenate(([0], np.cumsum([len(t) for t in items])))
    A = sp.csr_matrix(
        (np.ones(len(flat)), cols.astype(np.int32), indptr), shape=(len(items), len(item_ids))
    )
    return A, item_ids


def read_binary(
    path: str | Path, fmt: BinaryFormat = "auto", missing: Missing = "error"
) -> sp.csr_matrix:
    """Read a binary matrix file; ``fmt="auto"`` takes ``.dat`` files as transactions.

    Other files are read as dense 0/1 text when every line has the same number of tokens and
    every token is 0, 1 or nan, else as transactions.
    """
    path = Path(path)
    if fmt == "auto":
        fmt = "transactions" if path.suffix == ".dat" or not _looks_dense(path) else "dense"
    if fmt == "dense":
        return read_dense_binary(path, missing)
    return read_transactions(path)[0]


def binarize_ratings(ratings: Ratings, threshold: float) -> sp.csr_matrix:
    """Users x items matrix with a 1 where the rating is ``>= threshold`` (the paper: 3.5)."""
    keep = ratings.values >= threshold
    if not keep.any():
        raise DataError(f"no rating reaches the threshold {threshold}")
    A = sp.csr_matrix(
        (np.ones(int(keep.sum())), (ratings.users[keep], ratings.items[keep])),
        shape=ratings.shape,
    )
    A.data[:] = 1.0  # a (user, item) pair rated twice counts once
    return A


def _looks_dense(path: Path) -> bool:
    widths = set()
    with _open(path) as fh:
        for line in fh:
            tokens = line.split()
            if not tokens:
                continue
            widths.add(len(tokens))
            if len(widths) > 1 or not set(tokens) <= _DENSE_TOKENS:
                return False
    return True


_DENSE_TOKENS = {"0", "1", "0.0", "1.0", "nan"}


def _open(path: Path):
    if not path.is_file():
        raise DataError("no such file", path)
    return path.open(encoding="utf-8")

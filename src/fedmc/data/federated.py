"""The federated layout every algorithm and the engine work on.

All training ratings live in one CSR matrix whose rows (users) are grouped so that the users of
client ``c`` are the contiguous block ``client_ptr[c]:client_ptr[c+1]``. A client's ratings
are then ``indptr[client_ptr[c]]:indptr[client_ptr[c+1]]``: a batch of sampled clients is a
set of row blocks, which is what the batched kernels loop over without any Python loop.

In a real federation each client holds only its own block; the simulation keeps all blocks in
one array for speed, and only the client-side code of an algorithm ever reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from fedmc.data.normalize import Normalizer
from fedmc.data.ratings import Ratings
from fedmc.errors import DataError


@dataclass(frozen=True)
class CSR:
    """Rows are users in federated order; ``values`` are on the normalized scale."""

    indptr: np.ndarray  # int64, length n_users + 1
    indices: np.ndarray  # int32 item index
    values: np.ndarray  # float64, normalized scale

    @property
    def nnz(self) -> int:
        """Number of stored ratings."""
        return int(len(self.values))

    def rows(self) -> np.ndarray:
        """Row (user) index of every stored rating."""
        n_rows = len(self.indptr) - 1
        return np.repeat(np.arange(n_rows, dtype=np.int32), np.diff(self.indptr))


@dataclass(frozen=True)
class FederatedData:
    """Training and test ratings of ``n_clients`` clients in the batched layout.

    Attributes
    ----------
    train, test
        CSR matrices over users in federated order (see module docstring).
    client_ptr
        ``int64`` array of length ``n_clients + 1``: client ``c`` owns users
        ``client_ptr[c]:client_ptr[c+1]``.
    user_index
        For every federated row, the user's dense index in the source ``Ratings``.
    normalizer
        The map from original ratings to the normalized scale the algorithms train on.
    value_range
        Smallest and largest training rating (original scale), for clipping predictions.
    """

    train: CSR
    test: CSR
    client_ptr: np.ndarray
    n_items: int
    user_index: np.ndarray
    normalizer: Normalizer
    value_range: tuple[float, float] = (-np.inf, np.inf)
    name: str = "ratings"

    @property
    def n_users(self) -> int:
        """Number of users over all clients."""
        return int(len(self.user_index))

    @property
    def n_clients(self) -> int:
        """Number of clients ``p``."""
        return int(len(self.client_ptr) - 1)

    @property
    def client_rating_ptr(self) -> np.ndarray:
        """Client ``c``'s training ratings are ``ptr[c]:ptr[c+1]`` of ``train``."""
        return self.train.indptr[self.client_ptr]

    def client_of_row(self) -> np.ndarray:
        """Client of every federated row."""
        return np.repeat(np.arange(self.n_clients, dtype=np.int32), np.diff(self.client_ptr))

    @classmethod
    def build(
        cls,
        train: Ratings,
        test: Ratings,
        client_of_user: np.ndarray,
        normalizer: Normalizer | None = None,
    ) -> FederatedData:
        """Group users by client and build the CSR matrices.

        Parameters
        ----------
        train, test
            A split of one ``Ratings`` (same shape).
        client_of_user
            Client of every user (from :func:`fedmc.data.partition.partition_users`).
        normalizer
            Fitted on the training values; identity when omitted.
        """
        if train.shape != test.shape:
            raise DataError(f"train shape {train.shape} differs from test shape {test.shape}")
        client_of_user = np.asarray(client_of_user)
        if len(client_of_user) != train.n_users:
            raise DataError(
                f"partition covers {len(client_of_user)} users, the data has {train.n_users}"
            )
        normalizer = normalizer or Normalizer()
        n_clients = int(client_of_user.max()) + 1 if len(client_of_user) else 0
        # stable order: by client, then by user index
        user_index = np.lexsort((np.arange(train.n_users), client_of_user)).astype(np.int64)
        row_of_user = np.empty(train.n_users, dtype=np.int64)
        row_of_user[user_index] = np.arange(train.n_users)
        counts = np.bincount(client_of_user, minlength=n_clients)
        if np.any(counts == 0):
            raise DataError(f"client {int(np.flatnonzero(counts == 0)[0])} has no user")
        client_ptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        return cls(
            train=_csr(train, row_of_user, normalizer),
            test=_csr(test, row_of_user, normalizer),
            client_ptr=client_ptr,
            n_items=train.n_items,
            user_index=user_index,
            normalizer=normalizer,
            value_range=(
                (float(train.values.min()), float(train.values.max()))
                if train.n_ratings
                else (-np.inf, np.inf)
            ),
            name=train.name,
        )


def _csr(r: Ratings, row_of_user: np.ndarray, normalizer: Normalizer) -> CSR:
    indptr, indices, values = _counting_sort(
        r.users, r.items, r.values, row_of_user, normalizer.mean, normalizer.scale
    )
    return CSR(indptr=indptr, indices=indices, values=values)


@numba.njit(cache=True)
def _counting_sort(users, items, values, row_of_user, mean, scale):
    """CSR rows ``row_of_user[users]`` in one counting-sort pass (stable within a row).

    Values are normalized on the way (``(v - mean) / scale``). No full-size index array is
    built, so memory stays at the output's size even for 100M ratings.
    """
    n_rows = row_of_user.shape[0]
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    for q in range(users.shape[0]):
        indptr[row_of_user[users[q]] + 1] += 1
    for t in range(n_rows):
        indptr[t + 1] += indptr[t]
    fill = indptr[:-1].copy()
    out_items = np.empty(users.shape[0], dtype=np.int32)
    out_values = np.empty(users.shape[0], dtype=np.float64)
    for q in range(users.shape[0]):
        t = row_of_user[users[q]]
        k = fill[t]
        out_items[k] = items[q]
        out_values[k] = (values[q] - mean) / scale
        fill[t] = k + 1
    return indptr, out_items, out_values

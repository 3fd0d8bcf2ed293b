"""What a client step reads: the ratings of a batch of clients in the federated layout.

All training ratings of the clients a shard holds live in one :class:`CSR` whose rows (users)
are grouped so that the users of client ``c`` are the contiguous block
``client_ptr[c]:client_ptr[c+1]``: a batch of clients is a set of row blocks, which is what the
batched kernels loop over without a Python loop. :class:`ItemMajor` regroups the same ratings
by client and item. :class:`RatingsShard` and :class:`BooleanShard` are what an algorithm's
client functions read of the data they are handed (one client's shard in a federation, every
client's in the batched simulation); :mod:`fedmc.data` builds them
(:class:`fedmc.data.federated.FederatedData`,
:class:`fedmc.data.boolean.data.BooleanFederatedData`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Protocol

import numba
import numpy as np

from fedmc.core.small_data import SMALL, by_client_and_item

if TYPE_CHECKING:
    import scipy.sparse as sp

    from fedmc.core.protocol import FederationInfo


class CSR(NamedTuple):
    """Rows are users in federated order; ``values`` are on the normalized scale. A
    ``NamedTuple``, so that a kernel takes it as one argument."""

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

    def row_block(self, rows: slice) -> CSR:
        """The rows ``rows`` (a contiguous slice) as a CSR of their own (copies)."""
        q0, q1 = self.indptr[rows.start], self.indptr[rows.stop]
        return CSR(
            indptr=self.indptr[rows.start : rows.stop + 1] - q0,
            indices=self.indices[q0:q1].copy(),
            values=self.values[q0:q1].copy(),
        )


class ItemMajor(NamedTuple):
    """Each client's training ratings regrouped by item: a CSC per client (a ``NamedTuple``,
    so that a kernel takes it as one argument).

    Group ``g`` is the ratings of item ``item[g]`` by one client, stored at
    ``ptr[g]:ptr[g+1]`` of ``row`` (federated user row) and ``values``; client ``c``'s groups
    are ``client_ptr[c]:client_ptr[c+1]``, in increasing item order, rows increasing within a
    group. Kernels that accumulate per-item statistics walk it sequentially instead of
    scattering into a random item for every rating.
    """

    client_ptr: np.ndarray  # int64, n_clients + 1
    item: np.ndarray  # int32, one per group
    ptr: np.ndarray  # int64, n_groups + 1
    row: np.ndarray  # int32, one per rating
    values: np.ndarray  # float64, one per rating


class RatingsShard(Protocol):
    """The ratings of one or more clients, as a client step reads them (module docstring).

    Attributes
    ----------
    train, test
        CSR matrices over the shard's users in federated order (normalized scale).
    client_ptr
        ``int64`` offsets: client ``c`` of the shard owns rows ``client_ptr[c]:client_ptr[c+1]``.
    n_items
        Number of items (columns).
    value_range
        Smallest and largest training rating (original scale), for clipping predictions.
    """

    train: CSR
    test: CSR
    client_ptr: np.ndarray
    n_items: int
    value_range: tuple[float, float]

    @property
    def n_users(self) -> int:
        """Number of users over the shard's clients."""
        ...

    @property
    def n_clients(self) -> int:
        """Number of clients in the shard."""
        ...

    @property
    def item_major(self) -> ItemMajor:
        """The training ratings regrouped by client and item."""
        ...

    def client_of_row(self) -> np.ndarray:
        """Client of every row."""
        ...

    def federation_info(self) -> FederationInfo:
        """The facts every party of this federation knows before training."""
        ...


class BooleanShard(Protocol):
    """The rows of a binary matrix held by one or more clients, as Felb's client step reads
    them.

    Attributes
    ----------
    A
        ``float64`` CSR matrix with stored values 1, rows in federated order.
    client_ptr
        ``int64`` offsets: client ``c`` of the shard owns rows ``client_ptr[c]:client_ptr[c+1]``.
    signal
        The noise-free ground truth in the same row order (synthetic data), else ``None``.
    """

    A: sp.csr_matrix
    client_ptr: np.ndarray
    signal: sp.csr_matrix | None

    @property
    def n_clients(self) -> int:
        """Number of clients in the shard."""
        ...

    @property
    def shape(self) -> tuple[int, int]:
        """``(n, m)``."""
        ...

    @property
    def client_sizes(self) -> np.ndarray:
        """Rows ``n_i`` of every client."""
        ...

    @property
    def density(self) -> float:
        """Fraction of ones."""
        ...

    def block(self, c: int) -> sp.csr_matrix:
        """Client ``c``'s private rows ``A_c``."""
        ...

    def federation_info(self) -> FederationInfo:
        """The facts every party of this federation knows before training."""
        ...


def item_major(train: CSR, client_ptr: np.ndarray, n_items: int) -> ItemMajor:
    """The ratings of ``train`` regrouped by client (row blocks ``client_ptr``) and item."""
    layout = by_client_and_item if len(train.values) <= SMALL else _item_major
    return ItemMajor(*layout(train.indptr, train.indices, train.values, client_ptr, n_items))


@numba.njit(nogil=True, cache=True)
def _item_major(indptr, indices, values, client_ptr, n_items):
    """Counting sort of every client's ratings by item (see :class:`ItemMajor`)."""
    p = client_ptr.shape[0] - 1
    count = np.zeros(n_items, dtype=np.int64)
    group_ptr = np.zeros(p + 1, dtype=np.int64)
    for c in range(p):
        q0 = indptr[client_ptr[c]]
        q1 = indptr[client_ptr[c + 1]]
        groups = 0
        for q in range(q0, q1):
            if count[indices[q]] == 0:
                groups += 1
            count[indices[q]] += 1
        for q in range(q0, q1):
            count[indices[q]] = 0
        group_ptr[c + 1] = group_ptr[c] + groups
    item = np.empty(group_ptr[p], dtype=np.int32)
    ptr = np.empty(group_ptr[p] + 1, dtype=np.int64)
    ptr[0] = 0
    row = np.empty(values.shape[0], dtype=np.int32)
    out = np.empty(values.shape[0], dtype=np.float64)
    fill = np.zeros(n_items, dtype=np.int64)
    for c in range(p):
        q0 = indptr[client_ptr[c]]
        q1 = indptr[client_ptr[c + 1]]
        for q in range(q0, q1):
            count[indices[q]] += 1
        g = group_ptr[c]
        pos = q0
        for j in range(n_items):
            if count[j] > 0:
                item[g] = j
                fill[j] = pos
                pos += count[j]
                ptr[g + 1] = pos
                count[j] = 0
                g += 1
        for t in range(client_ptr[c], client_ptr[c + 1]):
            for q in range(indptr[t], indptr[t + 1]):
                k = fill[indices[q]]
                row[k] = t
                out[k] = values[q]
                fill[indices[q]] = k + 1
    return group_ptr, item, ptr, row, out

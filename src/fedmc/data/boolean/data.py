"""The federated layout of a Boolean matrix split by rows over clients (Sec. 3, A = [A_1; ...]).

All rows live in one CSR matrix whose rows are grouped so that client ``c`` owns the contiguous
block ``client_ptr[c]:client_ptr[c+1]``. Only client-side code reads a client's block.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from fedmc.core.protocol import FederationInfo
from fedmc.data.partition import PartitionKind, partition_users
from fedmc.errors import DataError


@dataclass(frozen=True)
class BooleanFederatedData:
    """A binary ``n x m`` matrix ``A`` split by rows over ``n_clients`` clients.

    Attributes
    ----------
    A
        ``float64`` CSR matrix with stored values 1, rows in federated order.
    client_ptr
        ``int64`` array of length ``n_clients + 1``; client ``c`` owns rows
        ``client_ptr[c]:client_ptr[c+1]`` of ``A``.
    row_index
        Source row of every federated row.
    signal
        The noise-free ground truth ``G`` in the same row order (synthetic data), else ``None``.
    name
        Where the data came from.
    """

    A: sp.csr_matrix
    client_ptr: np.ndarray
    row_index: np.ndarray
    signal: sp.csr_matrix | None = None
    name: str = "boolean"

    @property
    def n_clients(self) -> int:
        """Number of clients ``C``."""
        return int(len(self.client_ptr) - 1)

    @property
    def shape(self) -> tuple[int, int]:
        """``(n, m)``."""
        return self.A.shape

    @property
    def client_sizes(self) -> np.ndarray:
        """Rows ``n_i`` of every client."""
        return np.diff(self.client_ptr)

    @property
    def density(self) -> float:
        """Fraction of ones."""
        n, m = self.shape
        return self.A.nnz / (n * m)

    def client_of_row(self) -> np.ndarray:
        """Client of every federated row."""
        return np.repeat(np.arange(self.n_clients, dtype=np.int64), self.client_sizes)

    def block(self, c: int) -> sp.csr_matrix:
        """Client ``c``'s private rows ``A_c``."""
        return self.A[self.client_rows(c)]

    def client_rows(self, client: int) -> slice:
        """The federated rows of ``client``."""
        return slice(int(self.client_ptr[client]), int(self.client_ptr[client + 1]))

    def client_shard(self, client: int) -> BooleanFederatedData:
        """What ``client`` holds itself: its rows (and their signal), as a federation of one
        client."""
        return self.clients_shard(client, client + 1)

    def clients_shard(self, first: int, stop: int) -> BooleanFederatedData:
        """What the clients ``first`` to ``stop - 1`` hold, as a federation of those clients
        (:meth:`client_shard` of each, together)."""
        rows = slice(int(self.client_ptr[first]), int(self.client_ptr[stop]))
        return BooleanFederatedData(
            A=self.A[rows],
            client_ptr=self.client_ptr[first:stop + 1] - self.client_ptr[first],
            row_index=self.row_index[rows],
            signal=None if self.signal is None else self.signal[rows],
            name=self.name,
        )

    def federation_info(self) -> FederationInfo:
        """The facts every party knows before training: the clients and the ``m`` columns."""
        return FederationInfo(self.n_clients, self.shape[1], client_rows=self.client_ptr,
                              kind="boolean")

    def top_items(self, n_items: int) -> BooleanFederatedData:
        """The same rows restricted to the ``n_items`` most frequent columns (a subsample).

        Columns are ranked by their number of ones over all clients (ties by column id) and
        kept in their original order; rows left without ones stay as zero rows. Used to make
        very wide sparse sets (retail: 16,470 items) affordable; ``self`` if already narrower.
        """
        m = self.shape[1]
        if n_items >= m:
            return self
        counts = np.bincount(self.A.indices, minlength=m)
        keep = np.sort(np.argsort(-counts, kind="stable")[:n_items])
        cut = lambda X: None if X is None else sp.csr_matrix(X[:, keep])  # noqa: E731
        return BooleanFederatedData(
            A=cut(self.A),
            client_ptr=self.client_ptr,
            row_index=self.row_index,
            signal=cut(self.signal),
            name=f"{self.name}-top{n_items}",
        )

    @classmethod
    def build(
        cls,
        A: sp.spmatrix | np.ndarray,
        n_clients: int,
        seed: int = 0,
        partition: PartitionKind = "random",
        signal: sp.spmatrix | np.ndarray | None = None,
        name: str = "boolean",
    ) -> BooleanFederatedData:
        """Split the rows of ``A`` over ``n_clients`` clients (near-equal shards by default).

        Parameters
        ----------
        A
            Binary matrix (dense or sparse) with entries 0 and 1.
        n_clients
            Number of clients ``C``; each gets at least one row.
        seed, partition
            Passed to :func:`fedmc.data.partition.partition_users` (rows play the users).
        signal
            Ground truth of the same shape, kept for F1 against the signal.
        """
        A = _binary_csr(A, "data")
        n = A.shape[0]
        if n == 0 or A.shape[1] == 0:
            raise DataError(f"the binary matrix is empty ({A.shape[0]} x {A.shape[1]})")
        client = partition_users(n, n_clients, kind=partition, seed=seed)
        order = np.lexsort((np.arange(n), client)).astype(np.int64)
        counts = np.bincount(client, minlength=n_clients)
        client_ptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        G = None
        if signal is not None:
            G = _binary_csr(signal, "signal")
            if G.shape != A.shape:
                raise DataError(f"signal shape {G.shape} differs from data shape {A.shape}")
            G = G[order]
        return cls(A=A[order], client_ptr=client_ptr, row_index=order, signal=G, name=name)


def _binary_csr(X: sp.spmatrix | np.ndarray, what: str) -> sp.csr_matrix:
    X = sp.csr_matrix(X, dtype=np.float64)
    X.eliminate_zeros()
    if X.nnz and not np.all(X.data == 1.0):
        bad = X.data[X.data != 1.0][0]
        raise DataError(f"the {what} matrix is not binary: it holds the value {bad}")
    X.sort_indices()
    return X

"""Batched products of many clients' private blocks with their own factors, without a loop.

The sampled clients' factors are stacked as ``U`` of shape ``(s, n_max, k)`` (client blocks
padded with zero rows to the largest client; a zero row of ``U`` stays zero under every Felb
step because its gradient is zero) and ``V`` of shape ``(s, k, m)``. The two products with the
data every local step needs, ``A_i V_i^T`` and ``U_i^T A_i``, are then one call each:

* dense data: ``A`` is an ``(s, n_max, m)`` array and both are batched ``matmul``;
* sparse data: ``A`` is one block-diagonal CSR of shape ``(s n_max, s m)`` in which the entry
  ``(r, j)`` of client ``c`` sits at column ``pos(c) m + j``, so both are one sparse product
  with the row-stacked ``V^T``.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from fedmc.core.shard import BooleanShard

DENSE_MAX_DENSITY = 0.05
DENSE_MAX_ENTRIES = 2**27


class ClientBlocks:
    """Private blocks ``A_i`` of the sampled ``clients``, ready for batched products.

    Parameters
    ----------
    data
        The federated Boolean data.
    clients
        Sorted ids of the clients whose blocks are stacked, in this order.
    n_max
        Rows per stacked block (at least the largest client's); default: the largest.
    dense
        Dense 3-D layout (fast for dense data) or block-diagonal CSR; ``None`` chooses dense
        when the density exceeds 5% and the padded array has at most 2^27 entries.
    """

    def __init__(
        self,
        data: BooleanShard,
        clients: np.ndarray,
        n_max: int | None = None,
        dense: bool | None = None,
    ) -> None:
        self.clients = np.asarray(clients, dtype=np.int64)
        sizes = data.client_sizes[self.clients]
        self.n_max = int(sizes.max()) if n_max is None else n_max
        self.m = data.shape[1]
        s = len(self.clients)
        starts = data.client_ptr[self.clients]
        # federated row of every padded slot, -1 for padding
        slot = np.arange(self.n_max)
        self.rows = np.where(slot < sizes[:, None], starts[:, None] + slot, -1)
        self.mask = (self.rows >= 0)[:, :, None].astype(np.float64)
        if dense is None:
            dense = (
                data.density > DENSE_MAX_DENSITY and s * self.n_max * self.m <= DENSE_MAX_ENTRIES
            )
        self.dense = dense
        sub = data.A[np.where(self.rows >= 0, self.rows, 0).ravel()]
        valid = (self.rows >= 0).ravel()
        sub = sp.diags(valid.astype(np.float64)) @ sub
        if dense:
            self.A = sub.toarray().reshape(s, self.n_max, self.m)
        else:
            sub = sp.csr_matrix(sub)
            sub.eliminate_zeros()
            pos = np.repeat(np.arange(s, dtype=np.int64), self.n_max)
            offsets = np.repeat(pos * self.m, np.diff(sub.indptr))
            self.A = sp.csr_matrix(
                (sub.data, sub.indices + offsets, sub.indptr), shape=(s * self.n_max, s * self.m)
            )
            self.At = self.A.T.tocsr()

    def AVt(self, V: np.ndarray) -> np.ndarray:
        """``A_i V_i^T`` for every stacked client: ``(s, n_max, k)`` from ``V`` ``(s, k, m)``."""
        if self.dense:
            return self.A @ V.transpose(0, 2, 1)
        s, k, _ = V.shape
        return (self.A @ V.transpose(0, 2, 1).reshape(s * self.m, k)).reshape(s, self.n_max, k)

    def UtA(self, U: np.ndarray) -> np.ndarray:
        """``U_i^T A_i`` for every stacked client: ``(s, k, m)`` from ``U`` ``(s, n_max, k)``."""
        if self.dense:
            return U.transpose(0, 2, 1) @ self.A
        s, _, k = U.shape
        return (self.At @ U.reshape(s * self.n_max, k)).reshape(s, self.m, k).transpose(0, 2, 1)

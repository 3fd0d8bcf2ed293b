"""Quality of a Boolean factorization ``A_i ~ U_i o V`` over all clients (Sec. 4, spec 5.4).

Everything is computed without forming the dense ``n x m`` reconstruction: the true positives
from the stored ones of ``A``, the size of the reconstruction from the distinct rows of the
binary ``U`` of each client.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

_CHUNK = 2**22


@dataclass(frozen=True)
class BooleanCounts:
    """Per-client counts of ``A_i`` against the reconstruction ``B_i = U_i o V``.

    ``ones_data`` = ``|A_i|``, ``ones_model`` = ``|B_i|``, ``overlap`` = ``|A_i and B_i|``,
    ``cells`` = ``n_i m``.
    """

    ones_data: np.ndarray
    ones_model: np.ndarray
    overlap: np.ndarray
    cells: np.ndarray

    def f1(self) -> float:
        """F1 of the whole matrix: ``2 TP / (|A| + |B|)`` (1 when both are empty)."""
        denom = self.ones_data.sum() + self.ones_model.sum()
        return float(2 * self.overlap.sum() / denom) if denom else 1.0

    def rmsd_per_client(self) -> np.ndarray:
        """``sqrt(Hamming(A_i, B_i) / (n_i m))`` of every client."""
        hamming = self.ones_data + self.ones_model - 2 * self.overlap
        return np.sqrt(hamming / self.cells)


def boolean_counts(
    A: sp.csr_matrix, U: np.ndarray, V: np.ndarray, client_ptr: np.ndarray
) -> BooleanCounts:
    """Counts of every client's block of ``A`` against ``U o V`` (Boolean product, Sec. 3).

    Parameters
    ----------
    A
        Binary CSR ``n x m``, rows grouped by client.
    U
        Binary ``n x k`` (rows as ``A``).
    V
        Binary ``k x m``.
    client_ptr
        Client ``c`` owns rows ``client_ptr[c]:client_ptr[c+1]``.
    """
    U = np.asarray(U, dtype=np.float64)
    V = np.asarray(V, dtype=np.float64)
    n, m = A.shape
    client = np.repeat(np.arange(len(client_ptr) - 1), np.diff(client_ptr))
    rows = np.repeat(np.arange(n), np.diff(A.indptr))
    hit = _products_at_ones(A, U, V) >= 1.0
    overlap = np.bincount(client[rows[hit]], minlength=len(client_ptr) - 1)
    ones_data = np.bincount(client[rows], minlength=len(client_ptr) - 1)
    # |B_i|: every distinct (client, binary row of U) covers the same columns
    keys, inverse = np.unique(np.column_stack([client, U]), axis=0, return_inverse=True)
    covered = np.empty(len(keys))
    step = max(1, _CHUNK // m)
    for s in range(0, len(keys), step):
        covered[s : s + step] = ((keys[s : s + step, 1:] @ V) >= 1.0).sum(axis=1)
    ones_model = np.bincount(
        client, weights=covered[inverse.ravel()], minlength=len(client_ptr) - 1
    )
    return BooleanCounts(
        ones_data=ones_data.astype(np.float64),
        ones_model=ones_model,
        overlap=overlap.astype(np.float64),
        cells=np.diff(client_ptr).astype(np.float64) * m,
    )


def squared_loss(A: sp.csr_matrix, U: np.ndarray, V: np.ndarray) -> float:
    """``||A - U V||_F^2`` of the relaxed (linear) model (Eq. 2), for any real ``U`` and ``V``.

    ``= |A| - 2 sum_{A_ij = 1} (U V)_ij + tr(U^T U V V^T)`` for binary ``A``.
    """
    fitted = _products_at_ones(A, U, V).sum()
    return float(A.nnz - 2.0 * fitted + np.sum((U.T @ U) * (V @ V.T)))


def _products_at_ones(A: sp.csr_matrix, U: np.ndarray, V: np.ndarray) -> np.ndarray:
    """``(U V)_ij`` at every stored one of ``A``, in CSR order, in chunks of bounded memory."""
    rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    out = np.empty(A.nnz)
    step = max(1, _CHUNK // max(U.shape[1], 1))
    for s in range(0, A.nnz, step):
        r, j = rows[s : s + step], A.indices[s : s + step]
        out[s : s + step] = np.einsum("ek,ke->e", U[r], V[:, j])
    return out


def boolean_metrics(
    A: sp.csr_matrix,
    U: np.ndarray,
    V: np.ndarray,
    client_ptr: np.ndarray,
    signal: sp.csr_matrix | None = None,
) -> dict[str, float]:
    """RMSD and F1 of the binary factors ``U`` (rows as ``A``) and ``V`` (spec 5.4).

    ``rmsd``: mean over clients of ``sqrt(Hamming(A_i, U_i o V) / (n_i m))``; ``rmsd_sum``: the
    sum over clients (the scale of the paper's Table 3); ``f1`` against ``A``; ``f1_signal``
    against ``signal`` (NaN without one).
    """
    counts = boolean_counts(A, U, V, client_ptr)
    rmsd = counts.rmsd_per_client()
    f1_signal = (
        boolean_counts(signal, U, V, client_ptr).f1() if signal is not None else float("nan")
    )
    return {
        "rmsd": float(rmsd.mean()),
        "rmsd_sum": float(rmsd.sum()),
        "f1": counts.f1(),
        "f1_signal": f1_signal,
    }

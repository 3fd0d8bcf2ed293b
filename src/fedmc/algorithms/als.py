"""Centralized biased matrix factorization by alternating least squares (the reference the
federated methods are judged against at the same rank and split).

The federation is ignored: all training ratings are used in every sweep, nothing is
communicated. With the bias layout of :mod:`fedmc.algorithms.factor_model`
(``U = [u | b_user | 1]``, ``V = [v | 1 | b_item]``) the model is ``u_t . v_j + b_t + b_j`` and
ALS minimizes

    1/2 sum_{(t,j) in Omega} (m_tj - U[t] . V[j])^2
        + lam/2 sum_t w_t ||U[t, free]||^2 + lam/2 sum_j w_j ||V[j, free]||^2,

where ``free`` are the columns that are not fixed to 1 and ``w_t = |Omega_t|``, ``w_j`` the
item's count with ``weighted=True`` (the weighted-lambda regularization of ALS-WR, Zhou et al.
2008), else ``w = 1`` (plain ridge, the default). One engine round is one sweep: every user
row solves its ``(r+1) x (r+1)`` ridge problem (normal equations)

    (sum_j f_j f_j^T + lam w_t I) x = sum_j (m_tj - b_j) f_j,   f_j = V[j, free],

with the item bias ``b_j`` (the fixed columns' share) moved to the target, then every item
column does the same with the roles swapped. Rows are independent, so each half-sweep is one
Numba kernel parallel over rows. After ``sweeps`` sweeps (default 15, chosen on a validation
split of the ML-1M training ratings, see ``docs/fedmavg.md``) later rounds leave the model as it
is.
"""

from __future__ import annotations

import numba
import numpy as np
from pydantic import Field

from fedmc.algorithms.base import Communication
from fedmc.algorithms.factor_model import FactorConfig, FactorModel
from fedmc.core.prox import Regularizer
from fedmc.data.federated import CSR, FederatedData


class ALSConfig(FactorConfig):
    """Hyper-parameters of centralized ALS."""

    rank: int = 10
    biases: bool = True
    lam: float = Field(10.0, gt=0, description="ridge weight lambda (times the count if weighted)")
    weighted: bool = Field(False, description="lambda * |Omega_t| per row (ALS-WR)")
    init_scale: float = 0.1
    sweeps: int = Field(15, ge=0, description="sweeps to run; later rounds change nothing")


@numba.njit(cache=True, fastmath=True)
def _normal_equations_upper(F, cols, values, x_fixed, Y_fixed, A, b):
    """Upper triangle of ``A = F[cols]^T F[cols]`` and ``b = F[cols]^T y`` with targets
    ``y_q = values[q] - x_fixed . Y_fixed[cols[q]]`` (the fixed columns' share moved over).

    ``F[cols]`` is first gathered into a ``(k, d)`` copy, so that every entry of ``A`` and ``b``
    is a dot product of contiguous vectors (ALS rows are long: all of a user's or an item's
    ratings), unlike :func:`fedmc.core.kernels.normal_equations`, whose groups are short.
    """
    k = F.shape[1]
    d = cols.shape[0]
    G = np.empty((k, d))
    y = np.empty(d)
    for q in range(d):
        j = cols[q]
        f = F[j]
        for a in range(k):
            G[a, q] = f[a]
        y_q = values[q]
        for a in range(x_fixed.shape[0]):
            y_q -= x_fixed[a] * Y_fixed[j, a]
        y[q] = y_q
    for a in range(k):
        ga = G[a]
        s = 0.0
        for q in range(d):
            s += ga[q] * y[q]
        b[a] = s
        for c in range(a, k):
            gc = G[c]
            s = 0.0
            for q in range(d):
                s += ga[q] * gc[q]
            A[a, c] = s


@numba.njit(cache=True)
def _cholesky_solve_upper(A, b):
    """Solve ``A x = b`` in place (``x`` into ``b``) for symmetric positive definite ``A``
    given by its upper triangle, which is overwritten by ``R`` with ``A = R^T R``."""
    k = b.shape[0]
    for j in range(k):
        s = A[j, j]
        for p in range(j):
            s -= A[p, j] * A[p, j]
        d = np.sqrt(s)
        A[j, j] = d
        for i in range(j + 1, k):
            s = A[j, i]
            for p in range(j):
                s -= A[p, j] * A[p, i]
            A[j, i] = s / d
    for i in range(k):  # R^T z = b
        s = b[i]
        for p in range(i):
            s -= A[p, i] * b[p]
        b[i] = s / A[i, i]
    for i in range(k - 1, -1, -1):  # R x = z
        s = b[i]
        for p in range(i + 1, k):
            s -= A[i, p] * b[p]
        b[i] = s / A[i, i]


@numba.njit(cache=True, parallel=True)
def ridge_rows(indptr, indices, values, F, X_fixed, Y_fixed, lam, weighted, X):
    """Row ``t`` of ``X`` solves ``(sum_q F[j_q] F[j_q]^T + lam w_t I) x = sum_q y_q F[j_q]``.

    The sums run over the row's entries ``q`` (columns ``j_q = indices[q]``), with targets
    ``y_q = values[q] - X_fixed[t] . Y_fixed[j_q]`` (``X_fixed, Y_fixed`` may have no column);
    ``w_t`` is the row's count if ``weighted`` else 1 and ``lam > 0``; the system is solved by
    Cholesky. A row with no entries gets ``x = 0``.
    """
    k = F.shape[1]
    for t in numba.prange(indptr.shape[0] - 1):
        count = indptr[t + 1] - indptr[t]
        if count == 0:
            X[t] = 0.0
            continue
        A = np.empty((k, k))
        b = np.empty(k)
        q0, q1 = indptr[t], indptr[t + 1]
        _normal_equations_upper(F, indices[q0:q1], values[q0:q1], X_fixed[t], Y_fixed, A, b)
        reg = lam * count if weighted else lam
        for a in range(k):
            A[a, a] += reg
        _cholesky_solve_upper(A, b)
        X[t] = b


class ALS(FactorModel):
    """Centralized biased matrix factorization by alternating least squares.

    Examples
    --------
    >>> from fedmc.api import load_federated
    >>> data = load_federated("synthetic", clients=20)
    >>> model = ALS().fit(data, rounds=10)
    >>> model.history_.last("test_rmse") < 1.0
    True
    """

    name = "als"
    Config = ALSConfig
    config: ALSConfig

    def setup(self, data: FederatedData, rng: np.random.Generator) -> Communication:
        """Initial factors and the item-major copy of the training ratings."""
        self.init_factors(data, rng)
        tr = data.train
        self.by_user_ = tr
        order = np.argsort(tr.indices, kind="stable")  # by item, then by user row
        counts = np.bincount(tr.indices, minlength=data.n_items)
        self.by_item_ = CSR(
            indptr=np.concatenate(([0], np.cumsum(counts))).astype(np.int64),
            indices=tr.rows()[order],
            values=np.ascontiguousarray(tr.values[order]),
        )
        self.sweeps_ = 0
        return Communication()

    def _half_sweep(self, X: np.ndarray, Y: np.ndarray, free: np.ndarray, R: CSR) -> None:
        """Solve for ``X[:, free]`` with ``Y`` fixed on the ratings ``R`` (rows of ``X``)."""
        fixed = ~free
        F = np.ascontiguousarray(Y[:, free])
        out = np.empty((len(X), F.shape[1]))
        cfg = self.config
        ridge_rows(R.indptr, R.indices, R.values, F, np.ascontiguousarray(X[:, fixed]),
                   np.ascontiguousarray(Y[:, fixed]), cfg.lam, cfg.weighted, out)
        X[:, free] = out

    def round(self, clients: np.ndarray, rng: np.random.Generator) -> Communication:
        """One sweep (users, then items) unless ``sweeps`` are done; ``clients`` are ignored."""
        if self.sweeps_ >= self.config.sweeps:
            return Communication()
        layout = self.layout_
        self._half_sweep(self.U_, self.V_, layout.free_mask_u(), self.by_user_)
        self._half_sweep(self.V_, self.U_, layout.free_mask_v(), self.by_item_)
        self.sweeps_ += 1
        return Communication()

    def evaluate(self, data: FederatedData) -> dict[str, float]:
        """The ALS objective (module docstring), errors, sparsity and the sweeps done."""
        none = Regularizer("none")
        out = self.factor_metrics(data, none, none)  # objective = 1/2 SSE / p here
        out["objective"] = out["objective"] * data.n_clients + self._penalty()
        out["sweeps"] = float(self.sweeps_)
        return out

    def _penalty(self) -> float:
        """``lam/2 (sum_t w_t ||U[t, free]||^2 + sum_j w_j ||V[j, free]||^2)``."""
        cfg = self.config
        total = 0.0
        for X, free, R in (
            (self.U_, self.layout_.free_mask_u(), self.by_user_),
            (self.V_, self.layout_.free_mask_v(), self.by_item_),
        ):
            sq = np.sum(X[:, free] ** 2, axis=1)
            w = np.diff(R.indptr) if cfg.weighted else np.ones(len(X))
            total += float(w @ sq)
        return 0.5 * cfg.lam * total

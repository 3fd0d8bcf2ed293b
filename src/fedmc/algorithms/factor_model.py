"""What every matrix-factorization algorithm shares: the factor layout with optional biases,
initialization, evaluation and prediction.

Biases are constraint sets, not extra parameters (as the core issue asks): with ``biases=True``
the factors get two more columns,

    U = [U_factors | b_user | 1]        V = [V_factors | 1 | b_item]      (rows: users / items)

so that ``U[t] . V[j] = u_t . v_j + b_t + b_j``. The all-ones columns are constraint sets whose
prox is a projection (the entry is set to 1); the algorithms apply it after every prox step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedmc.algorithms.base import AlgorithmConfig, FederatedAlgorithm
from fedmc.core.kernels import predict_pairs, rank_token, residual_sums
from fedmc.core.prox import Regularizer
from fedmc.data.federated import FederatedData
from fedmc.errors import ConfigError


@dataclass(frozen=True)
class FactorLayout:
    """Column layout of ``U`` and ``V`` for a rank and a bias setting."""

    rank: int
    biases: bool

    @property
    def width(self) -> int:
        """Number of columns of ``U`` and ``V`` (rank + 2 with biases)."""
        return self.rank + 2 if self.biases else self.rank

    @property
    def ones_col_u(self) -> int:
        """Column of ``U`` fixed to 1 (the item-bias carrier), or -1."""
        return self.rank + 1 if self.biases else -1

    @property
    def ones_col_v(self) -> int:
        """Column of ``V`` fixed to 1 (the user-bias carrier), or -1."""
        return self.rank if self.biases else -1

    def project_u(self, U: np.ndarray) -> None:
        """Project ``U`` onto its constraint set in place."""
        if self.biases:
            U[:, self.ones_col_u] = 1.0

    def project_v(self, V: np.ndarray) -> None:
        """Project ``V`` onto its constraint set in place."""
        if self.biases:
            V[:, self.ones_col_v] = 1.0

    def free_mask_u(self) -> np.ndarray:
        """Columns of ``U`` that carry a regularizer (all but the fixed one)."""
        mask = np.ones(self.width, dtype=bool)
        if self.biases:
            mask[self.ones_col_u] = False
        return mask

    def free_mask_v(self) -> np.ndarray:
        """Columns of ``V`` that carry a regularizer (all but the fixed one)."""
        mask = np.ones(self.width, dtype=bool)
        if self.biases:
            mask[self.ones_col_v] = False
        return mask


class FactorConfig(AlgorithmConfig):
    """Settings shared by the matrix-factorization algorithms."""

    rank: int = 5
    biases: bool = False
    init_scale: float = 1.0
    clip: bool = False

    def check_rank(self, data: FederatedData) -> None:
        """Refuse a rank larger than the data allows."""
        if self.rank < 1:
            raise ConfigError(f"rank must be at least 1, got {self.rank}")
        limit = min(data.n_users, data.n_items)
        if self.rank > limit:
            raise ConfigError(
                f"rank {self.rank} exceeds min(users, items) = {limit} of the training data"
            )
        if self.init_scale < 0:
            raise ConfigError(f"init scale must be >= 0, got {self.init_scale}")


class FactorModel(FederatedAlgorithm):
    """Base of algorithms whose model is ``U V^T`` (plus biases) on the normalized scale.

    Learned attributes (after :meth:`setup`/``fit``): ``U_`` (users in federated order) and
    ``V_`` (items), both with ``layout_.width`` columns, and ``data_`` (the training layout).
    """

    config: FactorConfig

    def init_factors(self, data: FederatedData, rng: np.random.Generator) -> None:
        """``U^0, V^0`` uniform on ``[0, init_scale]`` (section 5), constraints projected."""
        cfg = self.config
        cfg.check_rank(data)
        self.layout_ = FactorLayout(cfg.rank, cfg.biases)
        w = self.layout_.width
        self.V_ = rng.uniform(0.0, cfg.init_scale, size=(data.n_items, w))
        self.U_ = rng.uniform(0.0, cfg.init_scale, size=(data.n_users, w))
        if cfg.biases:  # biases start at zero
            self.U_[:, cfg.rank] = 0.0
            self.V_[:, cfg.rank + 1] = 0.0
        self.layout_.project_u(self.U_)
        self.layout_.project_v(self.V_)
        self.data_ = data

    def _clip_range(self, data: FederatedData) -> tuple[float, float]:
        return data.value_range if self.config.clip else (-np.inf, np.inf)

    def factor_metrics(
        self, data: FederatedData, reg_u: Regularizer, reg_v: Regularizer
    ) -> dict[str, float]:
        """Objective (17), RMSE/MAE on both scales and fractions of nonzeros.

        The objective is ``(1/p) sum_i [f_i(U_i, V) + R_i(U_i)] + R(V)`` with
        ``f_i = 1/2 ||P_Omega_i(M_i - U_i V)||^2`` on the normalized scale.
        """
        norm = data.normalizer
        lo, hi = self._clip_range(data)
        args = (self.U_, self.V_, norm.mean, norm.scale, lo, hi, rank_token(self.U_.shape[1]))
        sse_z_tr, sse_tr, _ = residual_sums(
            data.train.indptr, data.train.indices, data.train.values, *args
        )
        _, sse_te, sae_te = residual_sums(
            data.test.indptr, data.test.indices, data.test.values, *args
        )
        n_tr = max(data.train.nnz, 1)
        n_te = max(data.test.nnz, 1)
        layout = self.layout_
        r_u = reg_u.value(self.U_[:, layout.free_mask_u()])
        r_v = reg_v.value(self.V_[:, layout.free_mask_v()])
        out = {
            "objective": (0.5 * sse_z_tr + r_u) / data.n_clients + r_v,
            "train_rmse": float(np.sqrt(sse_tr / n_tr)),
            "test_rmse": float(np.sqrt(sse_te / n_te)) if data.test.nnz else float("nan"),
            "test_mae": sae_te / n_te if data.test.nnz else float("nan"),
        }
        if not norm.is_identity:  # the same errors on the normalized scale (the paper's)
            for key in ("train_rmse", "test_rmse", "test_mae"):
                out[key + "_z"] = out[key] / norm.scale
        r = self.config.rank
        out["nnz_u"] = np.count_nonzero(self.U_[:, :r]) / max(self.U_[:, :r].size, 1)
        out["nnz_v"] = np.count_nonzero(self.V_[:, :r]) / max(self.V_[:, :r].size, 1)
        return out

    def predict(self, users: np.ndarray, items: np.ndarray) -> np.ndarray:
        """Predicted ratings on the original scale for dense (user, item) indices.

        ``users`` are indices of the source ``Ratings`` (not federated rows).
        """
        data = self.data_
        row_of_user = np.empty(data.n_users, dtype=np.int64)
        row_of_user[data.user_index] = np.arange(data.n_users)
        z = predict_pairs(
            row_of_user[np.asarray(users, dtype=np.int64)],
            np.asarray(items, dtype=np.int64),
            self.U_,
            self.V_,
            rank_token(self.U_.shape[1]),
        )
        lo, hi = self._clip_range(data)
        return np.clip(data.normalizer.inverse(z), lo, hi)

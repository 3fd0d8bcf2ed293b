"""What every matrix-factorization algorithm shares: the factor layout with optional biases,
the initial draws, the client-side error sums and the metrics built from them.

Biases are constraint sets, not extra parameters: with ``biases=True`` the factors get two more
columns,

    U = [U_factors | b_user | 1]        V = [V_factors | 1 | b_item]      (rows: users / items)

so that ``U[t] . V[j] = u_t . v_j + b_t + b_j``. The all-ones columns are constraint sets whose
prox is a projection (the entry is set to 1); the algorithms apply it after every prox step.

Evaluation follows the protocol (:mod:`fedmc.core.protocol`): each client sums its own
squared and absolute errors, its regularizer and its nonzeros (:func:`error_sums`); the driver
adds the sums; :func:`factor_metrics` turns them into the history's columns.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict

from fedmc.core.kernels import predict_pairs, rank_token, residual_sums
from fedmc.core.protocol import FederationInfo, InitialDraws
from fedmc.core.prox import Regularizer
from fedmc.core.scale import Normalizer
from fedmc.errors import ConfigError

RANK_BOOST = "rank_boost"
"""The name of a published factor model's optional per-item score that its top-N lists add to
the predicted (normalized) rating (:meth:`fedmc.model.FactorModel.ranking_factors`)."""


class AlgorithmConfig(BaseModel):
    """Hyper-parameters of an algorithm; subclass it with typed, documented fields."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class FactorLayout:
    """Column layout of ``U`` and ``V`` for a rank and a bias setting; with ``item_item``, the
    layout of an item-item model (EASE's): ``V = B^T``, one column per item, and a user's row
    its own interactions, so that ``U V^T = X B`` (rank 0, no biases, as wide as the
    catalogue: :meth:`width_for`)."""

    rank: int
    biases: bool
    item_item: bool = False

    @property
    def width(self) -> int:
        """Number of columns of ``U`` and ``V`` (rank + 2 with biases).

        Raises
        ------
        ValueError
            For an item-item layout, whose width is its catalogue's (:meth:`width_for`).
        """
        if self.item_item:
            raise ValueError("an item-item layout is as wide as its catalogue: width_for(n)")
        return self.rank + 2 if self.biases else self.rank

    def width_for(self, n_items: int) -> int:
        """Number of columns of ``U`` and ``V`` over a catalogue of ``n_items`` items."""
        return n_items if self.item_item else self.width

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

    @property
    def layout(self) -> FactorLayout:
        """The column layout of the factors."""
        return FactorLayout(self.rank, self.biases)

    @staticmethod
    def data_bounds(n_users: int, n_items: int) -> dict[str, int]:
        """The largest value of each setting that data of ``n_users`` users and ``n_items``
        items allow (what :meth:`check_rank` refuses beyond; a search clips its declared
        ranges to them, :func:`fedmc.tune.search.fit_to_data`): the rank, min(users, items)."""
        return {"rank": min(n_users, n_items)}

    def check_rank(self, n_users: int, n_items: int) -> None:
        """Refuse a rank larger than the data allow (:meth:`data_bounds`)."""
        if self.rank < 1:
            raise ConfigError(f"rank must be at least 1, got {self.rank}")
        limit = self.data_bounds(n_users, n_items)["rank"]
        if self.rank > limit:
            raise ConfigError(
                f"rank {self.rank} exceeds min(users, items) = {limit} of the training data"
            )
        if self.init_scale < 0:
            raise ConfigError(f"init scale must be >= 0, got {self.init_scale}")

    def clip_range(self, value_range: tuple[float, float]) -> tuple[float, float]:
        """Where predictions are clipped on the original scale: the training ratings'
        ``value_range`` with ``clip``, nowhere without."""
        return clip_range(self.clip, value_range)


def clip_range(clip: bool, value_range: tuple[float, float]) -> tuple[float, float]:
    """``value_range`` when predictions are clipped (``clip``), else the whole line."""
    return value_range if clip else (-np.inf, np.inf)


def uniform_draws(cfg: FactorConfig, info: FederationInfo, rng: np.random.Generator,
                  ) -> InitialDraws:
    """``V^0`` (the server's) and every user's ``U^0`` row uniform on ``[0, init_scale]``
    (section 5 of the FedMC-ADMM paper), biases at zero, the all-ones columns set.

    ``V^0`` is drawn first, then the user rows in federated order, so a seed gives the same
    numbers whichever driver hands them out.
    """
    cfg.check_rank(info.n_users, info.n_items)
    layout = cfg.layout
    w = layout.width
    V = rng.uniform(0.0, cfg.init_scale, size=(info.n_items, w))
    U = rng.uniform(0.0, cfg.init_scale, size=(info.n_users, w))
    if cfg.biases:  # biases start at zero
        U[:, cfg.rank] = 0.0
        V[:, cfg.rank + 1] = 0.0
    layout.project_u(U)
    layout.project_v(V)
    return InitialDraws(server={"V": V}, rows={"U": U})


def error_sums(shard, U: np.ndarray, V: np.ndarray, clip: tuple[float, float],
               reg_u: Regularizer, layout: FactorLayout) -> dict[str, float]:
    """A batch of clients' evaluation sums for the model ``U V^T`` (``U``: the shard's rows).

    ``sse_z``: squared training error on the normalized scale (``2 f_i`` summed); ``sse_train``,
    ``sse_test``, ``sae_test``: on the original scale after clipping to ``clip``; ``n_train``,
    ``n_test``: counts; ``reg_u``: ``sum_i R_i(U_i)``; ``nnz_u``, ``size_u``: nonzeros and size
    of the factor columns of ``U``.
    """
    norm = shard.normalizer
    args = (U, V, norm.mean, norm.scale, clip[0], clip[1], rank_token(U.shape[1]))
    tr, te = shard.train, shard.test
    sse_z, sse_train, _ = residual_sums(tr.indptr, tr.indices, tr.values, *args)
    _, sse_test, sae_test = residual_sums(te.indptr, te.indices, te.values, *args)
    factors = U[:, : layout.rank]
    return {
        "sse_z": sse_z,
        "sse_train": sse_train,
        "n_train": float(tr.nnz),
        "sse_test": sse_test,
        "sae_test": sae_test,
        "n_test": float(te.nnz),
        "reg_u": reg_u.value(U[:, layout.free_mask_u()]),
        "nnz_u": float(np.count_nonzero(factors)),
        "size_u": float(factors.size),
    }


def factor_metrics(sums: Mapping[str, float], V: np.ndarray, info: FederationInfo,
                   reg_v: Regularizer, layout: FactorLayout) -> dict[str, float]:
    """Objective (17), RMSE/MAE on both scales and fractions of nonzeros from the clients'
    :func:`error_sums` and the server's ``V``.

    The objective is ``(1/p) sum_i [f_i(U_i, V) + R_i(U_i)] + R(V)`` with
    ``f_i = 1/2 ||P_Omega_i(M_i - U_i V)||^2`` on the normalized scale.
    """
    n_tr = max(sums["n_train"], 1.0)
    n_te = sums["n_test"]
    out = {
        "objective": (0.5 * sums["sse_z"] + sums["reg_u"]) / info.n_clients
        + reg_v.value(V[:, layout.free_mask_v()]),
        "train_rmse": float(np.sqrt(sums["sse_train"] / n_tr)),
        "test_rmse": float(np.sqrt(sums["sse_test"] / n_te)) if n_te else float("nan"),
        "test_mae": sums["sae_test"] / n_te if n_te else float("nan"),
    }
    norm = info.normalizer
    # the same errors on the normalized scale (the paper's)
    if norm is not None and not norm.is_identity:
        for key in ("train_rmse", "test_rmse", "test_mae"):
            out[key + "_z"] = out[key] / norm.scale
    out["density_u"] = sums["nnz_u"] / max(sums["size_u"], 1.0)
    factors = V[:, : layout.rank]
    out["density_v"] = np.count_nonzero(factors) / max(factors.size, 1)
    return out


def predict(U: np.ndarray, V: np.ndarray, rows: np.ndarray, items: np.ndarray,
            normalizer: Normalizer, clip: tuple[float, float]) -> np.ndarray:
    """``U[rows] . V[items]`` mapped back to the original scale and clipped: the one prediction
    of a factor model (the estimators' and the saved model's)."""
    z = predict_pairs(np.ascontiguousarray(rows, dtype=np.int64),
                      np.ascontiguousarray(items, dtype=np.int64),
                      np.ascontiguousarray(U, dtype=np.float64),
                      np.ascontiguousarray(V, dtype=np.float64), rank_token(U.shape[1]))
    return np.clip(normalizer.inverse(z), *clip)

"""Centralized biased matrix factorization by alternating least squares (the reference the
federated methods are judged against at the same rank and split).

The federation is ignored: all training ratings are used in every sweep, nothing is
communicated. With the bias layout of :mod:`fedmc.core.factors`
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
Numba kernel parallel over rows. It runs ``sweeps`` sweeps (default 15, chosen on a validation
split of the ML-1M training ratings, see ``docs/fedmavg.md``); its history has one row per
sweep. ALS is not a federated algorithm: it stays outside the protocol of
:mod:`fedmc.core.protocol` and only shares the data layout, the factor layout and the metrics.
"""

from __future__ import annotations

import time

import numpy as np
from pydantic import Field

from fedmc.core.compile_time import compile_seconds
from fedmc.core.factors import FactorConfig, error_sums, factor_metrics, uniform_draws
from fedmc.core.prox import Regularizer
from fedmc.core.ridge import ridge_rows
from fedmc.data.federated import CSR, FederatedData
from fedmc.estimator import Estimator, FactorPredictions
from fedmc.model.fold_in import user_row
from fedmc.sim.history import History
from fedmc.sim.loop import RoundCallback


class ALSConfig(FactorConfig):
    """Hyper-parameters of centralized ALS."""

    rank: int = 10
    biases: bool = True
    lam: float = Field(10.0, gt=0, description="ridge weight lambda (times the count if weighted)")
    weighted: bool = Field(False, description="lambda * |Omega_t| per row (ALS-WR)")
    init_scale: float = 0.1
    sweeps: int = Field(15, ge=0, description="sweeps to run; later rounds change nothing")


def half_sweep(X: np.ndarray, Y: np.ndarray, free: np.ndarray, R: CSR, cfg: ALSConfig) -> None:
    """Solve for ``X[:, free]`` with ``Y`` fixed on the ratings ``R`` (rows of ``X``), in
    place: every row's ridge problem (:func:`fedmc.core.ridge.ridge_rows`)."""
    fixed = ~free
    F = np.ascontiguousarray(Y[:, free])
    out = np.empty((len(X), F.shape[1]))
    ridge_rows(R.indptr, R.indices, R.values, F, np.ascontiguousarray(X[:, fixed]),
               np.ascontiguousarray(Y[:, fixed]), cfg.lam, cfg.weighted, out)
    X[:, free] = out


def fold_in(cfg: ALSConfig, V: np.ndarray, items: np.ndarray, values: np.ndarray) -> np.ndarray:
    """A new user's row of ``U`` from the item factors ``V``: the user half-sweep on that
    user's ratings alone, i.e. the exact solution of its ridge problem with training's
    ``lam`` and weighting.

    Parameters
    ----------
    cfg
        The settings the model was trained with.
    V
        Item factors ``(n, width)``.
    items, values
        The user's rated items (dense indices, checked by the caller) and ratings on the
        normalized scale.
    """
    layout = cfg.layout
    u = np.zeros((1, layout.width))
    layout.project_u(u)
    half_sweep(u, V, layout.free_mask_u(), user_row(items, values), cfg)
    return u[0]


class ALS(FactorPredictions, Estimator):
    """Centralized biased matrix factorization by alternating least squares.

    Learned attributes: ``U_`` (users in federated row order), ``V_`` (items), ``user_index_``,
    ``user_ids_``, ``item_ids_`` (raw ids of the rows of ``U_`` and ``V_``), ``history_`` (one
    row per sweep; ``round`` counts sweeps).

    Examples
    --------
    >>> from fedmc.api import load_federated
    >>> data = load_federated("synthetic", clients=20)
    >>> model = ALS(sweeps=10).fit(data)
    >>> model.history_.last("test_rmse") < 1.0
    True
    """

    name = "als"
    Config = ALSConfig
    run_params = {"eval_every": 1, "random_state": 0}

    def fit_with_progress(self, data: FederatedData, callback: RoundCallback | None = None,
                          ) -> ALS:
        """Run the sweeps on all training ratings, calling ``callback(sweep, row or None)``.

        The initial factors are drawn as the federated algorithms draw theirs (same seed,
        same ``U^0, V^0``).
        """
        cfg = self.config_ = self.make_config()
        self.info_ = info = data.federation_info()
        init_seq = np.random.SeedSequence(self.random_state).spawn(2)[0]
        draws = uniform_draws(cfg, data, np.random.default_rng(init_seq))
        U, V = np.array(draws.rows["U"]), np.array(draws.server["V"])
        tr = data.train
        order = np.argsort(tr.indices, kind="stable")  # by item, then by user row
        counts = np.bincount(tr.indices, minlength=data.n_items)
        by_item = CSR(
            indptr=np.concatenate(([0], np.cumsum(counts))).astype(np.int64),
            indices=tr.rows()[order],
            values=np.ascontiguousarray(tr.values[order]),
        )
        layout = cfg.layout
        history = History()
        seconds = 0.0

        def record(k: int) -> dict[str, float]:
            none = Regularizer("none")
            sums = error_sums(data, U, V, cfg.clip_range(info.value_range), none, layout)
            row: dict[str, float] = {"round": k, **factor_metrics(sums, V, info, none, layout)}
            row["objective"] = 0.5 * sums["sse_z"] + self._penalty(U, V, tr, by_item)
            row.update(sweeps=float(k), bytes_up=0, bytes_down=0, seconds=seconds, clients=0)
            history.append(row)
            return row

        record(0)
        for k in range(1, cfg.sweeps + 1):
            t0, c0 = time.perf_counter(), compile_seconds()
            half_sweep(U, V, layout.free_mask_u(), tr, cfg)
            half_sweep(V, U, layout.free_mask_v(), by_item, cfg)
            seconds += time.perf_counter() - t0 - (compile_seconds() - c0)
            row = record(k) if (k % self.eval_every == 0 or k == cfg.sweeps) else None
            if callback is not None:
                callback(k, row)
        self.U_, self.V_, self.history_ = U, V, history
        self._keep_index_maps(data)
        return self

    def _penalty(self, U: np.ndarray, V: np.ndarray, by_user: CSR, by_item: CSR) -> float:
        """``lam/2 (sum_t w_t ||U[t, free]||^2 + sum_j w_j ||V[j, free]||^2)``."""
        cfg = self.config_
        layout = cfg.layout
        total = 0.0
        for X, free, R in ((U, layout.free_mask_u(), by_user), (V, layout.free_mask_v(),
                                                                 by_item)):
            sq = np.sum(X[:, free] ** 2, axis=1)
            w = np.diff(R.indptr) if cfg.weighted else np.ones(len(X))
            total += float(w @ sq)
        return 0.5 * cfg.lam * total


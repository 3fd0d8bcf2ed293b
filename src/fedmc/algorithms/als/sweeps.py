"""Centralized ALS's sweeps (:func:`run_sweeps`), which the package exports."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from fedmc.algorithms.als.config import ALSConfig
from fedmc.algorithms.als.kernels import half_sweep
from fedmc.core.compile_time import compile_seconds
from fedmc.core.factors import error_sums, factor_metrics, uniform_draws
from fedmc.core.prox import Regularizer
from fedmc.core.shard import CSR, RatingsShard

SweepCallback = Callable[[int, dict[str, float] | None], bool | None]
"""Told ``(sweep, row or None)`` after each sweep; True stops the sweeps there."""


def run_sweeps(cfg: ALSConfig, data: RatingsShard, seed: int, eval_every: int = 1,
               callback: SweepCallback | None = None,
               ) -> tuple[np.ndarray, np.ndarray, list[dict[str, float]]]:
    """Run ``cfg.sweeps`` sweeps on all training ratings of ``data``, calling
    ``callback(sweep, row or None)`` after each (True: stop); the factors ``U`` (federated
    row order) and ``V``, and one row of metrics per evaluated sweep (the history's,
    ``round`` counting sweeps).

    The initial factors are drawn as the federated algorithms draw theirs (same seed, same
    ``U^0, V^0``).
    """
    info = data.federation_info()
    init_seq = np.random.SeedSequence(seed).spawn(2)[0]
    draws = uniform_draws(cfg, info, np.random.default_rng(init_seq))
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
    rows: list[dict[str, float]] = []
    seconds = 0.0

    def record(k: int) -> dict[str, float]:
        none = Regularizer("none")
        sums = error_sums(data, U, V, cfg.clip_range(info.value_range), none, layout)
        row: dict[str, float] = {"round": k, **factor_metrics(sums, V, info, none, layout)}
        row["objective"] = 0.5 * sums["sse_z"] + _penalty(cfg, U, V, tr, by_item)
        row.update(sweeps=float(k), bytes_up=0, bytes_down=0, seconds=seconds, clients=0)
        rows.append(row)
        return row

    record(0)
    for k in range(1, cfg.sweeps + 1):
        t0, c0 = time.perf_counter(), compile_seconds()
        half_sweep(U, V, layout.free_mask_u(), tr, cfg)
        half_sweep(V, U, layout.free_mask_v(), by_item, cfg)
        seconds += time.perf_counter() - t0 - (compile_seconds() - c0)
        row = record(k) if (k % eval_every == 0 or k == cfg.sweeps) else None
        if callback is not None and callback(k, row):
            break
    return U, V, rows


def _penalty(cfg: ALSConfig, U: np.ndarray, V: np.ndarray, by_user: CSR, by_item: CSR) -> float:
    """``lam/2 (sum_t w_t ||U[t, free]||^2 + sum_j w_j ||V[j, free]||^2)``."""
    layout = cfg.layout
    total = 0.0
    for X, free, R in ((U, layout.free_mask_u(), by_user), (V, layout.free_mask_v(), by_item)):
        sq = np.sum(X[:, free] ** 2, axis=1)
        w = np.diff(R.indptr) if cfg.weighted else np.ones(len(X))
        total += float(w @ sq)
    return 0.5 * cfg.lam * total

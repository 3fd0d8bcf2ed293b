"""Aggregated BMF (Alg. 2 of the Felb paper): local BMF per client, one-shot aggregation of V.

Each client factorizes its own rows, ``(U_i, V_i) <- BMF(A_i)``; the server aggregates the
``V_i`` into one ``V_hat`` (Eqs. 11-13) and every client keeps its ``U_i`` with ``V_hat``
(no refit, spec A14).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from fedmc.algorithms.felb import client, server
from fedmc.algorithms.felb.config import FelbConfig
from fedmc.algorithms.felb.metrics import boolean_metrics
from fedmc.algorithms.felb.prox import binarize
from fedmc.core.shard import BooleanShard

Aggregation = Literal["average", "majority", "or"]
LocalMethod = Literal["elbmf", "grecond"]


def aggregate(V: np.ndarray, how: Aggregation) -> np.ndarray:
    """Aggregate binary ``V`` of shape ``(C, k, m)`` (Eqs. 11-13).

    ``"average"``: the rounded mean ``round(mean_c V^c)`` (half to even, as Julia's ``round``);
    ``"majority"``: ``sum_c V^c >= C/2``; ``"or"``: ``V^1 or ... or V^C``.
    """
    if how == "average":
        return np.asarray(np.round(V.mean(axis=0)), dtype=np.uint8)
    if how == "majority":
        return (V.sum(axis=0) >= V.shape[0] / 2).astype(np.uint8)
    return np.asarray(V.any(axis=0), dtype=np.uint8)


def grecond(A: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """GreConD (Belohlavek and Vychodil 2010): greedy cover of ``A`` by ``k`` formal concepts.

    Each factor grows an intent ``D`` one attribute at a time, always to the closure
    ``(D + j)^{down, up}`` that covers most still-uncovered ones, and stops when no attribute
    adds coverage. All candidate attributes are scored at once from co-occurrence counts.

    Returns
    -------
    U, V
        ``uint8`` of shapes ``(n, k)`` and ``(k, m)``; factors past the point where all ones
        are covered stay zero.
    """
    A = np.asarray(A, dtype=bool)
    n, m = A.shape
    U = np.zeros((n, k), dtype=np.uint8)
    V = np.zeros((k, m), dtype=np.uint8)
    uncovered = A.copy()
    Af = A.astype(np.float64)
    for f in range(k):
        if not uncovered.any():
            break
        extent, intent, best = np.ones(n, dtype=bool), np.zeros(m, dtype=bool), 0.0
        while True:
            AC = Af[extent]
            co = AC.T @ AC  # co[j, l]: rows of the extent holding j and l
            closure = co == np.diag(co)[:, None]  # intent of (extent and column j)
            value = ((AC.T @ uncovered[extent]) * closure).sum(axis=1)
            value[intent] = -1.0
            j = int(np.argmax(value))
            if value[j] <= best:
                break
            best, extent, intent = value[j], extent & A[:, j], closure[j]
        if best == 0:
            break
        U[:, f], V[f] = extent, intent
        uncovered[np.ix_(extent, intent)] = False
    return U, V


def local_factors(
    data: BooleanShard,
    k: int,
    method: LocalMethod,
    rng: np.random.Generator,
    elbmf_steps: int = 1000,
) -> tuple[np.ndarray, np.ndarray]:
    """Binary local factors of every client: ``U`` ``(n, k)`` in row order, ``V`` ``(C, k, m)``.

    ``"elbmf"``: the Felb client step without proximity or synchronization (Elbmf, Dalleiger
    and Vreeken 2022) for ``elbmf_steps`` steps, all clients batched, with the paper's
    baseline settings (App. D: kappa = lambda = 0.01, lambda_t = lambda 1.02^t, beta = 0.01)
    and independent random starts; ``"grecond"``: :func:`grecond` on every client.
    """
    if method == "elbmf":
        cfg = FelbConfig(rank=k, kappa=0.01, lam=0.01, rate=1.02, rate_counter="local_step",
                         beta=0.01, gamma=0.0, sharpen=0.0, init="independent",
                         local_steps=elbmf_steps)
        info = data.federation_info()
        draws = server.draws(cfg, data.federation_info(), rng)
        state = client.init_clients(cfg, data, draws, info)
        everyone = np.arange(data.n_clients, dtype=np.int64)
        msg = server.message(cfg, server.init_server(cfg, info, draws.server), 1, everyone, rng)
        state, uploads = client.client_step(cfg, data, state, msg, everyone, everyone)
        dense = uploads[client.UPLOAD].dense
        assert dense is not None  # Felb's clients upload their whole factors
        return binarize(client.factors(state)), binarize(dense)
    pairs = [grecond(data.block(c).toarray(), k) for c in range(data.n_clients)]
    return np.concatenate([u for u, _ in pairs]), np.stack([v for _, v in pairs])


def aggregated_bmf(
    data: BooleanShard,
    k: int,
    method: LocalMethod,
    aggregations: tuple[Aggregation, ...] = ("majority",),
    rng: np.random.Generator | None = None,
    elbmf_steps: int = 1000,
) -> dict[Aggregation, dict[str, float]]:
    """Alg. 2: local BMF, then each aggregation of the ``V_i``; metrics of ``U_i o V_hat``."""
    rng = rng if rng is not None else np.random.default_rng(0)
    U, V = local_factors(data, k, method, rng, elbmf_steps)
    return {
        how: boolean_metrics(data.A, U, aggregate(V, how), data.client_ptr, data.signal)
        for how in aggregations
    }

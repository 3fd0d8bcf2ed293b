"""The prototype that chose the cross-device mode's U-step (docs/algorithms.md): consensus on
rated items with the exact W-step, each rating's ``W_ij`` and ``Y_ij`` stored explicitly, and
the U-step (14) taken either against the client's copies ``W_i`` (the paper) or against the
consensus ``V^k`` (``--u-step consensus``, what ``fedmc`` ships). One user per client, ML-1M,
10% of the clients per round, scored on the validation cut of ``bench_cross_device.py``.
Written for clarity, not speed; the objective here is (17) itself, so ``beta`` and ``gamma``
are the package's divided by the number of clients.

    FEDMC_DATA=../shared/data python benchmarks/xdevice_prototype.py --u-step copies
    FEDMC_DATA=../shared/data python benchmarks/xdevice_prototype.py --u-step consensus
"""

from __future__ import annotations

import argparse

import numba
import numpy as np
from bench_cross_device import validation_data

from fedmc.core.prox import Regularizer, prox_scalar


@numba.njit(parallel=True)
def _visit(clients, indptr, indices, values, U, W, Y, V, beta, p, n_inner, reg, ones_u, D,
           consensus):
    r = V.shape[1]
    for k in numba.prange(clients.shape[0]):
        t = clients[k]
        q0, q1 = indptr[t], indptr[t + 1]
        A = np.zeros((r, r))
        b = np.zeros(r)
        for q in range(q0, q1):
            w = V[indices[q]] if consensus else W[q]
            b += values[q] * w
            A += np.outer(w, w)
        L = max(np.sqrt(np.sum(A * A)), 1e-300)
        u = U[t].copy()
        for _ in range(n_inner):
            g = A @ u - b
            for a in range(r):
                u[a] = prox_scalar(u[a] - g[a] / L, 1.0 / L, reg)
            if ones_u >= 0:
                u[ones_u] = 1.0
        U[t] = u
        for q in range(q0, q1):
            j = indices[q]
            rhs = u * values[q] / p + beta * V[j] - Y[q]
            w = (rhs - u * (np.dot(u, rhs) / (p * beta + np.dot(u, u)))) / beta
            y = Y[q] + beta * (w - V[j])
            D[q] = beta * (w - W[q]) + (y - Y[q])
            W[q] = w
            Y[q] = y


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--u-step", choices=("copies", "consensus"), default="consensus")
    ap.add_argument("--beta", type=float, default=0.6)
    ap.add_argument("--gamma", type=float, default=6.0)
    ap.add_argument("--lam", type=float, default=5.0)
    ap.add_argument("--inner", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=100)
    ns = ap.parse_args()
    data = validation_data()
    rng = np.random.default_rng(0)
    tr, te, p, n, rank = data.train, data.test, data.n_clients, data.n_items, 8
    V = rng.uniform(0, 0.1, (n, rank + 2))
    U = rng.uniform(0, 0.1, (data.n_users, rank + 2))
    U[:, rank], V[:, rank + 1], U[:, rank + 1], V[:, rank] = 0.0, 0.0, 1.0, 1.0
    W, Y = V[tr.indices].copy(), np.zeros((tr.nnz, rank + 2))
    counts = np.bincount(tr.indices, minlength=n).astype(float)
    beta = ns.beta / p
    total = np.zeros_like(V)
    np.add.at(total, tr.indices, beta * W + Y)
    reg = Regularizer("l2", ns.lam).params
    D = np.zeros_like(W)
    for _ in range(ns.rounds):
        clients = np.sort(rng.choice(p, p // 10, replace=False)).astype(np.int64)
        _visit(clients, tr.indptr, tr.indices, tr.values, U, W, Y, V, beta, p, ns.inner, reg,
               rank + 1, D, ns.u_step == "consensus")
        rows = np.concatenate([np.arange(tr.indptr[t], tr.indptr[t + 1]) for t in clients])
        np.add.at(total, tr.indices[rows], D[rows])
        rated = counts > 0
        V[rated] = total[rated] / (beta * counts[rated, None] + ns.gamma / p)
        V[:, rank] = 1.0
    users = np.repeat(np.arange(data.n_users), np.diff(te.indptr))
    pred = np.clip(np.sum(U[users] * V[te.indices], axis=1) * data.normalizer.scale
                   + data.normalizer.mean, *data.value_range)
    truth = te.values * data.normalizer.scale + data.normalizer.mean
    print(f"u-step {ns.u_step}: validation RMSE {np.sqrt(np.mean((pred - truth) ** 2)):.4f} "
          f"after {ns.rounds} rounds")


if __name__ == "__main__":
    main()

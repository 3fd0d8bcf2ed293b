"""Centralized ALS: one sweep against direct dense ridge solves, monotone objective, the sweep
count, and determinism."""

from __future__ import annotations

import numpy as np
import pytest

from fedmc.api import load_federated
from fedmc.core.ridge import ridge_rows
from fedmc.estimators import ALS
from fedmc.federation.settings import Schedule
from fedmc.run.data import DataSettings
from fedmc.run.runner import execute
from fedmc.run.spec import RunSpec


def dense_sweep(M, mask, U0, V0, lam, weighted, free_u, free_v):
    """One ALS sweep written with dense matrices: a ridge solve per user row, then per item."""
    U, V = U0.copy(), V0.copy()
    for X, Y, Mx, Px, free in ((U, V, M, mask, free_u), (V, U, M.T, mask.T, free_v)):
        for t in range(X.shape[0]):
            rated = Px[t]
            F = Y[rated][:, free]
            y = Mx[t, rated] - Y[rated][:, ~free] @ X[t, ~free]
            w = rated.sum() if weighted else 1.0
            A = F.T @ F + lam * w * np.eye(free.sum())
            X[t, free] = np.linalg.solve(A, F.T @ y)
    return U, V


def als_objective(M, mask, U, V, lam, weighted, free_u, free_v):
    wu = mask.sum(axis=1) if weighted else np.ones(len(U))
    wv = mask.sum(axis=0) if weighted else np.ones(len(V))
    return (0.5 * np.sum((mask * (M - U @ V.T)) ** 2)
            + 0.5 * lam * (wu @ np.sum(U[:, free_u] ** 2, axis=1)
                           + wv @ np.sum(V[:, free_v] ** 2, axis=1)))


@pytest.mark.parametrize("biases", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_sweep_equals_dense_ridge_solves(biases, weighted, tiny_federated):
    data, M, mask = tiny_federated(m=14, n=9, p=3, density=0.4, seed=2)
    params = dict(rank=3, lam=0.7, weighted=weighted, biases=biases, init_scale=1.0)
    start = ALS(**params, sweeps=0).fit(data)
    model = ALS(**params, sweeps=1).fit(data)
    layout = model.config_.layout
    free_u, free_v = layout.free_mask_u(), layout.free_mask_v()
    U, V = dense_sweep(M, mask, start.U_, start.V_, 0.7, weighted, free_u, free_v)
    assert np.abs(model.U_ - U).max() < 1e-10
    assert np.abs(model.V_ - V).max() < 1e-10
    expected = als_objective(M, mask, U, V, 0.7, weighted, free_u, free_v)
    assert model.history_.last("objective") == pytest.approx(expected, rel=1e-10)


def test_ridge_rows_empty_row_fixed_share_and_solution():
    rng = np.random.default_rng(1)
    F = rng.normal(size=(5, 3))
    indptr = np.array([0, 2, 2, 5])
    indices = np.array([0, 3, 1, 2, 4], dtype=np.int32)
    y = rng.normal(size=5)
    X_fixed, Y_fixed = rng.normal(size=(3, 1)), rng.normal(size=(5, 1))
    X = np.full((3, 3), np.nan)
    ridge_rows(indptr, indices, y, F, X_fixed, Y_fixed, 0.5, True, X)
    assert np.array_equal(X[1], np.zeros(3))
    Fr = F[[1, 2, 4]]
    yr = y[2:] - X_fixed[2, 0] * Y_fixed[[1, 2, 4], 0]
    assert np.allclose(X[2], np.linalg.solve(Fr.T @ Fr + 1.5 * np.eye(3), Fr.T @ yr), atol=1e-12)


def test_objective_never_increases_and_runs_its_sweeps_only(tiny_federated):
    data, _, _ = tiny_federated(m=30, n=12, p=3, density=0.5, seed=3)
    model = ALS(rank=3, lam=0.5, sweeps=6, random_state=1).fit(data)
    obj = model.history_.column("objective")
    assert np.all(np.diff(obj[1:]) <= 1e-12 * obj[1:-1])  # exact block minimization
    assert np.array_equal(model.history_.column("sweeps"), np.arange(7))
    assert model.history_.last("bytes_up") == 0 == model.history_.last("bytes_down")


def test_same_seed_same_history():
    data = load_federated("synthetic", clients=20)
    runs = []
    for _ in range(2):
        model = ALS(rank=4, sweeps=5, random_state=2).fit(data)
        runs.append([{k: v for k, v in row.items() if k != "seconds"}
                     for row in model.history_.rows])
    assert runs[0] == runs[1]


def test_runs_through_the_runner():
    result = execute(RunSpec(algorithm="als", schedule=Schedule(rounds=4),
                             data=DataSettings(clients=10), params={"rank": 3, "sweeps": "2"}))
    assert result.summary["sweeps"] == 2 and np.isfinite(result.summary["test_rmse"])

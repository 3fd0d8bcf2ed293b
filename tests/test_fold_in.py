"""Fold-in of a new user: each algorithm's user step run for one row against a brute-force
solve of the same problem, ``min_u 1/2 ||P(m - V u)||^2 + R_i(u)`` with ``u``'s constraint
sets."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize

from fedmc.algorithms.als.config import ALSConfig
from fedmc.algorithms.als.fold_in import fold_in as als_fold_in
from fedmc.algorithms.fedmavg import FedMAvgConfig, FedMAvgPosterConfig
from fedmc.algorithms.fedmavg.fold_in import fold_in as fedmavg_fold_in
from fedmc.algorithms.fedmc_admm import FedMCADMMConfig
from fedmc.algorithms.fedmc_admm.fold_in import fold_in as admm_fold_in
from fedmc.algorithms.registry import fold_in_algorithms, spec
from fedmc.algorithms.rfrec import RFRecConfig, RFRecFConfig
from fedmc.algorithms.rfrec.fold_in import fold_in as rfrec_fold_in
from fedmc.core.prox import Regularizer
from fedmc.errors import ConfigError


def problem(layout, n=40, rated=25, seed=0):
    """Item factors in the layout and one user's ratings (normalized scale)."""
    rng = np.random.default_rng(seed)
    V = rng.normal(size=(n, layout.width))
    layout.project_v(V)
    items = np.sort(rng.choice(n, rated, replace=False)).astype(np.int64)
    z = rng.normal(size=rated)
    return V, items, z


def brute_force(V, items, z, reg: Regularizer, layout) -> np.ndarray:
    """The minimizer by a general-purpose solver (L-BFGS-B; l1 terms split as u = p - q)."""
    free = layout.free_mask_u()
    fixed = np.zeros(layout.width)
    layout.project_u(fixed[None, :])
    F = V[items][:, free]
    target = z - V[items] @ fixed
    k = int(free.sum())
    if reg.kind == "l2":
        x = np.linalg.solve(F.T @ F + reg.lam * np.eye(k), F.T @ target)
    else:
        l1 = reg.lam * (reg.ratio if reg.kind == "elastic" else 1.0)
        l2 = reg.lam * (1 - reg.ratio) if reg.kind == "elastic" else 0.0
        split = reg.kind in ("l1", "elastic")

        def objective(w):
            x = w[:k] - w[k:] if split else w
            r = F @ x - target
            value = 0.5 * r @ r + 0.5 * l2 * x @ x
            g = F.T @ r + l2 * x
            if split:
                return value + l1 * w.sum(), np.concatenate((g + l1, -g + l1))
            return value, g

        bounds = {"l1": [(0, None)] * 2 * k, "elastic": [(0, None)] * 2 * k,
                  "nonneg": [(0, None)] * k, "box": [(reg.lo, reg.hi)] * k}[reg.kind]
        w = minimize(objective, np.full(len(bounds), 0.1), jac=True, method="L-BFGS-B",
                     bounds=bounds, options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 50000}).x
        x = w[:k] - w[k:] if split else w
    u = fixed.copy()
    u[free] = x
    return u


@pytest.mark.parametrize("steps", ["per-row", "paper"])
@pytest.mark.parametrize("biases", [True, False])
@pytest.mark.parametrize(("reg_u", "lam"), [("l2", 4.0), ("l2", 0.3), ("l1", 0.5),
                                            ("elastic", 0.8), ("nonneg", 0.0), ("box", 0.0)])
def test_admm_fold_in_solves_the_u_step_problem(steps, biases, reg_u, lam):
    cfg = FedMCADMMConfig(rank=4, biases=biases, steps=steps, reg_u=reg_u, lam=lam,
                          box_lo=-0.2, box_hi=0.3)
    V, items, z = problem(cfg.layout)
    u = admm_fold_in(cfg, V, items, z)
    want = brute_force(V, items, z, cfg.regularizers()[0], cfg.layout)
    assert np.allclose(u, want, atol=1e-6), np.abs(u - want).max()
    if biases:
        assert u[cfg.layout.ones_col_u] == 1.0


@pytest.mark.parametrize("reg_u", ["l2", "elastic"])
def test_admm_fold_in_weighs_r_i_by_fold_lam(reg_u):
    """``fold_lam`` replaces ``lam`` in the fold-in's problem alone (training reads ``lam``)."""
    cfg = FedMCADMMConfig(rank=4, reg_u=reg_u, lam=4.0, fold_lam=0.3)
    assert cfg.regularizers()[0].lam == 4.0
    V, items, z = problem(cfg.layout)
    want = brute_force(V, items, z, Regularizer(reg_u, 0.3), cfg.layout)
    assert np.allclose(admm_fold_in(cfg, V, items, z), want, atol=1e-6)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("biases", [True, False])
def test_als_fold_in_is_the_ridge_solution(weighted, biases):
    cfg = ALSConfig(rank=3, biases=biases, lam=2.5, weighted=weighted)
    V, items, z = problem(cfg.layout, seed=1)
    u = als_fold_in(cfg, V, items, z)
    reg = Regularizer("l2", cfg.lam * (len(items) if weighted else 1.0))
    assert np.allclose(u, brute_force(V, items, z, reg, cfg.layout), atol=1e-10)


@pytest.mark.parametrize("config", [FedMAvgConfig, FedMAvgPosterConfig])
@pytest.mark.parametrize("biases", [True, False])
def test_fedmavg_fold_in_solves_its_u_step_problem(config, biases):
    cfg = config(rank=3, biases=biases, lam=0.7)
    V, items, z = problem(cfg.layout, seed=2)
    u = fedmavg_fold_in(cfg, V, items, z)
    assert np.allclose(u, brute_force(V, items, z, Regularizer("l2", 0.7), cfg.layout),
                       atol=1e-8)


@pytest.mark.parametrize("config", [RFRecConfig, RFRecFConfig])
def test_rfrec_fold_in_minimizes_its_part_of_f_i(config):
    cfg = config(rank=3, lam_u=0.4)
    V, items, z = problem(cfg.layout, seed=3)
    u = rfrec_fold_in(cfg, V, items, z)
    # ||r||^2 + lam_u ||u||^2 has the minimizer of 1/2 ||r||^2 + lam_u/2 ||u||^2
    assert np.allclose(u, brute_force(V, items, z, Regularizer("l2", 0.4), cfg.layout),
                       atol=1e-10)


def test_a_user_without_ratings_gets_the_prox_of_zero():
    cfg = FedMCADMMConfig(rank=3)
    V, _, _ = problem(cfg.layout)
    u = admm_fold_in(cfg, V, np.zeros(0, dtype=np.int64), np.zeros(0))
    assert np.allclose(u[:-1], 0.0) and u[-1] == 1.0


def test_registry_names_and_unknown_algorithms():
    assert {"fedmc-admm", "fedmavg", "fedmavg-poster", "rfrec", "rfrecf", "als"} <= set(
        fold_in_algorithms())
    assert spec("als").load_fold_in() is als_fold_in
    with pytest.raises(ConfigError, match="not available for felb"):
        spec("felb").load_fold_in()


@pytest.mark.parametrize(("name", "params"), [
    ("fedmc-admm", {"rank": 3}), ("item-bias", {}), ("fedals", {"rank": 3}),
    ("fedals", {"rank": 3, "implicit": True})], ids=["fedmc-admm", "item-bias", "fedals",
                                                     "fedals-implicit"])
def test_the_batched_fold_in_is_the_one_user_fold_in_of_every_row(name, params):
    """``fold_in_users`` by an algorithm's ``fold_in_rows`` equals its ``fold_in`` called for
    one user at a time (a user without ratings included)."""
    from fedmc.core.shard import CSR

    entry = spec(name)
    cfg = entry.Config(**params)
    assert entry.fold_in_rows is not None
    rng = np.random.default_rng(3)
    V = rng.normal(size=(30, cfg.layout.width))
    cfg.layout.project_v(V)
    users = [np.sort(rng.choice(30, k, replace=False)).astype(np.int64) for k in (5, 0, 12, 1)]
    values = [rng.normal(size=len(items)) for items in users]
    R = CSR(np.cumsum([0] + [len(u) for u in users]).astype(np.int64),
            np.concatenate(users), np.concatenate(values))
    one = entry.load_fold_in()
    expected = np.array([one(cfg, V, items, z) for items, z in zip(users, values, strict=True)])
    np.testing.assert_allclose(entry.fold_in_users(cfg, V, R), expected, rtol=1e-12,
                               atol=1e-12)

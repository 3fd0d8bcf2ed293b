"""FedMAvg (section 5.2 of the FedMC-ADMM paper) and the poster's original FedMAvg: the batched
engine against plain per-client transcriptions of the pseudo-code with dense matrices."""

from __future__ import annotations

import numpy as np
import pytest

from fedmc.algorithms.fedmavg import ALGORITHM, POSTER, FedMAvgConfig
from fedmc.algorithms.fedmavg.client import step_c
from fedmc.algorithms.fedmavg.config import FedMAvgPosterConfig
from fedmc.algorithms.fedmavg.kernels import gram_lambda_max
from fedmc.api import load_federated
from fedmc.estimators import FedMAvg, estimator_class
from fedmc.federation.loop import Rounds
from fedmc.federation.sampling import WithReplacementSampler
from fedmc.federation.settings import Schedule
from fedmc.run.data import DataSettings
from fedmc.run.runner import execute
from fedmc.run.spec import RunSpec
from fedmc.sim import simulate
from fedmc.testing import ScheduledSampler


def lambda_max(X: np.ndarray) -> float:
    return float(np.linalg.eigvalsh(X).max())


def reference_section_5_2(M, mask, blocks, U0, V0, schedule, *, Q, lam, gamma, gamma1, gamma2,
                          u_all, ones_u=-1, ones_v=-1):
    """FedMAvg as written in section 5.2, dense ``r x n`` matrices, a loop over clients."""
    p = len(blocks)
    U = [U0[b].copy() for b in blocks]
    Ms = [M[b] for b in blocks]
    Ps = [mask[b].astype(float) for b in blocks]
    V = V0.copy()
    for S in schedule:
        c = gamma1 / 2 * (lambda_max(V @ V.T) + lam)
        for i in range(p) if u_all else S:
            for _ in range(Q):  # l = 1..Q1
                U[i] = U[i] - ((Ps[i] * (U[i] @ V - Ms[i])) @ V.T + lam * U[i]) / c
                if ones_u >= 0:
                    U[i][:, ones_u] = 1.0
        uploads = []
        for i in S:
            d = gamma2 * lambda_max(U[i].T @ U[i])
            W = V.copy()  # W_i^{k,0} = V^k
            for _ in range(Q):  # l = 1..Q2
                W = W - (U[i].T @ (Ps[i] * (U[i] @ W - Ms[i])) / p + gamma * W) / d
            uploads.append(W)
        V = sum(uploads) / len(S)
        if ones_v >= 0:
            V[ones_v, :] = 1.0
    return np.vstack(U), V


def reference_poster(M, mask, blocks, U0, V0, schedule, *, Q1, q_hat, lam, gamma, gamma1,
                     gamma2, project, ones_u=-1, ones_v=-1):
    """Algorithm 1 of the poster with ``F_p = f_i + lam/2 ||U_i||^2 + gamma/2 ||V||^2``."""
    p = len(blocks)
    U = [U0[b].copy() for b in blocks]
    Ms = [M[b] for b in blocks]
    Ps = [mask[b].astype(float) for b in blocks]
    V = V0.copy()
    for s, A in enumerate(schedule, start=1):
        Q2 = q_hat // s + 1
        c = gamma1 / 2 * (lambda_max(V @ V.T) + lam)
        uploads = {}
        for i in range(p):  # every client computes
            for _ in range(Q1):
                U[i] = project(U[i] - ((Ps[i] * (U[i] @ V - Ms[i])) @ V.T + lam * U[i]) / c)
                if ones_u >= 0:
                    U[i][:, ones_u] = 1.0
            d = gamma2 * (lambda_max(U[i].T @ U[i]) + gamma)
            W = V.copy()
            for _ in range(Q2):
                W = W - (U[i].T @ (Ps[i] * (U[i] @ W - Ms[i])) + gamma * W) / d
            uploads[i] = W
        V = project(sum(uploads[i] for i in A) / len(A))  # A^s is a multiset
        if ones_v >= 0:
            V[ones_v, :] = 1.0
    return np.vstack(U), V


def blocks_of(data):
    ptr = data.client_ptr
    return [slice(ptr[c], ptr[c + 1]) for c in range(data.n_clients)]


SCHEDULE = ([0, 3], [1, 2, 4], [3], [0, 1, 2, 3, 4], [2, 4])


def run(algorithm, config, data, schedule, seed=11):
    """``algorithm`` on ``data`` with the rounds' clients given by ``schedule``."""
    return simulate(algorithm, config, data, seed=seed,
                    rounds=Rounds(ScheduledSampler(data.n_clients, schedule), len(schedule)))


def start(algorithm, config, data, seed=11):
    """``U^0`` (rows) and ``V^0`` (``r x n``) of a run."""
    sim = run(algorithm, config, data, [], seed)
    return sim.clients.state.U.copy(), sim.server.V.T.copy()


@pytest.mark.parametrize(
    "opts",
    [
        {},
        {"u_update": "sampled"},
        {"biases": True, "gamma1": 3.0, "gamma2": 2.0},
        {"biases": True, "u_update": "sampled", "lam": 0.0},
    ],
)
def test_section_5_2_batched_equals_per_client_loop(opts, tiny_federated):
    data, M, mask = tiny_federated(m=15, n=8, p=5, density=0.45, seed=4)
    cfg = FedMAvgConfig(**{"rank": 2, "inner": 3, "lam": 0.05, "gamma": 0.02, "init_scale": 1.0,
                           **opts})
    U0, V0 = start(ALGORITHM, cfg, data)
    sim = run(ALGORITHM, cfg, data, SCHEDULE)
    U, V = reference_section_5_2(
        M, mask, blocks_of(data), U0, V0, SCHEDULE, Q=cfg.inner, lam=cfg.lam, gamma=cfg.gamma,
        gamma1=cfg.gamma1, gamma2=cfg.gamma2, u_all=cfg.u_update == "all",
        ones_u=cfg.layout.ones_col_u, ones_v=cfg.layout.ones_col_v,
    )
    assert np.abs(sim.clients.state.U - U).max() < 1e-10
    assert np.abs(sim.server.V.T - V).max() < 1e-10


def test_step_constants():
    """``c^k`` and ``d_i^k`` as defined (section 5.2, reference [42])."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(7, 3))
    assert gram_lambda_max(X) == pytest.approx(lambda_max(X.T @ X), rel=1e-12)
    assert gram_lambda_max(X[:0]) == 0.0
    V = rng.normal(size=(9, 2))
    expected = 1.5 * (lambda_max(V.T @ V) + 0.3)
    assert step_c(FedMAvgConfig(rank=2, lam=0.3, gamma1=3.0), V) == pytest.approx(expected,
                                                                                   rel=1e-12)


POSTER_SCHEDULE = ([0, 0, 3], [1, 2, 4], [3, 3, 3], [0, 1, 2, 3, 4], [2])


@pytest.mark.parametrize(
    "opts",
    [
        {},
        {"constraint": "nonneg", "q_hat": 7},
        {"constraint": "box", "box_lo": -0.1, "box_hi": 0.4, "biases": True},
    ],
)
def test_poster_batched_equals_per_client_loop(opts, tiny_federated):
    data, M, mask = tiny_federated(m=15, n=8, p=5, density=0.45, seed=4)
    cfg = FedMAvgPosterConfig(**{"rank": 2, "inner": 3, "lam": 0.05, "gamma": 0.02,
                                 "init_scale": 1.0, "q_hat": 4, **opts})
    U0, V0 = start(POSTER, cfg, data)
    sim = run(POSTER, cfg, data, POSTER_SCHEDULE)
    lo, hi = {"none": (-np.inf, np.inf), "nonneg": (0.0, np.inf),
              "box": (cfg.box_lo, cfg.box_hi)}[cfg.constraint]
    U, V = reference_poster(
        M, mask, blocks_of(data), U0, V0, POSTER_SCHEDULE, Q1=cfg.inner, q_hat=cfg.q_hat,
        lam=cfg.lam, gamma=cfg.gamma, gamma1=cfg.gamma1, gamma2=cfg.gamma2,
        project=lambda X: np.clip(X, lo, hi),
        ones_u=cfg.layout.ones_col_u, ones_v=cfg.layout.ones_col_v,
    )
    assert np.abs(sim.clients.state.U - U).max() < 1e-10
    assert np.abs(sim.server.V.T - V).max() < 1e-10
    assert sim.history.last("q2") == cfg.q_hat // len(POSTER_SCHEDULE) + 1


def test_poster_setup_projects_the_initial_factors(tiny_federated):
    data, _, _ = tiny_federated()
    cfg = FedMAvgPosterConfig(rank=2, constraint="box", box_lo=0.0, box_hi=0.3, init_scale=1.0)
    for X in start(POSTER, cfg, data, seed=0):
        assert X.min() >= 0.0 and X.max() <= 0.3


def test_communication_per_round(tiny_federated):
    data, _, _ = tiny_federated(m=15, n=8, p=5)
    size = 8 * 2 * 8  # n * r * 8 bytes
    for u_update, down in (("all", 5), ("sampled", 2)):
        sim = run(ALGORITHM, FedMAvgConfig(rank=2, u_update=u_update), data, [[1, 3]])
        up_bytes, down_bytes = sim.history.column("bytes_up"), sim.history.column("bytes_down")
        assert (up_bytes[0], down_bytes[0]) == (0, 0)  # V^0 goes out with the first round
        assert (up_bytes[1], down_bytes[1]) == (2 * size, down * size)
    # two distinct uploaders (client 3 drawn twice), V broadcast to all
    sim = run(POSTER, FedMAvgPosterConfig(rank=2), data, [[3, 3, 4]])
    assert sim.history.last("bytes_up") == 2 * size
    assert sim.history.last("bytes_down") == 5 * size


def test_empty_round_keeps_v(tiny_federated):
    data, _, _ = tiny_federated()
    cfg = FedMAvgConfig(rank=2)
    _, V0 = start(ALGORITHM, cfg, data, seed=0)
    sim = run(ALGORITHM, cfg, data, [[]], seed=0)
    assert np.array_equal(sim.server.V.T, V0)


def test_with_replacement_sampler():
    sampler = WithReplacementSampler(4, 50)
    draw = sampler.sample(np.random.default_rng(0))
    assert len(draw) == 50 and np.all(np.diff(draw) >= 0) and set(draw) == {0, 1, 2, 3}


@pytest.mark.parametrize("name", ["fedmavg", "fedmavg-poster"])
def test_same_seed_same_history(name):
    data = load_federated("synthetic", clients=20)
    runs = []
    for _ in range(2):
        model = estimator_class(name)(rank=4, rounds=6, active=5, random_state=3).fit(data)
        runs.append([{k: v for k, v in row.items() if k != "seconds"}
                     for row in model.history_.rows])
    assert runs[0] == runs[1]


def test_fedmavg_decreases_objective_on_synthetic():
    data = load_federated("synthetic", clients=20)
    model = FedMAvg(rank=5, init_scale=0.1, rounds=30, active=5).fit(data)
    obj = model.history_.column("objective")
    assert obj[-1] < 0.8 * obj[0]


@pytest.mark.parametrize("name, extra", [("fedmavg", {"u_update": "sampled"}),
                                         ("fedmavg-poster", {"q_hat": "3"})])
def test_runs_through_the_runner(name, extra):
    """``fedmc run --algorithm NAME -P key=value`` reaches the algorithm (strings coerced)."""
    result = execute(RunSpec(algorithm=name, schedule=Schedule(rounds=3, active=4),
                             data=DataSettings(clients=10), params={"rank": 3, "inner": 2,
                                                                    **extra}))
    assert result.summary["round"] == 3 and np.isfinite(result.summary["test_rmse"])
    assert result.summary["bytes_up"] > 0

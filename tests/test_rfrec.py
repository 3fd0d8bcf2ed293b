"""RFRec / RFRecF: the batched sparse-storage implementation against a plain dense
transcription of Algorithms 1 and 2, the communication count of RFRecF against Lemma 3.9,
and the run contract."""

from __future__ import annotations

import numpy as np
import pytest

from fedmc.algorithms.rfrec import ALGORITHM, ALGORITHM_F
from fedmc.algorithms.rfrec.client import dense
from fedmc.estimators import RFRec, RFRecF, estimator_class
from fedmc.federation.loop import Rounds
from fedmc.sim import simulate
from fedmc.testing import ScheduledSampler

# ------------------------------------------------------- dense transcription of the paper


def dense_grad_f(R, mask, U, V, lam_u):
    """``grad f_i`` of one client: ``f_i = ||P(R - U V^T)||^2 + lam_u ||U||^2`` (V item-major)."""
    E = mask * (R - U @ V.T)
    return -2.0 * E @ V + 2.0 * lam_u * U, -2.0 * E.T @ U


def adam_dir(g, state, t):
    """Adam's direction (torch defaults) for gradient ``g``; ``state`` = moments, in place."""
    if not state:
        state.extend([np.zeros_like(g), np.zeros_like(g)])
    m, v = state
    m[:] = 0.9 * m + 0.1 * g
    v[:] = 0.999 * v + 0.001 * g * g
    return (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + 1e-8)


def dense_algorithm1(
    data, R, mask, U, V_bar, alpha, lam, lam_u, participants, delta=np.inf, use_adam=False
):
    """Algorithm 1 with a dense ``V_(i)`` per client, written line by line (``use_adam``: the
    notebooks' optimizer on the same gradient)."""
    ptr = data.client_ptr
    n = data.n_clients
    U = U.copy()
    V = [V_bar.copy() for _ in range(n)]  # V_(i)^0 = V̄^0
    state_u = [[] for _ in range(n)]
    state_v = [[] for _ in range(n)]
    for k, S in enumerate(participants):
        for i in range(n):  # line 7: x_i <- x_i - alpha (grad f_i + lambda grad psi_i)
            rows = slice(ptr[i], ptr[i + 1])
            g_u, g_v = dense_grad_f(R[rows], mask[rows], U[rows], V[i], lam_u)
            g_v = g_v + lam * (V[i] - V_bar)
            if use_adam:
                g_u = adam_dir(g_u, state_u[i], k + 1)
                g_v = adam_dir(g_v, state_v[i], k + 1)
            U[rows] = U[rows] - alpha * g_u
            V[i] = V[i] - alpha * g_v
        if len(S):  # lines 8-10: uploads of the participants, average
            V_bar = np.mean([np.clip(V[i], -delta, delta) for i in S], axis=0)
    return U, V_bar, V


def dense_algorithm2(
    data, R, mask, U, V_bar, alpha, lam, lam_u, p, participants, coins, use_adam=False,
    adam_average=False,
):
    """Algorithm 2 with a dense ``V_(i)`` per client; returns the communication count too.

    ``use_adam``: each client's Adam (one state for ``U_i``, one for ``V_(i)``) takes the
    main update's gradient with step ``alpha / (1-p)``; ``adam_average``: the moving-to-average
    gradient ``lambda (V_(i) - V̄)`` goes through the same ``V_(i)`` state with step
    ``alpha / p`` (otherwise line 11 as printed)."""
    ptr = data.client_ptr
    n = data.n_clients
    U = U.copy()
    V = [V_bar.copy() for _ in range(n)]
    state_u = [[] for _ in range(n)]
    state_v = [[] for _ in range(n)]
    t_u = [0] * n
    t_v = [0] * n
    uploads = V  # what the server last received
    prev = 0
    comm = 0
    for S, zeta in zip(participants, coins, strict=True):
        if zeta == 0:
            for i in range(n):
                if prev == 0:  # main update
                    rows = slice(ptr[i], ptr[i + 1])
                    g_u, g_v = dense_grad_f(R[rows], mask[rows], U[rows], V[i], lam_u)
                    if use_adam:
                        t_u[i] += 1
                        t_v[i] += 1
                        g_u = adam_dir(g_u, state_u[i], t_u[i])
                        g_v = adam_dir(g_v, state_v[i], t_v[i])
                    U[rows] = U[rows] - alpha / (1 - p) * g_u
                    V[i] = V[i] - alpha / (1 - p) * g_v
                elif use_adam and adam_average:  # moving to average, through Adam
                    t_v[i] += 1
                    V[i] = V[i] - alpha / p * adam_dir(lam * (V[i] - V_bar), state_v[i], t_v[i])
                else:  # moving to average
                    V[i] = V[i] - alpha / p * lam * (V[i] - V_bar)
        else:
            if prev == 0:  # clients send V_(i)
                uploads = [V[i].copy() for i in S]
            if len(uploads):  # central server aggregate
                V_bar = np.mean(uploads, axis=0)
        comm += int(prev != zeta)
        prev = zeta
    return U, V_bar, V, comm


def run(algorithm, data, schedule, seed=0, **params):
    """``algorithm`` (rank 2) on ``data`` with the rounds' participants given by
    ``schedule``."""
    cfg = algorithm.Config(rank=2, **params)
    return simulate(algorithm, cfg, data, seed=seed,
                    rounds=Rounds(ScheduledSampler(data.n_clients, schedule), len(schedule)))


def start(algorithm, data, seed=0, **params):
    """``U^0`` and ``V̄^0`` of a run."""
    sim = run(algorithm, data, [], seed, **params)
    return sim.clients.state.U.copy(), sim.server.V_bar.copy()


def server_coins(seed, rounds, p):
    """RFRecF's coins: the server's stream's uniform draws, one per round (a scheduled sampler
    draws nothing)."""
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(2)[1])
    return [int(rng.random() < p) for _ in range(rounds)]


def random_participants(n, rounds, seed, drop=0.4):
    rng = np.random.default_rng(seed)
    return [np.flatnonzero(rng.random(n) >= drop).astype(np.int64) for _ in range(rounds)]


# ---------------------------------------------------------------------------------- tests


@pytest.mark.parametrize(("m", "p"), [(12, 3), (12, 12), (10, 1)])
@pytest.mark.parametrize(("delta", "optimizer"), [(None, "gd"), (0.3, "gd"), (None, "adam")])
def test_rfrec_matches_dense_algorithm1(m, p, delta, optimizer, tiny_federated):
    """Groups, one user per client and a single client; with and without clipping; Adam;
    dropped devices; the sparse local item matrices equal the dense ones."""
    data, R, mask = tiny_federated(m=m, n=9, p=p)
    params = dict(alpha=0.03, lam=2.0, lam_u=0.1, init_scale=0.5, delta=delta,
                  optimizer=optimizer)
    U0, V0 = start(ALGORITHM, data, **params)
    participants = random_participants(data.n_clients, 15, seed=3)
    sim = run(ALGORITHM, data, participants, **params)
    U, V_bar, V = dense_algorithm1(
        data, R, mask, U0, V0, 0.03, 2.0, 0.1, participants,
        np.inf if delta is None else delta, optimizer == "adam",
    )
    assert np.allclose(sim.clients.state.U, U, rtol=0, atol=1e-10)
    assert np.allclose(sim.server.V_bar, V_bar, rtol=0, atol=1e-10)
    for i in range(data.n_clients):  # Adam's division by sqrt(v) amplifies rounding
        assert np.allclose(dense(sim.clients.state, i), V[i], rtol=0, atol=1e-9)
    assert sim.history.last("comm_rounds") == 2 * len(participants)


@pytest.mark.parametrize(("m", "p"), [(12, 3), (12, 12)])
@pytest.mark.parametrize(
    ("optimizer", "average_step"),
    [("gd", "plain"), ("gd", "optimizer"), ("adam", "plain"), ("adam", "optimizer")],
)
def test_rfrecf_matches_dense_algorithm2(m, p, optimizer, average_step, tiny_federated):
    """The paper's steps, Adam on the main update only, and Adam on both local steps."""
    data, R, mask = tiny_federated(m=m, n=9, p=p)
    params = dict(alpha=0.02, lam=3.0, lam_u=0.1, p=0.4, init_scale=0.5, optimizer=optimizer,
                  average_step=average_step)
    U0, V0 = start(ALGORITHM_F, data, **params)
    participants = random_participants(data.n_clients, 40, seed=4)
    sim = run(ALGORITHM_F, data, participants, **params)
    coins = server_coins(0, len(participants), 0.4)
    assert 0 < sum(coins) < len(coins)
    U, V_bar, V, comm = dense_algorithm2(
        data, R, mask, U0, V0, 0.02, 3.0, 0.1, 0.4, participants, coins,
        optimizer == "adam", average_step == "optimizer",
    )
    tol = 1e-9  # Adam's division by sqrt(v) amplifies rounding
    assert np.allclose(sim.clients.state.U, U, rtol=0, atol=tol)
    assert np.allclose(sim.server.V_bar, V_bar, rtol=0, atol=tol)
    for i in range(data.n_clients):
        assert np.allclose(dense(sim.clients.state, i), V[i], rtol=0, atol=tol)
    assert sim.history.last("comm_rounds") == comm


def test_objective_is_problem_5_on_the_local_models(tiny_federated):
    data, R, mask = tiny_federated(m=12, n=9, p=4)
    sim = run(ALGORITHM, data, [np.arange(4)] * 5, alpha=0.03, lam=2.0, lam_u=0.3,
              init_scale=0.5)
    U, V_bar = sim.clients.state.U, sim.server.V_bar
    ptr = data.client_ptr
    f = psi = 0.0
    for i in range(4):
        rows = slice(ptr[i], ptr[i + 1])
        V_i = dense(sim.clients.state, i)
        f += np.sum((mask[rows] * (R[rows] - U[rows] @ V_i.T)) ** 2)
        f += 0.3 * np.sum(U[rows] ** 2)
        psi += 0.5 * np.sum((V_i - V_bar) ** 2)
    assert sim.history.last("objective") == pytest.approx(f + 2.0 * psi, rel=1e-12)


def test_storage_is_one_row_per_rated_client_item_pair(tiny_federated):
    data, _, mask = tiny_federated(m=12, n=9, p=3)
    c = run(ALGORITHM, data, []).clients.state
    pairs = {(i, j) for i in range(3) for j in np.flatnonzero(mask[data.client_ptr[i]:
                                                                   data.client_ptr[i + 1]].any(0))}
    assert c.V_loc.shape == (len(pairs), 2)
    assert {(i, int(c.slot_item[s])) for i in range(3)
            for s in range(c.slot_ptr[i], c.slot_ptr[i + 1])} == pairs
    one_user, _, _ = tiny_federated(m=12, n=9, p=12)
    assert run(ALGORITHM, one_user, []).clients.state.V_loc.shape[0] == one_user.train.nnz


@pytest.mark.parametrize(("p", "runs"), [(0.5, 50), pytest.param(0.2, 200, marks=pytest.mark.slow),
                                         pytest.param(0.8, 200, marks=pytest.mark.slow)])
def test_rfrecf_communication_rounds_match_lemma_3_9(p, runs, tiny_federated):
    """Over many seeds the mean count matches 2p(1-p)T (exactly p + 2p(1-p)(T-1): the first
    iteration communicates only when zeta_0 = 1)."""
    data, _, _ = tiny_federated(m=6, n=5, p=2)
    T = 60
    counts = np.empty(runs)
    for seed in range(runs):
        counts[seed] = run(ALGORITHM_F, data, [np.arange(2)] * T, seed, p=p).server.comm_rounds
    tol = 4.0 * counts.std(ddof=1) / np.sqrt(runs)
    assert abs(counts.mean() - (p + 2 * p * (1 - p) * (T - 1))) < tol
    assert abs(counts.mean() - 2 * p * (1 - p) * T) < tol + abs(p - 2 * p * (1 - p))


def test_history_columns_and_ldp_epsilon(tiny):
    model = estimator_class("rfrec")(rank=2, delta=0.2, s=0.04, rounds=3).fit(tiny)
    h = model.history_
    assert list(h.column("comm_rounds")) == [0, 2, 4, 6]
    assert h.last("epsilon") == pytest.approx(10.0)
    assert np.isfinite(h.last("test_rmse"))
    model = estimator_class("rfrecf")(rank=2, rounds=3).fit(tiny)
    assert "epsilon" not in model.history_.columns
    cfg = model.config_
    assert (cfg.alpha, cfg.lam, cfg.lam_u, cfg.p) == (0.01, 100.0, 10.0, 0.5)
    assert (cfg.optimizer, cfg.average_step) == ("adam", "optimizer")


def test_ldp_noise_reaches_the_average_with_the_right_variance(tiny_federated):
    """Server average of n noisy uploads = mean of the clipped ones + noise of variance
    2 s^2 / n per entry (the quantity used in the proof of Corollary 3.7)."""
    data, _, _ = tiny_federated(m=12, n=9, p=12)
    c = run(ALGORITHM, data, [], delta=0.2, s=0.5).clients.state
    S = np.arange(12)
    clean = np.mean([np.clip(dense(c, i), -0.2, 0.2) for i in S], axis=0)
    mechanism = ALGORITHM.Config(delta=0.2, s=0.5).mechanism()
    rng = np.random.default_rng(1)
    noise = np.array([mechanism.perturb_sum(12 * clean, 12, rng) / 12 - clean
                      for _ in range(400)])
    assert abs(noise.mean()) < 4 * np.sqrt(2 * 0.25 / 12 / noise.size)
    assert noise.var() == pytest.approx(2 * 0.25 / 12, rel=0.05)


def test_config_validation():
    with pytest.raises(ValueError, match="biases"):
        RFRec(biases=True).make_config()
    with pytest.raises(ValueError, match="delta"):
        RFRec(s=0.1).make_config()
    with pytest.raises(ValueError):
        RFRecF(p=1.0).make_config()

"""Felb and Felb-MU (Alg. 1): batched clients against a per-client loop from the paper."""

from __future__ import annotations

import numpy as np
import pytest

from fedmc.algorithms.felb import ALGORITHM, ALGORITHM_MU
from fedmc.algorithms.felb.client import _gradient_step
from fedmc.algorithms.felb.config import FelbConfig, FelbMUConfig
from fedmc.algorithms.felb.prox import prox_elb, prox_proximity
from fedmc.data.boolean import BooleanFederatedData, load_boolean
from fedmc.errors import DataError
from fedmc.estimators import Felb, FelbMU
from fedmc.federation.loop import Rounds
from fedmc.sim import simulate
from fedmc.testing import ScheduledSampler

VARIANTS = [(ALGORITHM, FelbConfig), (ALGORITHM_MU, FelbMUConfig)]


def run(variant, data, schedule, seed=7, **params):
    """Felb or Felb-MU on ``data`` with the rounds' clients given by ``schedule``."""
    algorithm, config = variant
    return simulate(algorithm, config(**params), data, seed=seed,
                    rounds=Rounds(ScheduledSampler(data.n_clients, schedule), len(schedule)))


def _reference_round(A_blocks, U, U_prev, V_hat, cfg, lam_t, mu):
    """One synchronization of every client, one client at a time, as written in Alg. 1 / Eq. 8.

    With ``cfg.sharpen = c`` the fitted target is ``T = (1+2c) A - c``; Felb-MU then splits
    the gradient as ``(X G + N) - P`` with the constant part ``N`` of ``-T`` in its denominator.
    Returns the new ``U_i``, their previous iterates and the uploads ``V_i``.
    """
    uploads = []
    c = cfg.sharpen
    for i, A0 in enumerate(A_blocks):
        A = (1 + 2 * c) * A0 - c
        ones = np.ones_like(A)
        Ui, Ui_prev = U[i].copy(), U_prev[i].copy()
        V, V_prev = V_hat.copy(), V_hat.copy()  # line 11 of the last sync
        for _ in range(cfg.local_steps):
            Ut = Ui + cfg.beta * (Ui - Ui_prev)
            if mu:
                Ut = np.maximum(Ut, 0)
            grad = Ut @ V @ V.T - A @ V.T
            if mu:
                eta = Ut / (Ut @ V @ V.T + c * ones @ V.T + 1e-12)
            else:
                L = max(np.linalg.norm(V @ V.T), 1e-4)
                eta = 2 * (1 - cfg.beta) / ((1 + 2 * cfg.beta) * L)
            Ui_prev, Ui = Ui, prox_elb(Ut - eta * grad, eta * cfg.kappa, eta * lam_t, cfg.clamp)
            Vt = V + cfg.beta * (V - V_prev)
            if mu:
                Vt = np.maximum(Vt, 0)
            grad = Ui.T @ Ui @ Vt - Ui.T @ A
            if mu:
                eta = Vt / (Ui.T @ Ui @ Vt + c * Ui.T @ ones + 1e-12)
            else:
                L = max(np.linalg.norm(Ui.T @ Ui), 1e-4)
                eta = 2 * (1 - cfg.beta) / ((1 + 2 * cfg.beta) * L)
            V_new = prox_elb(Vt - eta * grad, eta * cfg.kappa, eta * lam_t, cfg.clamp)
            V_prev, V = V, prox_proximity(V_new, V_hat, eta * cfg.gamma)
        U[i], U_prev[i] = Ui, Ui_prev
        uploads.append(V)
    return uploads


@pytest.mark.parametrize("variant", VARIANTS, ids=["felb", "felb-mu"])
@pytest.mark.parametrize("density", [0.3, 0.02])  # dense and block-sparse layouts
@pytest.mark.parametrize("sharpen", [0.0, 0.5])
def test_batched_clients_equal_a_per_client_loop(variant, density, sharpen):
    rng = np.random.default_rng(0)
    A = (rng.random((47, 60)) < density).astype(np.uint8)
    data = BooleanFederatedData.build(A, 5, seed=1)  # sizes 10, 10, 9, 9, 9: padding
    params = dict(rank=3, local_steps=4, gamma=0.5, beta=0.05, lam=0.3, sharpen=sharpen,
                  sharpen_after=0)
    cfg = variant[1](**params)
    start = run(variant, data, [], **params)
    assert start.clients.state.all_blocks.dense == (density > 0.05)
    blocks = [data.block(c).toarray() for c in range(5)]
    U = [start.clients.state.U[c, : len(b)].copy() for c, b in enumerate(blocks)]
    U_prev = [u.copy() for u in U]
    V_hat = start.server.V_hat.copy()
    for r in range(1, 4):
        lam_t = cfg.lam_t(0, r - 1)
        uploads = _reference_round(blocks, U, U_prev, V_hat, cfg, lam_t, cfg.multiplicative)
        V_hat = prox_elb(np.mean(uploads, axis=0), cfg.kappa, lam_t, cfg.clamp)
        sim = run(variant, data, [np.arange(5)] * r, **params)
        np.testing.assert_allclose(sim.server.V_hat, V_hat, atol=1e-10)
        for c, b in enumerate(blocks):
            np.testing.assert_allclose(sim.clients.state.U[c, : len(b)], U[c], atol=1e-10)
            np.testing.assert_array_equal(sim.clients.state.U[c, len(b) :], 0.0)


def test_felb_mu_gradient_step_is_the_lee_seung_update():
    rng = np.random.default_rng(3)
    A, U, V = rng.random((8, 6)), rng.random((8, 2)) + 0.1, rng.random((2, 6)) + 0.1
    mu = FelbMUConfig(rank=2)
    VVt = (V @ V.T)[None]
    step, eta = _gradient_step(mu, U[None], U[None] @ VVt, (A @ V.T)[None], VVt)
    np.testing.assert_allclose(step[0], U * (A @ V.T) / (U @ V @ V.T), rtol=1e-9)
    np.testing.assert_allclose(eta[0], U / (U @ V @ V.T), rtol=1e-9)
    UtU = (U.T @ U)[None]
    step, _ = _gradient_step(mu, V[None], UtU @ V[None], (U.T @ A)[None], UtU)
    np.testing.assert_allclose(step[0], V * (U.T @ A) / (U.T @ U @ V), rtol=1e-9)


@pytest.mark.parametrize("cls", [Felb, FelbMU])
def test_factors_become_binary_as_lambda_grows(cls):
    data = load_boolean("synthetic-boolean", noise=0.1, n_clients=4, rows=200, cols=60, tiles=3)
    model = cls(rank=3, rate=1.5, rate_counter="local_step", rounds=12).fit(data)
    gaps = model.history_.column("integrality_gap")
    U, V_hat = model.factors()
    assert gaps[-1] < 1e-8 < gaps[1]
    assert np.all(np.minimum(abs(U), abs(U - 1)) < 1e-6)
    assert np.all(np.minimum(abs(V_hat), abs(V_hat - 1)) < 1e-6)


def test_lambda_schedule_counters():
    data = load_boolean("synthetic-boolean", n_clients=2, rows=20, cols=10, tiles=2)
    for counter, t in (("local_step", 6), ("round", 2)):
        model = Felb(rank=2, local_steps=3, rate_counter=counter, lam=0.1, rate=1.05, rounds=2)
        assert np.isclose(model.fit(data).history_.last("lambda_t"), 0.1 * 1.05**t)
    capped = Felb(rank=2, rate=1e9, lam_max=1e3, rate_counter="local_step", rounds=1)
    assert capped.fit(data).history_.last("lambda_t") == pytest.approx(1e3)


def test_history_columns():
    data = load_boolean("synthetic-boolean", noise=0.1, n_clients=4, rows=200, cols=50, tiles=3)
    hist = FelbMU(rank=3, dp_mechanism="gaussian", dp_epsilon=1.0, rounds=3).fit(data).history_
    for col in ("loss", "rmsd", "f1", "f1_signal", "integrality_gap", "bytes_up", "seconds"):
        assert col in hist.columns
    eps = hist.column("dp_epsilon")
    assert eps[0] == 0.0 and np.all(np.diff(eps) > 0)
    assert hist.last("bytes_up") == 3 * 4 * 3 * 50 * 8


def test_partial_participation_touches_only_the_sampled_clients():
    data = load_boolean("synthetic-boolean", n_clients=5, rows=100, cols=30, tiles=2)
    U0 = run(VARIANTS[0], data, [], seed=0, rank=2).clients.state.U
    sim = run(VARIANTS[0], data, [[1, 3]], seed=0, rank=2)
    changed = [not np.array_equal(U0[c], sim.clients.state.U[c]) for c in range(5)]
    assert changed == [False, True, False, True, False]
    assert sim.history.last("bytes_up") == 2 * 2 * 30 * 8


def test_felb_recovers_clean_tiles():
    data = load_boolean("synthetic-boolean", noise=0.0, n_clients=4, rows=400, cols=100, tiles=3)
    model = FelbMU(rank=3, rounds=40).fit(data)
    assert model.history_.last("f1_signal") > 0.9


def test_felb_refuses_rating_data(tiny_federated):

    with pytest.raises(DataError, match="Boolean"):
        Felb(rounds=1).fit(tiny_federated()[0])


def test_sharpened_target_is_the_hamming_loss_on_binary_factors():
    """``||(1+2c) A - c - B||^2 = c^2 n m + (1+2c) Hamming(A, B)`` for binary ``A``, ``B``."""
    rng = np.random.default_rng(3)
    A = (rng.random((30, 20)) < 0.4).astype(float)
    for _ in range(5):
        B = ((rng.random((30, 4)) < 0.3).astype(float) @ (rng.random((4, 20)) < 0.3) > 0) * 1.0
        hamming = np.abs(A - B).sum()
        for c in (0.0, 0.5, 2.0):
            loss = np.sum(((1 + 2 * c) * A - c - B) ** 2)
            assert loss == pytest.approx(c**2 * A.size + (1 + 2 * c) * hamming)


def test_sharpen_keeps_tiles_at_high_noise():
    """At 40% XOR noise the plain least-squares fit collapses to zeros; sharpen does not."""
    data = load_boolean(
        "synthetic-boolean", noise=0.4, n_clients=4, seed=0, rows=400, cols=200, tiles=4
    )
    f1 = {}
    for c in (0.0, 1.0):
        model = FelbMU(rank=4, sharpen=c, sharpen_after=10, rounds=30).fit(data)
        f1[c] = model.history_.last("f1_signal")
    assert f1[1.0] > f1[0.0] + 0.1

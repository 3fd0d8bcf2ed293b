"""User-level DP on summed uploads: the accountant, clipping, the noise, the refusal of runs
over budget (fedmc.privacy.accounting, fedmc.privacy.gaussian)."""

from __future__ import annotations

import dp_accounting
import numpy as np
import pytest
from dp_accounting import pld, rdp
from scipy import stats

from fedmc.algorithms.fedmc_admm import PAPER as FEDMC_ADMM
from fedmc.algorithms.fedmc_admm import RATED as FEDMC_ADMM_RATED
from fedmc.algorithms.registry import spec
from fedmc.audit.boundary import record_boundary
from fedmc.core.uploads import RowPatch, Stacked, sum_uploads
from fedmc.errors import ConfigError
from fedmc.federation.loop import Rounds
from fedmc.federation.sampling import make_sampler
from fedmc.privacy.accounting import ORDERS, Plan, UserDP, calibrate, epsilon
from fedmc.privacy.gaussian import add_noise, clip_uploads, squared_norms


@pytest.mark.parametrize(("q", "noise", "rounds", "setup", "scale"),
                         [(0.01, 1.0, 1000, False, 1.0), (0.1, 2.0, 100, True, 1.0),
                          (0.1, 1.0, 50, True, 4.0), (1.0, 1.0, 1, False, 1.0)])
def test_epsilon_is_dp_accountings_rdp_and_bounds_its_pld(q, noise, rounds, setup, scale):
    """The plan's epsilon is dp_accounting's RDP epsilon of the set-up Gaussian composed with the
    Poisson-subsampled Gaussian rounds, and lies within 20% above the tighter PLD epsilon."""
    round_event = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(noise))
    events = [dp_accounting.GaussianDpEvent(scale * noise)] if setup else []
    events.append(dp_accounting.SelfComposedDpEvent(round_event, rounds))
    expected = rdp.RdpAccountant(list(ORDERS)).compose(
        dp_accounting.ComposedDpEvent(events)).get_epsilon(1e-6)
    tight = pld.PLDAccountant().compose(dp_accounting.ComposedDpEvent(events)).get_epsilon(1e-6)
    got = epsilon(Plan(rounds, q, setup, scale), noise, 1e-6)
    assert got == pytest.approx(expected, rel=1e-12)
    assert tight <= got <= 1.2 * tight


def test_epsilon_grows_with_rounds_and_starts_at_the_setup():
    plan = Plan(20, 0.1, True)
    eps = [epsilon(plan, 1.5, 1e-6, k) for k in range(21)]
    assert eps[0] == pytest.approx(dp_accounting.rdp.RdpAccountant(list(ORDERS)).compose(
        dp_accounting.GaussianDpEvent(1.5)).get_epsilon(1e-6))
    assert np.all(np.diff(eps) > 0) and eps[-1] == epsilon(plan, 1.5, 1e-6)
    assert epsilon(Plan(5, 0.1, False), 1.5, 1e-6, 0) == 0.0
    assert epsilon(plan, 0.0, 1e-6) == np.inf


@pytest.mark.parametrize("target", [1.0, 8.0])
def test_calibrated_noise_is_the_smallest_within_budget(target):
    plan = Plan(50, 0.1, True)
    noise = calibrate(plan, target, 1e-6)
    assert epsilon(plan, noise, 1e-6) <= target < epsilon(plan, noise * 0.995, 1e-6)


def test_noise_over_budget_is_refused():
    plan = Plan(50, 0.1, False)
    with pytest.raises(ConfigError, match="over the budget"):
        UserDP(clip=1.0, epsilon=1.0, noise=0.5).multiplier(plan)
    # 50 rounds at noise 0.5 spend about 21 amplified, about 212 without: the budget of 100
    # holds against outsiders, not against the server, which knows the cohorts
    assert UserDP(clip=1.0, epsilon=100.0, noise=0.5,
                  against="outsiders").multiplier(plan) == 0.5
    with pytest.raises(ConfigError, match="against server.*dp.against=outsiders"):
        UserDP(clip=1.0, epsilon=100.0, noise=0.5).multiplier(plan)


def _exact_gaussian_epsilon(multipliers: list[float], delta: float) -> float:
    """Brute force: the exact epsilon at ``delta`` of Gaussian mechanisms of these noise
    multipliers composed (a mu-GDP mechanism, mu = sqrt(sum 1 / z^2): Dong, Roth and Su
    2022, Corollary 2.13 and Eq. (6)), by bisection on its delta(epsilon)."""
    mu = np.sqrt(np.sum(np.asarray(multipliers) ** -2.0))

    def delta_of(eps: float) -> float:
        return float(np.exp(stats.norm.logcdf(-eps / mu + mu / 2))
                     - np.exp(eps + stats.norm.logcdf(-eps / mu - mu / 2)))

    low, high = 0.0, 1000.0
    for _ in range(200):
        mid = 0.5 * (low + high)
        low, high = (mid, high) if delta_of(mid) > delta else (low, mid)
    return high


@pytest.mark.parametrize(("rounds", "q", "scale", "target"),
                         [(10, 0.1, 0.5, 8.0), (90, 0.1, 0.5, 8.0), (3, 1.0, 1.0, 1.0)])
def test_a_budget_against_the_server_is_its_gaussians_composed_without_amplification(
        rounds, q, scale, target):
    """Against the server (the default) the noise is calibrated as if a user were in every
    round's cohort, which the server knows: the set-up and ``rounds`` Gaussian mechanisms,
    whose exact composition (brute force) the accounted epsilon bounds from above, tightly;
    against outsiders the sampling amplifies, so less noise meets the same budget."""
    plan = Plan(rounds, q, True, scale)
    noise = UserDP(clip=1.0, epsilon=target).multiplier(plan)
    assert noise == calibrate(plan.known_cohorts(), target, 1e-6)
    exact = _exact_gaussian_epsilon([scale * noise] + [noise] * rounds, 1e-6)
    assert exact <= epsilon(plan.known_cohorts(), noise, 1e-6) <= target <= 1.12 * exact
    outsiders = UserDP(clip=1.0, epsilon=target, against="outsiders").multiplier(plan)
    assert (outsiders < noise) if q < 1 else (outsiders == noise)


def _brute_force(stacked: Stacked) -> np.ndarray:
    """Every client's upload as one dense array."""
    out = []
    for k in range(stacked.n_clients):
        w = np.zeros(stacked.n_clients)
        w[k] = 1.0
        out.append(stacked.weighted_sum(w))
    return np.array(out)


def _stacks(rng):
    s, n, r = 5, 7, 3
    ptr = np.array([0, 2, 2, 5, 6, 9])
    index = np.concatenate([rng.choice(n, c, replace=False) for c in np.diff(ptr)])
    rows = RowPatch(ptr, index, rng.normal(size=(len(index), r)))
    shared = np.broadcast_to(rng.normal(size=(n, r)), (s, n, r))
    return [Stacked((n, r), dense=rng.normal(size=(s, n, r))), Stacked((n, r), rows=rows),
            Stacked((n, r), dense=shared, rows=rows),
            Stacked((n, r), dense=rng.normal(size=(s, n, r)), rows=rows),
            Stacked((n, r), rows=rows, scale=rng.random(s))]


@pytest.mark.parametrize("form", range(5))
def test_squared_norms_match_the_dense_uploads(form):
    stacked = _stacks(np.random.default_rng(form))[form]
    dense = _brute_force(stacked)
    np.testing.assert_allclose(squared_norms(stacked), (dense**2).sum(axis=(1, 2)), rtol=1e-12)


def test_clipping_bounds_every_clients_whole_upload_and_keeps_its_direction():
    rng = np.random.default_rng(3)
    a, b = _stacks(rng)[2], Stacked((7, 1), rows=RowPatch(
        np.array([0, 1, 1, 3, 4, 5]), np.array([0, 1, 2, 3, 4]), np.ones((5, 1))))
    before = np.concatenate([_brute_force(s).reshape(5, -1) for s in (a, b)], axis=1)
    norms = np.linalg.norm(before, axis=1)
    clip = float(np.median(norms))
    clipped = clip_uploads({"a": a, "b": b}, clip)
    after = np.concatenate([_brute_force(clipped[k]).reshape(5, -1) for k in "ab"], axis=1)
    np.testing.assert_allclose(np.linalg.norm(after, axis=1), np.minimum(norms, clip),
                               rtol=1e-12)
    np.testing.assert_allclose(after * norms[:, None],
                               before * np.linalg.norm(after, axis=1)[:, None], atol=1e-12)


def test_gaussian_sum_has_the_stated_scale():
    zero = sum_uploads([], {"a": (100, 20), "b": (10000,)})
    noised = add_noise(zero, 0.3, np.random.default_rng(0))
    draws = np.concatenate([v.ravel() for v in noised.arrays.values()])
    assert stats.kstest(draws / 0.3, "norm").pvalue > 1e-3


RATED = {"consensus": "rated", "inner": 3}


@pytest.mark.parametrize(("name", "setup_clip", "params", "driver"), [
    ("fedmc-admm", None, RATED, "batched"),
    ("fedmc-admm", 0.7, {**RATED, "weights": "sqrt-items", "dual_init": "zeros"}, "batched"),
    ("fedmavg", None, {}, "batched"), ("rfrec", None, {}, "batched")])
def test_the_server_gets_the_clipped_sum_plus_noise_of_the_stated_scale(name, setup_clip,
                                                                          params, driver,
                                                                          tiny_federated):
    """Per exchange, the server's input minus the sum of the clipped uploads is Gaussian with
    standard deviation noise * clip in every entry; in the set-up exchange the clip is the
    set-up clip and the noise is also times the set-up scale (a run with clipping that binds):
    for FedMC-ADMM's sparse rows (with client weights, the set-up upload is the weighted
    counts, of norm 1 > 0.7), FedMAvg's dense W_i and RFRec's shared columns plus rows alike.
    (The secure sum's Skellam noise: ``tests/test_skellam.py``.)"""
    data = tiny_federated(m=40, n=30, p=40, density=0.3, seed=1)[0]
    entry = spec(name)
    cfg = entry.Config(rank=4, **params)
    algorithm = entry.algorithm_for(cfg)
    dp = UserDP(clip=0.05, noise=0.8, setup_scale=3.0, setup_clip=setup_clip,
                reproducible=True)  # the draws from the seed: the test repeats exactly
    records, _ = record_boundary(
        algorithm, cfg, data, driver=driver,
        rounds=Rounds(make_sampler(40, sampling="bernoulli", participation=0.3), 8, dp=dp))
    residuals, norms = [], []
    for rec in (r for r in records if len(r.message.upload)):
        expected = {k: np.zeros_like(v) for k, v in rec.summed.arrays.items()}
        for uploads, weights in rec.uploads:
            norms.append(np.sqrt(sum(squared_norms(s) for s in uploads.values())))
            for name, stacked in clip_uploads(uploads, dp.clip_of(rec.message.phase)).items():
                expected[name] += stacked.weighted_sum(weights)
        scale = (dp.setup_scale * dp.clip_of("setup") / dp.clip
                 if rec.message.phase == "setup" else 1.0)
        residuals += [(rec.summed[k] - expected[k]).ravel() / scale for k in expected]
    assert np.mean(np.concatenate(norms) > dp.clip) > 0.5, "clipping should bind"
    z = np.concatenate(residuals) / (dp.noise * dp.clip)
    assert stats.kstest(z, "norm").pvalue > 1e-3
    assert abs(z.std() - 1.0) < 4.0 / np.sqrt(2 * len(z)), "noise scale"


def test_a_run_over_its_budget_exits_2(monkeypatch, capsys, tmp_path, ratings_csv, invoke):
    code, _, err = invoke(monkeypatch, capsys, "run", "--ratings", ratings_csv, "--clients", 8,
                          "--rounds", 50, "--sampling", "bernoulli", "--participation", 0.5,
                          "--dp-epsilon", 1, "--dp-noise", 0.3, "--dp-clip", 1, "--dp-unit",
                          "client",
                          "--rating-scale", "1,5", "--out", tmp_path / "o", "-q")
    assert code == 2 and "over the budget" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_a_run_reports_its_epsilon(monkeypatch, capsys, tmp_path, ratings_csv, invoke):
    import csv
    import json

    code, _, _ = invoke(monkeypatch, capsys, "run", "--ratings", ratings_csv, "--clients", 8,
                        "--rounds", 3, "--sampling", "bernoulli", "--participation", 0.5,
                        "--dp-epsilon", 4, "--dp-clip", 1, "--dp-unit", "client",
                        "--rating-scale", "1,5",
                        "--out", tmp_path, "-q")
    assert code == 0
    eps = [float(r["epsilon"]) for r in csv.DictReader(open(tmp_path / "history.csv"))]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert np.all(np.diff(eps) > 0) and summary["epsilon"] == eps[-1] and eps[-1] <= 4.0
    assert summary["privacy"]["unit"] == "client" and summary["privacy"]["private"]


def test_a_setup_nobody_uploads_in_is_neither_noised_nor_accounted(tiny_federated):
    from fedmc.sim import simulate

    data = tiny_federated(m=20, n=10, p=20, density=0.4, seed=3)[0]
    cfg = FEDMC_ADMM.Config(rank=2, dual_init="zeros")
    sampler = make_sampler(20, sampling="bernoulli", participation=0.5)
    dp = UserDP(clip=0.5, noise=1.0, setup_scale=5.0, reproducible=True)  # keeps its metrics
    private = simulate(FEDMC_ADMM, cfg, data, rounds=Rounds(sampler, 0, dp=dp)).history
    plain = simulate(FEDMC_ADMM, cfg, data, rounds=Rounds(sampler, 0)).history
    assert private.column("epsilon")[0] == 0.0
    np.testing.assert_array_equal(private.column("test_rmse"), plain.column("test_rmse"))
    paper = simulate(FEDMC_ADMM, FEDMC_ADMM.Config(rank=2), data,
                     rounds=Rounds(sampler, 0, dp=dp)).history
    assert paper.column("epsilon")[0] == pytest.approx(epsilon(Plan(0, 0.5, True, 5.0), 1.0,
                                                               1e-6))


def test_a_run_with_a_set_up_clip_spends_what_dp_accounting_composes(tiny_federated):
    """The set-up release (its own clip, noise ``setup_scale * noise * setup_clip``) is one
    Gaussian mechanism of multiplier ``setup_scale * noise``, whatever its clip; each round a
    Poisson-subsampled Gaussian of multiplier ``noise``: the run's epsilon column is their
    composition by dp_accounting's RDP accountant, after the set-up and after every round."""
    from fedmc.sim import simulate

    data = tiny_federated(m=30, n=12, p=30, density=0.4, seed=2)[0]
    cfg = FEDMC_ADMM_RATED.Config(rank=2, consensus="rated", weights="sqrt-items",
                                  dual_init="zeros")
    dp = UserDP(clip=0.3, noise=0.9, setup_scale=2.0, setup_clip=1.0)
    sampler = make_sampler(30, sampling="bernoulli", participation=0.2)
    eps = simulate(FEDMC_ADMM_RATED, cfg, data,
                   rounds=Rounds(sampler, 4, dp=dp)).history.column("epsilon")
    for k, got in enumerate(eps):
        events = [dp_accounting.GaussianDpEvent(2.0 * 0.9)]
        if k:
            events.append(dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(
                0.2, dp_accounting.GaussianDpEvent(0.9)), k))
        expected = rdp.RdpAccountant(list(ORDERS)).compose(
            dp_accounting.ComposedDpEvent(events)).get_epsilon(1e-6)
        assert got == pytest.approx(expected, rel=1e-9)
    # the server knows the cohorts: a user in each of them spent the set-up's and k rounds'
    # Gaussian mechanisms, no amplification (brute force: their exact composition)
    server = simulate(FEDMC_ADMM_RATED, cfg, data,
                      rounds=Rounds(sampler, 4, dp=dp)).history.column("epsilon_server")
    for k, got in enumerate(server):
        exact = _exact_gaussian_epsilon([2.0 * 0.9] + [0.9] * k, 1e-6)
        assert exact <= got <= 1.2 * exact
        assert got > eps[k] if k else got == eps[k]  # the set-up: everyone, no sampling


def test_cyclic_participation_takes_every_client_once_a_cycle_in_a_secret_order():
    """``--sampling cyclic``: round k takes band (k - 1) mod cycle of an order drawn once a
    run (from the server's stream, no draw a round): every client once in every cycle, bands
    of sizes within one of each other, another run's order another."""
    from fedmc.federation.sampling import cycle_of, started

    sampler = make_sampler(23, sampling="cyclic", participation=0.25)
    assert cycle_of(sampler) == 4 and make_sampler(23, 6, "cyclic").cycle == 4
    run = started(sampler, np.random.default_rng(0))
    rng = np.random.default_rng(1)
    state = rng.bit_generator.state
    cohorts = [run.sample(rng, k) for k in range(1, 13)]
    assert rng.bit_generator.state == state  # nothing drawn a round
    for cycle in range(3):
        bands = cohorts[4 * cycle:4 * cycle + 4]
        assert np.array_equal(np.sort(np.concatenate(bands)), np.arange(23))
        assert {len(b) for b in bands} <= {5, 6}
    assert cohorts[0].tolist() != started(sampler, np.random.default_rng(2)).sample(rng, 1).tolist()


@pytest.mark.parametrize("rounds", [1, 4, 5, 12])
def test_cyclic_participation_is_accounted_over_the_rounds_a_user_takes_part_in(
        rounds, tiny_federated):
    """A user in one of every 4 rounds: after k rounds it took part in ceil(k / 4), and the
    budget (against the server, which knows the cohorts, and outsiders alike) is the set-up's
    and those rounds' Gaussian mechanisms, which the accounted epsilon bounds from above, within
    12% of their exact composition (brute force); every round's history says so."""
    from fedmc.sim import simulate

    data = tiny_federated(m=30, n=10, p=30, density=0.4, seed=2)[0]
    cfg = FEDMC_ADMM_RATED.Config(rank=2, consensus="rated", inner=2)
    dp = UserDP(clip=0.5, noise=0.9, setup_scale=2.0, reproducible=True)
    sampler = make_sampler(30, sampling="cyclic", participation=0.25)
    history = simulate(FEDMC_ADMM_RATED, cfg, data, rounds=Rounds(sampler, rounds, dp=dp)).history
    for k, (outsiders, server) in enumerate(zip(history.column("epsilon"),
                                                history.column("epsilon_server"),
                                                strict=True)):
        exact = _exact_gaussian_epsilon([2.0 * 0.9] + [0.9] * -(-k // 4), 1e-6)
        assert outsiders == server and exact <= server <= 1.12 * exact


def test_a_private_search_composes_the_rounds_a_user_takes_part_in():
    """A search's run event (:func:`fedmc.privacy.selection.run_event`) composes a cyclic
    plan's participations, as a run's account does, not its rounds."""
    from fedmc.privacy.selection import search_epsilon

    cyclic, every = Plan(12, 1.0, True, 0.5, cycle=4), Plan(3, 1.0, True, 0.5)
    assert search_epsilon(cyclic, 2.0, 0.5, None, 1.0, 1e-6) == search_epsilon(
        every, 2.0, 0.5, None, 1.0, 1e-6)

"""The Laplace LDP mechanism of Eq. (9): clip, noise scale, epsilon, exact summed noise."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from fedmc.errors import ConfigError
from fedmc.privacy.laplace import LaplaceMechanism


def test_epsilon_is_two_delta_over_s():
    assert LaplaceMechanism(0.2, 0.04).epsilon == pytest.approx(10.0)
    assert LaplaceMechanism(0.2, 0.06).epsilon == pytest.approx(20 / 3)


def test_clip_holds_and_keeps_inner_entries():
    mech = LaplaceMechanism(0.3, 1.0)
    X = np.random.default_rng(0).normal(scale=2.0, size=(50, 7))
    C = mech.clip(X)
    assert C.min() == -0.3 and C.max() == 0.3
    inside = np.abs(X) <= 0.3
    assert np.array_equal(C[inside], X[inside])
    assert np.array_equal(C[~inside], 0.3 * np.sign(X[~inside]))


def test_perturb_is_clip_plus_independent_laplace_noise():
    mech = LaplaceMechanism(0.3, 0.5)
    X = np.random.default_rng(0).normal(scale=2.0, size=(40, 5))
    noisy = mech.perturb(X, np.random.default_rng(7))
    expected = mech.noise(X.shape, np.random.default_rng(7))
    assert np.allclose(noisy - mech.clip(X), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("s", [0.04, 0.5, 3.0])
def test_noise_has_scale_s(s):
    """E|Laplace(0, s)| = s and Var = 2 s^2; 200k draws pin both within a few standard errors
    (a noise of standard deviation s, say, would have mean |.| = s / sqrt(2) and fail)."""
    n = 200_000
    z = LaplaceMechanism(1.0, s).perturb(np.zeros(n), np.random.default_rng(1))
    assert abs(np.mean(np.abs(z)) - s) < 5 * s / np.sqrt(n)  # sd of |Laplace| is s
    assert abs(np.mean(z)) < 5 * np.sqrt(2) * s / np.sqrt(n)
    assert np.var(z) == pytest.approx(2 * s * s, rel=0.03)
    assert stats.kstest(z, "laplace", args=(0.0, s)).pvalue > 1e-4


@pytest.mark.parametrize("n", [1, 3, 40])
def test_summed_noise_has_the_distribution_of_n_summed_draws(n):
    mech = LaplaceMechanism(0.2, 0.7)
    draws = 40_000
    summed = mech.summed_noise(n, (draws,), np.random.default_rng(2))
    direct = mech.noise((n, draws), np.random.default_rng(3)).sum(axis=0)
    assert np.var(summed) == pytest.approx(2 * n * 0.49, rel=0.05)
    assert stats.ks_2samp(summed, direct).pvalue > 1e-4
    assert not np.any(mech.summed_noise(0, (3,), np.random.default_rng(0)))


def test_perturb_sum_adds_the_summed_noise():
    mech = LaplaceMechanism(0.2, 0.7)
    base = np.arange(6.0).reshape(2, 3)
    out = mech.perturb_sum(base, 5, np.random.default_rng(4))
    expected = mech.summed_noise(5, (2, 3), np.random.default_rng(4))
    assert np.allclose(out - base, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize(("delta", "s"), [(0.0, 1.0), (1.0, 0.0), (-1.0, 1.0)])
def test_invalid_parameters(delta, s):
    with pytest.raises(ConfigError):
        LaplaceMechanism(delta, s)


def test_a_users_ldp_epsilon_is_the_worst_log_likelihood_ratio_composed_over_uploads():
    """Two users whose clamped uploads sit at opposite corners ``+delta`` and ``-delta`` are
    the worst neighbours: at an output equal to one of them the Laplace log-likelihood ratio of
    one upload is ``2 delta entries / s``; ``uploads`` uploads add up, and dp_accounting's
    Laplace accounting agrees."""
    import dp_accounting

    mech = LaplaceMechanism(0.2, 0.5)
    entries, uploads = 6, 3
    x, x2 = np.full(entries, 0.2), np.full(entries, -0.2)
    ratio = np.sum(np.abs(x - x2) - np.abs(x - x)) / mech.s  # output y = x
    assert mech.user_epsilon(entries, 1) == pytest.approx(ratio)
    assert mech.user_epsilon(entries, uploads) == pytest.approx(uploads * ratio)
    accountant = dp_accounting.pld.PLDAccountant()
    accountant.compose(dp_accounting.LaplaceDpEvent(mech.s / (2 * 0.2 * entries)), uploads)
    assert accountant.get_epsilon(1e-9) <= mech.user_epsilon(entries, uploads) + 1e-6

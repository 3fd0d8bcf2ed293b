"""Client samplers: sizes, inclusion probabilities (Assumption 4.3) and dropouts."""

from __future__ import annotations

import numpy as np
import pytest

from fedmc.errors import ConfigError
from fedmc.federation.sampling import BernoulliSampler, DropoutSampler, UniformSampler


def inclusion_frequency(sampler, n_draws=4000, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    counts = np.zeros(sampler.n_clients)
    for _ in range(n_draws):
        drawn = sampler.sample(rng)
        assert np.all(np.diff(drawn) > 0)  # sorted, distinct
        counts[drawn] += 1
    return counts / n_draws


def test_uniform_draws_fixed_size_with_equal_probability():
    s = UniformSampler(20, 5)
    assert len(s.sample(np.random.default_rng(1))) == 5
    freq = inclusion_frequency(s)
    # binomial standard error sqrt(.25 * .75 / 4000) ~ 0.0068
    assert np.all(np.abs(freq - 0.25) < 0.03)
    assert np.allclose(s.probabilities, 0.25)


def test_bernoulli_matches_per_client_probabilities():
    p = np.linspace(0.05, 0.95, 10)
    freq = inclusion_frequency(BernoulliSampler(p))
    assert np.all(np.abs(freq - p) < 0.03)


def test_dropout_thins_the_draw():
    freq = inclusion_frequency(DropoutSampler(UniformSampler(10, 10), 0.3))
    assert np.all(np.abs(freq - 0.7) < 0.03)


@pytest.mark.parametrize(
    "make",
    [lambda: UniformSampler(5, 6), lambda: UniformSampler(5, 0),
     lambda: BernoulliSampler(np.array([0.5, 0.0])),
     lambda: DropoutSampler(UniformSampler(5, 2), 1.0)],
)
def test_bad_settings(make):
    with pytest.raises(ConfigError):
        make()

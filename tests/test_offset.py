"""FedMC-ADMM's item-bias offset: the set-up gives the item-bias baseline's biases, the factors
fit the ratings less them, the published model adds them back; under DP the server reads only
the sums an exchange's phase can carry."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fedmc.algorithms.fedmc_admm import RATED as ADMM
from fedmc.algorithms.fedmc_admm import FedMCADMMConfig
from fedmc.algorithms.item_bias import ALGORITHM as ITEM_BIAS
from fedmc.algorithms.item_bias import ItemBiasConfig
from fedmc.core.shard import CSR
from fedmc.federation.loop import Rounds
from fedmc.federation.sampling import make_sampler
from fedmc.privacy.accounting import UserDP
from fedmc.sim import simulate
from fedmc.testing import record_boundary

RATED = {"rank": 2, "consensus": "rated", "dual_init": "zeros", "weights": "sqrt-items",
         "offset": "item-bias", "offset_lam": 1.5, "offset_lam_user": 2.0, "count_scale": 0.4}


@pytest.fixture(scope="module")
def one_user(tiny_federated):
    return tiny_federated(m=14, n=8, p=14, density=0.5, seed=5)[0]


def test_the_offset_is_the_item_bias_baseline(one_user):
    """One user per client: the set-up's b0 equals the item-bias model's set-up biases with the
    same weights and ridges, and the published V adds b0 to the learned item biases."""
    cfg = FedMCADMMConfig(**RATED)
    sim = simulate(ADMM, cfg, one_user,
                   rounds=Rounds(make_sampler(one_user.n_clients, active=4), 3))
    base = simulate(ITEM_BIAS, ItemBiasConfig(lam_item=1.5, lam_user=2.0, count_scale=0.4),
                    one_user, rounds=Rounds(make_sampler(one_user.n_clients), 0))
    np.testing.assert_allclose(sim.server.b0, base.server.b, atol=1e-12)
    published = ADMM.model(cfg, sim.server)["V"]
    bias = cfg.layout.rank + 1
    np.testing.assert_allclose(published[:, bias], sim.server.V[:, bias] + sim.server.b0)
    np.testing.assert_array_equal(np.delete(published, bias, 1), np.delete(sim.server.V, bias,
                                                                           1))


def test_the_factors_fit_the_ratings_less_the_offset(one_user):
    """A run with the offset equals, round for round, a run without it on the ratings less
    b0, once the same V^0 and set-up counts are given (the offset moves the data, not the
    algorithm)."""
    cfg = FedMCADMMConfig(**RATED)
    sim = simulate(ADMM, cfg, one_user,
                   rounds=Rounds(make_sampler(one_user.n_clients, active=4), 4))
    tr = one_user.train
    shifted = dataclasses.replace(one_user, train=CSR(tr.indptr, tr.indices,
                                                      tr.values - sim.server.b0[tr.indices]))
    plain = simulate(ADMM, FedMCADMMConfig(**{**RATED, "offset": "none"}), shifted,
                     rounds=Rounds(make_sampler(one_user.n_clients, active=4), 4))
    np.testing.assert_allclose(sim.server.V, plain.server.V, atol=1e-10)


def test_under_dp_the_counts_come_from_the_setup_alone(one_user):
    cfg = FedMCADMMConfig(**RATED)
    dp = UserDP(clip=0.1, noise=3.0, setup_clip=0.5)
    records, sim = record_boundary(
        ADMM, cfg, one_user, rounds=Rounds(
            make_sampler(one_user.n_clients, sampling="bernoulli", participation=0.5), 3, dp=dp))
    setup = records[0].summed
    assert records[0].message.phase == "setup"
    np.testing.assert_allclose(sim.server.counts, setup["count"][:, 0] / cfg.count_scale)
    assert all(np.any(r.summed["count"] != 0) for r in records[1:])  # noise the server skips

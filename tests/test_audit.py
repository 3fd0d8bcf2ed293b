"""The curious server's rated-item-set attack (fedmc.privacy.audit) on a tiny federation."""

from __future__ import annotations

import numpy as np

from fedmc.algorithms.fedmc_admm import ALGORITHM
from fedmc.algorithms.fedmc_admm.rated import UPLOAD
from fedmc.privacy.audit import observations, rated_sets, set_scores
from fedmc.sim.sampling import make_sampler
from fedmc.testing import record_boundary
from tests.conftest import tiny_federated


def _truth(data):
    tr = data.train
    return {c: tr.indices[tr.indptr[c]:tr.indptr[c + 1]] for c in range(data.n_clients)}


def test_plain_uploads_give_the_exact_rated_sets_and_sums_only_their_union():
    data = tiny_federated(m=30, n=25, p=30, density=0.15, seed=2)[0]
    cfg = ALGORITHM.Config(rank=2, consensus="rated", inner=3)
    records, _ = record_boundary(ALGORITHM, cfg, data, lambda: make_sampler(30, 6), rounds=5)
    truth = _truth(data)
    plain = set_scores(rated_sets(list(observations(records, "plain", UPLOAD))), truth, 25)
    assert plain["precision"] == plain["recall"] == 1.0 and plain["clients"] == 30
    sums = list(observations(records, "secagg", UPLOAD))
    for o in sums:
        if o.round > 0:
            union = np.unique(np.concatenate([truth[c] for c in o.clients]))
            np.testing.assert_array_equal(rated_sets([o])[o.clients[0]], union)
    cohort = set_scores(rated_sets(sums), truth, 25)
    assert cohort["recall"] == 1.0 and cohort["precision"] < 1.0

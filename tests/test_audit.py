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


def test_setup_uploads_of_one_user_clients_give_their_exact_ratings():
    """The closed form of the set-up dual (Y_j^0 parallel to u) recovers every rating."""
    from fedmc.data import FederatedData, Ratings
    from fedmc.data.normalize import Normalizer
    from fedmc.privacy.audit import decode_setup

    rng = np.random.default_rng(5)
    users, items = np.nonzero(rng.random((12, 40)) < 0.3)
    ratings = Ratings(users.astype(np.int32), items.astype(np.int32),
                      rng.integers(1, 6, len(users)).astype(float), 12, 40)
    data = FederatedData.build(ratings, ratings.subset(np.arange(0, len(users), 7)),
                               np.arange(12, dtype=np.int32), Normalizer())
    cfg = ALGORITHM.Config(rank=3, consensus="rated", dual_init="paper", beta=0.6)
    records, _ = record_boundary(ALGORITHM, cfg, data, lambda: make_sampler(12, 3), rounds=1)
    setup = records[0]
    V0 = setup.message.arrays["V"]
    tr = data.train
    for o in observations([setup], "plain", UPLOAD):
        c = int(o.clients[0])
        rated = tr.indices[tr.indptr[c]:tr.indptr[c + 1]]
        got = decode_setup(o.array[rated] - cfg.beta * V0[rated], V0[rated], 1.0 / 40,
                           np.arange(1.0, 6.0))
        np.testing.assert_array_equal(got, tr.values[tr.indptr[c]:tr.indptr[c + 1]])


def test_fedmavg_uploads_give_the_exact_rated_sets_through_the_broadcast():
    """FedMAvg's unrated rows are the broadcast V times one factor per client; RFRec's are the
    same for every client of a round (the cohort median shows them)."""
    from fedmc.algorithms import get_algorithm
    from fedmc.privacy.audit import broadcast_outliers, cohort_outliers

    data = tiny_federated(m=30, n=25, p=30, density=0.15, seed=2)[0]
    truth = _truth(data)
    for name in ("fedmavg", "rfrec"):
        algorithm = get_algorithm(name).algorithm
        records, _ = record_boundary(algorithm, algorithm.Config(rank=2), data,
                                     lambda: make_sampler(30, 8), rounds=3)
        upload = next(iter(records[-1].summed.arrays))
        obs = list(observations(records, "plain", upload))
        sent = {r.message.round: next(iter(r.message.arrays.values())) for r in records}
        guesses = (broadcast_outliers(obs, sent) if name == "fedmavg"
                   else cohort_outliers(obs, intersect=True))
        scores = set_scores(guesses, truth, 25)
        assert scores["recall"] == 1.0 and scores["precision"] > 3 * scores["base_rate"], name
        if name == "fedmavg":
            assert scores["precision"] == 1.0

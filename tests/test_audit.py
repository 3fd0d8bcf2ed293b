"""The curious server's attacks (fedmc.audit.attacks) on tiny federations: rated-item sets
from every algorithm's uploads, and the decoders of one user's ratings checked against the
truth (and, for FedMAvg, against a plain re-computation of the client's steps)."""

from __future__ import annotations

import numpy as np
import pytest

from fedmc.algorithms.fedmc_admm import RATED
from fedmc.algorithms.fedmc_admm.rated.client import UPLOAD
from fedmc.algorithms.registry import spec
from fedmc.algorithms.rfrec.client import shared_uploads
from fedmc.audit import attacks as audit
from fedmc.audit.boundary import record_boundary
from fedmc.audit.run import rated_items
from fedmc.core.scale import Normalizer
from fedmc.data import FederatedData, Ratings
from fedmc.federation.loop import Rounds
from fedmc.federation.sampling import make_sampler

STARS = np.arange(1.0, 6.0)


def one_user_clients(m: int = 12, n: int = 40, seed: int = 5) -> FederatedData:
    """``m`` users, one per client, with integer ratings of about 30% of ``n`` items."""
    rng = np.random.default_rng(seed)
    users, items = np.nonzero(rng.random((m, n)) < 0.3)
    ratings = Ratings(users.astype(np.int32), items.astype(np.int32),
                      rng.integers(1, 6, len(users)).astype(float), m, n)
    return FederatedData.build(ratings, ratings.subset(np.arange(0, len(users), 7)),
                               np.arange(m, dtype=np.int32), Normalizer())


def _own(data: FederatedData, c: int) -> tuple[np.ndarray, np.ndarray]:
    tr = data.train
    return tr.indices[tr.indptr[c]:tr.indptr[c + 1]], tr.values[tr.indptr[c]:tr.indptr[c + 1]]


def test_plain_uploads_give_the_exact_rated_sets_and_sums_only_their_union(tiny_federated):
    data = tiny_federated(m=30, n=25, p=30, density=0.15, seed=2)[0]
    cfg = RATED.Config(rank=2, consensus="rated", inner=3)
    records, _ = record_boundary(RATED, cfg, data, rounds=Rounds(make_sampler(30, 6), 5))
    truth = rated_items(data)
    plain = audit.set_scores(audit.rated_sets(list(audit.observations(records, "plain", UPLOAD))),
                             truth, 25)
    assert plain["precision"] == plain["recall"] == 1.0 and plain["clients"] == 30
    sums = list(audit.observations(records, "secagg", UPLOAD))
    for o in sums:
        if o.round > 0:
            union = np.unique(np.concatenate([truth[c] for c in o.clients]))
            np.testing.assert_array_equal(audit.rated_sets([o])[o.clients[0]], union)
    cohort = audit.set_scores(audit.rated_sets(sums), truth, 25)
    assert cohort["recall"] == 1.0 and cohort["precision"] < 1.0


@pytest.mark.parametrize("name", ["fedmavg", "rfrec"])
def test_uploads_off_the_servers_reference_are_the_exact_rated_sets(name, tiny_federated):
    """FedMAvg's unrated rows are the broadcast V times one factor per client; RFRec's are the
    shared columns, which the server replays from the V̄ it sent (exactly, checked)."""
    data = tiny_federated(m=30, n=25, p=30, density=0.15, seed=2)[0]
    entry = spec(name)
    cfg = entry.Config(rank=2)
    algorithm = entry.algorithm_for(cfg)
    records, _ = record_boundary(algorithm, cfg, data, rounds=Rounds(make_sampler(30, 8), 3))
    sent = {r.message.round: r.message.arrays["V"] for r in records if r.message.round > 0}
    reference = sent
    if name == "rfrec":
        reference = dict(zip(sent, shared_uploads(cfg, list(sent.values())), strict=True))
    upload = next(iter(algorithm.upload_shapes(cfg, data.federation_info())))
    obs = list(audit.observations(records, "plain", upload))
    truth = rated_items(data)
    if name == "rfrec":
        for o in obs:
            unrated = np.setdiff1d(np.arange(25), truth[int(o.clients[0])])
            np.testing.assert_array_equal(o.array[unrated], reference[o.round][unrated])
    guesses = audit.rated_sets(obs, lambda o: reference[o.round], intersect=True)
    scores = audit.set_scores(guesses, truth, 25)
    assert scores["precision"] == scores["recall"] == 1.0 and scores["clients"] > 15


def test_setup_uploads_of_one_user_clients_give_their_exact_ratings():
    """The closed form of the set-up dual (Y_j^0 parallel to u) recovers every rating."""
    data = one_user_clients()
    cfg = RATED.Config(rank=3, consensus="rated", dual_init="paper", beta=0.6)
    records, _ = record_boundary(RATED, cfg, data, rounds=Rounds(make_sampler(12, 3), 1))
    setup = records[0]
    V0 = setup.message.arrays["V"]
    for o in audit.observations([setup], "plain", UPLOAD):
        rated, values = _own(data, int(o.clients[0]))
        got = audit.decode_rank_one(o.array[rated] - cfg.beta * V0[rated], V0[rated], 1.0 / 40,
                                    STARS)
        np.testing.assert_array_equal(got, values)


def test_a_first_visit_with_zero_duals_gives_the_exact_ratings():
    """Consensus on rated items, zero duals: the first visit's upload less beta (V^k - V^0)
    is 2 (m_j - u . v_j) u / (1 + |u|^2 / beta) on each rated item, without the column of V
    fixed to 1 (whose partner in u, the user's bias, the decoder searches too)."""
    data = one_user_clients()
    cfg = RATED.Config(rank=3, consensus="rated", dual_init="zeros", beta=0.6, inner=5)
    records, _ = record_boundary(RATED, cfg, data, rounds=Rounds(make_sampler(12, 4), 1))
    V0, V = records[0].message.arrays["V"], records[1].message.arrays["V"]
    for o in audit.observations(records[1:], "plain", UPLOAD):
        rated, values = _own(data, int(o.clients[0]))
        y = o.array[rated] - cfg.beta * (V[rated] - V0[rated])
        assert not y[:, cfg.layout.ones_col_v].any()
        got = audit.decode_rank_one(y, V[rated], 2.0, STARS, damping=1.0 / cfg.beta,
                                    hidden=cfg.layout.ones_col_v)
        np.testing.assert_array_equal(got, values)


def test_a_cohorts_sum_splits_into_its_members_exclusive_items_and_their_ratings():
    """SecAgg alone: in the sum of a cohort's first visits (zero duals, consensus on rated
    items) the rows of an item only one member rated are that member's, parallel to its u:
    grouped by direction they are each member's exclusive items, decoded exactly."""
    from fedmc.audit.targets.fedmc_admm import ADMMTarget

    data = one_user_clients(m=12, n=60)
    cfg = RATED.Config(rank=3, consensus="rated", dual_init="zeros", beta=0.6, inner=5)
    records, _ = record_boundary(RATED, cfg, data, rounds=Rounds(make_sampler(12, 4), 1))
    target = ADMMTarget(cfg, data, records, STARS)
    o = next(o for o in audit.observations(records, "secagg", UPLOAD) if o.round == 1)
    truth = rated_items(data)
    owner = {}
    for c in o.clients.tolist():
        for j in truth[c].tolist():
            owner[j] = -1 if j in owner else c  # -1: rated by several members
    rows = audit.guessed_rated(o.array)
    y = target.rank_one(o, o.array, rows, len(o.clients))
    groups = audit.parallel_groups(y)
    for g in groups:  # one member's exclusive items per group, every member with 3 or more
        assert len({owner[j] for j in rows[g].tolist()}) == 1 and owner[rows[g][0]] >= 0
    exclusive = {c: [j for j, k in owner.items() if k == c] for c in o.clients.tolist()}
    assert len(groups) == sum(len(items) >= 3 for items in exclusive.values()) >= 2
    assert_split_is_exact(data, target, o)


def assert_split_is_exact(data, target, o, least=6):
    """Every rating target.split decodes from o is the one its item's only rater gave (at
    least ``least`` of them)."""
    truth = rated_items(data)
    raters = {}
    for c in o.clients.tolist():
        for j in truth[c].tolist():
            raters.setdefault(j, []).append(c)
    groups = target.split(o)
    items = np.concatenate([g.items for g in groups])
    ratings = np.concatenate([g.ratings for g in groups])
    assert len(items) >= least
    for j, r in zip(items.tolist(), ratings.tolist(), strict=True):
        assert len(raters[j]) == 1
        own, values = _own(data, raters[j][0])
        assert values[own == j][0] == r


@pytest.mark.parametrize(("name", "params"), [
    ("rfrec", {"optimizer": "gd"}), ("rfrec", {"optimizer": "adam"}),
    ("fedmavg", {"gamma": 1e-3})])
def test_a_cohorts_sum_of_rfrec_and_fedmavg_uploads_splits_into_its_members(name, params):
    """The same for RFRec's first round (under Adam, rows that reach alpha are several
    members' steps and are left out) and FedMAvg's W_i (each member's own shrink factor of V
    unknown in the sum: found with |u|)."""
    from fedmc.audit.targets import target as target_of

    entry = spec(name)
    data = one_user_clients(m=12, n=60)
    cfg = entry.Config(rank=3, **params)
    algorithm = entry.algorithm_for(cfg)
    records, _ = record_boundary(algorithm, cfg, data, rounds=Rounds(make_sampler(12, 5), 1))
    target = target_of(name)(cfg, data, records, STARS)
    o = next(o for o in audit.observations(records, "secagg", target.upload) if o.round == 1)
    assert_split_is_exact(data, target, o)


def test_groups_seen_in_two_cohorts_name_their_client():
    """Two groups that agree on 3 shared items (most of either) are one user's; the one
    client their cohorts share is named, with the items of both. Groups that share fewer
    items, or few of their items, or disagree on a rating, are not linked; a linked pair whose
    cohorts share two clients names nobody."""
    G = audit.Group

    def group(cohort, items, ratings):
        return G(np.array(cohort), np.array(items), np.array(ratings, dtype=float))

    groups = [group([1, 5, 7], [1, 2, 3, 4], [5, 4, 3, 1]),
              group([5, 8, 9], [2, 3, 4, 6], [4, 3, 1, 2]),   # client 5 again
              group([2, 8, 11], [2, 3, 9], [4, 3, 5]),       # shares 2 items only
              group([3, 9, 11], [1, 2, 3, 4], [5, 4, 2, 1]),  # disagrees on item 3
              group([20, 21, 22], [30, 31, 32], [1, 2, 3]),
              group([20, 21, 23], [30, 31, 32], [1, 2, 3]),  # cohorts share 20 and 21
              group([40, 41, 42], list(range(50, 60)), [3] * 10),
              group([40, 43, 44], [50, 51, 52, *range(60, 67)], [3] * 10)]  # 3 of 10 shared
    named = audit.link_groups(groups)
    assert set(named) == {5}
    np.testing.assert_array_equal(named[5], [1, 2, 3, 4, 6])


def test_fedmavg_uploads_give_the_exact_ratings_and_user_factor():
    """decode_fedmavg's ratings are the truth, and its u replays the client's Q2 steps (a
    plain re-computation) into the upload."""
    entry = spec("fedmavg")
    data = one_user_clients()
    cfg = entry.Config(rank=3, gamma=1e-3)
    algorithm = entry.algorithm_for(cfg)
    records, sim = record_boundary(algorithm, cfg, data, rounds=Rounds(make_sampler(12, 12), 1))
    rec = records[0]
    V, steps = rec.message.arrays["V"], int(rec.message.flags["q2"])
    U = sim.clients.user_factors()
    f_scale, shift = cfg.w_objective(12)
    for o in audit.observations([rec], "plain", "W"):
        c = int(o.clients[0])
        rated, values = _own(data, c)
        rows = audit.guessed_rated(o.array, V)
        np.testing.assert_array_equal(rows, rated)
        factor = audit.reference_factor(o.array, V)
        got, u = audit.decode_fedmavg(o.array[rows] - factor * V[rows], V[rows], factor, steps, cfg,
                                12, STARS)
        np.testing.assert_array_equal(got, values)
        np.testing.assert_allclose(u, U[c], rtol=1e-4)
        W, d = V.copy(), cfg.gamma2 * (u @ u + shift)
        for _ in range(steps):
            grad = np.zeros_like(W)
            grad[rated] = np.outer(W[rated] @ u - got, u)
            W = W - (f_scale * grad + cfg.gamma * W) / d
        np.testing.assert_allclose(W, o.array, rtol=1e-4, atol=1e-12)


@pytest.mark.parametrize("optimizer", ["gd", "adam"])
def test_rfrecs_first_step_gives_the_exact_ratings(optimizer):
    """One step from V_(i) = V̄^0: the change is -alpha G (gd) or -alpha G / (|G| + eps)
    (Adam), with -G_j = 2 (m_j - u . v_j) u."""
    entry = spec("rfrec")
    data = one_user_clients()
    cfg = entry.Config(rank=3, optimizer=optimizer)
    algorithm = entry.algorithm_for(cfg)
    records, _ = record_boundary(algorithm, cfg, data, rounds=Rounds(make_sampler(12, 12), 1))
    V0 = records[1].message.arrays["V"]
    shared = shared_uploads(cfg, [V0])[0]
    for o in audit.observations(records[1:], "plain", "V"):
        rated, values = _own(data, int(o.clients[0]))
        G = audit.first_gradients(o.array[rated] - shared[rated], cfg.alpha, optimizer == "adam")
        np.testing.assert_array_equal(audit.decode_rank_one(G, V0[rated], 2.0, STARS), values)


def test_the_paper_consensus_rounds_give_the_rated_sets_through_the_previous_visits_v(
        tiny_federated):
    """consensus="all": a visit moves an unrated row by beta (V^k - V^l), l the client's
    previous visit; off that, a round's upload is the client's rated set."""
    from fedmc.audit.run import AuditSettings, run_audit

    data = tiny_federated(m=30, n=25, p=30, density=0.15, seed=2)[0]
    rows = run_audit(data, AuditSettings("fedmc-admm", {"rank": 2, "inner": 2}, rounds=4,
                                         active=6, views=("plain",)))
    first_round = next(r for r in rows if r["attack"] == "first-round")
    assert first_round["precision"] == first_round["recall"] == 1.0
    assert first_round["clients"] > 10


def test_the_audit_decodes_the_set_up_duals_of_the_rated_consensus():
    """consensus="rated" with the paper's duals: one user's set-up upload less beta V^0 on its
    rated items (once per rater) is its dual, decoded exactly by the audit."""
    from fedmc.audit.run import AuditSettings, run_audit

    rows = run_audit(one_user_clients(), AuditSettings(
        "fedmc-admm", {"rank": 3, "consensus": "rated", "dual_init": "paper", "inner": 2},
        rounds=1, active=4, views=("plain",)))
    ratings = next(r for r in rows if r["attack"] == "ratings")
    assert ratings["rmse"] == 0.0 and ratings["clients"] == 12


def test_pooled_runs_weigh_each_client_and_rating_once():
    """pool_runs: precision over every guessed client of every run, RMSE over every rating,
    an interval from the runs' own ratios (Student's t, 1 degree of freedom here)."""
    from fedmc.audit.run import pool_runs

    def runs(p, g, b, c, rmse, n):
        return [{"view": "dp", "attack": "first", "precision": p, "recall": 0.5, "base_rate": b,
                 "guessed": g, "clients": c, "ratio": p / b},
                {"view": "dp", "attack": "ratings", "rmse": rmse, "rmse_mean": 1.0,
                 "accuracy": 0.5, "accuracy_mean": 0.5, "accuracy_constant": 0.6,
                 "ratings": n, "clients": 1}]

    first, ratings = audit_pool = pool_runs([runs(0.2, 1, 0.1, 2, 1.0, 1),
                                             runs(0.0, 3, 0.1, 2, 2.0, 3),
                                             runs(np.nan, 0, 0.1, 4, np.nan, 0)])
    assert len(audit_pool) == 2
    assert first["precision"] == pytest.approx(0.05) and first["guessed"] == 4
    assert first["base_rate"] == pytest.approx(0.1) and first["ratio"] == pytest.approx(0.5)
    half = 12.706204736 * np.std([2.0, 0.0], ddof=1) / np.sqrt(2)
    assert first["ratio_high"] - first["ratio"] == pytest.approx(half)
    assert ratings["rmse"] == pytest.approx(np.sqrt((1.0 + 3 * 4.0) / 4))
    assert ratings["ratings"] == 4 and ratings["clients"] == 3
    assert ratings["accuracy_constant"] == pytest.approx(0.6)


def test_rating_scores_compare_with_the_mean_and_the_better_constant_guess():
    scores = audit.rating_scores(np.array([5.0, 4.0, 2.0, 4.0]), np.array([5.0, 4.0, 4.0, 1.0]),
                                 mean=3.5, like=4.0)
    assert scores["rmse"] == pytest.approx(np.sqrt((0 + 0 + 4 + 9) / 4))
    assert scores["accuracy"] == 0.5 and scores["accuracy_mean"] == 0.25
    assert scores["accuracy_constant"] == 0.75  # three likes of four


@pytest.mark.parametrize("params", [
    {"rank": 3}, {"rank": 3, "biases": False}, {"rank": 3, "sums": "fresh"},
    {"rank": 3, "biases": False, "sums": "fresh", "gram_scale": 0.3}])
def test_federated_als_statistics_give_the_exact_rated_sets_and_ratings(params):
    """One user's rows of item-step statistics are built from its x alone: the rows present
    are its rated items, and the set-up, a first visit (running sums) or any visit (fresh
    sums) decodes to its exact ratings; a cohort's sum splits into its members' exclusive
    items, each group decoded exactly (with fresh sums and biases: up to the member's bias,
    which the grid finds unless a shift by a rating step fits too)."""
    from fedmc.audit.targets.fedals import FedALSTarget

    entry = spec("fedals")
    data = one_user_clients(m=12, n=150)
    cfg = entry.Config(**params)
    records, _ = record_boundary(entry.algorithm_for(cfg), cfg, data,
                                 rounds=Rounds(make_sampler(12, 5), 3))
    target = FedALSTarget(cfg, data, records, STARS)
    truth = rated_items(data)
    plain = list(audit.observations(records, "plain", target.upload))
    scores = audit.set_scores(audit.rated_sets(plain), truth, 150)
    assert scores["precision"] == scores["recall"] == 1.0
    decoded = 0
    for o in plain:
        out = target.decode(o, 0.0)
        if out is None:
            assert cfg.sums == "running" and o.round > 1
            continue
        items, ratings = out
        own, values = _own(data, int(o.clients[0]))
        np.testing.assert_array_equal(items, own)
        np.testing.assert_array_equal(ratings, values)
        decoded += 1
    assert decoded >= 10
    for o in audit.observations(records, "secagg", target.upload):  # the set-up's sum too
        if o.round > 1:
            continue
        if cfg.sums == "running" or not cfg.biases:
            assert_split_is_exact(data, target, o, least=3 if o.round else 1)
            continue
        for g in target.split(o):  # each group's ratings less the truth: one shift
            own = {j: r for c in o.clients.tolist() for j, r in zip(*_own(data, c),
                                                                    strict=True)}
            shift = g.ratings - np.array([own[j] for j in g.items.tolist()])
            assert np.ptp(shift) == 0.0

"""Every algorithm of the protocol under every driver: the same history, and a server that is
handed cohort sums only (``fedmc.testing``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import pytest

from fedmc.algorithms.ease import ALGORITHM as EASE
from fedmc.algorithms.fedals import ALGORITHM as FEDALS
from fedmc.algorithms.fedmavg import ALGORITHM as FEDMAVG
from fedmc.algorithms.fedmavg import POSTER as FEDMAVG_POSTER
from fedmc.algorithms.fedmc_admm import PAPER as FEDMC_ADMM
from fedmc.algorithms.fedmc_admm import RATED as FEDMC_ADMM_RATED
from fedmc.algorithms.felb import ALGORITHM as FELB
from fedmc.algorithms.felb import ALGORITHM_MU as FELB_MU
from fedmc.algorithms.item_bias import ALGORITHM as ITEM_BIAS
from fedmc.algorithms.registry import specs
from fedmc.algorithms.rfrec import ALGORITHM as RFREC
from fedmc.algorithms.rfrec import ALGORITHM_F as RFRECF
from fedmc.core.protocol import Algorithm
from fedmc.data.boolean import BooleanFederatedData
from fedmc.federation.loop import Rounds
from fedmc.federation.sampling import make_sampler
from fedmc.privacy.accounting import UserDP
from fedmc.sim import simulate
from fedmc.sim.clients import PerClientClients
from fedmc.sim.sharded import ShardedClients
from fedmc.testing import (
    assert_drivers_agree,
    assert_same_history,
    assert_server_sees_only_sums,
    run_driver,
)


@dataclass(frozen=True)
class Case:
    """One conformance case: an algorithm with its configuration, the sampler's options and the
    data it runs on (``None``: the default ratings; else ``"one-user"`` (a client per user),
    ``"implicit"`` or ``"implicit-one-user"``; a boolean algorithm always gets boolean data)."""

    algorithm: Algorithm
    params: dict[str, Any]
    run: dict[str, Any] = field(default_factory=dict)
    data: str | None = None


EVERY_CLIENT = {"active": None}  # fedals' item_step="exchanges" takes every client each round
CASES = [
    Case(FEDMC_ADMM, {"rank": 2, "inner": 3, "beta": 0.8, "lam": 0.05, "gamma": 0.02}),
    Case(FEDMC_ADMM, {"rank": 2, "steps": "paper", "biases": False, "reg_u": "l1", "reg_v": "l1",
                      "dual_init": "zeros"}, run={"sampling": "bernoulli", "participation": 0.5}),
    Case(FEDMC_ADMM, {"rank": 3, "biases": True}, run={"dropout": 0.3, "active": 4}),
    Case(FEDMC_ADMM_RATED, {"rank": 2, "consensus": "rated"}),
    Case(FEDMC_ADMM_RATED, {"rank": 2, "consensus": "rated", "dual_init": "paper", "reg_u": "l1"},
         run={"sampling": "bernoulli", "participation": 0.4}, data="one-user"),
    Case(FEDMC_ADMM_RATED, {"rank": 3, "consensus": "rated", "steps": "paper"},
         run={"dropout": 0.3}, data="one-user"),
    Case(FEDMC_ADMM_RATED, {"rank": 2, "consensus": "rated", "weights": "sqrt-items",
                            "dual_init": "zeros"},
         run={"sampling": "bernoulli", "participation": 0.4}),
    Case(FEDMC_ADMM_RATED, {"rank": 2, "consensus": "rated", "weights": "sqrt-items",
                            "dual_init": "zeros", "offset": "item-bias", "count_scale": 0.4},
         run={"sampling": "bernoulli", "participation": 0.4}),
    Case(FEDMC_ADMM_RATED, {"rank": 2, "consensus": "rated", "dual_init": "zeros",
                            "offset": "item-bias"}, run={"dropout": 0.3}, data="one-user"),
    Case(ITEM_BIAS, {"weights": "equal", "lam_item": 0.5}),
    Case(ITEM_BIAS, {"count_scale": 0.3}, run={"sampling": "bernoulli", "participation": 0.4},
         data="one-user"),
    Case(ITEM_BIAS, {"signal": "counts"}, run={"dropout": 0.3}),
    Case(FEDMAVG, {"rank": 2, "inner": 3, "lam": 0.05, "gamma": 0.02}),
    Case(FEDMAVG, {"rank": 2, "u_update": "sampled", "biases": True},
         run={"sampling": "bernoulli", "participation": 0.3}),
    Case(FEDMAVG_POSTER, {"rank": 2, "q_hat": 4, "constraint": "nonneg"},
         run={"sampling": "replacement", "active": 4}),
    Case(FEDMAVG_POSTER, {"rank": 2, "constraint": "box", "box_hi": 0.5, "biases": True},
         run={"dropout": 0.3, "active": 4}),
    Case(RFREC, {"rank": 2, "optimizer": "gd", "alpha": 0.01, "lam": 2.0, "lam_u": 0.1}),
    Case(RFREC, {"rank": 2, "delta": 0.3, "s": 0.1},
         run={"sampling": "bernoulli", "participation": 0.5}),
    Case(RFREC, {"rank": 2}, run={"dropout": 0.3, "active": 5}),
    Case(RFRECF, {"rank": 2, "p": 0.4}),
    Case(RFRECF, {"rank": 2, "optimizer": "gd", "alpha": 0.01, "average_step": "plain",
                  "delta": 0.2, "s": 0.05}, run={"dropout": 0.2, "active": 5}),
    Case(FELB, {"rank": 2, "local_steps": 3}),
    Case(FELB, {"rank": 2, "init": "independent", "rate_counter": "local_step", "sharpen": 0.5,
                "sharpen_after": 1, "server_step": "inverse_clients"}, run={"active": 3}),
    Case(FELB, {"rank": 2, "dp_mechanism": "laplace", "dp_clip": "elementwise", "dp_theta": 0.5}),
    Case(FELB_MU, {"rank": 2, "local_steps": 3}, run={"active": 3}),
    Case(FELB_MU, {"rank": 2, "dp_mechanism": "gaussian", "dp_clip": "frobenius"},
         run={"dropout": 0.3}),
    Case(FELB_MU, {"rank": 2, "dp_mechanism": "gaussian", "dp_clip": "none", "sharpen": 0.0}),
    Case(FEDALS, {"rank": 2, "lam": 0.5}),
    Case(FEDALS, {"rank": 2, "biases": False}, run={"sampling": "bernoulli", "participation": 0.5}),
    Case(FEDALS, {"rank": 3}, run={"dropout": 0.3}, data="one-user"),
    Case(FEDALS, {"rank": 2, "implicit": True, "alpha": 3.0}, data="implicit"),
    Case(FEDALS, {"rank": 2, "implicit": True, "solver": "exact"}, data="implicit"),
    Case(FEDALS, {"rank": 3, "solver": "cg", "cg_steps": 2}, data="one-user"),
    Case(FEDALS, {"rank": 3, "implicit": True, "lam": 0.2},
         run={"sampling": "replacement", "active": 6}, data="implicit-one-user"),
    Case(FEDALS, {"rank": 2, "sums": "fresh", "max_items": 2}),
    Case(FEDALS, {"rank": 2, "implicit": True, "sums": "fresh", "max_items": 3},
         data="implicit-one-user"),
    Case(FEDALS, {"rank": 3, "upload": "factors"}, data="one-user"),
    Case(FEDALS, {"rank": 3, "implicit": True, "upload": "factors"}, data="implicit-one-user"),
    Case(FEDALS, {"rank": 2, "item_step": "exchanges"}, run=EVERY_CLIENT),
    Case(FEDALS, {"rank": 2, "implicit": True, "item_step": "exchanges", "cg_steps": 2},
         run=EVERY_CLIENT, data="implicit"),
    Case(FEDALS, {"rank": 3, "item_step": "exchanges", "upload": "factors"}, run=EVERY_CLIENT,
         data="one-user"),
    Case(FEDALS, {"rank": 3, "implicit": True, "item_step": "exchanges"}, run=EVERY_CLIENT,
         data="implicit-one-user"),
    Case(EASE, {"implicit": True, "lam": 2.0}, data="implicit"),
    Case(EASE, {"implicit": True, "max_items": 3}, run={"dropout": 0.3},
         data="implicit-one-user"),
]


def test_every_registered_algorithm_has_cases():
    """A registered protocol algorithm joins the conformance suite by having cases here."""
    registered = {a.name for entry in specs().values() for a in entry.algorithms()}
    assert registered == {case.algorithm.name for case in CASES}
    assert {case.algorithm.name for case in DP_CASES} <= registered


def _case_id(case: Case) -> str:
    return "-".join([case.algorithm.name,
                     *(f"{k}={v}" for k, v in {**case.params, **case.run}.items()),
                     *([case.data] if case.data else [])])


@pytest.fixture(scope="module")
def ratings(tiny_federated):
    return tiny_federated(m=15, n=8, p=5, density=0.45, seed=4)[0]


@pytest.fixture(scope="module")
def boolean():
    A = (np.random.default_rng(0).random((23, 12)) < 0.3).astype(np.uint8)
    return BooleanFederatedData.build(A, 5, seed=1)


@pytest.fixture(scope="module")
def one_user(tiny_federated):
    return tiny_federated(m=15, n=8, p=15, density=0.45, seed=4)[0]


@pytest.fixture(scope="module")
def implicit(tiny_interactions):
    return tiny_interactions(m=15, n=8, p=5, density=0.45, seed=4)


@pytest.fixture(scope="module")
def implicit_one_user(tiny_interactions):
    return tiny_interactions(m=15, n=8, p=15, density=0.45, seed=4)


@pytest.fixture
def data(request, ratings, boolean, one_user, implicit, implicit_one_user):
    case = request.getfixturevalue("case")
    if case.algorithm.data_kind == "boolean":
        return boolean
    return {None: ratings, "one-user": one_user, "implicit": implicit,
            "implicit-one-user": implicit_one_user}[case.data]


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_batched_driver_equals_per_client_driver(case, data):
    algorithm, params, run = case.algorithm, case.params, case.run
    cfg = algorithm.Config(**params)
    assert_drivers_agree(algorithm, cfg, data,
                         rounds=Rounds(make_sampler(data.n_clients, **{"active": 4, **run}), 6))


@pytest.fixture(scope="module")
def ray_actors():
    """Ray started on this machine once for the module (skipped where it is not installed)."""
    ray = pytest.importorskip("ray")
    from fedmc.sim.ray_shards import RayActors

    yield RayActors()
    ray.shutdown()


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_ray_actors_equal_the_batched_driver(case, data, ray_actors):
    """Every algorithm with its clients in two Ray actors (``--backend ray``)."""
    algorithm, params, run = case.algorithm, case.params, case.run
    assert_drivers_agree(algorithm, algorithm.Config(**params), data,
                         rounds=Rounds(make_sampler(data.n_clients, **{"active": 4, **run}), 6),
                         drivers=("batched",
                                  partial(ShardedClients, shards=2, workers=ray_actors)))


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_server_step_is_handed_only_cohort_sums(case, data):
    algorithm, params, run = case.algorithm, case.params, case.run
    cfg = algorithm.Config(**params)
    sampler = make_sampler(data.n_clients, **{"active": 4, **run})
    assert_server_sees_only_sums(algorithm, cfg, data, rounds=Rounds(sampler, 4))


class FoldingClients(PerClientClients):
    """The per-client loop, taking each evaluation along with the next round's message (as a
    real federation does, fedmc.federation.population.ClientPopulation.folds_evaluation)."""

    folds_evaluation = True


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_evaluation_folded_into_the_next_message_gives_the_same_history(case, data):
    algorithm, params, run = case.algorithm, case.params, case.run
    cfg = algorithm.Config(**params)
    rows = []

    def sampler():
        return make_sampler(data.n_clients, **{"active": 4, **run})

    plain = simulate(algorithm, cfg, data, rounds=Rounds(sampler(), 5, eval_every=2))
    folded = simulate(algorithm, cfg, data, rounds=Rounds(sampler(), 5, eval_every=2),
                      callback=lambda k, row: rows.append((k, row)),
                      driver=lambda *args: FoldingClients(*args))
    assert_same_history(plain.history, folded.history)
    assert [r["round"] for r in folded.history.rows] == [0, 2, 4, 5]
    assert [k for k, _ in rows] == [1, 2, 3, 4, 5]  # reported in order, evaluated rows whole
    assert [k for k, row in rows if row is not None] == [2, 4, 5]


@pytest.mark.parametrize("case", [c for c in CASES if c.algorithm.split_batches][:4]
                         + [c for c in CASES if c.algorithm in (FEDALS, EASE)], ids=_case_id)
def test_chunked_messages_give_the_same_history(case, data, monkeypatch):
    """An algorithm whose clients share no batched state may run a large message in chunks
    (fedmc.sim.clients.CHUNK_RATINGS): same history as one client step over all."""
    import fedmc.sim.clients

    algorithm, params, run = case.algorithm, case.params, case.run
    cfg = algorithm.Config(**params)

    def sampler():
        return make_sampler(data.n_clients, **{"active": 4, **run})

    whole = run_driver(algorithm, cfg, data, sampler, 5, 0, "batched")
    monkeypatch.setattr(fedmc.sim.clients, "CHUNK_RATINGS", 7)
    chunked = run_driver(algorithm, cfg, data, sampler, 5, 0, "batched")
    assert_same_history(whole.history, chunked.history)


DP_CASES = [
    Case(FEDMC_ADMM, {"rank": 2, "inner": 3, "beta": 0.8, "lam": 0.05, "gamma": 0.02}),
    Case(FEDMC_ADMM_RATED, {"rank": 2, "consensus": "rated"}, data="one-user"),
    Case(FEDMC_ADMM_RATED, {"rank": 2, "consensus": "rated", "weights": "sqrt-items",
                            "dual_init": "zeros"}, data="one-user"),
    Case(FEDMC_ADMM_RATED, {"rank": 2, "consensus": "rated", "weights": "sqrt-items"}),
    Case(FEDMC_ADMM_RATED, {"rank": 2, "consensus": "rated", "weights": "sqrt-items",
                            "dual_init": "zeros", "offset": "item-bias", "count_scale": 0.3},
         data="one-user"),
    Case(ITEM_BIAS, {"count_scale": 0.5}, data="one-user"),
    Case(ITEM_BIAS, {"weights": "equal"}),
    Case(FEDMAVG, {"rank": 2, "inner": 3, "lam": 0.05, "gamma": 0.02}),
    Case(RFREC, {"rank": 2, "delta": 0.3, "s": 0.1}),
    Case(FELB, {"rank": 2, "local_steps": 3}),
    Case(FEDALS, {"rank": 2}, data="one-user"),
    Case(FEDALS, {"rank": 2, "implicit": True}, data="implicit"),
    Case(FEDALS, {"rank": 2, "sums": "fresh", "max_items": 3}, data="one-user"),
    Case(FEDALS, {"rank": 2, "implicit": True, "sums": "fresh", "max_items": 2}, data="implicit"),
    Case(FEDALS, {"rank": 2, "implicit": True, "sums": "fresh", "upload": "factors"},
         data="implicit-one-user"),
    Case(EASE, {"implicit": True, "max_items": 2}, data="implicit-one-user"),
]


@pytest.mark.parametrize(("mechanism", "sampling"), [(None, "bernoulli"),
                                                     ("skellam", "bernoulli"), (None, "cyclic")])
@pytest.mark.parametrize("case", DP_CASES, ids=_case_id)
def test_drivers_agree_with_user_level_dp(case, mechanism, sampling, data):
    """Clipping and the noise on the sums (drawn from the server's stream; under the Skellam
    mechanism each client's integers and every member's share from its stream), and cyclic
    participation, leave the drivers in step: the same history, epsilon included."""
    algorithm, params = case.algorithm, case.params
    dp = UserDP(clip=0.5, noise=0.7, delta=1e-5, setup_clip=0.8, unit="client", reproducible=True,
                mechanism=mechanism)
    sims = assert_drivers_agree(
        algorithm, algorithm.Config(**params), data,
        rounds=Rounds(make_sampler(data.n_clients, sampling=sampling, participation=0.5), 4,
                      dp=dp))
    eps = sims[0].history.column("epsilon")
    grows = np.diff(eps) > 0  # every round, or (cyclic) every first round of a cycle
    assert np.all(grows if sampling != "cyclic" else grows == [True, False, True, False])
    assert np.all(sims[0].history.column("dp_noise") == 0.7)

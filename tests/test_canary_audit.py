"""The canary audit (fedmc.audit.canary) finds the leaks of a run that is not private and none
in a private one (nor in a private search): a fast version of benchmarks/canary_audit.py on a
small data set."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from fedmc.algorithms.registry import spec
from fedmc.algorithms.spec import Range
from fedmc.audit.canary import (
    LOSS,
    audit_runs,
    epsilon_lower_bound,
    neighbours,
    pick_canary,
    read_artifacts,
    server_view_bound,
    server_views,
)
from fedmc.data import Ratings
from fedmc.federation.settings import Schedule
from fedmc.privacy.accounting import UserDP
from fedmc.run.data import DataSettings
from fedmc.run.options import RunOptions
from fedmc.run.runner import execute, write_outputs
from fedmc.run.settings import resolve
from fedmc.run.spec import RunSpec
from fedmc.tune import private
from fedmc.tune.report import write_private_best

RUNS = 25


def small_ratings(n_users: int = 50) -> Ratings:
    rng = np.random.default_rng(5)
    users, items = np.nonzero(rng.random((n_users, 30)) < 0.3)
    values = np.clip(np.round(3 + rng.normal(0, 1.2, len(users))), 1, 5)
    return Ratings.from_raw(users + 1, items + 1, values, name="small")


def audit(private: bool) -> tuple[float, str, list, list]:
    ratings = small_ratings()
    canary = pick_canary(ratings, n_items=6)
    data_settings = DataSettings(partition="user", normalize="public" if private else "zscore",
                                 rating_scale=(1.0, 5.0) if private else None)
    dp = UserDP(epsilon=1.0, clip=0.5) if private else None
    run = RunSpec(algorithm="item-bias", schedule=Schedule(rounds=0, active=None, dp=dp),
                  data=data_settings)
    inside, outside = neighbours(ratings, canary, 0.2, 0, data_settings.normalize,
                                 data_settings.rating_scale)

    def run_once(data, folder):
        write_outputs(folder, execute(run, loaded=(data, {})))

    runs_in, runs_out = audit_runs(run_once, inside, outside, canary, RUNS)
    bound = epsilon_lower_bound(runs_in, runs_out, delta=1e-6 if private else 0.0)
    return bound.epsilon, bound.test, runs_in, runs_out


def test_the_audit_finds_the_leaks_of_a_run_that_is_not_private():
    epsilon, test, runs_in, runs_out = audit(private=False)
    assert epsilon > 1.5  # 20 evaluation runs a side can show no more than log(22) = 3.1
    assert runs_in[0][LOSS] < runs_out[0][LOSS]  # the canary fits a model trained on it


def test_a_private_run_leaks_nothing_the_audit_can_find():
    epsilon, test, runs_in, runs_out = audit(private=True)
    assert epsilon <= 1.0, test
    assert runs_in[0]["config.json:private"] == "true"


def test_the_neighbours_differ_in_the_canarys_ratings_alone():
    ratings = small_ratings()
    canary = pick_canary(ratings, n_items=6)
    inside, outside = neighbours(ratings, canary, 0.2, 0, "zscore", None)
    assert inside.n_users == outside.n_users == ratings.n_users + 1
    assert inside.train.nnz == outside.train.nnz + 6 and inside.test.nnz == outside.test.nnz
    row = inside.client_ptr[-2]  # the canary's client, the last: one user per client
    assert inside.train.indptr[row + 1] - inside.train.indptr[row] == 6
    assert outside.train.indptr[row + 1] == outside.train.indptr[row]


@pytest.mark.parametrize("field", ["config.json:data:n_ratings", "model.npz:V"])
def test_every_published_value_is_read(tmp_path, field):
    ratings = small_ratings()
    canary = pick_canary(ratings, n_items=6)
    inside, _ = neighbours(ratings, canary, 0.2, 0, "zscore", None)
    run = RunSpec(algorithm="item-bias", schedule=Schedule(rounds=0, active=None))
    write_outputs(tmp_path, execute(run.model_copy(update={"data": DataSettings(partition="user")}),
                                    loaded=(inside, {})))
    assert field in read_artifacts(tmp_path, canary)


@pytest.mark.slow
@pytest.mark.federation
def test_a_private_secure_federation_passes_the_audit(tmp_path, loopback_federation):
    """The same audit of a real federation's outputs (SecAgg+, distributed DP, one user per
    client), its server and ClientApps in this process (the loopback_federation fixture):
    nothing the out folder holds, progress.jsonl included, tells the canary's presence."""
    pytest.importorskip("flwr")
    from fedmc.deploy.split import write_shards
    from fedmc.flower.settings import FederatedRun

    ratings = small_ratings(n_users=12)  # a secure sum's cost grows with the cohort squared
    canary = pick_canary(ratings, n_items=6)
    settings = DataSettings(partition="user", normalize="public", rating_scale=(1.0, 5.0))
    worlds = [neighbours(ratings, canary, 0.2, 0, kind, (1.0, 5.0)) for kind in ("public", "none")]
    dp = UserDP(epsilon=1.0, clip=0.5)
    run = FederatedRun(spec=RunSpec(algorithm="item-bias", data=settings,
                                    schedule=Schedule(rounds=0, active=None, dp=dp)),
                       secagg=True)

    split = tmp_path / "split"  # one path for both data sets: config.json names it

    def run_once(data, folder):
        original = worlds[1][0] if data is worlds[0][0] else worlds[1][1]
        shutil.rmtree(split, ignore_errors=True)
        write_shards(data, original, settings, split)
        loopback_federation(folder / "work", settings,
                            run.model_copy(update={"out": folder.resolve()}), split=split)

    runs_in, runs_out = audit_runs(run_once, *worlds[0], canary, RUNS)
    bound = epsilon_lower_bound(runs_in, runs_out, delta=1e-6)
    assert bound.epsilon <= 1.0, bound
    assert any(k.startswith("progress.jsonl") for k in runs_in[0])


@pytest.mark.slow
def test_the_canary_audit_finds_nothing_in_a_private_search():
    """The canary audit (``fedmc.audit.canary``) of a whole private search on a small data
    set (a random search of ``lam``, then the fold-in choice): every file it publishes,
    ``best.json`` included, read back from 25 searches on each neighbour; no test does better
    than the budget allows."""
    ratings = small_ratings()
    canary = pick_canary(ratings, n_items=6)
    options = RunOptions(algorithm="fedmc-admm", partition="user", rounds=2, dp_epsilon=1.0,
                         dp_clip=0.05, rating_scale=(1.0, 5.0), validation_fraction=0.2,
                         params={"rank": 2, "inner": 5})
    search = private.PrivateSearch(options, {"lam": Range(0.5, 8.0, log=True)}, trials=2,
                                   fold_in=dict(spec("fedmc-admm").fold_in_space))
    inside, outside = neighbours(ratings, canary, 0.2, 0, "public", (1.0, 5.0),
                                 validation_fraction=0.2)

    def run_once(data, folder):
        chosen = private.run_private_search(search, loaded=(data, {}))
        write_outputs(folder, chosen.result)
        write_private_best(folder / "best.json", search, chosen, [])

    runs_in, runs_out = audit_runs(run_once, inside, outside, canary, RUNS)
    bound = epsilon_lower_bound(runs_in, runs_out, delta=1e-6)
    assert bound.epsilon <= 1.0, (bound.test, bound.epsilon)
    assert "best.json:value" in runs_in[0] and runs_in[0]["config.json:private"] == "true"
    assert "best.json:settings:fold_lam" in runs_in[0]


@pytest.mark.parametrize("epsilon", [None, 1.0])
def test_the_servers_view_gives_the_canary_away_without_dp_and_no_more_than_the_budget_with(
        epsilon):
    """The audit of what the server step is handed (every exchange's cohort sum, as under
    secure aggregation): without DP the sums on the canary's items tell it apart in every
    run; with the DP defaults at epsilon 1 against the server, no test does better than
    the budget allows."""
    dp = {} if epsilon is None else {"dp_epsilon": epsilon}
    options = RunOptions(algorithm="fedmc-admm", partition="user", rounds=2,
                         rating_scale=(1.0, 5.0), params={"rank": 2, "inner": 5,
                                                          "consensus": "rated",
                                                          "dual_init": "zeros"}, **dp)
    ratings = small_ratings()
    canary = pick_canary(ratings, n_items=6)
    run = resolve(options)
    worlds = neighbours(ratings, canary, 0.2, 0, run.data.normalize, (1.0, 5.0))
    inside, outside = server_views(run, *worlds, canary, RUNS)
    bound = server_view_bound(inside, outside, delta=1e-6)
    if epsilon is None:
        assert bound.tpr == 1.0 and bound.fpr == 0.0 and bound.epsilon > 1.5, bound
    else:
        assert bound.epsilon <= epsilon, bound
    assert any(":count:" in name for name in inside[0])


def test_one_test_is_chosen_on_the_calibration_runs_and_a_noised_value_is_no_leak():
    """The bound evaluates the one test that separated the calibration runs best: a
    published value that differs in every run (noise) names only the calibration runs'
    values and is no candidate; a value seen only with the canary, repeated, is; else the
    canary's loss."""
    rng = np.random.default_rng(0)

    def runs(shift):
        return [{"model.npz:V": rng.random().hex(), LOSS: float(rng.normal(shift)),
                 "config.json:seed": "0"} for _ in range(100)]

    inside, outside = runs(-3.0), runs(0.0)
    bound = epsilon_lower_bound(inside, outside)
    assert bound.test == LOSS and bound.tpr > 0.8 > 0.2 > bound.fpr and bound.epsilon > 1
    for a, b in zip(inside, outside, strict=True):
        a["config.json:data:n_ratings"], b["config.json:data:n_ratings"] = "27", "21"
    bound = epsilon_lower_bound(inside, outside)
    assert bound.test == "config.json:data:n_ratings" and (bound.tpr, bound.fpr) == (1.0, 0.0)

"""Real-process federations that take longer (marked slow): the acceptance runs of issue 12 on
MovieLens 100K, and a SuperNode killed mid-run."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("flwr")

from fedmc.algorithms.fedmc_admm import PAPER as FEDMC_ADMM
from fedmc.federation.loop import Rounds  # noqa: E402
from fedmc.federation.sampling import make_sampler  # noqa: E402
from fedmc.federation.settings import Schedule
from fedmc.privacy.accounting import UserDP
from fedmc.run.data import DataSettings, federate, load_ratings  # noqa: E402
from fedmc.run.spec import RunSpec  # noqa: E402
from fedmc.testing import assert_same_history, client_ids, replay  # noqa: E402

PARAMS = {"rank": 3}

pytestmark = [pytest.mark.slow, pytest.mark.federation]


@pytest.fixture(scope="module")
def movielens(require_shared_data) -> DataSettings:
    folder = require_shared_data("ml-100k")
    return DataSettings(dataset="ml-100k", data_dir=folder.parent, clients=5)


@pytest.mark.realdata
@pytest.mark.parametrize("algorithm", ["fedmc-admm", "fedmavg", "rfrec"])
def test_ml100k_five_clients_ten_rounds_equal_fedmc_run(tmp_path, movielens, algorithm, federated,
                                                        simulated):
    run = RunSpec(algorithm=algorithm, schedule=Schedule(rounds=10, active=3, seed=0))
    history, _ = federated(tmp_path, movielens, run, {}, timeout=60.0)
    reference = simulated(movielens, run, {})
    assert_same_history(history, reference, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(history.column("test_rmse"), reference.column("test_rmse"),
                               rtol=0, atol=1e-9)


@pytest.mark.realdata
def test_ml100k_with_secure_aggregation_stays_within_the_quantization_bound(tmp_path, movielens,
                                                                            federated, simulated):
    run = RunSpec(schedule=Schedule(rounds=10, active=3, seed=0))
    history, _ = federated(tmp_path, movielens, run, {}, timeout=60.0, secagg=True)
    reference = simulated(movielens, run, {})
    # docs/federation.md: each summed entry within n quanta of 2^-26 of the cohort's largest
    # value; over 10 rounds the test RMSE moved by 2e-9 here
    np.testing.assert_allclose(history.column("test_rmse"), reference.column("test_rmse"),
                               rtol=1e-7, atol=0)
    assert_same_history(history, reference, rtol=0, atol=0, columns=["clients"])


@pytest.mark.parametrize("secagg", [False, True], ids=["plain", "secagg"])
def test_a_node_killed_in_round_3_of_6_is_left_out_and_rejoins(tmp_path, secagg, data_settings,
                                                               federated, ratings_file):
    settings = data_settings(ratings_file(tmp_path, users=60), clients=5)
    run = RunSpec(schedule=Schedule(rounds=6, active=3, seed=0))
    killed: list[int] = []

    def kill_in_round_3(event, fed):
        if event["event"] == "exchange" and event["round"] == 3 and event["phase"] == "round" \
                and not killed:
            killed.append(event["clients"][0])
            fed.kill(f"node-{killed[0]}")  # SIGKILL while round 3 is sent
            fed.start_node(killed[0])  # restarted: a new node id, the same state folder

    history, out = federated(tmp_path, settings, run, PARAMS, kill_in_round_3, timeout=8.0,
                             secagg=secagg)
    rows = {int(r["round"]): r for r in history.rows}
    assert len(rows) == 7, "the run completed"
    included = client_ids(history)
    assert killed[0] not in included[3] and killed[0] in client_ids(history, "lost")[3]
    assert any(killed[0] in included[k] for k in (4, 5, 6)), "the restarted node rejoined"
    data = federate(load_ratings(settings), settings)
    cfg = FEDMC_ADMM.Config(**PARAMS)
    again = replay(FEDMC_ADMM, cfg, data, rounds=Rounds(make_sampler(5, 3), 6), seed=0,
                   included=included)
    model = np.load(out / "model.npz")
    tolerance = 1e-6 if secagg else 1e-10
    np.testing.assert_allclose(model["V"], again.server.V, rtol=0, atol=tolerance)
    assert_same_history(history, again.history, rtol=tolerance, atol=tolerance,
                        columns=["clients", "bytes_down"])


def test_a_node_that_signs_off_mid_run_is_lost_and_the_plain_run_finishes(tmp_path,
                                                                          data_settings,
                                                                          federated,
                                                                          ratings_file):
    """A node stopped with SIGTERM while round 3 is sent signs off; Flower then answers for
    it ("node unavailable", from the SuperLink's node id 1, issue 29's problem 2): the client
    is lost in every later exchange, the failures are recorded, and the run finishes as the
    replay of the clients it included."""
    import os
    import signal

    settings = data_settings(ratings_file(tmp_path, users=60), clients=5)
    run = RunSpec(schedule=Schedule(rounds=6, active=3, seed=0))
    stopped: list[int] = []
    failed: list[dict] = []

    def stop_in_round_3(event, fed):
        if event["event"] == "failed":
            failed.append(event)
        if event["event"] == "exchange" and event["round"] == 3 and event["phase"] == "round" \
                and not stopped:
            stopped.append(event["clients"][0])
            node = fed.processes.pop(f"node-{stopped[0]}")  # gone for good, not a failure
            os.killpg(node.pid, signal.SIGTERM)
            node.wait(timeout=60)

    history, out = federated(tmp_path, settings, run, PARAMS, stop_in_round_3, timeout=90.0)
    assert len(history.rows) == 7, "the run completed"
    included, lost = client_ids(history), client_ids(history, "lost")
    assert all(stopped[0] not in included[k] for k in (4, 5, 6))
    assert stopped[0] in lost[6]  # by Flower's error reply (then a "failed" line) or, once
    # Flower refuses messages for the node, by no reply
    assert all(e["clients"] == [stopped[0]] for e in failed)
    data = federate(load_ratings(settings), settings)
    again = replay(FEDMC_ADMM, FEDMC_ADMM.Config(**PARAMS), data,
                   rounds=Rounds(make_sampler(5, 3), 6), seed=0, included=included)
    np.testing.assert_allclose(np.load(out / "model.npz")["V"], again.server.V, rtol=0,
                               atol=1e-10)


def test_secure_aggregation_with_dp_has_the_clients_add_the_noise(tmp_path, data_settings,
                                                                  federated, ratings_file,
                                                                  simulation):
    """Distributed DP in real processes: with --secagg each client adds its integer share of
    the Skellam noise inside the secure sum and the server none. In a reproducible run the
    members draw their shares from the run's secret, as the simulation of the same mechanism
    does, so FedMAvg's published V equals the simulation's (one round, every client); the
    noise is there (V is off the noiseless run's by about the noise's scale)."""
    settings = data_settings(ratings_file(tmp_path, users=60, items=200)).model_copy(
        update={"normalize": "none"})  # a DP run serves no fitted normalizer (preflight)
    dp = UserDP(clip=0.5, noise=2.0, unit="client", mechanism="skellam", reproducible=True)
    run = RunSpec(algorithm="fedmavg", data=DataSettings(normalize="none"),  # not fitted
                  schedule=Schedule(rounds=1, active=None, seed=0, dp=dp))
    _, out = federated(tmp_path, settings, run, {"rank": 8}, timeout=60.0, secagg=True)
    published = np.load(out / "model.npz")["V"]
    np.testing.assert_allclose(published, simulation(settings, run, {"rank": 8}).server.V,
                               rtol=0, atol=1e-10)
    noiseless = run.model_copy(update={"schedule": run.schedule.model_copy(
        update={"dp": dp.model_copy(update={"noise": 1e-9})})})
    moved = published - simulation(settings, noiseless, {"rank": 8}).server.V
    spread = moved[moved != 0].std() / (2.0 * 0.5 / 3)  # the noise over the mean of 3
    assert 0.8 < spread < 1.2, spread

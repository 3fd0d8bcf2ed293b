"""A run stopped after any round and resumed from its checkpoint ends as if it had not stopped
(fedmc.federation.loop: Checkpoint, a callback's after_exchange, run_rounds' resume); in a
federation, the server's checkpoint after every round and fedmc federate resume (the
loopback_federation fixture)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from fedmc.algorithms.fedals import ALGORITHM as FEDALS
from fedmc.algorithms.fedmavg import ALGORITHM as FEDMAVG
from fedmc.algorithms.fedmc_admm import RATED
from fedmc.federation.loop import Rounds, run_rounds, streams
from fedmc.federation.sampling import make_sampler
from fedmc.privacy.accounting import UserDP
from fedmc.sim.clients import BatchedClients, PerClientClients
from fedmc.testing import assert_same_history

CASES = [(RATED, {"rank": 2, "consensus": "rated"}, BatchedClients, None),
         (FEDMAVG, {"rank": 2}, PerClientClients, None),
         (RATED, {"rank": 2, "consensus": "rated"}, BatchedClients,
          UserDP(clip=0.5, noise=0.8)),  # a private run: secret noise, resumed all the same
         # federated ALS: the running sums and each client's rows of its last upload; fresh
         # sums averaged over rounds (memory), each user's own draw of its items (max_items)
         (FEDALS, {"rank": 2}, BatchedClients, None),
         (FEDALS, {"rank": 2, "sums": "fresh", "memory": 0.5, "max_items": 3}, BatchedClients,
          UserDP(clip=0.5, noise=0.8)),
         # cyclic participation: the order of the clients (a secret of the run) is resumed
         (RATED, {"rank": 2, "consensus": "rated"}, BatchedClients,
          UserDP(clip=0.5, noise=0.8, mechanism="skellam"))]


def run(algorithm, cfg, data, population, dp, rounds, callbacks=None, resume=None):
    """A run from seed 0, or, resumed, from another seed: what it holds must come from the
    checkpoint. Under the Skellam mechanism, with cyclic participation."""
    init_rng, rng = streams(0 if resume is None else 99, secret=dp is not None)
    info = data.federation_info()
    draws = algorithm.draws(cfg, info, init_rng)
    clients = population(algorithm, cfg, data, draws, info)
    cyclic = dp is not None and dp.mechanism == "skellam"
    sampler = make_sampler(data.n_clients, sampling="cyclic" if cyclic else "bernoulli",
                           participation=0.25 if cyclic else 0.5)
    return run_rounds(algorithm, cfg, info, clients, Rounds(sampler, rounds, 2, dp),
                      server_draws=draws.server, rng=rng, callbacks=callbacks, resume=resume)


@pytest.mark.parametrize(("algorithm", "params", "population", "dp"), CASES,
                         ids=["rated", "fedmavg-per-client", "rated-private", "fedals",
                              "fedals-fresh-private", "rated-private-cyclic-skellam"])
def test_a_resumed_run_ends_as_the_uninterrupted_one(algorithm, params, population, dp,
                                                     tiny_federated, checkpoint_keeper):
    data = tiny_federated(m=15, n=8, p=15, density=0.45, seed=4)[0]
    cfg = algorithm.Config(**params)
    keeper = checkpoint_keeper()
    saved = keeper.saved
    whole = run(algorithm, cfg, data, population, dp, 6, callbacks=[keeper])
    assert sorted(saved) == [1, 2, 3, 4, 5, 6]
    for stop in (1, 3):  # an evaluated round's row waits for the next message, or none does
        resumed = run(algorithm, cfg, data, population, dp, 6,
                      resume=pickle.loads(saved[stop]))
        assert_same_history(whole.history, resumed.history, rtol=0, atol=0)
        for name, array in algorithm.model(cfg, whole.server).items():
            np.testing.assert_array_equal(algorithm.model(cfg, resumed.server)[name], array)


@pytest.mark.parametrize("secagg", [False, True], ids=["plain", "secagg"])
def test_a_federation_resumed_from_the_servers_checkpoint_ends_as_the_uninterrupted_one(
        tmp_path, monkeypatch, secagg, data_settings, loopback_federation, ratings_file):
    """The server stops right after round 3's checkpoint (as if killed); a new Flower run
    (another run id) with the same run key and ``resume`` goes on from it: the clients find
    their states under the run key, the exchanges' numbers go on, and the history and the
    model are the uninterrupted run's. The checkpoint is gone once the run has ended."""
    pytest.importorskip("flwr")
    from pathlib import Path

    import fedmc.flower.server_app as server_app
    from fedmc.federation.history import History
    from fedmc.federation.settings import Schedule
    from fedmc.flower.checkpoints import CheckpointWriter
    from fedmc.flower.settings import FederatedRun
    from fedmc.run.spec import RunSpec

    settings = data_settings(ratings_file(tmp_path, users=30), clients=4)
    run = FederatedRun(spec=RunSpec(params={"rank": 3},
                                    schedule=Schedule(rounds=6, active=3, seed=0)),
                       secagg=secagg, out=Path("out"))
    whole = loopback_federation(tmp_path / "whole", settings, run)

    class Killed(Exception):
        pass

    write = CheckpointWriter.after_exchange

    def write_then_die(self, round, checkpoint):
        write(self, round, checkpoint)
        if round == 3:  # the checkpoint
            raise Killed

    monkeypatch.setattr(CheckpointWriter, "after_exchange", write_then_die)
    with pytest.raises(Killed):
        loopback_federation(tmp_path / "cut", settings, run)
    out = tmp_path / "cut" / "out"
    assert (out / server_app.CHECKPOINT).exists() and not (out / "model.npz").exists()
    monkeypatch.setattr(CheckpointWriter, "after_exchange", write)
    loopback_federation(tmp_path / "cut", settings, run.model_copy(update={"resume": True}),
                        split=tmp_path / "cut" / "split", run_id=2)
    resumed = History.read_csv(out / "history.csv")
    # secure sums round stochastically (docs/federation.md): two secure runs agree to the
    # quantization's precision, plain ones exactly
    tolerance = 1e-6 if secagg else 1e-12
    assert_same_history(whole, resumed, rtol=tolerance, atol=tolerance,
                        ignore=("seconds", "participants", "lost", "claims_refused"))
    for name, array in np.load(tmp_path / "whole" / "out" / "model.npz").items():
        np.testing.assert_allclose(np.load(out / "model.npz")[name], array, rtol=0,
                                   atol=1e-6 if secagg else 1e-9)
    assert not (out / server_app.CHECKPOINT).exists()

"""fedmc.flower: the split files, the client's two-phase state, the wire format, and one real
federation (a SuperLink and three SuperNodes as processes) against the simulation."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")

from fedmc.algorithms.registry import spec  # noqa: E402
from fedmc.core.protocol import Message  # noqa: E402
from fedmc.core.uploads import RowPatch, Stacked  # noqa: E402
from fedmc.federation.history import History  # noqa: E402
from fedmc.federation.loop import Outcome, Rounds
from fedmc.federation.sampling import make_sampler  # noqa: E402
from fedmc.flower.client_state import StateStore  # noqa: E402
from fedmc.flower.compact import pack, unpack  # noqa: E402
from fedmc.flower.local import run_local  # noqa: E402
from fedmc.flower.manifest import Manifest  # noqa: E402
from fedmc.flower.node import Poller  # noqa: E402
from fedmc.flower.settings import FederatedRun  # noqa: E402
from fedmc.flower.shard import load_shard  # noqa: E402
from fedmc.flower.split import client_files, write_split  # noqa: E402
from fedmc.flower.wire import (  # noqa: E402
    NO_EXCHANGE,
    Envelope,
    pack_message,
    pack_reply,
    unpack_message,
    unpack_sums,
    unpack_uploads,
)
from fedmc.run.data import DataSettings, federate, load_ratings  # noqa: E402
from fedmc.run.settings import RunSettings  # noqa: E402
from fedmc.sim import simulate  # noqa: E402
from fedmc.testing import assert_same_history  # noqa: E402

PARAMS = {"rank": 3}


def ratings_file(folder: Path, users: int = 40, items: int = 25, seed: int = 0) -> Path:
    """A small CSV of ratings 1..5 with string user ids (every user rates a few items)."""
    rng = np.random.default_rng(seed)
    lines = ["user_id,item_id,stars"]
    for u in range(users):
        for i in rng.choice(items, size=rng.integers(3, 12), replace=False):
            lines.append(f"u{u:03d},{100 + i},{rng.integers(1, 6)}")
    path = folder / "ratings.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def data_settings(path: Path, clients: int = 3) -> DataSettings:
    return DataSettings(ratings=path, columns=("user_id", "item_id", "stars"), clients=clients)


def test_split_files_rebuild_the_simulation_shards_bit_for_bit(tmp_path):
    settings = data_settings(ratings_file(tmp_path))
    write_split(settings, tmp_path / "split")
    manifest = Manifest.read(tmp_path / "split" / "manifest.json")
    data = federate(load_ratings(settings), settings)
    assert manifest.n_clients == 3 and manifest.n_items == data.n_items
    for c in range(3):
        train, test = client_files(tmp_path / "split", c)
        shard = load_shard(manifest, c, train, test if test.exists() else None)
        ref = data.client_shard(c)
        for a, b in ((shard.train, ref.train), (shard.test, ref.test)):
            np.testing.assert_array_equal(a.indptr, b.indptr)
            np.testing.assert_array_equal(a.indices, b.indices)
            np.testing.assert_array_equal(a.values, b.values)
        assert shard.normalizer == ref.normalizer and shard.value_range == ref.value_range


def test_pending_state_is_committed_only_when_the_server_included_it(tmp_path):
    store = StateStore(tmp_path, run="r1")
    store.start({"x": 0})
    store.propose(3, {"x": 1})
    store.decide(NO_EXCHANGE)  # the server did not include exchange 3: dropped
    assert store.committed == {"x": 0} and store.pending_exchange == NO_EXCHANGE
    store.propose(5, {"x": 2})
    resumed = StateStore(tmp_path, run="r1")  # a node restarted before the decision
    assert resumed.pending_exchange == 5
    resumed.decide(5)
    assert resumed.committed == {"x": 2}
    assert StateStore(tmp_path, run="r1").committed == {"x": 2}
    assert StateStore(tmp_path, run="another run").committed is None


def test_a_clients_noise_secret_outlives_its_process_and_no_other_run_shares_it(tmp_path):
    """The seed of a client's DP noise shares is kept with its states: a node restarted, or
    a run resumed under the same key, draws the same share for a repeated exchange (no
    second release); another run draws its own, and no one else can read it."""
    first = StateStore(tmp_path, run="r1").noise_secret
    assert StateStore(tmp_path, run="r1").noise_secret == first
    assert StateStore(tmp_path, run="r2").noise_secret != first
    assert (tmp_path / "secret.pkl").stat().st_mode & 0o077 == 0


def test_uploads_travel_dense_and_sparse_with_their_scale():
    """What travels is what the client's upload adds to the sum: its scale (a client weight,
    FedMC-ADMM's ``weights="sqrt-items"``) applied."""
    dense = Stacked((4, 2), dense=np.arange(8.0).reshape(1, 4, 2))
    rows = Stacked((4, 2), rows=RowPatch(np.array([0, 2]), np.array([1, 3]),
                                         np.array([[1.0, 2.0], [3.0, 4.0]])))
    scaled = Stacked((4, 2), dense=dense.dense, rows=rows.rows, scale=np.array([0.3]))
    shapes = {"a": (4, 2), "b": (4, 2), "c": (4, 2)}
    back = unpack_uploads(pack_reply({"a": dense, "b": rows, "c": scaled}), shapes)
    for name, s in (("a", dense), ("b", rows), ("c", scaled)):
        np.testing.assert_array_equal(back[name].weighted_sum(np.ones(1)),
                                      s.weighted_sum(np.ones(1)))
        assert back[name].nbytes() == s.nbytes()


def test_a_client_that_computes_without_uploading_replies_with_nothing():
    """FedMAvg's unsampled clients take their U-steps and upload no W (a batch of none)."""
    none = Stacked((4, 2), dense=np.zeros((0, 4, 2)))
    assert unpack_uploads(pack_reply({"a": none}), {"a": (4, 2)}) == {}


def test_a_step_message_carries_the_model_to_evaluate_once():
    V, other = np.arange(6.0).reshape(3, 2), np.ones((3, 2))
    msg = Message(4, "round", np.array([0, 2]), np.array([2]), {"V": V}, {"lr": 0.5})
    same = Envelope(7, msg, {0: 5}, {}, {"V": V.copy()})
    assert set(same.payload()) == {"V"}  # equal to the message's V: not sent twice
    back = unpack_message(pack_message(same))
    np.testing.assert_array_equal(back.model["V"], V)
    assert (back.exchange, back.included_of(0), back.included_of(2)) == (7, 5, NO_EXCHANGE)
    np.testing.assert_array_equal(back.message.compute, [0, 2])
    assert set(back.message.arrays) == {"V"} and back.message.flags == {"lr": 0.5}
    apart = unpack_message(pack_message(Envelope(8, msg, model={"V": other})))
    np.testing.assert_array_equal(apart.model["V"], other)
    np.testing.assert_array_equal(apart.message.arrays["V"], V)
    assert unpack_message(pack_message(Envelope(9, msg))).model is None


def test_a_reply_carries_uploads_and_sums_together():
    up = Stacked((2, 2), dense=np.arange(4.0).reshape(1, 2, 2))
    reply = pack_reply({"a": up}, {"sse": 1.5, "n": 3.0})
    assert unpack_sums(reply) == {"sse": 1.5, "n": 3.0}
    np.testing.assert_array_equal(unpack_uploads(reply, {"a": (2, 2)})["a"].dense, up.dense)


def test_packed_contents_are_one_record_and_unpack_exactly():
    from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects

    V = np.random.default_rng(0).normal(size=(50, 4))
    content = pack_message(Envelope(1, Message(1, "round", np.arange(3), np.arange(3),
                                               {"V": V, "W": V + 1})))
    assert len(get_all_nested_objects(content)) == 7  # record dict, 2 records, 2 arrays + chunks
    packed = pack(content)
    assert len(get_all_nested_objects(packed)) == 2  # the record dict and one record
    assert pack(content).object_id == packed.object_id  # same content, one stored object
    back = unpack_message(unpack(packed))
    np.testing.assert_array_equal(back.message.arrays["W"], V + 1)
    assert unpack(content) is content  # not packed: as it is


def test_a_clients_dp_share_is_its_own_and_the_same_when_an_exchange_is_repeated(tmp_path):
    """Distributed DP: a share of variance std^2 / members on every upload entry, from a stream
    of the client's secret and the exchange's number (a repeated secure sum adds the same
    share, also after a restart: no second draw is released; another client or exchange draws
    anew)."""
    from fedmc.core.protocol import FederationInfo
    from fedmc.federation.aggregator import Aggregator
    from fedmc.flower.client_app import Party

    cfg = spec("fedmc-admm").Config(rank=5)
    algorithm = spec("fedmc-admm").algorithm_for(cfg)
    info = FederationInfo(n_clients=9, n_items=400, normalizer=None, value_range=(1.0, 5.0))

    def party(c):
        return Party(c, algorithm, cfg, info, None, StateStore(tmp_path / str(c), "run"),
                     Aggregator(algorithm, cfg, info))

    me, other = party(0), party(1)

    def share(party, exchange):
        envelope = Envelope(exchange, Message(exchange, "round", np.arange(9), np.arange(9), {}),
                            extra={"dp_std": 0.9, "dp_members": 9})
        return np.concatenate([v.ravel() for v in party.dp_share(envelope).values()])

    first = share(me, 4)
    np.testing.assert_array_equal(share(me, 4), first)
    np.testing.assert_array_equal(share(party(0), 4), first)  # the node restarted
    assert not np.allclose(share(me, 5), first) and not np.allclose(share(other, 4), first)
    assert first.size > 2000 and abs(first.std() / (0.9 / 3) - 1.0) < 0.05


def test_a_node_stays_quiet_for_most_of_the_usual_gap_and_then_polls():
    poller = Poller(poll=0.1, longest=0.5)
    assert poller.pause(0.0) == 0.1  # nothing learned yet
    for t in (10.0, 12.0, 13.6):  # gaps 2.0 and 1.6: quiet for 0.85 * 1.6 after a message
        poller.arrived(t)
    poller.replied(13.7)
    assert poller.pause(13.7) == pytest.approx(13.6 + 0.85 * 1.6 - 13.7)
    assert poller.pause(15.0) == pytest.approx(0.13)  # due: a tenth of the idle time
    assert poller.pause(30.0) == 0.5  # long idle: at most the longest interval


def simulation(settings: DataSettings, run: RunSettings, params: dict) -> Outcome:
    data = federate(load_ratings(settings), settings)
    sampler = make_sampler(data.n_clients, run.active, run.sampling,
                           participation=run.participation)
    entry = spec(run.algorithm)
    cfg = entry.Config(**params)
    algorithm = entry.algorithm_for(cfg)
    dp = run.privacy()
    return simulate(algorithm, cfg, data, rounds=Rounds(sampler, run.rounds, dp=dp),
                    seed=run.seed)


def simulated(settings: DataSettings, run: RunSettings, params: dict) -> History:
    return simulation(settings, run, params).history


def federated(tmp_path: Path, settings: DataSettings, run: RunSettings, params: dict,
              on_event=None, **flags) -> tuple[History, Path]:
    out = tmp_path / "out"
    started: list[int] = []

    def watch(event, fed):
        started.extend(p.pid for p in fed.processes.values() if p.pid not in started)
        if on_event is not None:
            on_event(event, fed)

    run_local(FederatedRun.of(run, params, out=out, **flags), settings,
              tmp_path / "work", on_event=watch)
    for pid in started:  # every process started is gone, with its process group
        with pytest.raises(ProcessLookupError):
            os.killpg(pid, 0)
    return History.read_csv(out / "history.csv"), out


@pytest.mark.federation
@pytest.mark.parametrize("algorithm", ["fedmc-admm", "fedmavg"])  # fedmavg: all compute
def test_three_nodes_two_rounds_give_the_simulations_history(tmp_path, algorithm):
    settings = data_settings(ratings_file(tmp_path))
    run = RunSettings(rounds=2, active=2, seed=0, algorithm=algorithm)
    history, out = federated(tmp_path, settings, run, PARAMS, timeout=60.0)
    assert_same_history(history, simulated(settings, run, PARAMS), rtol=1e-9, atol=1e-9)
    assert [row["lost"] for row in history.rows if "lost" in row] == []
    assert {"config.json", "history.csv", "summary.json", "model.npz"} <= {
        p.name for p in out.iterdir()}


def test_user_level_dp_travels_in_the_run_configuration():
    run = RunSettings(user_dp_clip=0.3, user_dp_noise=0.8, user_dp_setup_clip=1.0)
    sent = FederatedRun.of(run, PARAMS)
    back = FederatedRun.from_run_config(sent.run_config())
    assert back.privacy() == run.privacy() != None  # noqa: E711
    assert FederatedRun.from_run_config(FederatedRun().run_config()
                                        ).privacy() is None


@pytest.mark.federation
def test_three_nodes_with_user_level_dp_give_the_simulations_history(tmp_path):
    """Central DP: each client clips its own upload, the server adds the noise to the sum
    from its stream, as the simulation does (every client in every round: q = 1)."""
    settings = data_settings(ratings_file(tmp_path))
    run = RunSettings(rounds=2, active=None, seed=0, user_dp_clip=0.05, user_dp_noise=0.5,
                      user_dp_unit="client", user_dp_reproducible=True)
    history, _ = federated(tmp_path, settings, run, PARAMS, timeout=60.0)
    reference = simulated(settings, run, PARAMS)
    assert_same_history(history, reference, rtol=1e-9, atol=1e-9)
    assert history.column("epsilon")[-1] > 0 and history.column("dp_noise")[-1] == 0.5

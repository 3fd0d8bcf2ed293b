"""fedmc.flower: the split files, the client's two-phase state, the wire format, and one real
federation (a SuperLink and three SuperNodes as processes) against the simulation."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("flwr")

from fedmc.algorithms.registry import spec  # noqa: E402
from fedmc.core.protocol import Message  # noqa: E402
from fedmc.core.uploads import (  # noqa: E402
    OuterFactors,
    OuterRows,
    RowPatch,
    ScaledRows,
    Stacked,
)
from fedmc.deploy.node import Poller  # noqa: E402
from fedmc.deploy.split import client_files, write_split  # noqa: E402
from fedmc.errors import ConfigError
from fedmc.federation.settings import Schedule
from fedmc.flower.client_state import StateStore  # noqa: E402
from fedmc.flower.compact import pack, unpack  # noqa: E402
from fedmc.flower.manifest import Manifest  # noqa: E402
from fedmc.flower.settings import FederatedRun  # noqa: E402
from fedmc.flower.shard import load_shard  # noqa: E402
from fedmc.flower.wire import (  # noqa: E402
    NO_EXCHANGE,
    Envelope,
    RefusedReply,
    pack_arrays,
    pack_message,
    pack_reply,
    unpack_arrays,
    unpack_message,
    unpack_sums,
    unpack_uploads,
)
from fedmc.privacy.accounting import UserDP
from fedmc.run.data import federate, load_ratings  # noqa: E402
from fedmc.run.data_settings import DataSettings  # noqa: E402
from fedmc.run.spec import RunSpec  # noqa: E402
from fedmc.testing import (  # noqa: E402
    FEDERATION_COLUMNS,
    IGNORED_COLUMNS,
    assert_same_history,
)

PARAMS = {"rank": 3}


def test_split_files_rebuild_the_simulation_shards_bit_for_bit(tmp_path, data_settings,
                                                               ratings_file):
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
    """... and the folder's latest exchange (what a claim names, never behind the server's
    record of the client's last included exchange) follows the states on disk."""
    store = StateStore(tmp_path, run="r1")
    store.start({"x": 0})
    assert store.held_exchange == NO_EXCHANGE
    store.propose(3, {"x": 1})
    assert store.held_exchange == 3  # on disk before the reply leaves
    store.decide(NO_EXCHANGE)  # the server did not include exchange 3: dropped
    assert store.committed == {"x": 0} and store.pending_exchange == NO_EXCHANGE
    assert store.held_exchange == NO_EXCHANGE
    store.propose(5, {"x": 2})
    resumed = StateStore(tmp_path, run="r1")  # a node restarted before the decision
    assert resumed.pending_exchange == 5 == resumed.held_exchange
    resumed.decide(5)
    assert resumed.committed == {"x": 2}
    again = StateStore(tmp_path, run="r1")
    assert again.committed == {"x": 2} and again.held_exchange == 5
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


def _outer(kind, scale=None):
    """One client's statistics rows (d = 2, width 5) on rows 0 and 2 of a (3, 5) upload: three
    terms over two vectors."""
    rows = kind(np.array([0, 2]), np.array([2, 0]), np.array([0, 2, 3]), np.array([0, 1, 1]),
                np.array([1.5, -1.5, 2.0]), np.array([0.5, -0.5, 1.0]),
                np.array([[1.0, 2.0], [-3.0, 0.5]]))
    return Stacked((3, 5), rows=rows, scale=scale)


def test_rows_without_the_gram_part_travel_as_factors_without_a():
    """Rows ``sum_q b_q x_q`` alone (no Gram part, width ``d``): their factors omit the Gram
    weights ``a``, and the server forms the same rows."""
    args = (np.array([0, 2]), np.array([2, 0]), np.array([0, 2, 3]), np.array([0, 1, 1]),
            np.array([1.5, -1.5, 2.0]), np.array([0.5, -0.5, 1.0]),
            np.array([[1.0, 2.0], [-3.0, 0.5]]), False)
    rows = Stacked((3, 2), rows=OuterRows(*args))
    factors = Stacked((3, 2), rows=OuterFactors(*args), scale=np.array([0.3]))
    content = pack_reply({"s": factors})
    assert "s.a" not in unpack_arrays(content.array_records["uploads"])
    back = unpack_uploads(content, {"s": (3, 2)})["s"]
    np.testing.assert_allclose(back.weighted_sum(np.ones(1)),
                               0.3 * rows.weighted_sum(np.ones(1)), rtol=1e-15)
    assert back.nbytes() == factors.nbytes() == 8 * (2 * 2 + 2 * 2 + 2 * 3)
    parts = unpack_arrays(content.array_records["uploads"])
    parts["s.a"] = np.zeros(3)  # Gram weights on rows that have no Gram part
    content["uploads"] = pack_arrays(parts)
    with pytest.raises(RefusedReply):
        unpack_uploads(content, {"s": (3, 2)})


def test_scaled_rows_travel_as_one_vector_and_a_number_a_row():
    """A one-user client's exchange rows (:class:`ScaledRows`, factored): its vector and per
    row the index and one number go over the wire, scaled by its clip, and the server forms the
    same rows; malformed ones are refused."""
    rows = ScaledRows(np.array([0, 2]), np.array([2, 0]), np.array([1.5, -0.5]),
                      np.array([[1.0, 2.0]]), factored=True)
    content = pack_reply({"s": Stacked((3, 2), rows=rows, scale=np.array([0.3]))})
    back = unpack_uploads(content, {"s": (3, 2)})["s"]
    assert isinstance(back.rows, ScaledRows) and back.rows.factored
    np.testing.assert_allclose(back.weighted_sum(np.ones(1)),
                               0.3 * Stacked((3, 2), rows=rows).weighted_sum(np.ones(1)))
    assert back.nbytes() == 8 * (2 + 2 * 2)
    parts = unpack_arrays(content.array_records["uploads"])
    for broken in ({"s.vectors": np.ones((2, 2))}, {"s.b": np.array([1.0, np.inf])},
                   {"s.vectors": np.ones((1, 3))}):
        content["uploads"] = pack_arrays({**parts, **broken})
        with pytest.raises(RefusedReply):
            unpack_uploads(content, {"s": (3, 2)})
    content["uploads"] = pack_arrays({k: v for k, v in parts.items() if k != "s.b"})
    with pytest.raises(RefusedReply, match="without b"):
        unpack_uploads(content, {"s": (3, 2)})


def _gram():
    """One client's Gram of two users over 5 items (EASE's upload)."""
    from fedmc.core.gram_rows import GramRows

    return GramRows.of(np.array([0, 2]), np.array([0, 3, 5]), np.array([0, 2, 4, 1, 2]),
                       np.array([1.0, 2.0, 1.0, 3.0, 1.0]), 5)


def test_a_gram_travels_as_its_packed_upper_triangle_to_the_same_sum():
    """EASE's upload: the client's Gram goes over the wire as its upper triangle, scaled by
    its clip; the server forms the same symmetric rows and counts what was sent."""
    gram = _gram()
    sent = Stacked((5, 5), rows=gram, scale=np.array([0.5]))
    back = unpack_uploads(pack_reply({"g": sent}), {"g": (5, 5)})["g"]
    np.testing.assert_allclose(back.weighted_sum(np.ones(1)), sent.weighted_sum(np.ones(1)),
                               rtol=1e-15)
    assert back.nbytes() == sent.nbytes() == 8 * gram.numbers()


@pytest.mark.parametrize("broken", ["below", "outside", "count", "values", "nan"])
def test_a_malformed_triangle_is_refused(broken):
    content = pack_reply({"g": Stacked((5, 5), rows=_gram())})
    parts = unpack_arrays(content.array_records["uploads"])
    if broken == "below":
        parts["g.cols"] = parts["g.cols"].copy()
        parts["g.cols"][-1] = 0  # the last row's entry left of its diagonal
    elif broken == "outside":
        parts["g.index"] = parts["g.index"][:-1]  # a column with no row sent
        parts["g.upper"] = parts["g.upper"][:-1]
    elif broken == "count":
        parts["g.upper"] = parts["g.upper"] + 1
    elif broken == "values":
        parts["g.values"] = np.zeros((len(parts["g.index"]), 5))  # a triangle and rows
    else:
        parts["g.entries"] = np.full(len(parts["g.entries"]), np.nan)
    content["uploads"] = pack_arrays(parts)
    with pytest.raises(RefusedReply):
        unpack_uploads(content, {"g": (5, 5)})


def test_statistics_travel_as_their_factors_to_the_same_sum():
    """Federated ALS's ``upload=factors``: the rows' factors go over the wire, scaled by the
    client's clip, and the server forms the same rows; the bytes count the factors."""
    for scale in (None, np.array([0.3])):
        rows, factors = _outer(OuterRows, scale), _outer(OuterFactors, scale)
        back = unpack_uploads(pack_reply({"s": factors}), {"s": (3, 5)})["s"]
        assert isinstance(back.rows, OuterFactors)
        np.testing.assert_allclose(back.weighted_sum(np.ones(1)),
                                   rows.weighted_sum(np.ones(1)), rtol=1e-15)
        assert back.nbytes() == factors.nbytes()
    assert factors.nbytes() == 8 * (2 * 2 + 2 * 2 + 3 * 3)  # vectors, rows' index and count, terms
    assert rows.nbytes() == 8 * 2 * (5 + 1)  # two rows and their indices


@pytest.mark.parametrize("broken", ["a", "terms", "vec", "vectors", "values"])
def test_malformed_factors_are_refused(broken):
    content = pack_reply({"s": _outer(OuterFactors)})
    parts = unpack_arrays(content.array_records["uploads"])
    if broken == "values":
        parts["s.values"] = np.zeros((2, 5))  # rows and factors at once
    elif broken == "a":
        parts["s.a"] = np.array([1.0, np.nan, 2.0])
    elif broken == "terms":
        parts["s.terms"] = np.array([2, 2])  # four terms, three sent
    elif broken == "vec":
        parts["s.vec"] = np.array([0, 1, 2])  # no third vector
    else:
        parts["s.vectors"] = np.ones((2, 3))  # rows of 9, not 5
    content["uploads"] = pack_arrays(parts)
    with pytest.raises(RefusedReply):
        unpack_uploads(content, {"s": (3, 5)})


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


def _secure_party(tmp_path, client, reproducible=False):
    """A client of a secure federation under user-level DP at noise multiplier 0.9 (its
    aggregator as :meth:`fedmc.flower.settings.FederatedRun.planned_aggregator` makes it)."""
    from fedmc.core.protocol import FederationInfo
    from fedmc.federation.aggregator import Aggregator
    from fedmc.federation.population import federation_placement
    from fedmc.flower.client_app import Party
    from fedmc.privacy.accounting import Plan, UserDP

    cfg = spec("fedmc-admm").Config(rank=5)
    algorithm = spec("fedmc-admm").algorithm_for(cfg)
    info = FederationInfo(n_clients=9, n_items=400, normalizer=None, value_range=(1.0, 5.0))
    dp = UserDP(clip=0.5, noise=0.9, reproducible=reproducible)
    return Party(client, algorithm, cfg, info, None, StateStore(tmp_path / str(client), "run"),
                 Aggregator(algorithm, cfg, info, dp=dp, plan=Plan(10, 1.0, False),
                            placement=federation_placement(True)))


def _secure_round(round_, extra, compute=9):
    return Envelope(round_, Message(round_, "round", np.arange(compute), np.arange(compute), {}),
                    extra=extra)


def test_a_client_adds_its_own_noise_and_refuses_a_server_asking_for_less(tmp_path):
    """Distributed DP against the server: a member of a secure sum takes its noise multiplier
    from its own run settings (the plan calibrates it as the server's does) and refuses an
    exchange whose message asks for another (less noise, or none: a plain answer would carry
    its upload without a share) or names more members to share the noise among than the
    exchange computes on, or than there are clients; the honest message is answered."""
    from fedmc.errors import ConfigError

    party = _secure_party(tmp_path, 0)
    zeros = {name: np.zeros(shape) for name, shape in party.shapes.items()}
    honest = {"dp_noise": 0.9, "dp_members": 9}
    assert party.dp_noise(_secure_round(3, honest)) == 0.9
    assert party.secure_integers(_secure_round(3, honest), zeros)
    for told, why in [({**honest, "dp_noise": 0.3}, "multiplier 0.3"),
                      ({}, "multiplier 0,"),
                      ({**honest, "dp_members": 90}, "shared by 90 members"),
                      ({**honest, "dp_members": 18}, "shared by 18 members")]:
        with pytest.raises(ConfigError, match=why):
            party.dp_noise(_secure_round(3, told))
        with pytest.raises(ConfigError, match=why):
            party.secure_integers(_secure_round(3, told), zeros)
    with pytest.raises(ConfigError, match="shared by 9 members; the exchange has 4 of 9"):
        party.dp_noise(_secure_round(3, honest, compute=4))  # the cohort padded to 9


def test_a_clients_dp_share_is_its_own_and_the_same_when_an_exchange_is_repeated(tmp_path):
    """Distributed DP: a member's integers (here of a zero upload: its Skellam share of the
    noise, modulo the field) come from a stream of the client's secret and the exchange (a
    repeated exchange adds the same share, also after a restart: no second draw is released;
    another client or round draws anew); a secret the server sends is used only where the
    client's own settings say the run is reproducible."""
    from fedmc.privacy.skellam import MODULUS, member_stream

    def party(c, reproducible=False):
        return _secure_party(tmp_path, c, reproducible)

    me, other = party(0), party(1)

    def share(party, round_, secret=None):
        extra = {"dp_noise": 0.9, "dp_members": 9,
                 **({} if secret is None else {"dp_secret": secret})}
        envelope = _secure_round(round_, extra)
        zeros = {name: np.zeros(shape) for name, shape in party.shapes.items()}
        sent = party.secure_integers(envelope, zeros)
        return np.concatenate([np.where(v >= MODULUS // 2, v - MODULUS, v).ravel()
                               for v in sent.values()])

    first = share(me, 4)
    np.testing.assert_array_equal(share(me, 4), first)
    np.testing.assert_array_equal(share(party(0), 4), first)  # the node restarted
    assert not np.allclose(share(me, 5), first) and not np.allclose(share(other, 4), first)
    code = me.aggregator.integer_form("round", 0.9)
    assert first.size > 2000 and abs(first.std() / np.sqrt(code.variance / 9) - 1.0) < 0.05
    np.testing.assert_array_equal(share(me, 4, secret=7), first)  # private: its own secret
    seeded = code.shares(me.shapes, 9, member_stream(7, 0, 4, "round"))  # the run's secret
    np.testing.assert_array_equal(share(party(0, True), 4, secret=7),
                                  np.concatenate([v.ravel() for v in seeded.values()]))


def test_a_node_stays_quiet_for_most_of_the_usual_gap_and_then_polls():
    poller = Poller(poll=0.1, longest=0.5)
    assert poller.pause(0.0) == 0.1  # nothing learned yet
    for t in (10.0, 12.0, 13.6):  # gaps 2.0 and 1.6: quiet for 0.85 * 1.6 after a message
        poller.arrived(t)
    poller.replied(13.7)
    assert poller.pause(13.7) == pytest.approx(13.6 + 0.85 * 1.6 - 13.7)
    assert poller.pause(15.0) == pytest.approx(0.13)  # due: a tenth of the idle time
    assert poller.pause(30.0) == 0.5  # long idle: at most the longest interval


@pytest.mark.federation
@pytest.mark.parametrize("algorithm", ["fedmc-admm", "fedmavg"])  # fedmavg: all compute
def test_three_nodes_two_rounds_give_the_simulations_history(tmp_path, algorithm, data_settings,
                                                             federated, ratings_file, simulated):
    settings = data_settings(ratings_file(tmp_path))
    run = RunSpec(algorithm=algorithm, schedule=Schedule(rounds=2, active=2, seed=0))
    history, out = federated(tmp_path, settings, run, PARAMS, timeout=60.0)
    assert_same_history(history, simulated(settings, run, PARAMS), rtol=1e-9, atol=1e-9)
    assert [row["lost"] for row in history.rows if "lost" in row] == []
    assert {"config.json", "history.csv", "summary.json", "model.npz"} <= {
        p.name for p in out.iterdir()}


def test_user_level_dp_travels_in_the_run_configuration():
    run = RunSpec(data=DataSettings(normalize="public"),
                  schedule=Schedule(dp=UserDP(clip=0.3, noise=0.8, setup_clip=1.0)))
    sent = FederatedRun(spec=run.model_copy(update={"params": PARAMS}))
    back = FederatedRun.from_run_config(sent.run_config())
    assert back.privacy() == run.schedule.dp != None  # noqa: E711
    assert FederatedRun.from_run_config(FederatedRun().run_config()
                                        ).privacy() is None


@pytest.mark.parametrize(("key", "value", "named"), [
    ("run", "{not json", "key run: Invalid JSON"),
    ("run", '{"schedule": {"rounds": -1}}', "key run.schedule.rounds:"),
    ("max-upload-norm", "x", "key max-upload-norm:"),
])
def test_a_bad_run_configuration_names_its_key(key, value, named):
    """What ``run.toml`` gets wrong is named by its key (and, inside the ``run`` JSON object,
    by the field): one line the ServerApp's log shows."""
    with pytest.raises(ConfigError, match=r"^bad run configuration: ") as refused:
        FederatedRun.from_run_config({**FederatedRun().run_config(), key: value})
    assert named in str(refused.value) and "\n" not in str(refused.value)


def test_a_bad_run_configuration_leaves_its_refusal_in_a_new_out_folder(tmp_path):
    """The ServerApp's refusal of a run configuration is ``status.json`` "failed" naming the
    key, where the configuration names a new out folder; an earlier run's status stays."""
    import json

    from fedmc.flower.server_app import configured

    bad = {**FederatedRun().run_config(), "max-upload-norm": "x", "out": str(tmp_path / "new")}
    with pytest.raises(ConfigError, match="key max-upload-norm"):
        configured(bad)
    status = json.loads((tmp_path / "new" / "status.json").read_text())
    assert status["status"] == "failed" and "key max-upload-norm" in status["reason"]
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "status.json").write_text('{"status": "finished"}')
    with pytest.raises(ConfigError):
        configured({**bad, "out": str(tmp_path / "old")})
    assert json.loads((tmp_path / "old" / "status.json").read_text()) == {"status": "finished"}



def test_a_killed_serverapp_leaves_failed_within_seconds_zombie_or_not(tmp_path):
    """Issue 40's item 3: a process that wrote ``running`` and started its watch, then was
    SIGKILLed and left unreaped (a zombie, as ``flower-superexec`` leaves its ServerApp):
    ``status.json`` says ``failed`` within 10 s, naming the pid. A status that recorded its
    end, or belongs to another run (key), is left as it is."""
    import json
    import signal
    import subprocess
    import sys
    import time

    from fedmc.flower.sentinel import settle

    status = tmp_path / "status.json"
    serverapp = subprocess.Popen([sys.executable, "-c", f"""
import time
from pathlib import Path
from fedmc.flower.sentinel import watch
from fedmc.run.folder import write_status
write_status(Path({str(status)!r}), "running", key="k")
watch(Path({str(status)!r}), "k")
print("watched", flush=True)
time.sleep(120)
"""], stdout=subprocess.PIPE, text=True)
    assert serverapp.stdout.readline().strip() == "watched"
    serverapp.send_signal(signal.SIGKILL)
    deadline = time.monotonic() + 10
    while json.loads(status.read_text())["status"] == "running" and time.monotonic() < deadline:
        time.sleep(0.05)
    with open(f"/proc/{serverapp.pid}/stat") as fh:  # not reaped yet: a zombie
        assert fh.read().split(") ")[1].startswith("Z")
    left = json.loads(status.read_text())
    assert left["status"] == "failed" and f"(pid {serverapp.pid}) ended" in left["reason"]
    serverapp.wait()
    for recorded in ({"status": "finished", "key": "k"}, {"status": "running", "key": "x"}):
        status.write_text(json.dumps(recorded))
        assert not settle(status, "k") and json.loads(status.read_text()) == recorded

@pytest.mark.federation
def test_three_nodes_with_user_level_dp_give_the_simulations_history(tmp_path, data_settings,
                                                                     federated, ratings_file,
                                                                     simulated):
    """Central DP: each client clips its own upload, the server adds the noise to the sum
    from its stream, as the simulation does (every client in every round: q = 1)."""
    # split without a fitted normalizer: the served model would publish it (preflight refuses)
    settings = data_settings(ratings_file(tmp_path)).model_copy(update={"normalize": "none"})
    dp = UserDP(clip=0.05, noise=0.5, unit="client", reproducible=True)
    run = RunSpec(data=DataSettings(normalize="none"),  # a DP spec publishes no fitted one
                  schedule=Schedule(rounds=2, active=None, seed=0, dp=dp))
    history, _ = federated(tmp_path, settings, run, PARAMS, timeout=60.0)
    reference = simulated(settings, run, PARAMS)
    # the plain server sees every upload: no epsilon against it, where the simulation (which
    # hands its server sums only, as a secure sum does) reports one
    assert "epsilon_server" not in history.columns and "epsilon_server" in reference.columns
    assert_same_history(history, reference, rtol=1e-9, atol=1e-9,
                        ignore=(*IGNORED_COLUMNS, *FEDERATION_COLUMNS, "epsilon_server"))
    assert history.column("epsilon")[-1] > 0 and history.column("dp_noise")[-1] == 0.5

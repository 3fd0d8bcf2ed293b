"""What no fault, repeated submission or malformed reply may do to a federation (issue 29),
checked in one process (the loopback_federation fixture of conftest.py): a second run with
the same settings starts afresh, a finished run is never continued, an error reply is a lost
client and never a crash, and an upload outside its algorithm's bounds is refused."""

from __future__ import annotations

import json
import shutil
import time
import tomllib
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")

from fedmc.errors import ConfigError  # noqa: E402
from fedmc.federation.history import History  # noqa: E402
from fedmc.federation.settings import Schedule  # noqa: E402
from fedmc.flower.settings import FederatedRun  # noqa: E402
from fedmc.run.data_settings import DataSettings  # noqa: E402
from fedmc.run.spec import RunSpec  # noqa: E402
from fedmc.testing import assert_same_history, client_ids  # noqa: E402

LOCAL = ("seconds", "participants", "lost", "claims_refused")

PUBLIC = DataSettings(normalize="public", rating_scale=(1.0, 5.0))  # a DP run's (not fitted)


@pytest.fixture
def small(tmp_path, data_settings, ratings_file):
    """The data settings and the run of a small federation (4 clients, 3 per round)."""
    settings = data_settings(ratings_file(tmp_path, users=30), clients=4)
    run = FederatedRun(spec=RunSpec(params={"rank": 3},
                                    schedule=Schedule(rounds=4, active=3, seed=0)),
                       out=Path("out"))
    return settings, run


def test_a_second_run_of_the_splits_run_config_starts_afresh(tmp_path, monkeypatch, capsys,
                                                             invoke, ratings_file,
                                                             loopback_federation):
    """The ``run.toml`` of ``fedmc federate split`` submitted twice (another ``out``) to the
    same nodes, as docs/federation.md's steps do: the second run's clients start from their
    initial states, not from the first run's final ones, so both histories are the same."""
    ratings = ratings_file(tmp_path, users=30)
    split = tmp_path / "split"
    code, _, err = invoke(monkeypatch, capsys, "federate", "split", "--ratings", ratings,
                          "--columns", "user_id,item_id,stars", "--clients", 4, "--active", 3,
                          "--rounds", 4, "--rank", 3, "--out", split)
    assert code == 0, err
    with open(split / "run.toml", "rb") as fh:
        run = FederatedRun.from_run_config(tomllib.load(fh))
    settings = run.spec.data  # unused: the split is given
    histories = [loopback_federation(tmp_path, settings,
                                     run.model_copy(update={"out": tmp_path / out}),
                                     split=split, run_id=run_id)
                 for run_id, out in enumerate(("first", "second"), start=1)]
    assert_same_history(*histories, rtol=0, atol=0, ignore=LOCAL)


def test_a_finished_run_is_never_continued(tmp_path, small, monkeypatch, loopback_federation):
    """A copy of a checkpoint taken during a run that has since finished, resumed: every
    node refuses the run's key, and the server stops with that line before any exchange."""
    import fedmc.flower.server_app as server_app
    from fedmc.flower.checkpoints import CheckpointWriter

    settings, run = small
    write, kept = CheckpointWriter.after_exchange, tmp_path / "kept.pkl"

    def write_and_keep(self, round, checkpoint):
        write(self, round, checkpoint)
        if round == 2:  # the checkpoint
            shutil.copy(self.out / server_app.CHECKPOINT, kept)

    monkeypatch.setattr(CheckpointWriter, "after_exchange", write_and_keep)
    loopback_federation(tmp_path, settings, run)
    assert not list((tmp_path / "state").glob("*/committed.pkl"))  # the nodes dropped them
    shutil.copy(kept, tmp_path / "out" / server_app.CHECKPOINT)
    started = time.monotonic()
    with pytest.raises(ConfigError, match="has already finished here"):
        loopback_federation(tmp_path, settings, run.model_copy(update={"resume": True}),
                            split=tmp_path / "split", run_id=2)
    # at once (about 2 s here), not after waiting out the nodes' replies (300 s when the
    # refusal was taken for one lost node)
    assert time.monotonic() - started < 60
    rows = History.read_csv(tmp_path / "out" / "history.csv").rows
    assert len(rows) == 5 and np.isfinite([r["test_rmse"] for r in rows]).all()


def unavailable(client: int, calls: range):
    """A mod: while ``client``'s node is gone (its messages other than queries numbered in
    ``calls``, from 0), Flower answers on its behalf: an error reply "node unavailable" whose
    source is the SuperLink (node id 1), not the node."""
    from flwr.app import Error, Message
    from flwr.common.constant import ErrorCode

    seen = [0]

    def mod(msg, context, call_next):
        if int(context.node_config["client"]) != client or msg.metadata.message_type == "query":
            return call_next(msg, context)
        seen[0] += 1
        if seen[0] - 1 not in calls:
            return call_next(msg, context)
        reply = Message(Error(ErrorCode.NODE_UNAVAILABLE, "node unavailable"), reply_to=msg)
        reply.metadata.__dict__["_src_node_id"] = 1
        return reply

    return mod


def every(mods):
    """One mod per client, as the loopback's ``mods`` takes them."""
    return dict(enumerate(mods))


@pytest.mark.parametrize("secagg", [False, True], ids=["plain", "secagg"])
def test_flowers_error_reply_for_a_node_is_a_lost_client(tmp_path, small, secagg,
                                                        loopback_federation, out_files):
    """Client 1's node gone for a while: Flower's "node unavailable" replies (from node id 1)
    mark client 1 lost in those exchanges, the failure is recorded, and the run finishes."""
    settings, run = small
    calls = range(8, 16) if secagg else range(2, 4)  # a secure exchange is four messages
    history = loopback_federation(tmp_path, settings, run.model_copy(update={"secagg": secagg}),
                                  mods={1: unavailable(1, calls)})
    lost = {int(r["round"]): str(r["lost"]).split() for r in history.rows}
    assert any("1" in clients for clients in lost.values())
    model, events = out_files(tmp_path / "out")
    assert np.isfinite(model["V"]).all()
    if not secagg:  # SecAgg+ leaves the node out without an error of fedmc's to record
        failed = [e for e in events if e["event"] == "failed"]
        assert failed and all(e["clients"] == [1] and "unavailable" in e["reason"]
                              for e in failed)


def test_an_exchange_that_loses_everyone_is_recorded_and_the_run_goes_on(tmp_path, small,
                                                                         loopback_federation,
                                                                         out_files):
    """Every node gone for one exchange (round 2's, which carries round 1's evaluation):
    round 1's row lists everyone lost and has no metrics, round 2's has no participants, and
    the run finishes."""
    settings, run = small
    history = loopback_federation(tmp_path, settings, run,
                                  mods=every(unavailable(c, range(2, 3)) for c in range(4)))
    rows = {int(r["round"]): r for r in history.rows}
    assert str(rows[1]["lost"]).split() == ["0", "1", "2", "3"] and not rows[2]["participants"]
    assert "test_rmse" not in rows[1] and np.isfinite(rows[4]["test_rmse"])
    written = History.read_csv(tmp_path / "out" / "history.csv").rows
    assert "test_rmse" not in written[1] and len(written) == 5
    _, events = out_files(tmp_path / "out")
    assert [e["round"] for e in events if e["event"] == "everyone lost"] == [2]


def test_a_run_that_keeps_losing_everyone_stops_cleanly(tmp_path, small, loopback_federation):
    """Every node gone from round 2 on: after max-lost-rounds exchanges the run stops with
    one line, and its checkpoint stays for a resume."""
    from fedmc.flower.server_app import CHECKPOINT

    settings, run = small
    with pytest.raises(ConfigError, match="every client was lost in 2 exchanges in a row"):
        loopback_federation(tmp_path, settings, run.model_copy(update={"max_lost_rounds": 2}),
                            mods=every(unavailable(c, range(2, 99)) for c in range(4)))
    assert (tmp_path / "out" / CHECKPOINT).exists()
    status = json.loads((tmp_path / "out" / "status.json").read_text())
    assert status["status"] == "failed" and "every client was lost" in status["reason"]


def tampered(client: int, change):
    """A mod: ``client``'s replies with ``change(content)`` applied (a malicious client)."""
    from fedmc.flower.compact import pack, unpack

    def mod(msg, context, call_next):
        reply = call_next(msg, context)
        if int(context.node_config["client"]) == client and reply.has_content():
            content = unpack(reply.content)
            change(content)
            reply.content = pack(content)
        return reply

    return mod


def scale_uploads(factor: float):
    """``change`` for :func:`tampered`: every upload multiplied by ``factor``."""
    from fedmc.flower.wire import pack_arrays, unpack_arrays

    def change(content):
        if "uploads" in content.array_records:
            parts = unpack_arrays(content.array_records["uploads"])
            content["uploads"] = pack_arrays({k: a * factor if k.endswith((".dense", ".values"))
                                              else a for k, a in parts.items()})

    return change


def negative_sse(content):
    """``change`` for :func:`tampered`: a negative squared-error sum."""
    if "sums" in content.config_records:
        content.config_records["sums"]["sse_train"] = -1.0


def refusals(events, client: int) -> list[str]:
    return [e["reason"] for e in events if e["event"] == "refused" and e["clients"] == [client]]


def test_a_huge_finite_upload_is_refused_and_poisons_nothing(tmp_path, small,
                                                             loopback_federation, out_files):
    """Client 1's uploads times 1e300 (finite, but their norm overflows): refused every time,
    the model, every metric and the checkpoints stay finite, and the run finishes."""
    settings, run = small
    history = loopback_federation(tmp_path, settings, run,
                                  mods={1: tampered(1, scale_uploads(1e300))})
    model, events = out_files(tmp_path / "out")
    assert np.isfinite(model["V"]).all() and np.isfinite(history.column("test_rmse")).all()
    assert refusals(events, 1) and all("norm" in r for r in refusals(events, 1))


def test_an_upload_over_max_upload_norm_is_refused_and_honest_ones_are_clipped(
        tmp_path, small, loopback_federation, out_files):
    """With ``max-upload-norm``: a bound above every honest upload changes nothing (the run
    equals the one without it), client 1's uploads times 1000 are refused; a bound below
    them has the clients clip, and nothing is refused."""
    settings, run = small
    free = loopback_federation(tmp_path / "free", settings, run)
    bounded = run.model_copy(update={"max_upload_norm": 50.0})
    same = loopback_federation(tmp_path / "same", settings, bounded)
    assert_same_history(free, same, rtol=0, atol=0, ignore=LOCAL)
    loopback_federation(tmp_path / "x1000", settings, bounded,
                        mods={1: tampered(1, scale_uploads(1000.0))})
    _, events = out_files(tmp_path / "x1000" / "out")
    assert refusals(events, 1) and all("exceeds the bound" in r for r in refusals(events, 1))
    clipped = loopback_federation(tmp_path / "clipped", settings,
                                  run.model_copy(update={"max_upload_norm": 0.01}))
    _, events = out_files(tmp_path / "clipped" / "out")
    assert not [e for e in events if e["event"] == "refused"]
    assert clipped.rows[-1]["test_rmse"] != free.rows[-1]["test_rmse"]


def test_by_default_a_scaled_upload_is_refused_and_every_exchanges_norms_are_reported(
        tmp_path, small, loopback_federation, out_files):
    """Issue 40's item 2: under the run configuration's defaults (``max-upload-norm =
    "auto"``) an honest run equals one without any bound (0); client 1's uploads times 1000
    are refused every time, recorded (``refused`` lines, the history's
    ``uploads_over_bound``, the summary), and every plain exchange's norms are in
    ``progress.jsonl``."""
    import json

    settings, run = small
    assert run.auto_bound
    auto = loopback_federation(tmp_path / "auto", settings, run)
    free = loopback_federation(tmp_path / "free", settings,
                               run.model_copy(update={"max_upload_norm": 0.0}))
    assert_same_history(free, auto, rtol=0, atol=0, ignore=LOCAL)
    _, events = out_files(tmp_path / "auto" / "out")
    norms = [e for e in events if e["event"] == "uploads"]
    assert len(norms) == len([e for e in events if e["event"] == "exchange"
                              and e["phase"] != "evaluate"])
    assert all(e["norm_median"] <= e["norm_max"] < e["bound_per_root_user"] and
               not e["over_bound"] for e in norms)
    scaled = loopback_federation(tmp_path / "x1000", settings, run,
                                 mods={1: tampered(1, scale_uploads(1000.0))})
    _, events = out_files(tmp_path / "x1000" / "out")
    asked = [e for e in events if e["event"] == "exchange" and 1 in e["clients"]
             and e["phase"] != "evaluate"]
    assert len(refusals(events, 1)) == len(asked) > 0
    assert all("exceeds the bound" in r for r in refusals(events, 1))
    assert sum(scaled.column("uploads_over_bound")) == len(asked)
    assert all(1 not in included for included in client_ids(scaled).values())
    summary = json.loads((tmp_path / "x1000" / "out" / "summary.json").read_text())
    assert summary["uploads"]["bound"].startswith("auto")
    assert sum(p["over_bound"] for p in summary["uploads"]["phases"].values()) == len(asked)

def test_impossible_evaluation_sums_are_refused(tmp_path, small, loopback_federation,
                                                out_files):
    """Client 1 reports a negative squared-error sum: refused, so no negative objective and
    no NaN RMSE reaches the history."""
    settings, run = small
    history = loopback_federation(tmp_path, settings, run, mods={1: tampered(1, negative_sse)})
    assert np.isfinite(history.column("train_rmse")).all()
    assert (history.column("objective") >= 0).all()
    _, events = out_files(tmp_path / "out")
    assert refusals(events, 1) and all("negative" in r for r in refusals(events, 1))


def test_a_run_into_an_out_that_holds_a_run_is_refused_unless_overwrite(tmp_path, small,
                                                                      loopback_federation):
    """As ``fedmc run`` and ``federate local`` refuse it: the folder stays as it was; with
    ``overwrite`` the earlier run's files are replaced. A finished run's status says so."""
    settings, run = small
    loopback_federation(tmp_path, settings, run)
    out = tmp_path / "out"
    assert json.loads((out / "status.json").read_text())["status"] == "finished"
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(ConfigError, match="already holds a run"):
        loopback_federation(tmp_path, settings, run, split=tmp_path / "split", run_id=2)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    loopback_federation(tmp_path, settings, run.model_copy(update={"overwrite": True}),
                        split=tmp_path / "split", run_id=3)
    assert json.loads((out / "status.json").read_text())["status"] == "finished"


def test_relative_paths_are_taken_in_the_stated_folder(tmp_path, monkeypatch):
    """``out`` and ``manifest`` relative: taken in ``FEDMC_RUNS`` (``fedmc federate
    server``'s ``--runs``), refused in one line without it."""
    from fedmc.flower.out_folder import RUNS_ENV, resolved

    run = FederatedRun(out=Path("runs/a"), manifest=Path("split/manifest.json"))
    monkeypatch.delenv(RUNS_ENV, raising=False)
    with pytest.raises(ConfigError, match="out = 'runs/a' is relative"):
        resolved(run)
    monkeypatch.setenv(RUNS_ENV, str(tmp_path))
    assert resolved(run).out == tmp_path / "runs" / "a"
    assert resolved(run).manifest == tmp_path / "split" / "manifest.json"
    absolute = run.model_copy(update={"out": tmp_path / "elsewhere"})
    assert resolved(absolute).out == tmp_path / "elsewhere"


def test_a_claim_refused_while_a_run_resumes_reaches_the_history():
    """The server takes up its checkpoint's view of the clients before the nodes are asked
    (so a second claimant is judged by the identity first claimed) and again in the round
    loop: a claim refused in between stays, and the first identity wins."""
    from fedmc.flower.grid_clients import GridClients

    before = GridClients(None, 2, 1.0)
    before.admit(7, 1, "first", b"")
    snapshot = before.snapshot()
    resumed = GridClients(None, 2, 1.0)
    resumed.restore(snapshot)
    assert not resumed.admit(8, 1, "second", b"")
    resumed.restore(snapshot)
    assert [r.client for r in resumed.refusals] == [1]
    assert resumed.token_of == {1: "first"} and resumed.key == before.key


def _second_process_after(n: int):
    """A reply tamper under which a client's replies after its first ``n`` come from another
    process than the one admitted, and the count of its replies."""
    from fedmc.flower.wire import HEADER

    calls = [0]

    def second_process(content):
        if HEADER in content.config_records:
            calls[0] += 1
            if calls[0] > n:
                content.config_records[HEADER]["process"] = "another"

    return calls, second_process


def test_replies_of_a_second_process_for_a_client_are_refused_and_recorded(
        tmp_path, small, monkeypatch, loopback_federation, out_files):
    """From round 2 on, client 1's replies come from another process than the one its node
    was admitted with (a duplicate answering under the same node id): never taken, recorded
    as refused claims, and the run finishes."""
    from fedmc.flower.client_app import NODE_PROCESS_ENV

    monkeypatch.setenv(NODE_PROCESS_ENV, "first")  # as fedmc federate node sets it
    settings, run = small
    calls, second_process = _second_process_after(2)
    history = loopback_federation(tmp_path, settings, run,
                                  mods={1: tampered(1, second_process)})
    rows = {int(r["round"]): r for r in history.rows}
    assert all("1" not in str(rows[k]["participants"]).split() for k in (3, 4))
    assert any("1" in str(r["claims_refused"]).split() for r in history.rows)
    _, events = out_files(tmp_path / "out")
    assert [e for e in events if e["event"] == "claim refused" and e["clients"] == [1]]


def test_a_private_run_refuses_a_second_process_without_naming_its_client(
        tmp_path, small, monkeypatch, loopback_federation, out_files):
    """Under user-level DP only the (secretly) sampled clients are asked: a reply of a second
    process is refused as above, but its client is not listed in ``claims_refused``."""
    from fedmc.flower.client_app import NODE_PROCESS_ENV
    from fedmc.privacy.accounting import UserDP

    monkeypatch.setenv(NODE_PROCESS_ENV, "first")
    settings, run = small
    settings = settings.model_copy(update={"normalize": "public", "rating_scale": (1.0, 5.0)})
    spec = run.spec.model_copy(update={"data": PUBLIC, "schedule": Schedule(
        rounds=4, active=None, seed=0, dp=UserDP(noise=1.0, clip=0.5, unit="client"))})
    calls, second_process = _second_process_after(2)
    history = loopback_federation(tmp_path, settings, run.model_copy(update={"spec": spec}),
                                  mods={1: tampered(1, second_process)})
    assert calls[0] > 2  # client 1 did answer from a second process
    assert not any(str(r.get("claims_refused", "")).strip() for r in history.rows)
    _, events = out_files(tmp_path / "out")
    assert not [e for e in events if e["event"] == "claim refused"]


def test_under_secagg_max_upload_norm_bounds_the_range_a_client_can_claim(
        tmp_path, small, monkeypatch, loopback_federation, out_files):
    """SecAgg+ hides single uploads, but with ``max-upload-norm`` the server never widens a
    secure sum's range beyond what clipped uploads need: client 1 skipping its clip and
    sending 1000 times its upload makes the sums it joins overflow, and they are taken from
    nobody (recorded) instead of carrying its upload into the model."""
    import fedmc.flower.client_app as client_app

    step = client_app.Party.step

    def inflated(self, envelope):
        uploads, weight = step(self, envelope)
        if self.client == 1 and weight:
            uploads = {k: s.scaled(np.array([1e6])) for k, s in uploads.items()}
        return uploads, weight

    monkeypatch.setattr(client_app.Party, "step", inflated)
    settings, run = small
    bounded = run.model_copy(update={"secagg": True, "max_upload_norm": 50.0,
                                     "max_lost_rounds": 10})
    history = loopback_federation(tmp_path, settings, bounded)
    model, events = out_files(tmp_path / "out")
    overflowed = [e for e in events if e["event"] == "refused" and "overflows" in e["reason"]]
    assert overflowed and np.isfinite(model["V"]).all()
    for r in history.rows:
        assert "1" not in str(r.get("participants", "")).split()

"""Shared fixtures and test helpers. Test modules import nothing from each other
(tests/test_architecture.py): what several share lives here, as a fixture (a helper function is
handed out by a fixture of its name), or in :mod:`fedmc.testing` when it is test tooling of
the package (the conformance checks, the small data sets, the HTTP server)."""

from __future__ import annotations

import copy
import json
import os
import sys
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

import fedmc.testing

if TYPE_CHECKING:
    from flwr.app import Context, Message
    from flwr.proto.node_pb2 import NodeInfo  # pylint: disable=E0611

    from fedmc.federation.history import History
    from fedmc.federation.loop import Outcome
    from fedmc.flower.settings import FederatedRun
    from fedmc.run.data import DataSettings
    from fedmc.run.spec import RunSpec

# The command line runs a rank without compiled specialized kernels on the generic ones and
# compiles the others in a background process (fedmc.run.precompile): tests compile in the
# foreground, so no process outlives them and results do not depend on what was compiled.
os.environ.setdefault("FEDMC_KERNELS", "specialized")

# Licensed real data: $FEDMC_DATA when set, else the checkout's sibling ../shared/data.
SHARED_DATA = Path(os.environ.get("FEDMC_DATA")
                   or Path(__file__).resolve().parents[1].parent / "shared" / "data")


def _require_shared_data(*parts: str) -> Path:
    """Path under the real-data folder (:data:`SHARED_DATA`); skip the test when it is
    absent (a folder without the files a test needs counts as absent: name the files)."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} not present (licensed data is not part of the repository)")
    return path


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--slow", action="store_true",
                     help="also run the tests marked slow (CI leaves them out)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked slow, and those that start real Flower processes (marked federation), run
    only with ``--slow``."""
    if config.getoption("--slow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --slow")
    for item in items:
        if "slow" in item.keywords or "federation" in item.keywords:
            item.add_marker(skip)


# --- the round loop -----------------------------------------------------------------------


@pytest.fixture(scope="session")
def checkpoint_keeper():
    """A class of callbacks that keep every checkpoint the round loop offers, pickled, by
    round (``keeper.saved``), as a federation's server writes them; ``Keeper(*also)`` pickles
    the tuple of the checkpoint and ``also`` (an early-stopping watcher, as the server keeps
    its own)."""
    import pickle

    from fedmc.federation.callbacks import Callback

    class Keeper(Callback):
        def __init__(self, *also) -> None:
            self.saved: dict[int, bytes] = {}
            self.also = also

        def after_exchange(self, round, checkpoint):
            taken = checkpoint()
            self.saved[round] = pickle.dumps((taken, *self.also) if self.also else taken)

    return Keeper


# --- small data sets ----------------------------------------------------------------------


@pytest.fixture(scope="session")
def tiny_federated():
    """:func:`fedmc.testing.tiny_federated`: a random low-rank matrix on a mask, federated."""
    return fedmc.testing.tiny_federated


@pytest.fixture(scope="session")
def tiny_interactions():
    """:func:`fedmc.testing.tiny_interactions`: implicit feedback on a random mask."""
    return fedmc.testing.tiny_interactions


@pytest.fixture(scope="session")
def raw_data():
    """:func:`fedmc.testing.raw_data`: ratings with raw ids unlike their dense indices."""
    return fedmc.testing.raw_data


@pytest.fixture
def tiny(tiny_federated):
    return tiny_federated()[0]


@pytest.fixture(scope="session")
def require_shared_data():
    """``require_shared_data(*parts)``: the path under the real-data folder, or skip."""
    return _require_shared_data


# --- the command line -----------------------------------------------------------------------


def _invoke(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
            *args: object) -> tuple[int, str, str]:
    from fedmc.cli import main

    monkeypatch.setattr(sys, "argv", ["fedmc", *map(str, args)])
    code = 0
    try:
        main()
    except SystemExit as exc:
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="session")
def invoke():
    """``invoke(monkeypatch, capsys, *args)``: run ``fedmc *args`` in this process; its exit
    status, standard output and standard error."""
    return _invoke


@pytest.fixture
def ratings_csv(tmp_path):
    rng = np.random.default_rng(0)
    rows = {(int(u), int(i)) for u, i in zip(rng.integers(1, 41, 900), rng.integers(1, 31, 900),
                                             strict=True)}
    path = tmp_path / "r.csv"
    with open(path, "w") as fh:
        fh.write("userId,movieId,rating\n")
        for u, i in sorted(rows):
            fh.write(f"{u},{i},{1 + (u * i) % 5}\n")
    return path


# --- federations: a ratings file, its settings, the simulation to compare with ---------------


def _ratings_file(folder: Path, users: int = 40, items: int = 25, seed: int = 0) -> Path:
    """A small CSV of ratings 1..5 with string user ids (every user rates a few items)."""
    rng = np.random.default_rng(seed)
    lines = ["user_id,item_id,stars"]
    for u in range(users):
        for i in rng.choice(items, size=rng.integers(3, 12), replace=False):
            lines.append(f"u{u:03d},{100 + i},{rng.integers(1, 6)}")
    path = folder / "ratings.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def _data_settings(path: Path, clients: int = 3) -> DataSettings:
    from fedmc.run.data import DataSettings

    return DataSettings(ratings=path, columns=("user_id", "item_id", "stars"), clients=clients)


def _simulation(settings: DataSettings, run: RunSpec, params: dict) -> Outcome:
    from fedmc.algorithms.registry import spec
    from fedmc.federation.loop import Rounds
    from fedmc.federation.sampling import make_sampler
    from fedmc.run.data import federate, load_ratings
    from fedmc.sim import simulate

    data = federate(load_ratings(settings), settings)
    schedule = run.schedule
    sampler = make_sampler(data.n_clients, schedule.active, schedule.sampling,
                           participation=schedule.participation)
    entry = spec(run.algorithm)
    cfg = entry.Config(**params)
    algorithm = entry.algorithm_for(cfg)
    return simulate(algorithm, cfg, data, rounds=Rounds(sampler, schedule.rounds, dp=schedule.dp),
                    seed=schedule.seed)


def _simulated(settings: DataSettings, run: RunSpec, params: dict) -> History:
    return _simulation(settings, run, params).history


def _federated(tmp_path: Path, settings: DataSettings, run: RunSpec, params: dict,
               on_event=None, **flags) -> tuple[History, Path]:
    from fedmc.deploy.local import run_local
    from fedmc.federation.history import History
    from fedmc.flower.settings import FederatedRun

    out = tmp_path / "out"
    started: list[int] = []

    def watch(event, fed):
        started.extend(p.pid for p in fed.processes.values() if p.pid not in started)
        if on_event is not None:
            on_event(event, fed)

    run_local(FederatedRun(spec=run.model_copy(update={"params": params}), out=out, **flags),
              settings, tmp_path / "work", on_event=watch)
    for pid in started:  # every process started is gone, with its process group
        with pytest.raises(ProcessLookupError):
            os.killpg(pid, 0)
    return History.read_csv(out / "history.csv"), out


def _low_rank_ratings(folder: Path, users: int = 80, items: int = 30, seed: int = 0) -> Path:
    """A small CSV of ratings 1..5 around a rank-2 matrix plus noise (12 per user): data a
    model can learn and then overfit, so that early stopping has a best round to find."""
    rng = np.random.default_rng(seed)
    U, V = rng.normal(size=(users, 2)), rng.normal(size=(items, 2))
    lines = ["user_id,item_id,stars"]
    for u in range(users):
        for i in rng.choice(items, 12, replace=False):
            value = np.clip(np.rint(3 + U[u] @ V[i] + 0.5 * rng.normal()), 1, 5)
            lines.append(f"u{u:03d},{100 + i},{int(value)}")
    path = folder / "low-rank.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="session")
def low_rank_ratings():
    """``low_rank_ratings(folder, users=80, items=30, seed=0)``: a learnable ratings CSV."""
    return _low_rank_ratings


@pytest.fixture(scope="session")
def ratings_file():
    """``ratings_file(folder, users=40, items=25, seed=0)``: a small ratings CSV in ``folder``."""
    return _ratings_file


@pytest.fixture(scope="session")
def data_settings():
    """``data_settings(path, clients=3)``: the data settings of a :func:`ratings_file`."""
    return _data_settings


@pytest.fixture(scope="session")
def simulation():
    """``simulation(settings, run, params)``: the simulated run's outcome."""
    return _simulation


@pytest.fixture(scope="session")
def simulated():
    """``simulated(settings, run, params)``: the simulated run's history."""
    return _simulated


@pytest.fixture(scope="session")
def federated():
    """``federated(tmp_path, settings, run, params, on_event=None, **flags)``: a real local
    federation (a SuperLink and a SuperNode per client as processes), its history and out
    folder; every process it started is gone when it returns."""
    pytest.importorskip("flwr")
    return _federated


# --- a federation in one process (the loopback) ----------------------------------------------
# The ServerApp's loop (fedmc.flower.server_app.serve) over a Grid that hands every message
# straight to fedmc's ClientApp, one context per node. No SuperLink, no node processes, no
# sleeps: what it checks is the server's and the clients' code (the wire format, SecAgg+ and
# its scaling, the two-phase state, what the server accepts) in a second or two, where a real
# deployment (run_local) takes half a minute. A ``mods`` list wraps chosen clients' ClientApp
# (a client that misbehaves).

FIRST_NODE = 2**63 + 7  # Flower's node ids lie above the int64 maximum
ClientAppCallable = Callable[["Message", "Context"], "Message"]
Mod = Callable[["Message", "Context", ClientAppCallable], "Message"]


class LoopbackGrid:
    """A Grid whose nodes answer every message as it is pushed (the section's comment).

    Parameters
    ----------
    contexts
        Each node's Flower context (its node configuration names its client).
    mods
        Per client id, a mod wrapped around the ClientApp for that client's messages (one
        that returns None sends no reply).
    """

    def __init__(self, contexts: dict[int, Context], mods: dict[int, Mod] | None = None):
        self.contexts = contexts
        self.mods = mods or {}
        self.replies: dict[str, Message] = {}

    def get_node_ids(self) -> list[int]:
        return list(self.contexts)

    def get_nodes(self) -> list[NodeInfo]:
        """The nodes, each with a public key of its own (as the SuperLink reports them)."""
        from flwr.proto.node_pb2 import NodeInfo  # pylint: disable=E0611

        return [NodeInfo(node_id=n, public_key=f"key of node {n}".encode())
                for n in self.contexts]

    def push_messages(self, messages: Iterable[Message]) -> list[str]:
        from flwr.app import Error, Message

        from fedmc.flower.client_app import app

        ids = []
        for msg in messages:
            message_id = str(uuid.uuid4())
            msg.metadata.__dict__["_message_id"] = message_id
            ids.append(message_id)
            delivered = copy.deepcopy(msg)  # as the wire gives it: nothing shared
            context = self.contexts[msg.metadata.dst_node_id]
            mod = self.mods.get(int(context.node_config["client"]))
            try:
                reply = (app(delivered, context) if mod is None
                         else mod(delivered, context, app))
            except Exception as exc:  # a ClientApp's exception reaches the server as an error
                reply = Message(Error(0, repr(exc)), reply_to=delivered)
            if reply is not None:  # a mod's None: no reply comes (as one lost to the timeout)
                self.replies[message_id] = copy.deepcopy(reply)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> list[Message]:
        return [self.replies.pop(m) for m in list(message_ids) if m in self.replies]


@contextmanager
def _server_identity(run_id: int = 1) -> Iterator[None]:
    """Messages take their sender from the process's task identity (a ServerApp's)."""
    from flwr.supercore.task_identity import TaskIdentity

    from fedmc.flower.client_app import _PARTIES

    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = run_id, 0, 1
    try:
        yield
    finally:
        TaskIdentity.run_id = TaskIdentity.node_id = TaskIdentity.task_id = None
        _PARTIES.clear()


def _loopback_federation(folder: Path, data: DataSettings, run: FederatedRun,
                         mods: dict[int, Mod] | None = None,
                         split: Path | None = None, run_id: int = 1) -> History:
    from flwr.app import Context, RecordDict
    from flwr.common.config import parse_config_args

    from fedmc.deploy.local import node_config
    from fedmc.deploy.split import write_split
    from fedmc.flower.manifest import Manifest
    from fedmc.flower.server_app import serve

    if split is None:
        split = folder / "split"
        manifest = write_split(data, split, boolean=run.algorithm.data_kind == "boolean")
    else:
        manifest = Manifest.read(split / "manifest.json")
    run = run.model_copy(update={"manifest": split / "manifest.json", "out": folder / run.out})
    contexts = {}
    for c in range(manifest.n_clients):
        config = parse_config_args([node_config(split, c, folder / "state" / f"client-{c}")])
        contexts[FIRST_NODE + c] = Context(run_id, FIRST_NODE + c, config, RecordDict(),
                                           run.run_config())
    with _server_identity(run_id):
        return serve(LoopbackGrid(contexts, mods), run)


@pytest.fixture(scope="session")
def loopback_federation():
    """``loopback_federation(folder, data, run, mods=None, split=None, run_id=1)``: split
    ``data`` into ``folder/split`` (or take the files already in ``split``), serve ``run`` (its
    ``out`` under ``folder`` unless absolute) over a :class:`LoopbackGrid` of one node per
    client; the history."""
    pytest.importorskip("flwr")
    return _loopback_federation


def _out_files(folder: Path) -> tuple[dict[str, np.ndarray], list[dict]]:
    """The published model and the progress events of a run's output folder."""
    with np.load(folder / "model.npz") as npz:
        model = {name: npz[name] for name in npz.files}
    events = [json.loads(line) for line in (folder / "progress.jsonl").read_text().splitlines()]
    return model, events


@pytest.fixture(scope="session")
def out_files():
    """``out_files(folder)``: the published model and the progress events of an out folder."""
    return _out_files


def _assert_publishes_only_what_is_private(out: Path, epsilon: float) -> None:
    """A private federation's out folder (docs/privacy.md, "What a run publishes"): history
    columns the guarantee covers, progress events that name no client and hold no time, every
    output marked private, the guarantee per party (the server's without amplification), no
    counts of the data and no timings."""
    from fedmc.federation.aggregator import PUBLIC_COLUMNS
    from fedmc.federation.history import History

    history = History.read_csv(out / "history.csv")
    assert set(history.columns) <= {*PUBLIC_COLUMNS, "claims_refused"}
    _, events = _out_files(out)
    assert not [e for e in events if {"clients", "time", "seconds"} & set(e)]
    summary = json.loads((out / "summary.json").read_text())
    config = json.loads((out / "config.json").read_text())
    eps = summary["privacy"]["epsilon"]
    assert summary["privacy"]["private"] and config["private"]
    assert json.loads((out / "model.json").read_text())["private"]
    assert eps["outsiders"] <= epsilon
    if summary["privacy"]["calibrated_against"] == "server":  # the promise, kept
        assert eps["server"] <= epsilon
    else:  # no amplification against the server
        assert eps["server"] is None or epsilon < eps["server"]
    assert not {"train_seconds", "total_seconds", "peak_memory_mb"} & set(summary)
    data = config["data"]
    assert data["normalizer"]["kind"] == "public"
    assert not [k for k in data if k.endswith("_ratings") or k.startswith("n_")]


@pytest.fixture(scope="session")
def assert_publishes_only_what_is_private():
    """``assert_publishes_only_what_is_private(out, epsilon)``: a private federation's out
    folder publishes only what its guarantee covers."""
    return _assert_publishes_only_what_is_private

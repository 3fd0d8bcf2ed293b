"""A deployment across machines as ``docs/federation.md`` describes it, on this host: the
keys and certificates of ``fedmc federate certs``, the SuperLink of ``fedmc federate server``
(TLS, SuperNode authentication, the roster) and three ``fedmc federate node`` processes.

The nodes live at a network address of their own. Where this process may create a network
namespace (root, ``ip``), that is a namespace joined to the host by a veth pair, with the
server listening on 0.0.0.0 as in production: the nodes and the attacker's ``flwr`` commands
reach the host only through the veth address, as from another machine. Elsewhere it is the
loopback address 127.0.0.2 with the server's Fleet API bound to it (the Control API stays on
127.0.0.1, which a process on this host can always reach: a weaker check that the Control API
is neither on the Fleet API's socket nor on the nodes' address; ``FEDMC_TEST_NO_NETNS=1``
chooses it where a namespace could be made).

Marked slow (and federation): about three minutes here.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

pytest.importorskip("flwr")

from cryptography.hazmat.primitives import serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402

from fedmc.deploy.app import write_app, write_run_config  # noqa: E402
from fedmc.deploy.local import free_port, node_config  # noqa: E402
from fedmc.deploy.split import write_split  # noqa: E402
from fedmc.federation.history import History  # noqa: E402
from fedmc.federation.settings import Schedule
from fedmc.flower.settings import FederatedRun  # noqa: E402
from fedmc.run.data import DataSettings  # noqa: E402
from fedmc.run.spec import RunSpec  # noqa: E402
from fedmc.testing import assert_same_history, client_ids  # noqa: E402

PARAMS = {"rank": 3}

pytestmark = [pytest.mark.slow, pytest.mark.federation]
WAIT = 300.0  # seconds a run or a process may take to get where a test expects it


@dataclass
class Network:
    """Where the nodes are: the server's ``--host``, the address the nodes reach it at (in
    its certificate) and the command prefix that runs a process at the nodes' address."""

    bind: str
    address: str
    prefix: list[str] = field(default_factory=list)
    cleanup: list[list[str]] = field(default_factory=list)


def namespace() -> Network | None:
    """A network namespace joined to this host by a veth pair, when this process may make
    one; None otherwise."""
    if (not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("ip") is None
            or os.environ.get("FEDMC_TEST_NO_NETNS")):
        return None
    pid = os.getpid()
    name, host_if, node_if = f"fedmc{pid}", f"fm{pid % 10**8}h", f"fm{pid % 10**8}n"
    subnet = f"10.{200 + pid % 50}.{pid // 50 % 250}"
    net = Network("0.0.0.0", f"{subnet}.1", ["ip", "netns", "exec", name],
                  [["ip", "link", "del", host_if], ["ip", "netns", "del", name]])
    steps = [["ip", "netns", "add", name],
             ["ip", "link", "add", host_if, "type", "veth", "peer", "name", node_if],
             ["ip", "link", "set", node_if, "netns", name],
             ["ip", "addr", "add", f"{subnet}.1/30", "dev", host_if],
             ["ip", "link", "set", host_if, "up"],
             [*net.prefix, "ip", "addr", "add", f"{subnet}.2/30", "dev", node_if],
             [*net.prefix, "ip", "link", "set", node_if, "up"],
             [*net.prefix, "ip", "link", "set", "lo", "up"]]
    for step in steps:
        if subprocess.run(step, capture_output=True).returncode != 0:
            remove(net)
            return None
    return net


def remove(net: Network) -> None:
    for step in net.cleanup:
        subprocess.run(step, capture_output=True)


class Deployment:
    """The processes of one deployment, their logs, and ``flwr`` with three connections:
    ``operator`` (the Control API on 127.0.0.1), ``fleet`` and ``control`` (the Fleet and
    Control ports at the nodes' address of the server)."""

    def __init__(self, root: Path, net: Network, settings: DataSettings) -> None:
        self.root, self.net = root, net
        self.port, self.control_port = free_port(), free_port()
        self.processes: dict[str, subprocess.Popen] = {}
        home = root / "flwr-home"
        home.mkdir()
        (root / "logs").mkdir()
        self.env = {**os.environ, "FLWR_HOME": str(home), "FLWR_TELEMETRY_ENABLED": "0",
                    "FLWR_DISABLE_UPDATE_CHECK": "1", "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": "0.5",
                    "PATH": os.pathsep.join([str(Path(sys.executable).parent),
                                             os.environ.get("PATH", "")])}
        ca = root / "certs" / "ca.crt"
        (home / "config.toml").write_text("".join(
            f'[superlink.{name}]\naddress = "{address}"\nroot-certificates = "{ca}"\n\n'
            for name, address in (("operator", f"127.0.0.1:{self.control_port}"),
                                  ("fleet", f"{net.address}:{self.port}"),
                                  ("control", f"{net.address}:{self.control_port}"))))
        self.split = root / "split"
        self.settings = settings
        write_split(self.settings, self.split)
        self.app = write_app(root / "app")

    def fedmc(self, name: str, *args: str, at_node: bool = False) -> subprocess.Popen:
        """Start ``fedmc ARGS`` in a session of its own (at the nodes' address)."""
        log = open(self.root / "logs" / f"{name}.log", "ab")
        try:
            proc = subprocess.Popen([*(self.net.prefix if at_node else []), sys.executable,
                                     "-m", "fedmc", *args], env=self.env, stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        finally:
            log.close()
        self.processes[name] = proc
        return proc

    def start_server(self) -> None:
        self.fedmc("server", "federate", "server", "--certs", str(self.root / "certs"),
                   "--host", self.net.bind, "--port", str(self.port),
                   "--control-port", str(self.control_port),
                   "--database", str(self.root / "state" / "superlink.db"))
        self.until(lambda: self._healthy(), "the server answers on the operator's port")

    def start_node(self, name: str, client: int, key: Path,
                   state: str | None = None) -> subprocess.Popen:
        """Start node ``name`` for ``client`` with ``key``, its state in ``state/NAME`` (or
        another node's folder)."""
        return self.fedmc(name, "federate", "node", "--superlink",
                          f"{self.net.address}:{self.port}",
                          "--root-certificates", str(self.root / "certs" / "ca.crt"),
                          "--auth-key", str(key), "--node-config",
                          node_config(self.split, client, self.root / "state" / (state or name)),
                          at_node=True)

    def flwr(self, *args: str, at_node: bool = False) -> subprocess.CompletedProcess:
        return subprocess.run([*(self.net.prefix if at_node else []), "flwr", *args],
                              env=self.env, capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL)

    def submit(self, run: RunSpec, out: Path, timeout: float = 60.0) -> int:
        config = FederatedRun(spec=run.model_copy(update={"params": PARAMS}), timeout=timeout,
                              manifest=self.split / "manifest.json",
                              out=out).run_config()
        done = self.flwr("run", str(self.app), "operator", "--run-config",
                         str(write_run_config(out.with_suffix(".toml"), config)),
                         "--format", "json")
        assert done.returncode == 0, done.stdout + done.stderr
        return int(json.loads(done.stdout[done.stdout.find("{"):])["run-id"])

    def status(self, run_id: int) -> str:
        listed = self.flwr("ls", "operator", "--run-id", str(run_id), "--format", "json")
        return json.loads(listed.stdout[listed.stdout.find("{"):])["runs"][0]["status"]

    def history(self, out: Path) -> History:
        self.until(lambda: '"done"' in read(out / "progress.jsonl"), f"{out} is written")
        return History.read_csv(out / "history.csv")

    def log(self, name: str) -> str:
        return read(self.root / "logs" / f"{name}.log")

    def until(self, condition, what: str, wait: float = WAIT) -> None:
        deadline = time.monotonic() + wait
        while not condition():
            if time.monotonic() > deadline:
                logs = {p.name: p.read_text()[-1500:] for p in (self.root / "logs").iterdir()}
                raise AssertionError(f"timed out waiting until {what}; logs: {logs}")
            time.sleep(0.2)

    def kill(self, name: str, sig: signal.Signals = signal.SIGKILL) -> None:
        proc = self.processes.pop(name)
        with_group(proc, sig)
        proc.wait(30)

    def stop(self) -> None:
        """Stop every process this deployment started, and Flower's SuperExec and ServerApp
        processes (in sessions of their own) that serve this deployment's Control port."""
        for proc in self.processes.values():
            with_group(proc, signal.SIGTERM)
        for proc in self.processes.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                with_group(proc, signal.SIGKILL)
                proc.wait()
        self.processes.clear()
        for pid in flower_processes(f"127.0.0.1:{self.control_port}"):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _healthy(self) -> bool:
        if self.processes["server"].poll() is not None:
            raise AssertionError(f"the server exited: {self.log('server')}")
        try:
            import ssl
            context = ssl.create_default_context(cafile=str(self.root / "certs" / "ca.crt"))
            with urllib.request.urlopen(f"https://127.0.0.1:{self.control_port}/health",
                                        timeout=1, context=context):
                return True
        except OSError:
            return False


def read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def with_group(proc: subprocess.Popen, sig: signal.Signals) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def flower_processes(needle: str) -> list[int]:
    """Processes whose command line holds ``needle``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def new_key(folder: Path, name: str) -> Path:
    """An EC P-384 key pair in OpenSSH files ``NAME`` and ``NAME.pub`` (ssh-keygen's)."""
    key = ec.generate_private_key(ec.SECP384R1())
    (folder / name).write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption()))
    (folder / f"{name}.pub").write_bytes(key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH))
    return folder / name


@pytest.fixture(scope="module")
def deployment(tmp_path_factory, data_settings, ratings_file):
    net = namespace() or Network("127.0.0.2", "127.0.0.2")
    root = tmp_path_factory.mktemp("deployment")
    fed = Deployment(root, net, data_settings(ratings_file(root)))
    try:
        made = subprocess.run([sys.executable, "-m", "fedmc", "federate", "certs", "--out",
                               str(root / "certs"), "--clients", "3", "--name", net.address],
                              env=fed.env, capture_output=True, text=True)
        assert made.returncode == 0, made.stderr
        fed.start_server()
        for c in range(3):
            fed.start_node(f"node-{c}", c, root / "certs" / f"client-{c}")
        fed.until(lambda: all("connected" in fed.log(f"node-{c}") for c in range(3)),
                  "every node is connected")
        yield fed
    finally:
        fed.stop()
        remove(net)


def test_the_control_api_cannot_be_reached_from_the_nodes_address(deployment):
    fed = deployment
    spare = new_key(fed.root, "spare")
    for where in ("fleet", "control"):
        for args in (["ls", where], ["supernode", "register", f"{spare}.pub", where],
                     ["run", str(fed.app), where]):
            done = fed.flwr(*args, at_node=True)
            assert done.returncode != 0, (args, done.stdout)
            if where == "fleet":  # the Fleet socket does not serve the Control API's paths
                assert "404" in done.stdout + done.stderr, (args, done.stdout)
    listed = fed.flwr("supernode", "ls", "operator", "--format", "json")  # the operator can
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert len(json.loads(listed.stdout[listed.stdout.find("{"):])["nodes"]) == 3


def test_three_nodes_equal_fedmc_run_and_a_second_claimant_is_refused(deployment, simulated):
    """A registered node that claims client 1 (the operator registered its key, which the
    roster gives to no client) is refused and recorded; a node whose key is not registered
    cannot even connect; the run equals ``fedmc run``."""
    fed = deployment
    impostor, stranger = new_key(fed.root, "impostor"), new_key(fed.root, "stranger")
    done = fed.flwr("supernode", "register", f"{impostor}.pub", "operator")
    assert done.returncode == 0, done.stdout + done.stderr
    fed.start_node("impostor", 1, impostor)
    fed.start_node("stranger", 2, stranger)
    fed.until(lambda: "connected" in fed.log("impostor"), "the impostor is connected")
    fed.until(lambda: "refused to activate" in fed.log("stranger"), "the stranger is refused")
    run = RunSpec(schedule=Schedule(rounds=2, active=2, seed=0))
    out = fed.root / "out"
    fed.submit(run, out)
    history = fed.history(out)
    assert_same_history(history, simulated(fed.settings, run, PARAMS), rtol=1e-9, atol=1e-9)
    assert all(not lost for lost in client_ids(history, "lost").values())
    assert client_ids(history, "claims_refused")[0] == [1]
    events = [json.loads(line) for line in read(out / "progress.jsonl").splitlines()]
    refused = [e for e in events if e["event"] == "claim refused"]
    assert [e["clients"] for e in refused] == [[1]] and "roster" in refused[0]["reason"]
    node = refused[0]["reason"].split()[1]  # "node N claims client 1: ..."
    assert f"node {node} connected" in fed.log("impostor")
    assert fed.processes["stranger"].poll() is None, "it waits to be registered"
    fed.kill("impostor", signal.SIGTERM)
    fed.kill("stranger", signal.SIGTERM)


def test_a_duplicate_node_is_refused_and_a_refused_node_joins_once_restarted(deployment,
                                                                             simulated):
    """Issue 29's problems 3 and 4: a second process with client 1's own key and node
    configuration exits 2 at once (the state folder is held); node 2 started with client 1's
    configuration is refused, and once restarted with its own it is asked again and joins
    the run that was waiting for it, which then equals ``fedmc run``."""
    fed = deployment
    certs = fed.root / "certs"
    duplicate = fed.start_node("duplicate", 1, certs / "client-1", state="node-1")
    assert duplicate.wait(60) == 2, fed.log("duplicate")
    assert "another live node process" in fed.log("duplicate")
    fed.processes.pop("duplicate")
    fed.kill("node-2", signal.SIGTERM)
    fed.start_node("node-2", 1, certs / "client-2")  # client 1's configuration: refused
    run, out = RunSpec(schedule=Schedule(rounds=2, active=2, seed=0)), fed.root / "refused"
    fed.submit(run, out)
    fed.until(lambda: '"claim refused"' in read(out / "progress.jsonl"), "node 2 is refused")
    fed.kill("node-2", signal.SIGTERM)
    fed.start_node("node-2", 2, certs / "client-2")  # the same key and node id, signed on anew
    history = fed.history(out)
    assert_same_history(history, simulated(fed.settings, run, PARAMS), rtol=1e-9, atol=1e-9)
    assert client_ids(history, "claims_refused")[0] == [1]


def test_nodes_outlive_flwr_stop_their_own_restart_and_a_superlink_restart(deployment, simulated):
    fed = deployment
    long = fed.root / "long"
    run_id = fed.submit(RunSpec(schedule=Schedule(rounds=50, active=2, seed=0)), long)
    fed.until(lambda: '"round": 1' in read(long / "progress.jsonl"), "round 1 has begun")
    stopped = fed.flwr("stop", str(run_id), "operator")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    fed.until(lambda: fed.status(run_id) == "finished:stopped", "the run is stopped")
    time.sleep(3)  # a node that held the run's message gets 403 and logs it (Flower's node died)
    assert all(fed.processes[f"node-{c}"].poll() is None for c in range(3)), "nodes live on"
    # a node killed and started again rejoins at once (no 60 s lockout of its key)
    fed.kill("node-2")
    started, before = time.monotonic(), fed.log("node-2").count("connected")
    fed.start_node("node-2", 2, fed.root / "certs" / "client-2")
    fed.until(lambda: fed.log("node-2").count("connected") == before + 1, "node 2 is back", 30)
    assert "signed off" in fed.log("node-2") and time.monotonic() - started < 30
    # the SuperLink killed and started again on its database: the nodes reconnect
    fed.kill("server")
    fed.until(lambda: all("cannot be reached" in fed.log(f"node-{c}") for c in range(3)),
              "every node noticed")
    fed.start_server()
    fed.until(lambda: all("answers again" in fed.log(f"node-{c}") for c in range(3)),
              "every node is back")
    run, out = RunSpec(schedule=Schedule(rounds=2, active=2, seed=0)), fed.root / "after"
    fed.submit(run, out)
    history = fed.history(out)
    assert_same_history(history, simulated(fed.settings, run, PARAMS), rtol=1e-9, atol=1e-9)
    assert all(not lost for lost in client_ids(history, "lost").values())


def test_a_run_resumed_after_a_superlink_crash_equals_the_uninterrupted_one(deployment, simulated,
                                                                            simulation):
    """The SuperLink (and with it the server host's Flower processes) killed with SIGKILL
    right after round 3 of 6 is checkpointed; the SuperLink started again on its database, the
    nodes reconnect, ``fedmc federate resume`` submits the run again from the checkpoint: the
    history and the model are ``fedmc run``'s (1e-9), no client is lost."""
    import numpy as np

    fed = deployment
    run, out = RunSpec(schedule=Schedule(rounds=6, active=2, seed=0)), fed.root / "crashed"
    fed.submit(run, out)
    fed.until(lambda: '"round": 3, "row"' in read(out / "progress.jsonl"), "round 3 is done")
    fed.until(lambda: (out / "checkpoint.pkl").exists(), "round 3 is checkpointed")
    fed.kill("server")
    for pid in flower_processes(f"127.0.0.1:{fed.control_port}"):  # its ServerApp dies too
        os.kill(pid, signal.SIGKILL)
    fed.until(lambda: '"status": "failed"' in read(out / "status.json"),
              "status.json says the run failed", wait=10)
    fed.until(lambda: all("cannot be reached" in fed.log(f"node-{c}") for c in range(3)),
              "every node noticed")
    fed.start_server()
    fed.until(lambda: all("answers again" in fed.log(f"node-{c}") for c in range(3)),
              "every node is back")
    done = subprocess.run([sys.executable, "-m", "fedmc", "federate", "resume", str(out),
                           "--app", str(fed.app), "--connection", "operator"],
                          env=fed.env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    history = fed.history(out)
    reference = simulated(fed.settings, run, PARAMS)
    assert_same_history(history, reference, rtol=1e-9, atol=1e-9)
    assert all(not lost for lost in client_ids(history, "lost").values())

    expected = simulation(fed.settings, run, PARAMS).server.V
    with np.load(out / "model.npz") as model:
        np.testing.assert_allclose(model["V"], expected, rtol=0, atol=1e-9)
    assert not (out / "checkpoint.pkl").exists()


POISON = """
import sys
import numpy as np
import fedmc.flower.client_app as client_app
from fedmc.cli import main

honest = client_app.Party.step


def poisoned(self, envelope):
    uploads, weight = honest(self, envelope)
    return {k: s.scaled(np.array([1e3])) for k, s in uploads.items()}, weight


client_app.Party.step = poisoned
sys.argv = ["fedmc", *sys.argv[1:]]
main()
"""
"""A node process whose every upload is multiplied by 1000 (a malicious client): the run
configuration's default bound (``max-upload-norm = "auto"``) refuses it."""
FAULTS = ("kill", "sign off", "duplicate", "copy", "poison", "server")
FAULT_ROUNDS = 80  # room for every fault: a restarted node rejoins after the server's probe


def current_round(out: Path) -> int:
    """The round of the run's latest exchange."""
    events = [json.loads(line) for line in read(out / "progress.jsonl").splitlines()]
    return max((e["round"] for e in events if e["event"] == "exchange"), default=0)


def fault(fed: Deployment, kind: str, client: int, out: Path, after: int) -> None:
    """Inject ``kind`` on ``client``'s node (or the server) now; the run goes on from there;
    restore the node (or resume the run) once round ``after`` is under way."""
    name, key = f"node-{client}", fed.root / "certs" / f"client-{client}"

    def under_way(k: int) -> None:
        fed.until(lambda: f'"round": {k}, "phase": "round"' in read(out / "progress.jsonl"),
                  f"round {k} is under way")

    def restart() -> None:  # and wait until the new process holds the state folder: a
        # duplicate started before it would take the folder and the restarted node refuse
        lock = fed.root / "state" / name / "node.lock"
        before = read(lock).strip()
        fed.start_node(name, client, key)
        fed.until(lambda: read(lock).strip() not in ("", before), f"{name} holds its state")

    if kind == "kill":
        fed.kill(name)
        restart()
    elif kind == "sign off":
        fed.kill(name, signal.SIGTERM)
        under_way(after)
        restart()
    elif kind == "duplicate":
        duplicate = fed.start_node("duplicate", client, key, state=name)
        assert duplicate.wait(60) == 2, fed.log("duplicate")
        fed.processes.pop("duplicate")
    elif kind == "copy":  # a copy of the key and folder started elsewhere: refused, stops
        shutil.rmtree(fed.root / "state" / f"copy-{client}", ignore_errors=True)
        shutil.copytree(fed.root / "state" / name, fed.root / "state" / f"copy-{client}")
        copy = fed.start_node("copy", client, key, state=f"copy-{client}")
        assert copy.wait(WAIT) == 2, fed.log("copy")
        fed.processes.pop("copy")
    elif kind == "poison":
        fed.kill(name, signal.SIGTERM)
        seen = fed.log(f"poisoned-{client}").count("connected")
        log = open(fed.root / "logs" / f"poisoned-{client}.log", "ab")
        fed.processes["poisoned"] = subprocess.Popen(
            [*fed.net.prefix, sys.executable, "-c", POISON, "federate", "node", "--superlink",
             f"{fed.net.address}:{fed.port}", "--root-certificates",
             str(fed.root / "certs" / "ca.crt"), "--auth-key", str(key), "--node-config",
             node_config(fed.split, client, fed.root / "state" / name)],
            env=fed.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
        log.close()
        fed.until(lambda: fed.log(f"poisoned-{client}").count("connected") > seen,
                  "the poisoner is on")
        refused = read(out / "progress.jsonl").count("exceeds the bound")
        fed.until(lambda: read(out / "progress.jsonl").count("exceeds the bound")
                  > refused or current_round(out) >= FAULT_ROUNDS - 4,
                  "a poisoned upload is refused")
        fed.kill("poisoned", signal.SIGTERM)
        fed.start_node(name, client, key)
    else:  # the SuperLink and its ServerApp killed, started again, the run resumed
        fed.until(lambda: (out / "checkpoint.pkl").exists(), "a round is checkpointed")
        fed.kill("server")
        for pid in flower_processes(f"127.0.0.1:{fed.control_port}"):
            os.kill(pid, signal.SIGKILL)
        fed.start_server()
        done = subprocess.run([sys.executable, "-m", "fedmc", "federate", "resume", str(out),
                               "--app", str(fed.app), "--connection", "operator"],
                              env=fed.env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("seed", range(5))
def test_a_run_with_random_faults_finishes_as_the_replay_of_its_participants(deployment, seed):
    """Issue 29's item 7: a run with TLS and node authentication while nodes are killed and
    restarted, signed off, duplicated, copied elsewhere (key and state folder, issue 40) and
    replaced by a poisoning process, and the SuperLink is killed and the run resumed, each at
    a moment the seed draws: the run
    finishes, the history names the losses and refusals, and the published model equals
    the replay of the clients the history says each round included."""
    import random

    fed, draw = deployment, random.Random(seed)
    run = RunSpec(schedule=Schedule(rounds=FAULT_ROUNDS, active=2, seed=seed))
    out = fed.root / f"f{seed}"
    fed.submit(run, out, timeout=10.0)
    kinds, start = draw.sample(FAULTS, len(FAULTS)), 3
    for kind in kinds:
        start += draw.randint(1, 2)
        fed.until(lambda k=start: f'"round": {k}, "phase": "round"'
                  in read(out / "progress.jsonl"), f"round {start} is under way")
        fault(fed, kind, draw.randrange(3), out, start + 2)
        start = max(start + 2, current_round(out))
    history = fed.history(out)
    assert len(history.rows) == FAULT_ROUNDS + 1, "the run finished"
    events = [json.loads(line) for line in read(out / "progress.jsonl").splitlines()]
    assert [e for e in events if e["event"] == "failed"], "the nodes gone are recorded"
    assert [e for e in events if e["event"] == "refused" and "exceeds the bound" in e["reason"]]
    assert [e for e in events if e["event"] == "uploads" and e["over_bound"]]
    assert [e for e in events if e["event"] == "claim refused"], "the copy is recorded"
    assert any(client_ids(history, "lost").values())
    assert_replayed(fed, out, history, run)


def assert_replayed(fed: Deployment, out: Path, history: History, run: RunSpec) -> None:
    """The published model equals the replay of the clients the history says each round
    included (1e-12)."""
    import numpy as np

    from fedmc.algorithms.fedmc_admm import PAPER as FEDMC_ADMM
    from fedmc.federation.loop import Rounds
    from fedmc.federation.sampling import make_sampler
    from fedmc.run.data import federate, load_ratings
    from fedmc.testing import replay

    schedule = run.schedule
    data = federate(load_ratings(fed.settings), fed.settings)
    again = replay(FEDMC_ADMM, FEDMC_ADMM.Config(**PARAMS), data,
                   rounds=Rounds(make_sampler(3, schedule.active), schedule.rounds),
                   seed=schedule.seed, included=client_ids(history))
    with np.load(out / "model.npz") as model:
        np.testing.assert_allclose(model["V"], again.server.V, rtol=0, atol=1e-12)


def test_copies_of_a_nodes_key_and_state_folder_are_refused_and_the_node_keeps_serving(
        deployment):
    """Issue 40's item 1: two copies of client 1's key and state folder, each started
    elsewhere (a folder of its own) while node 1 serves: one copied at round 3 and started
    after the other (its folder older than the server's record), one copied and started at
    round 5 (current: only a probe of the process admitted tells it from a restart). Each is
    refused and recorded, and stops (exit 2); node 1 keeps serving; the model equals the
    replay of the recorded participants."""
    fed = deployment
    run, out = RunSpec(schedule=Schedule(rounds=40, active=2, seed=3)), fed.root / "copied"
    fed.submit(run, out, timeout=10.0)
    state, key = fed.root / "state", fed.root / "certs" / "client-1"

    def under_way(k: int) -> None:
        fed.until(lambda: f'"round": {k}, "phase": "round"' in read(out / "progress.jsonl"),
                  f"round {k} is under way")

    under_way(3)
    shutil.copytree(state / "node-1", state / "earlier-1")
    under_way(5)
    shutil.copytree(state / "node-1", state / "current-1")
    for copy in ("current-1", "earlier-1"):
        before = read(out / "progress.jsonl").count('"claim refused"')
        proc = fed.start_node(copy, 1, key, state=copy)
        assert proc.wait(WAIT) == 2, fed.log(copy)
        fed.processes.pop(copy)
        assert "refused this node process" in fed.log(copy)
        assert read(out / "progress.jsonl").count('"claim refused"') > before
    history = fed.history(out)
    assert len(history.rows) == 41, "the run finished"
    refused = [r for r in client_ids(history, "claims_refused").values() if r]
    assert refused and all(r == [1] for r in refused)
    late = [k for k, clients in client_ids(history).items() if k > 30 and 1 in clients]
    assert late, "node 1 keeps serving"
    assert fed.processes["node-1"].poll() is None
    assert_replayed(fed, out, history, run)

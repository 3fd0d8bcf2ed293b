"""A deployment across machines, the cheap parts: ``fedmc federate certs`` (keys Flower takes,
a certificate a TLS client accepts for the names given and the loopback), the Fleet-only
front of ``fedmc federate server``, how the server admits a node's claim to a client, the
node's connection errors and its configuration check. The real-process deployment is in
``tests/test_flower_deploy_slow.py``."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import ssl
import stat
from typing import Any

import httpx
import pytest

pytest.importorskip("flwr")

from cryptography import x509  # noqa: E402
from cryptography.hazmat.primitives import serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from flwr.app import ConfigRecord, Context, Error, Message, RecordDict  # noqa: E402
from flwr.proto.node_pb2 import NodeInfo  # noqa: E402
from flwr.supercore.task_identity import TaskIdentity  # noqa: E402

from fedmc.deploy.certs import write_certs  # noqa: E402
from fedmc.deploy.fleet import (  # noqa: E402
    Dropped,
    FleetConnection,
    RunStopped,
    transport_failure,
)
from fedmc.deploy.node import load_auth_key  # noqa: E402
from fedmc.deploy.server import FleetOnly, fleet_paths, register_roster  # noqa: E402
from fedmc.deploy.split import client_files, write_split  # noqa: E402
from fedmc.errors import ConfigError, FedMCError  # noqa: E402
from fedmc.federation.history import History  # noqa: E402
from fedmc.flower.client_app import NODE_KEYS, NodeSettings  # noqa: E402
from fedmc.flower.client_state import identity  # noqa: E402
from fedmc.flower.compact import packed  # noqa: E402
from fedmc.flower.grid_clients import GridClients, Record, Refusal  # noqa: E402
from fedmc.flower.roster import pem_public, read_roster  # noqa: E402
from fedmc.flower.server_app import _mark_participants  # noqa: E402
from fedmc.flower.wire import process_tag  # noqa: E402


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    out = tmp_path_factory.mktemp("deploy") / "certs"
    write_certs(out, 3, ["superlink.example.org", "10.0.0.5"])
    return out


def test_certs_give_flower_keys_and_a_roster_of_them(certs):
    roster = read_roster(certs / "roster.json")
    assert sorted(roster) == [0, 1, 2] and len(set(roster.values())) == 3
    for c in range(3):
        private, public = load_auth_key(certs / f"client-{c}")  # as the node loads it
        assert isinstance(public.curve, ec.SECP384R1)
        on_disk = serialization.load_ssh_public_key((certs / f"client-{c}.pub").read_bytes())
        assert pem_public(on_disk) == pem_public(public) == roster[c]
    for secret in ("ca.key", "server.key", "client-0", "client-2"):
        assert stat.S_IMODE((certs / secret).stat().st_mode) == 0o600, secret


def test_the_server_certificate_names_the_hosts_given_and_the_loopback(certs):
    ca = x509.load_pem_x509_certificate((certs / "ca.crt").read_bytes())
    cert = x509.load_pem_x509_certificate((certs / "server.pem").read_bytes())
    cert.verify_directly_issued_by(ca)
    alt = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert alt.get_values_for_type(x509.DNSName) == ["superlink.example.org", "localhost"]
    assert alt.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("10.0.0.5"),
                                                       ipaddress.ip_address("127.0.0.1")]
    for host in ("superlink.example.org", "10.0.0.5", "127.0.0.1", "localhost"):
        handshake(certs, host)  # what the SuperExec, flwr and the nodes check
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(certs, "other.example.org")


def handshake(certs, host: str) -> None:
    """A TLS handshake in memory: a client trusting ``ca.crt`` that connects to ``host``."""
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(certs / "server.pem", certs / "server.key")
    client = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    pipes = [(ssl.MemoryBIO(), ssl.MemoryBIO()) for _ in range(2)]
    ends = [server.wrap_bio(*pipes[0], server_side=True),
            client.wrap_bio(*pipes[1], server_hostname=host)]
    done = [False, False]
    for _ in range(20):
        for k, end in enumerate(ends):
            if not done[k]:
                try:
                    end.do_handshake()
                    done[k] = True
                except ssl.SSLWantReadError:
                    pass
        for (_, out), (into, _) in ((pipes[0], pipes[1]), (pipes[1], pipes[0])):
            into.write(out.read())
        if all(done):
            return
    raise AssertionError("handshake did not finish")


def test_certs_refuse_to_replace_a_deployment_and_take_a_clients_own_key(tmp_path, monkeypatch,
                                                                          capsys, invoke):
    out = tmp_path / "certs"
    code, _, _ = invoke(monkeypatch, capsys, "federate", "certs", "--out", out, "--clients", 2)
    assert code == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    code, _, err = invoke(monkeypatch, capsys, "federate", "certs", "--out", out,
                          "--clients", 2)
    assert code == 2 and "--overwrite" in err and len(err.strip().splitlines()) == 1
    own = ec.generate_private_key(ec.SECP384R1()).public_key()
    (tmp_path / "mine.pub").write_bytes(own.public_bytes(serialization.Encoding.OpenSSH,
                                                         serialization.PublicFormat.OpenSSH))
    code, _, err = invoke(monkeypatch, capsys, "federate", "certs", "--out", out, "--clients",
                          2, "--node-key", f"5={tmp_path / 'mine.pub'}", "--overwrite")
    assert code == 2 and "0..1" in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing half-written
    code, _, _ = invoke(monkeypatch, capsys, "federate", "certs", "--out", out, "--clients",
                        2, "--node-key", f"1={tmp_path / 'mine.pub'}", "--overwrite")
    assert code == 0 and not (out / "client-1").exists() and (out / "client-0").exists()
    assert read_roster(out / "roster.json")[1] == pem_public(own)
    assert (out / "ca.crt").read_bytes() != before["ca.crt"]


class Recorder:
    """An ASGI app that records the paths it serves."""

    def __init__(self) -> None:
        self.served: list[str] = []

    async def __call__(self, scope, receive, send) -> None:
        self.served.append(scope.get("path", scope["type"]))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})


def call(app, scope) -> list[dict]:
    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": b""}

    async def send(message):
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return sent


def test_from_the_network_only_the_fleet_api_is_served():
    inner = Recorder()
    front = FleetOnly(inner, ("127.0.0.1", 9093), fleet_paths())
    assert {"/v1/fleet/pull-messages", "/v1/fleet/activate-node", "/health"} <= fleet_paths()
    assert not any(p.startswith(("/v1/control", "/v1/runtime")) for p in fleet_paths())
    public = {"type": "http", "server": ("10.0.0.5", 9092)}
    for path in ("/v1/control/start-run", "/v1/control/register-node", "/v1/runtime/get-nodes",
                 "/v1/runtime/acquire-task", "/docs", "/openapi.json", "/v1/fleet/",
                 "/v1/fleet/../control/start-run", "/v1/fleet/pull-messages/x"):
        sent = call(front, {**public, "path": path})
        assert sent[0]["status"] == 404, path
    assert call(front, {"type": "websocket", "server": ("10.0.0.5", 9092), "path": "/health"}
                ) == [{"type": "websocket.close", "code": 1008}]
    call(front, {**public, "path": "/v1/fleet/pull-messages"})
    call(front, {**public, "server": ("127.0.0.1", 9092), "path": "/health"})
    # the operator's socket (bound to 127.0.0.1 only) reaches everything
    call(front, {"type": "http", "server": ("127.0.0.1", 9093), "path": "/v1/control/start-run"})
    call(front, {"type": "lifespan"})
    assert inner.served == ["/v1/fleet/pull-messages", "/health", "/v1/control/start-run",
                            "lifespan"]


def test_the_server_registers_the_rosters_keys_once_and_names_other_registered_keys():
    from flwr.supercore.constant import FLWR_IN_MEMORY_DB_NAME
    from flwr.superlink.config_loader import (
        get_federation_manager,
        get_objectstore_linkstate_factories,
    )

    _, factory = get_objectstore_linkstate_factories(
        FLWR_IN_MEMORY_DB_NAME, get_federation_manager(is_simulation=False))
    state, roster = factory.state(), {0: b"key-0", 1: b"key-1"}
    first = register_roster(state, roster)
    assert len(first) == 2 and all(state.get_node_id_by_public_key(k) for k in roster.values())
    assert register_roster(state, roster) == []  # a restart on the same database
    state.create_node("<id:none>", "none", b"someone-else", 30)
    assert ["not in the roster" in line for line in register_roster(state, roster)] == [True]


def clients(roster=None) -> GridClients:
    events: list[dict] = []
    grid = GridClients(grid=None, n_clients=3, timeout=1.0, on_event=events.append,
                       roster=roster)
    grid.reported = events
    return grid


def test_with_a_roster_a_client_is_admitted_only_from_the_node_holding_its_key():
    keys = {c: f"key-{c}".encode() for c in range(3)}
    grid = clients(keys)
    assert grid.admit(101, 1, "", keys[1])
    assert not grid.admit(102, 1, "", keys[2])  # a registered node claiming another's id
    assert not grid.admit(103, 1, "", b"unknown")
    assert not grid.admit(104, 3, "", keys[1])  # not a client of this federation
    assert grid.admit(105, 1, "", keys[1])  # the same key on a new node: a restarted client
    assert grid.node_of == {1: 105}
    assert [(r.node, r.client) for r in grid.refusals] == [(102, 1), (103, 1), (104, 3)]
    assert "roster" in grid.refusals[0].reason
    assert [(e["event"], e["clients"]) for e in grid.reported] == [("claim refused", [1])] * 2 + [
        ("claim refused", [3])]
    assert grid.reported[0]["reason"].startswith("node 102 claims client 1: its key")


def test_without_a_roster_the_first_state_folder_holds_a_client(tmp_path):
    grid = clients()
    mine, theirs = identity(tmp_path / "a"), identity(tmp_path / "b")
    assert identity(tmp_path / "a") == mine != theirs and len(mine) == 32
    assert grid.admit(11, 0, mine, b"k1") and grid.admit(12, 2, theirs, b"k2")
    assert not grid.admit(13, 0, theirs, b"k3")  # a second node claiming client 0
    assert grid.admit(14, 0, mine, b"k4")  # client 0 restarted on its own folder
    assert grid.node_of == {0: 14, 2: 12}
    assert [(r.node, r.client) for r in grid.refusals] == [(13, 0)]


class QueryGrid:
    """A Grid whose nodes answer ``query`` as ``answers`` says: ``(client, token)``, an
    error text or a claim as a dict; ``keys`` are the nodes' public keys as the SuperLink
    reports them."""

    def __init__(self, answers: dict[int, Any], keys: dict[int, bytes]):
        self.answers, self.keys, self.sent = answers, keys, {}
        self.activated: dict[int, str] = {}  # when each node last signed on
        self.busy: set[int] = set()  # nodes that answer nothing for now

    def get_nodes(self):
        return [NodeInfo(node_id=n, public_key=self.keys[n],
                         last_activated_at=self.activated.get(n, "")) for n in self.answers]

    def push_messages(self, messages):
        for m in messages:
            m.metadata.__dict__["_message_id"] = m.object_id
            self.sent[m.object_id] = m
        return [m.object_id for m in messages]

    def pull_messages(self, ids):
        replies = []
        for i in ids:
            if self.sent[i].metadata.dst_node_id in self.busy:
                continue
            asked = self.sent.pop(i)
            answer = self.answers[asked.metadata.dst_node_id]
            claim = answer if isinstance(answer, dict) else (
                None if isinstance(answer, str) else {"id": answer[0], "token": answer[1]})
            replies.append(Message(Error(0, answer), reply_to=asked) if claim is None
                           else Message(RecordDict({"client": ConfigRecord(claim)}),
                                        reply_to=asked))
        return [packed(r) for r in replies]


@pytest.fixture
def server_identity():
    """Messages take their sender from the process's task identity (a ServerApp's)."""
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1
    yield
    TaskIdentity.run_id = TaskIdentity.node_id = TaskIdentity.task_id = None


def test_the_server_asks_new_nodes_and_says_why_a_client_did_not_join(server_identity):
    keys = {1: b"key-0", 2: b"key-1", 3: b"key-2", 4: b"key-x"}
    grid = QueryGrid({1: (0, "a"), 2: (1, "b"), 3: "ConfigError: /d/client-0002.csv: no such "
                      "file", 4: (1, "c")}, keys)
    clients = GridClients(grid, 3, timeout=1.0, roster={0: b"key-0", 1: b"key-1", 2: b"key-2"})
    with pytest.raises(FedMCError) as error:
        clients.connect(0.5)
    assert "clients [2] did not join" in str(error.value)
    assert "node 3 could not say which client it is: ConfigError: /d/client-0002.csv" in str(
        error.value)
    assert clients.node_of == {0: 1, 1: 2}
    assert [(r.node, r.client) for r in clients.refusals] == [(4, 1)]


def test_a_claim_whose_id_or_exchange_is_no_number_is_a_failure_not_an_error(server_identity):
    """A node's claim is a peer's bytes: one whose last exchange is not a number, or that
    names no client id, is recorded as that node's failure with its reason (the server does
    not raise on it), and the client waits for a node that can say who it is."""
    keys = {1: b"key-0", 2: b"key-1", 3: b"key-x"}
    grid = QueryGrid({1: (0, "a"), 2: {"id": 1, "token": "b", "exchange": "7"},
                      3: {"token": "c", "exchange": 0}}, keys)
    clients = GridClients(grid, 2, timeout=1.0, roster={0: b"key-0", 1: b"key-1"})
    with pytest.raises(FedMCError, match=r"clients \[1\] did not join"):
        clients.connect(0.5)
    assert clients.failed == {2: "its reply's last exchange is not a number",
                              3: "its reply names no client id"}
    assert clients.node_of == {0: 1}


def test_a_node_that_refuses_the_run_stops_it_only_before_it_starts(server_identity):
    """A node that says it has finished the run (its key) stops a resumed run before its
    first exchange; once the run is under way, such a reply is one lost node, noted, not a
    stop for every other client."""
    import numpy as np

    refusal = {"id": 1, "refuses": "the run has already finished here"}
    grid = QueryGrid({1: (0, "a"), 2: refusal}, {1: b"key-0", 2: b"key-1"})
    clients = GridClients(grid, 2, timeout=1.0, roster={0: b"key-0", 1: b"key-1"})
    with pytest.raises(ConfigError, match="node 2 .client 1. refuses the run"):
        clients.nodes(np.arange(2))
    grid = QueryGrid({1: (0, "a"), 2: refusal}, {1: b"key-0", 2: b"key-1"})
    clients = GridClients(grid, 2, timeout=1.0, roster={0: b"key-0", 1: b"key-1"})
    clients._answered_here = 1  # under way: this process has finished an exchange
    events = []
    clients.on_event = events.append
    assert clients.nodes(np.arange(2)) == {0: 1}
    assert "refuses the run" in clients.failed[2]
    assert [(e["event"], e["clients"]) for e in events] == [("failed", [1])]


def test_a_node_refused_once_is_asked_again_once_it_restarts(server_identity):
    """Node 2 (client 1's key) first claims client 0 and is refused; restarted with the
    right configuration it keeps its node id (its key fixes it) but signs on anew, and is
    asked again: client 1 joins."""
    import numpy as np

    grid = QueryGrid({1: (0, "a"), 2: (0, "b")}, {1: b"key-0", 2: b"key-1"})
    clients = GridClients(grid, 2, timeout=1.0, roster={0: b"key-0", 1: b"key-1"})
    everyone = np.arange(2)
    assert clients.nodes(everyone) == {0: 1}
    grid.answers[2] = (1, "b")  # the right configuration, not yet signed on again
    assert clients.nodes(everyone) == {0: 1}
    grid.activated[2] = "2026-11-27T10:00:00+00:00"
    assert clients.nodes(everyone) == {0: 1, 1: 2}
    assert [(r.node, r.client) for r in clients.refusals] == [(2, 0)]


def test_a_node_busy_when_first_asked_is_asked_again_while_its_client_is_missing(
        server_identity):
    """A node still busy with a stopped run's message when a resumed run asks who it is
    does not answer in time; it is asked again while its client has no node."""
    import numpy as np

    grid = QueryGrid({1: (0, "a")}, {1: b"key-0"})
    grid.busy.add(1)
    clients = GridClients(grid, 1, timeout=0.05)
    assert clients.nodes(np.arange(1)) == {}
    grid.busy.clear()
    assert clients.nodes(np.arange(1)) == {0: 1}


class SharedNodeGrid:
    """Node 1, whose key two processes hold (a node and a copy of its key and state folder):
    each message goes to the first of ``order`` that lives and does not keep off the
    SuperLink, the order turning after every message. Probes are answered by fedmc's
    ClientApp as that process (:func:`fedmc.flower.client_app.probe`)."""

    def __init__(self, monkeypatch, order: list[str], alive: set[str]):
        from fedmc.flower import client_app

        self.client_app, self.monkeypatch = client_app, monkeypatch
        self.order, self.alive = order, alive
        self.quiet: dict[str, float] = {}
        self.replies: dict[str, Message] = {}
        self.served: list[tuple[str, str]] = []  # (process, message type)
        self.context = Context(1, 1, {"client": 1, "manifest": "m", "ratings": "r",
                                      "state": "s"}, RecordDict(), {})

    def push_messages(self, messages):
        import time

        ids = []
        for m in messages:
            mid = m.metadata.__dict__["_message_id"] = m.object_id
            ids.append(mid)
            now = time.monotonic()
            takers = [p for p in self.order if p in self.alive and self.quiet.get(p, 0) <= now]
            self.order = self.order[1:] + self.order[:1]
            if not takers:
                continue
            process = takers[0]
            self.monkeypatch.setenv(self.client_app.NODE_PROCESS_ENV, process)
            self.monkeypatch.setattr(self.client_app, "_quiet_until", 0.0)
            self.replies[mid] = self.client_app.app(m, self.context)
            self.quiet[process] = self.client_app.quiet_until()
            self.served.append((process, m.metadata.message_type))
        return ids

    def pull_messages(self, ids):
        return [self.replies.pop(i) for i in list(ids) if i in self.replies]


def admitted_to(grid) -> GridClients:
    """Clients whose client 1 was admitted from process ``P`` on node 1 and last included in
    exchange 5."""
    clients = GridClients(grid, 2, timeout=1.0, roster={1: b"key-1"})
    clients.node_of[1], clients.process_of[1], clients.last_included[1] = 1, "P", 5
    return clients


def test_a_copy_of_an_earlier_state_folder_is_refused_without_a_probe(server_identity,
                                                                      monkeypatch):
    grid = SharedNodeGrid(monkeypatch, ["Q", "P"], {"P", "Q"})
    clients = admitted_to(grid)
    assert not clients.admit(1, 1, "", b"key-1", "Q", exchange=3)
    assert "older than the server's record" in clients.refusals[-1].reason
    assert clients.process_of[1] == "P" and grid.served == []
    assert clients.refused_processes == {process_tag("Q")}


def test_a_copy_is_refused_while_the_admitted_process_answers_a_probe(server_identity,
                                                                     monkeypatch):
    """The copy holds the current state, so only the probe tells it from a restart: the
    copy takes the first probe and keeps off; the admitted process takes the next."""
    grid = SharedNodeGrid(monkeypatch, ["Q", "P"], {"P", "Q"})
    clients = admitted_to(grid)
    assert not clients.admit(1, 1, "", b"key-1", "Q", exchange=5)
    assert grid.served == [("Q", "query.probe"), ("P", "query.probe")]
    assert "still answers" in clients.refusals[-1].reason
    assert clients.process_of[1] == "P" and process_tag("Q") in clients.refused_processes
    # the copy stops at its next message: the envelope names it
    import numpy as np

    from fedmc.core.protocol import Message as Step

    one = np.array([1])
    envelope = clients.envelope(6, Step(1, "round", one, one, {}), [1])
    monkeypatch.setenv(grid.client_app.NODE_PROCESS_ENV, "Q")
    with pytest.raises(grid.client_app.ProcessRefused, match="refused this node process"):
        grid.client_app._unless_refused(envelope.extra["refused"], 1)
    monkeypatch.setenv(grid.client_app.NODE_PROCESS_ENV, "P")
    grid.client_app._unless_refused(envelope.extra["refused"], 1)  # the admitted one goes on


def test_a_restarted_node_takes_its_client_over_once_the_old_process_is_silent(
        server_identity, monkeypatch):
    """The admitted process is gone (killed): the new one, from the same folder, answers the
    probes but is not the one probed; after the window it is admitted."""
    from fedmc.flower import grid_clients

    monkeypatch.setattr(grid_clients, "PROBE_WINDOW", 0.3)
    grid = SharedNodeGrid(monkeypatch, ["P", "Q"], {"Q"})
    clients = admitted_to(grid)
    assert clients.admit(1, 1, "", b"key-1", "Q", exchange=6)
    assert grid.served == [("Q", "query.probe")] and not clients.refusals
    assert clients.process_of[1] == "Q" and not clients.refused_processes


def test_a_second_live_node_process_on_a_state_folder_is_refused(node_files, monkeypatch,
                                                                 capsys, invoke):
    """Client 1's node configuration started twice on one host: the second process exits 2
    naming the first (one live process per client and state folder)."""
    from fedmc.deploy.node import hold_state

    held = hold_state(node_files["state"])
    try:
        code, _, err = invoke(monkeypatch, capsys, "federate", "node", "--superlink",
                              "127.0.0.1:1", "--insecure", "--node-config",
                              node_config(node_files))
    finally:
        held.close()
    assert code == 2 and "another live node process" in err, err
    assert len(err.strip().splitlines()) == 1


def test_refusals_go_to_the_row_of_their_round_or_the_next():
    history = History([{"round": k} for k in (0, 2, 4)])
    log = [Record(0, 2, "round", [0, 1], [0]), Record(1, 2, "evaluate", [0, 1, 2], [0, 1, 2])]
    refusals = [Refusal(0, 5, 1, ""), Refusal(1, 6, 2, ""), Refusal(2, 7, 0, ""),
                Refusal(3, 8, 1, ""), Refusal(5, 9, 2, "")]
    _mark_participants(history, log, refusals)
    assert [r["claims_refused"] for r in history.rows] == ["1", "0 2", "1 2"]
    assert [r["lost"] for r in history.rows] == ["", "1", ""]


class Answers:
    """A Fleet client method that fails with the given HTTP statuses (or ``(status, Flower's
    error code)``), then answers."""

    def __init__(self, *statuses: int | tuple[int, int] | type[Exception]) -> None:
        self.statuses = list(statuses)
        self.calls = 0

    def __call__(self, request):
        self.calls += 1
        if self.statuses:
            status = self.statuses.pop(0)
            if not isinstance(status, int | tuple):
                raise status("connection refused")
            status, code = status if isinstance(status, tuple) else (status, 1)
            response = httpx.Response(status, request=httpx.Request("POST", "https://x/"),
                                      json={"code": code, "detail": "no"})
            raise httpx.HTTPStatusError("error", request=response.request, response=response)
        return "answer"


def test_a_node_retries_an_unreachable_superlink_and_names_what_it_refused(monkeypatch):
    monkeypatch.setattr("fedmc.deploy.fleet.time.sleep", lambda s: None)
    conn = FleetConnection("127.0.0.1:1", None, None)
    try:
        flaky = Answers(httpx.ConnectError, 503, httpx.ReadTimeout)
        assert conn.call(flaky, None) == "answer" and flaky.calls == 4
        with pytest.raises(RunStopped):  # flwr stop: the node drops the run's message
            conn.call(Answers((403, 2007)), None)  # FLEET_RUN_STATUS_NOT_ALLOWED
        with pytest.raises(httpx.HTTPStatusError):  # flwr 1.43: not from this node
            conn.call(Answers((403, 2011)), None)
        with pytest.raises(Dropped, match="does not know this node"):  # it reconnects
            conn.call(Answers(401), None)
        with pytest.raises(httpx.HTTPStatusError):
            conn.call(Answers(500), None)
        conn._drop("a heartbeat was refused")
        with pytest.raises(Dropped, match="heartbeat"):
            conn.call(Answers(), None)
    finally:
        conn.close()


@pytest.fixture
def node_files(tmp_path, data_settings, ratings_file):
    write_split(data_settings(ratings_file(tmp_path)), tmp_path / "split")
    train, test = client_files(tmp_path / "split", 1)
    return {"manifest": tmp_path / "split" / "manifest.json", "ratings": train, "test": test,
            "state": tmp_path / "state"}


def node_config(files, client=1, **changes) -> str:
    files = {**files, **changes}
    return " ".join([f"client={client}", *(f'{k}="{v}"' for k, v in files.items())])


def test_a_node_with_a_missing_ratings_file_exits_2_naming_it(node_files, monkeypatch, capsys,
                                                              invoke):
    missing = node_files["ratings"].with_name("client-0009.csv")
    code, _, err = invoke(monkeypatch, capsys, "federate", "node", "--superlink",
                          "127.0.0.1:1", "--node-config", node_config(node_files,
                                                                        ratings=missing))
    assert code == 2 and str(missing) in err and len(err.strip().splitlines()) == 1


def test_a_node_names_a_key_or_certificate_it_cannot_read(node_files, monkeypatch, capsys,
                                                         certs, invoke):
    for option, path in (("--auth-key", certs / "client-7"), ("--auth-key", certs / "ca.crt"),
                         ("--root-certificates", certs / "nope.crt")):
        code, _, err = invoke(monkeypatch, capsys, "federate", "node", "--superlink",
                              "127.0.0.1:1", "--node-config", node_config(node_files),
                              option, path)
        assert code == 2 and str(path) in err and len(err.strip().splitlines()) == 1, err


def test_a_node_speaks_tls_or_says_insecure(node_files, monkeypatch, capsys, certs, invoke):
    """An authentication key without a root certificate would sign requests anyone on the
    way can read and replay: refused in one line naming both ways out; so is asking for
    TLS and no TLS at once."""
    plain = ("--auth-key", certs / "client-1")
    both = ("--root-certificates", certs / "ca.crt", "--insecure")
    for options, needle in ((plain, "--insecure"), (both, "choose one")):
        code, _, err = invoke(monkeypatch, capsys, "federate", "node", "--superlink",
                              "127.0.0.1:1", "--node-config", node_config(node_files), *options)
        assert code == 2 and needle in err and "--root-certificates" in err, err
        assert len(err.strip().splitlines()) == 1


def test_a_tls_mismatch_is_named_as_such():
    """A node with TLS facing a SuperLink without it (a failed handshake), and one without
    TLS facing a SuperLink with it (the connection dropped): both messages name TLS."""
    handshake = httpx.ConnectError("[SSL: WRONG_VERSION_NUMBER] wrong version number")
    dropped = httpx.RemoteProtocolError("Server disconnected without sending a response.")
    assert "TLS failed" in transport_failure(handshake, tls=True)
    assert "--root-certificates" in transport_failure(dropped, tls=False)
    refused = httpx.ConnectError("[Errno 111] Connection refused")
    assert "TLS" not in transport_failure(refused, tls=True)


@pytest.mark.parametrize("client,changes,needle", [
    (7, {}, "client=7 is not a client"),
    (0, {}, "the manifest gives it"),  # client 1's files under client 0's id
    (1, {"manifest": "nowhere.json"}, "nowhere.json"),
    (1, {"test": "gone.csv"}, "gone.csv"),
    (1, {"stat": "x"}, "unknown key(s) stat"),
    (1, {"columns": "user,item"}, "name three (user,item,rating)"),
])
def test_a_node_checks_its_configuration_before_it_connects(node_files, client, changes,
                                                            needle):
    with pytest.raises(FedMCError) as error:
        NodeSettings.parse(node_config(node_files, client, **changes)).check()
    assert needle in str(error.value)
    NodeSettings.parse(node_config(node_files)).check()  # the right files pass
    assert (node_files["state"]).is_dir()


def test_node_help_lists_every_key_of_the_node_configuration(monkeypatch, capsys, invoke):
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = invoke(monkeypatch, capsys, "federate", "node", "--help")
    assert code == 0
    for key in NODE_KEYS:
        assert f"{key}=" in out, key


def test_server_and_certs_are_commands(monkeypatch, capsys, invoke):
    for command in ("server", "certs"):
        code, out, _ = invoke(monkeypatch, capsys, "federate", command, "--help")
        assert code == 0 and "--" in out
    code, _, err = invoke(monkeypatch, capsys, "federate", "server", "--certs",
                          "/nonexistent/certs")
    assert code == 2 and "ca.crt" in err


def test_roster_errors_name_the_file(tmp_path):
    path = tmp_path / "roster.json"
    path.write_text(json.dumps({"0": "ssh-rsa AAAA"}))
    with pytest.raises(Exception, match="roster.json: client '0'"):
        read_roster(path)

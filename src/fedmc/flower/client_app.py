"""The ClientApp: one client of the federation, holding only its own ratings.

Its node configuration (``flower-supernode --node-config`` or ``fedmc federate node``) names
the client and its files::

    client=3 manifest="/data/manifest.json" ratings="/data/client-0003.csv"
    test="/data/client-0003.test.csv" state="/var/lib/fedmc/client-3"

(``test``, ``validation`` (the client's validation cut, for early stopping) and ``columns``,
e.g. ``columns="user_id,movie_id,stars"``, are optional; for a Boolean manifest ``ratings`` is
the client's ``row,cols`` file of ones and ``test`` its rows of the ground-truth signal,
:mod:`fedmc.deploy.split`). The run configuration (:mod:`fedmc.flower.settings`) names the
algorithm, its parameters and the seed.

Message types: ``query`` (the client's id, and a token naming its state folder: the server
knows clients by this id, not by Flower's node id, which changes when a node restarts, and
admits a client's id only from the node its roster names or, without a roster, from nodes
with the first token it saw, :mod:`fedmc.flower.grid_clients`; a node that has already
finished the run the query names says so instead; the claim also names the node process and
the latest exchange its state folder holds), ``query.probe`` (is the process the server
admitted for this client still there? :func:`probe`), ``query.done`` (the run has ended: the
client removes its states and records the run's key as finished), ``train.step`` (the
algorithm's client step on the message; the reply is the client's uploads, and, when the
message also carries the previous round's model, first the client's evaluation sums under
it), ``evaluate`` (the client's evaluation sums under the published model) and ``train``
(the same two inside SecAgg+, :mod:`fedmc.flower.secagg`). Every step and evaluation first
settles the pending state of the client's previous exchange
(:mod:`fedmc.flower.client_state`). Every message names the run's key, which the server makes
afresh for every submitted run: the client keeps its states under it, and the processes the
server has refused (:class:`ProcessRefused`: such a process stops).
"""

from __future__ import annotations

import math
import os
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.client.mod import secaggplus_mod
from flwr.clientapp import ClientApp

from fedmc.core.protocol import Algorithm, FederationInfo
from fedmc.core.uploads import Uploads
from fedmc.data.boolean import BooleanFederatedData
from fedmc.data.federated import FederatedData
from fedmc.errors import ConfigError
from fedmc.federation.aggregator import Aggregator
from fedmc.federation.loop import streams
from fedmc.flower import secagg
from fedmc.flower.client_state import RunFinished, StateStore, identity
from fedmc.flower.compact import compact_mod
from fedmc.flower.manifest import Manifest
from fedmc.flower.settings import FederatedRun
from fedmc.flower.shard import load_boolean_shard, load_shard
from fedmc.flower.wire import (
    Envelope,
    pack_reply,
    probed_tag,
    process_tag,
    refused_tags,
    run_key,
    unpack_message,
)

app = ClientApp(mods=[compact_mod, secaggplus_mod])
NODE_PROCESS_ENV = "FEDMC_NODE_PROCESS"
"""The environment variable holding the nonce of the node process (``fedmc federate node``
sets it): named in a client's claims and plain replies, so the server takes a client's replies
from the one process it admitted (a duplicate of a live node is refused)."""


PROBE_PAUSE = 3.0
"""Seconds a node process stays off the SuperLink after answering a probe for another
process (:func:`probe`), so that the process probed, if it lives, pulls the next one."""
_quiet_until = 0.0


class ProcessRefused(ConfigError):
    """The server refused this node process: another live process serves its client (a copy
    of the node's key and state folder), or its state is older than the server's record. The
    node stops (``fedmc federate node`` exits 2, without signing off the node id it shares
    with the process the server admitted)."""


def process_nonce() -> str:
    """The nonce of the node process this ClientApp serves in; empty under a stock
    ``flower-supernode``, whose ClientApp is a new process for every message (its replies
    are then not told apart)."""
    return os.environ.get(NODE_PROCESS_ENV, "")


def quiet_until() -> float:
    """Until when (``time.monotonic()``) the node should not poll: after it answered a probe
    for another process (:data:`PROBE_PAUSE`)."""
    return _quiet_until


def _unless_refused(tags: list[str], client: int) -> None:
    """Stop this process if the server names it among the processes it refused."""
    nonce = process_nonce()
    if nonce and process_tag(nonce) in tags:
        raise ProcessRefused(f"the server refused this node process for client {client}: "
                             f"another live process serves this client, or this state folder "
                             f"is older than the server's record (a copy of the node's key and "
                             f"state folder?); its progress.jsonl names the reason")


@dataclass
class Party:
    """What one client holds in one run: its shard, its settings, its state store and the
    run's aggregator (what it does to its uploads before they leave)."""

    client: int
    algorithm: Algorithm
    cfg: Any
    info: FederationInfo
    shard: FederatedData | BooleanFederatedData
    store: StateStore
    aggregator: Aggregator

    @property
    def shapes(self) -> Mapping[str, tuple[int, ...]]:
        """The shapes of the algorithm's uploads."""
        return self.aggregator.shapes

    def step(self, envelope: Envelope) -> tuple[Uploads, int]:
        """Settle the previous exchange, run the client step on the message, keep the new
        state pending; the uploads as they leave this client (clipped under user-level DP,
        its local noise added) and this client's multiplicity."""
        self.store.decide(envelope.included_of(self.client))
        msg = envelope.message
        weight = int(np.count_nonzero(msg.upload == self.client))
        me = np.zeros(1, dtype=np.int64)
        state, uploads = self.algorithm.client_step(self.cfg, self.shard,
                                                    self.store.working_copy(), msg, me,
                                                    me if weight else me[:0])
        self.store.propose(envelope.exchange, state)
        if not weight:
            return uploads, weight
        uploads = self.aggregator.prepare(msg, uploads)
        return self.aggregator.local_noise(uploads, np.random.default_rng()), weight

    def evaluate(self, envelope: Envelope) -> dict[str, float]:
        """Settle the previous exchange; the evaluation sums under the envelope's model."""
        if envelope.model is None:
            raise ConfigError(f"exchange {envelope.exchange} carries no model to evaluate")
        self.store.decide(envelope.included_of(self.client))
        return dict(self.algorithm.evaluate(self.cfg, self.shard, self.store.committed,
                                            envelope.model))

    def dp_noise(self, envelope: Envelope) -> float:
        """The noise multiplier of the user-level DP share this client adds to ``envelope``'s
        secure sum (0: none), from its own run settings, not the server's word: the
        multiplier the plan calibrates (:meth:`fedmc.flower.settings.FederatedRun.
        planned_aggregator`, as the server's is) where the clients add the noise (under
        ``secagg``), else 0.

        Raises
        ------
        ConfigError
            The server's message asks for another multiplier (less noise, or none), or names
            as many members to share the noise among (``dp_members``) as are not the
            exchange's computing clients, or more than the enrolled clients: the client
            sends nothing.
        """
        msg, extra, aggregator = envelope.message, envelope.extra, self.aggregator
        own = aggregator.multiplier(msg) if aggregator.placement.user_dp == "clients" else 0.0
        told = float(extra.get("dp_noise") or 0.0)
        if not math.isclose(told, own, rel_tol=1e-9):
            raise ConfigError(f"exchange {envelope.exchange}: the server asks for the DP noise "
                              f"multiplier {told:g}, this client's run settings give {own:g}: "
                              "refused")
        members = extra.get("dp_members")
        if own and (members != len(msg.compute) or not 1 <= members <= self.info.n_clients):
            raise ConfigError(f"exchange {envelope.exchange}: the server says the noise is "
                              f"shared by {members} members; the exchange has "
                              f"{len(msg.compute)} of {self.info.n_clients} clients: refused")
        return own

    def secure_integers(self, envelope: Envelope, values: Mapping[str, np.ndarray],
                        ) -> dict[str, np.ndarray]:
        """What this client adds to a secure sum under user-level DP: ``values`` in integer
        units plus its share of the Skellam noise
        (:meth:`fedmc.federation.aggregator.Aggregator.member_integers`) at its own multiplier
        (:meth:`dp_noise`, which refuses a server asking for another), drawn from a stream
        seeded by the client's secret (:attr:`StateStore.noise_secret`) and the exchange, so
        a repeated exchange (a resumed run) adds the same share again instead of releasing a
        second draw. In a reproducible run (this client's own settings say so) the secret is
        the run's, sent by the server, as a simulation of the run draws it."""
        self.dp_noise(envelope)
        extra, dp = envelope.extra, self.aggregator.dp
        reproducible = dp is not None and dp.reproducible and "dp_secret" in extra
        secret = int(extra["dp_secret"]) if reproducible else self.store.noise_secret
        return self.aggregator.member_integers(values, self.client, envelope.message, extra,
                                               secret)


NODE_KEYS = ("client", "manifest", "ratings", "test", "columns", "state", "validation")
"""Every key of a node configuration (module docstring)."""


@dataclass(frozen=True)
class NodeSettings:
    """A node configuration: which client this node is and where its files are."""

    client: int
    manifest: Path
    ratings: Path
    state: Path
    test: Path | None = None
    columns: tuple[str, str, str] | None = None
    validation: Path | None = None

    @classmethod
    def parse(cls, text: str) -> NodeSettings:
        """From ``--node-config``'s text (``key=value`` pairs, strings quoted)."""
        from fedmc.flower.compat import parse_config_args

        try:
            return cls.from_config(parse_config_args([text]))
        except ConfigError:
            raise
        except Exception:  # flwr raises click's exception on bad syntax
            raise ConfigError(f"--node-config {text!r}: expected space-separated key=value "
                              f"pairs, paths in double quotes") from None

    @classmethod
    def from_config(cls, node: Mapping[str, Any]) -> NodeSettings:
        """From a parsed node configuration (``context.node_config``)."""
        unknown = sorted(set(node) - set(NODE_KEYS))
        if unknown:
            raise ConfigError(f"the node configuration has unknown key(s) {', '.join(unknown)}"
                              f" (keys: {', '.join(NODE_KEYS)})")
        client = node.get("client")
        if isinstance(client, bool) or not isinstance(client, int):
            raise ConfigError("the node configuration needs client=ID (an integer)")
        for key in ("manifest", "ratings", "state"):
            if not node.get(key):
                raise ConfigError(f"the node configuration of client {client} needs "
                                  f"{key}=\"PATH\"")
        columns = None
        if node.get("columns"):
            names = str(node["columns"]).split(",")
            if len(names) != 3:
                raise ConfigError(f"the node configuration of client {client} has `columns="
                                  f"{node['columns']!r}`: name three (user,item,rating)")
            columns = (names[0], names[1], names[2])
        return cls(client, Path(str(node["manifest"])), Path(str(node["ratings"])),
                   Path(str(node["state"])),
                   Path(str(node["test"])) if node.get("test") else None, columns,
                   Path(str(node["validation"])) if node.get("validation") else None)

    def read_manifest(self) -> Manifest:
        """The manifest, with this client in it."""
        manifest = Manifest.read(self.manifest)
        if not 0 <= self.client < manifest.n_clients:
            raise ConfigError(f"client={self.client} is not a client of {self.manifest} "
                              f"(0..{manifest.n_clients - 1})")
        return manifest

    def shard(self, manifest: Manifest) -> FederatedData | BooleanFederatedData:
        """The client's data, read from its files and checked against the manifest."""
        if manifest.kind == "boolean":  # its rows of A and, for synthetic data, of the signal
            return load_boolean_shard(manifest, self.client, self.ratings, self.test)
        return load_shard(manifest, self.client, self.ratings, self.test, self.columns,
                          self.validation)

    def check(self) -> None:
        """What a node checks before it connects: the manifest readable and naming this
        client, the client's files readable and matching the manifest, the state folder
        writable (a :class:`~fedmc.errors.FedMCError` names the problem)."""
        for what, path in (("ratings", self.ratings), ("test", self.test),
                           ("validation", self.validation)):
            if path is not None and not path.is_file():
                raise ConfigError(f"{path}: no such file (client {self.client}'s {what} "
                                  f"file)")
        self.shard(self.read_manifest())
        try:
            self.state.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=self.state):
                pass
        except OSError as exc:
            raise ConfigError(f"{self.state}: the state folder is not writable "
                              f"({exc.strerror})") from None


_PARTIES: dict[tuple[int, int, str], Party] = {}


def party(context: Context, key: str) -> Party:
    """This node's client in the run under ``key`` (built on first use; kept while the
    process lives).

    Raises
    ------
    fedmc.flower.client_state.RunFinished
        That run has already finished on this node.
    """
    if not key:
        raise ConfigError("the message names no run key (a server of another fedmc version?)")
    node = NodeSettings.from_config(context.node_config)
    which = (context.run_id, node.client, key)
    if which not in _PARTIES:
        run = FederatedRun.from_run_config(dict(context.run_config))
        _PARTIES[which] = _make_party(node, run, key)
    return _PARTIES[which]


def _admitted_party(context: Context, envelope: Envelope) -> Party:
    """This node's client in the exchange's run, unless the exchange names this process
    among the refused (then it stops, :class:`ProcessRefused`)."""
    me = party(context, envelope.key)
    _unless_refused(envelope.extra.get("refused", []), me.client)
    return me


def forget_client(run_id: int, client: int) -> None:
    """Drop what this process holds of ``client`` in run ``run_id``: its next message builds
    it again from its folder. Flower's simulation engine hands a virtual node's messages to
    any of its actors, which serve thousands of clients in turn
    (:mod:`fedmc.deploy.simulation`): another actor may have served this client since, and
    an actor that kept every client it served would hold them all (about 3 MB each on
    ML-1M)."""
    for which in [k for k in _PARTIES if k[0] == run_id and k[1] == client]:
        del _PARTIES[which]


def forget_run(run_id: int) -> None:
    """Drop what this process holds for run ``run_id`` (it was stopped or has ended)."""
    for which in [k for k in _PARTIES if k[0] == run_id]:
        del _PARTIES[which]


def _make_party(node: NodeSettings, run: FederatedRun, key: str) -> Party:
    manifest = node.read_manifest()
    shard = node.shard(manifest)
    algorithm, cfg = run.algorithm, run.config()
    info = manifest.federation_info(algorithm.data_kind)
    store = StateStore(node.state, f"{key}/{node.client}")  # a folder may change clients
    if store.committed is None:  # this client's slice of the population's initial draws
        init_rng, _ = streams(run.schedule.seed)  # the server's rule, the same draws
        draws = algorithm.draws(cfg, info, init_rng)
        own = draws.take(np.array([node.client]), manifest.rows_of(node.client))
        store.start(algorithm.init_clients(cfg, shard, own, info))
    return Party(node.client, algorithm, cfg, info, shard, store, run.planned_aggregator(info))


@app.query()
def hello(msg: Message, context: Context) -> Message:
    """The client's id and the token of its state folder
    (:func:`fedmc.flower.client_state.identity`), or, when the node has already finished the
    run the message names (its key), the client's id and why it refuses."""
    client = NodeSettings.from_config(context.node_config).client
    _unless_refused(refused_tags(msg.content), client)
    try:
        me = party(context, run_key(msg.content))
    except RunFinished as exc:
        return Message(RecordDict({"client": ConfigRecord({
            "id": client, "refuses": str(exc)})}), reply_to=msg)
    return Message(RecordDict({"client": ConfigRecord({
        "id": me.client, "token": identity(me.store.folder), "process": process_nonce(),
        "exchange": me.store.held_exchange})}), reply_to=msg)


@app.query("probe")
def probe(msg: Message, context: Context) -> Message:
    """The server asks whether the process it admitted for this client still lives (another
    process claimed the client, :meth:`fedmc.flower.grid_clients.GridClients.admit`): the
    answer names this process. A process that is not the one probed stays off the SuperLink
    for :data:`PROBE_PAUSE` seconds, so that the probed one, if it lives, gets the next
    probe (both pull the messages of the node id their key shares)."""
    global _quiet_until
    _unless_refused(refused_tags(msg.content),
                    NodeSettings.from_config(context.node_config).client)
    nonce = process_nonce()
    if process_tag(nonce) != probed_tag(msg.content):
        _quiet_until = time.monotonic() + PROBE_PAUSE
    return Message(pack_reply(process=nonce), reply_to=msg)


@app.query("done")
def done(msg: Message, context: Context) -> Message:
    """The run has ended: its states are removed and its key recorded as finished
    (:meth:`fedmc.flower.client_state.StateStore.finish`)."""
    party(context, run_key(msg.content)).store.finish()
    forget_run(context.run_id)
    return Message(RecordDict(), reply_to=msg)


@app.train("step")
def step(msg: Message, context: Context) -> Message:
    """The client step of a plain exchange, after the evaluation it carries, if any."""
    envelope = unpack_message(msg.content)
    me = _admitted_party(context, envelope)
    sums = None if envelope.model is None else me.evaluate(envelope)
    uploads, _ = me.step(envelope)
    return Message(pack_reply(uploads, sums, process_nonce()), reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """The evaluation sums of a plain exchange."""
    envelope = unpack_message(msg.content)
    return Message(pack_reply(sums=_admitted_party(context, envelope).evaluate(envelope),
                              process=process_nonce()), reply_to=msg)


@app.train()
def secure(msg: Message, context: Context) -> Message:
    """A client step or an evaluation inside SecAgg+ (its masked-vector stage)."""
    envelope = secagg.unpack_secure(msg)
    return secagg.contribute(msg, envelope, _admitted_party(context, envelope))

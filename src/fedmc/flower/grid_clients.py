"""The clients of a real federation, as the round loop (:mod:`fedmc.federation.loop`) sees them.

:class:`GridClients` is a client population (:class:`fedmc.federation.population.
ClientPopulation`) whose clients are ClientApps on SuperNodes: an exchange sends the message to
the nodes of the clients it names and waits up to ``timeout`` seconds for their replies. Plain
exchanges have the aggregator sum the uploads that came back (:meth:`fedmc.federation.
aggregator.Aggregator.sum`, in client order, so a federation without losses reproduces the
simulation's sums bit for bit); secure ones get only the sum from SecAgg+
(:mod:`fedmc.flower.secagg`). The clients add their own local noise, and under secure
aggregation their shares of the user-level DP noise (:attr:`GridClients.placement`). A client
whose reply did not come is left out: the server step is handed the message as it was carried
out, and the client drops the state it computed (:mod:`fedmc.flower.client_state`).

Clients are known by the id in their node configuration: nodes that appear on the SuperLink
are asked for it (``query``), so a node restarted under a new Flower node id takes its
client's place again. A claim is checked before it is admitted (:meth:`GridClients.admit`):
with a roster (``fedmc federate server``) the node's public key, which the SuperLink has
verified on every request the node signed, must be the key the roster names for that client;
without one, the node must present the token of the state folder that first claimed the
client (a node restarted on its folder does; a second node with client 1's configuration
and a folder of its own does not). A claim by another process than the one admitted for the
client (a restart, or a copy of the node's key and state folder) must also hold a state folder
no older than the server's record and find the admitted process gone (:meth:`GridClients.
admit`). A refused claim is recorded (:class:`Refusal`: the
``claims_refused`` column of the history and a line of ``progress.jsonl``) and its node is never
sent a message: which node speaks for a client never depends on the order of replies.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, cast

import numpy as np
from flwr.app import Message as FlowerMessage
from flwr.app import RecordDict
from flwr.serverapp import Grid

from fedmc.core.protocol import Message
from fedmc.core.uploads import Uploads, upload_nbytes
from fedmc.errors import ConfigError
from fedmc.federation.aggregator import Aggregator
from fedmc.federation.bounds import NormReference, OutOfBounds, ReplyBounds, upload_norm
from fedmc.federation.population import Exchange, Placement, carried_out, federation_placement
from fedmc.flower.defaults import MAX_LOST_ROUNDS
from fedmc.flower.secagg import MIN_UPLOADERS, SecureSum
from fedmc.flower.transport import good_replies, replies_by_node
from fedmc.flower.wire import (
    NO_EXCHANGE,
    Envelope,
    RefusedReply,
    pack_key,
    pack_message,
    process_tag,
    reply_process,
    unpack_sums,
    unpack_uploads,
)

Shapes = Mapping[str, tuple[int, ...]]
Reply = tuple[Uploads, dict[str, float] | None]  # what the server took of a reply
COLD_TIMEOUT = 300.0  # the least wait for a node's first message of a phase (compilation)
PROBE_WINDOW = 6.0
"""Seconds the server probes for the process it admitted for a client when another process
claims the client (:meth:`GridClients.admit`); one that does not answer in that time is taken
for gone. More than :data:`fedmc.flower.client_app.PROBE_PAUSE` plus a node's longest pause
between polls, so that a live admitted process gets a probe the claimant does not take."""


@dataclass
class Record:
    """One exchange as it happened (or, for an evaluation carried by the next round's
    message, its part of that exchange): who was asked, who was included."""

    exchange: int
    round: int
    phase: str
    asked: list[int]
    included: list[int]

    @property
    def lost(self) -> list[int]:
        """Clients asked whose replies were not included."""
        return sorted(set(self.asked) - set(self.included))


@dataclass(frozen=True)
class UploadNorms:
    """The norms of one plain exchange's uploads as the server judged them: those it took,
    the clients whose uploads lay above the bound (refused), the bound (inf: none) and
    whether it is the default's, per square root of a client's users (``auto``,
    :class:`fedmc.federation.bounds.NormReference`)."""

    exchange: int
    round: int
    phase: str
    taken: list[float]
    over: list[int]
    bound: float
    auto: bool = False

    def event(self) -> dict[str, Any]:
        """Its line of ``progress.jsonl`` (``uploads``): how many uploads were taken, their
        norms' median, 90th percentile and largest, the bound (``bound``, with ``at_bound``,
        the uploads clipped to it, or under the default ``bound_per_root_user``) and the
        clients above it."""
        taken = np.array(self.taken)
        quantiles = ({} if not len(taken) else {
            "norm_median": float(np.median(taken)), "norm_p90": float(np.quantile(taken, 0.9)),
            "norm_max": float(taken.max())})
        bound = self.bound if np.isfinite(self.bound) else None
        limit = ({"bound_per_root_user": bound} if self.auto else
                 {"bound": bound, "at_bound": int(np.sum(taken >= self.bound * (1 - 1e-9)))})
        return {"event": "uploads", "exchange": self.exchange, "round": self.round,
                "phase": self.phase, "taken": len(taken), **quantiles, **limit,
                "over_bound": self.over}


@dataclass(frozen=True)
class Refusal:
    """A node's claim to be a client, refused: when, which node, which client, why."""

    round: int
    node: int
    client: int
    reason: str


class EveryoneLost(ConfigError):
    """Every client was lost in too many exchanges in a row: the run stops (its checkpoint
    stays, so it can be resumed)."""


@dataclass
class GridClients:
    """Clients behind a Flower Grid (module docstring).

    Each round's evaluation travels with the next round's message (``folds_evaluation``):
    one exchange per round instead of two; the last evaluation is an exchange of its own.

    Parameters
    ----------
    grid
        The ServerApp's grid.
    n_clients
        ``p``: client ids are ``0 .. p-1``.
    timeout
        Seconds to wait for the replies of one exchange.
    secure
        Sums uploads and evaluations with SecAgg+ when given (:class:`fedmc.flower.secagg.
        SecureSum`).
    on_exchange
        Called with every exchange's number, round, phase and clients before it is sent
        (progress reports).
    on_event
        Called with what else happened in an exchange, as a dict with ``event``
        (``refused``: a reply the server did not take; ``failed``: a client's error;
        ``skipped``: a step no client took; ``claim refused``: a node's claim to be a client,
        :meth:`admit`; ``everyone lost``: an exchange that took no client's reply),
        ``exchange``, ``round``, ``clients`` and ``reason``.
    roster
        The public key (PEM, as Flower records a node's) of every client, when the operator
        gave a roster (:func:`fedmc.flower.roster.read_roster`).
    key
        The run's key (every message names it; the clients keep their states under it): a
        fresh one for every submitted run, the checkpoint's when a run is resumed
        (:meth:`restore`).
    bounds
        What a plain reply may hold (:class:`fedmc.federation.bounds.ReplyBounds`): a reply
        outside is refused like a malformed one.
    max_lost
        How many exchanges in a row may lose every client they ask before the run stops
        (:class:`EveryoneLost`); each one is noted (``everyone lost``) and the run goes on.
    private
        A run under user-level DP, whose sample is secret: a reply of a second process is
        refused but not recorded as a claim refused (only the sampled clients are asked, so
        its client id would tell who was sampled), and the uploads' norms are not reported.
    reference
        The default bound on a plain upload's norm where no DP clip binds
        (:class:`fedmc.federation.bounds.NormReference`; None: only :attr:`bounds`'). Every
        plain exchange's norms are kept in :attr:`norms` and, outside a private run, noted
        (``uploads``).
    """

    grid: Grid
    n_clients: int
    timeout: float
    _: KW_ONLY
    secure: SecureSum | None = None
    on_exchange: Callable[[int, int, str, list[int]], None] | None = None
    on_event: Callable[[dict[str, Any]], None] | None = None
    roster: Mapping[int, bytes] | None = None
    key: str = field(default_factory=lambda: secrets.token_hex(16))
    max_lost: int = MAX_LOST_ROUNDS
    bounds: ReplyBounds = field(default_factory=ReplyBounds)
    private: bool = False
    reference: NormReference | None = None
    log: list[Record] = field(default_factory=list, init=False)
    norms: list[UploadNorms] = field(default_factory=list, init=False)
    refusals: list[Refusal] = field(default_factory=list, init=False)
    warm: set[tuple[int, str]] = field(default_factory=set, init=False)
    node_of: dict[int, int] = field(default_factory=dict, init=False)
    token_of: dict[int, str] = field(default_factory=dict, init=False)
    process_of: dict[int, str] = field(default_factory=dict, init=False)
    refused_processes: set[str] = field(default_factory=set, init=False)
    failed: dict[int, str] = field(default_factory=dict, init=False)
    last_included: dict[int, int] = field(default_factory=dict, init=False)
    _asked: dict[int, str] = field(default_factory=dict, init=False)
    _round: int = field(default=0, init=False)
    _exchanges: int = field(default=0, init=False)
    _lost_in_a_row: int = field(default=0, init=False)
    _answered_here: int = field(default=0, init=False)  # exchanges this process finished
    folds_evaluation: bool = field(default=True, init=False)

    def connect(self, wait: float) -> None:
        """Wait until every client's node has answered (at most ``wait`` seconds)."""
        deadline = time.monotonic() + wait
        while len(self.node_of) < self.n_clients:
            self._refresh()
            if len(self.node_of) == self.n_clients:
                break
            if time.monotonic() > deadline:
                missing = sorted(set(range(self.n_clients)) - set(self.node_of))
                failed = "".join(f"; node {node} could not say which client it is: {why}"
                                 for node, why in self.failed.items())
                raise ConfigError(f"clients {missing} did not join within {wait:g} s{failed}")
            time.sleep(0.2)

    @property
    def placement(self) -> Placement:
        """The clients add their own local noise; under secure aggregation also their shares
        of the user-level DP noise (distributed DP), otherwise the server adds it (central
        DP: the server process sees every upload anyway)."""
        return federation_placement(self.secure is not None)

    def exchange(self, msg: Message, aggregator: Aggregator,
                 evaluate: Mapping[str, np.ndarray] | None = None) -> Exchange:
        """Send ``msg`` to its clients (and ``evaluate``, the previous round's model, to every
        client with it); the sum of the uploads that came back."""
        sums, dp_share, evaluated = None, 0.0, []
        if self.secure is not None and evaluate is not None and aggregator.secure_settings(msg):
            sums, evaluate = self.evaluate(evaluate), None  # an integer sum carries none
        previous = self._round
        number = self._begin(msg.round, msg.phase, msg.compute)
        shapes = aggregator.shapes
        if self.secure is not None and 0 < len(np.unique(msg.upload)) < MIN_UPLOADERS:
            self.note(number, msg.round, "skipped", msg.upload, "a secure sum needs the "
                       f"uploads of at least {MIN_UPLOADERS} clients; the message names "
                       f"{len(np.unique(msg.upload))}: no client takes this step")
            msg = carried_out(msg, msg.compute[:0])
        if self.secure is not None and (len(msg.upload) or evaluate is not None):
            done = self.secure.exchange(self, number, msg, shapes, evaluate,
                                        aggregator.secure_settings(msg))
            summed, included, nbytes = done.summed, done.included, done.nbytes
            dp_share = done.dp_share
            if evaluate is not None:
                sums, evaluated = done.sums, done.evaluated
                self._end(number, previous, "evaluate", self.everyone, evaluated)
        else:
            weight = dict(zip(*np.unique(msg.upload, return_counts=True), strict=True))
            replies = self._checked(number, msg, self._send(number, msg, evaluate),
                                    {c: shapes for c in weight}, evaluate is not None,
                                    np.inf if aggregator.local else aggregator.clip(msg))
            included = sorted(set(replies) & set(msg.compute.tolist()))
            batches = [(replies[c][0], np.array([weight[c]])) for c in included if c in weight]
            summed = aggregator.sum(batches, msg)
            if not all(np.isfinite(a).all() for a in summed.arrays.values()):  # overflow
                self.note(number, msg.round, "refused", included, "the uploads' sum is not "
                           "finite: none of them is taken")
                included, batches = [], []
                summed = aggregator.sum(batches, msg)
            nbytes = sum(upload_nbytes(uploads) for uploads, _ in batches)
            if evaluate is not None:
                sums, evaluated = self._added_sums(number, previous, replies), list(replies)
        for c in included:
            self.last_included[c] = number
        self._end(number, msg.round, msg.phase, msg.compute, included)
        asked = self.everyone if evaluate is not None else msg.compute
        self._answered(number, msg.round, asked, [*included, *evaluated])
        return Exchange(summed, nbytes, carried_out(msg, np.array(included, dtype=np.int64)),
                        sums=sums, dp_share=dp_share)

    def evaluate(self, model: Mapping[str, np.ndarray]) -> dict[str, float]:
        """Every client's evaluation sums under ``model``, added up (in client order): a
        message that asks no client for a step, with the model."""
        none = self.everyone[:0]
        msg = Message(self._round, "evaluate", none, none, {})
        number = self._begin(msg.round, msg.phase, self.everyone)
        if self.secure is not None:
            total, included = self.secure.evaluate(self, number, msg, model)
            self._end(number, msg.round, "evaluate", self.everyone, included)
        else:
            replies = self._checked(number, msg, self._send(number, msg, model), {}, True)
            total, included = self._added_sums(number, msg.round, replies), list(replies)
        self._answered(number, msg.round, self.everyone, included)
        return total

    def _answered(self, number: int, round_: int, asked: np.ndarray,
                  answered: list[int]) -> None:
        """Count an exchange in which every client asked was lost (noted as ``everyone
        lost``); after :attr:`max_lost` such exchanges in a row, stop the run
        (:class:`EveryoneLost`)."""
        self._answered_here += 1
        if not len(asked) or answered:
            self._lost_in_a_row = 0
            return
        self._lost_in_a_row += 1
        self.note(number, round_, "everyone lost", asked, f"no reply of clients "
                   f"{sorted(set(asked.tolist()))} was taken ({self._lost_in_a_row} exchange(s) "
                   f"in a row, the run stops after {self.max_lost})")
        if self._lost_in_a_row >= self.max_lost:
            raise EveryoneLost(f"every client was lost in {self._lost_in_a_row} exchanges in a "
                               f"row (max-lost-rounds = {self.max_lost}): the run stops; "
                               f"resume it with fedmc federate resume once the nodes are back")

    def _checked(self, number: int, msg: Message, replies: Mapping[int, RecordDict],
                 uploads: Mapping[int, Shapes], sums: bool,
                 clip: float = np.inf) -> dict[int, Reply]:
        """What the server takes of each reply: the uploads of the clients in ``uploads``
        (every declared upload, :func:`fedmc.flower.wire.unpack_uploads`) and, with
        ``sums``, the evaluation sums. A reply that is not finite, has the wrong shape or
        lies outside :attr:`bounds` (its uploads' norm also within ``clip``, the clip every
        client applied when no noise is added after it) is refused: its client is left out
        of the exchange (lost) and the reason noted."""
        taken, norms = {}, {}
        for c, content in sorted(replies.items()):
            try:
                shapes = uploads.get(c, {})
                mine = unpack_uploads(content, shapes) if shapes else {}
                if set(mine) != set(shapes):
                    raise RefusedReply(f"uploads {sorted(mine)}, expected {sorted(shapes)}")
                process = reply_process(content)
                if not self._from_admitted(c, process):  # a sampled client names the sample
                    self._refuse(self.node_of[c], c, "its reply comes from another process "
                                 "than the one admitted (a duplicate of a live node)",
                                 process, listed=not self.private)
                    raise RefusedReply(f"client {c}: a reply of a second process")
                evaluation = unpack_sums(content) if sums else None
                if evaluation is not None:
                    self.bounds.check_sums(c, evaluation)
                taken[c] = (mine, evaluation)
                if shapes:
                    norms[c] = upload_norm(mine)
            except (RefusedReply, OutOfBounds) as exc:
                self.note(number, msg.round, "refused", [c], f"client {c}: {exc}")
        if uploads:
            self._judge_norms(number, msg, taken, norms, clip)
        return taken

    def _judge_norms(self, number: int, msg: Message, taken: dict[int, Reply],
                     norms: Mapping[int, float], clip: float) -> None:
        """Refuse the uploads in ``taken`` outside :attr:`bounds` (their norms ``norms``), and
        above ``clip`` or else the :attr:`reference`'s bound; keep the exchange's norms
        (:attr:`norms`) and note them (``uploads``) outside a private run."""
        bound = min(clip, self.bounds.max_norm)
        auto = self.reference is not None and np.isinf(bound)
        size = {c: self.bounds.size(c) for c in norms}
        per_user = {c: norms[c] / size[c] for c in norms}
        if auto:
            bound = cast(NormReference, self.reference).bound(msg.phase, per_user)
        over = []
        for c in sorted(norms):
            limit = bound * size[c] if auto else bound
            try:
                self.bounds.check_uploads(taken[c][0], limit, norms[c])
            except OutOfBounds as exc:
                self.note(number, msg.round, "refused", [c], f"client {c}: {exc}")
                del taken[c]
                if np.isfinite(norms[c]) and norms[c] > limit:  # not a negative count's
                    over.append(c)
        kept = [c for c in norms if c in taken]
        if self.reference is not None:
            self.reference.take(msg.phase, {c: per_user[c] for c in kept})
        record = UploadNorms(number, msg.round, msg.phase, [norms[c] for c in kept], over,
                             bound, auto)
        self.norms.append(record)
        if not self.private and self.on_event is not None:
            self.on_event(record.event())

    def _from_admitted(self, client: int, process: str) -> bool:
        """Whether ``process`` is the process admitted for ``client`` (any, where its node
        names none: a stock node); a node restarted since it was admitted (activated anew)
        is asked again first."""
        admitted = self.process_of.get(client, "")
        if not admitted or process == admitted:
            return True
        self._refresh()
        return process == self.process_of.get(client, "")

    def _added_sums(self, number: int, round_: int,
                    replies: Mapping[int, Reply]) -> dict[str, float]:
        """The evaluation sums of every client's reply, added up in client order (and the
        evaluation of round ``round_`` logged)."""
        total: dict[str, float] = {}
        for c in sorted(replies):
            for key, value in (replies[c][1] or {}).items():
                total[key] = total.get(key, 0.0) + value
        self._end(number, round_, "evaluate", self.everyone, sorted(replies))
        return total

    def timeout_for(self, nodes: Iterable[int], phase: str) -> float:
        """Seconds to wait for the replies of ``nodes`` to a message of ``phase``:
        :attr:`timeout`, or at least :data:`COLD_TIMEOUT` while one of them has not yet
        answered a message of that phase (its first compiles the kernels it runs)."""
        if all((node, phase) in self.warm for node in nodes):
            return self.timeout
        return max(self.timeout, COLD_TIMEOUT)

    def note(self, number: int, round_: int, event: str, clients: Iterable[int],
              reason: str) -> None:
        """Report what happened to ``clients`` in an exchange (``on_event``)."""
        if self.on_event is not None:
            self.on_event({"event": event, "exchange": number, "round": round_,
                           "clients": sorted({int(c) for c in clients}), "reason": reason})

    @property
    def everyone(self) -> np.ndarray:
        """Every client id, ``0 .. p-1``."""
        return np.arange(self.n_clients, dtype=np.int64)

    def user_factors(self) -> np.ndarray:
        """Not available: user factors never leave the clients."""
        raise ConfigError("in a federation the user factors stay on the clients")

    def snapshot(self) -> dict[str, Any]:
        """The server's view of its clients that a resumed run needs: the exchanges so far
        (their numbers go on, so a client's pending state is decided rightly), each client's
        last included exchange, who was included and refused (the history's columns), the
        identity each client was claimed with, the secure sums' learned scales. The clients'
        own states are on their nodes' disks."""
        return {"key": self.key, "exchanges": self._exchanges, "round": self._round,
                "last_included": self.last_included, "log": self.log,
                "refusals": self.refusals, "token_of": self.token_of,
                "refused_processes": self.refused_processes, "norms": self.norms,
                "reference": self.reference,
                "exponents": None if self.secure is None else self.secure.exponents}

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Take up a :meth:`snapshot` (nodes are asked who they are anew); taken up twice,
        before the nodes are asked and by the round loop, it keeps what happened between."""
        self.key = snapshot["key"]
        self._exchanges, self._round = snapshot["exchanges"], snapshot["round"]
        self.last_included = dict(snapshot["last_included"])
        self.log = list(snapshot["log"])
        # claims refused since (the resumed run's own) stay; the identities first claimed win
        self.refusals = [*snapshot["refusals"],
                         *(r for r in self.refusals if r not in snapshot["refusals"])]
        self.token_of = {**self.token_of, **snapshot["token_of"]}
        self.refused_processes |= set(snapshot.get("refused_processes", ()))
        self.norms = [*snapshot.get("norms", ()), *(n for n in self.norms
                                                     if n not in snapshot.get("norms", ()))]
        if snapshot.get("reference") is not None:
            self.reference = snapshot["reference"]
        if self.secure is not None and snapshot["exponents"] is not None:
            self.secure.exponents = snapshot["exponents"]

    def envelope(self, number: int, msg: Message, clients: Iterable[int],
                 model: Mapping[str, np.ndarray] | None = None, **extra: object) -> Envelope:
        """The exchange as ``clients`` receive it (with ``model`` to evaluate, if any)."""
        if self.refused_processes:  # a refused process that gets the message stops
            extra = {**extra, "refused": sorted(self.refused_processes)}
        return Envelope(number, msg, {c: self.last_included[c] for c in clients
                                      if c in self.last_included}, extra, model, self.key)

    def nodes(self, clients: np.ndarray) -> dict[int, int]:
        """The node of each of ``clients`` that has one (others are lost for this exchange)."""
        self._refresh()
        return {int(c): self.node_of[int(c)] for c in np.unique(clients)
                if int(c) in self.node_of}

    def _send(self, number: int, msg: Message,
              model: Mapping[str, np.ndarray] | None) -> dict[int, RecordDict]:
        """A plain exchange: the client step of ``msg.compute`` and, with ``model``, every
        client's evaluation of it (the only task of the clients outside ``msg.compute``); the
        replies' contents by client."""
        nodes = self.nodes(msg.compute if model is None else self.everyone)
        client_of = {node: c for c, node in nodes.items()}
        content = pack_message(self.envelope(number, msg, nodes, model))
        compute = set(msg.compute.tolist())
        out = [FlowerMessage(content, dst_node_id=node, group_id=str(msg.round),
                             message_type="train.step" if c in compute else "evaluate")
               for c, node in nodes.items()]
        wait = self.timeout_for(nodes.values(), msg.phase)
        replies = replies_by_node(self.grid, out, wait)
        silent = sorted(c for c, node in nodes.items() if node not in replies)
        if silent:
            self.note(number, msg.round, "timed out", silent,
                      f"no reply within {wait:g} s (clients {silent})")
        self.warm.update((node, msg.phase) for node in replies)
        for node, m in replies.items():
            if m.has_error():  # the node's, or Flower's on its behalf: the client is lost
                client = client_of[node]
                self.note(number, msg.round, "failed", [client],
                           f"client {client}: {m.error.reason}")
        return {client_of[node]: m.content for node, m in good_replies(replies).items()}

    def _refresh(self) -> None:
        """Ask nodes that appeared (or signed on anew) since the last look which client they
        are; while a client has no node, also those that have not answered yet."""
        nodes = list(self.grid.get_nodes())
        keys = {info.node_id: bytes(info.public_key) for info in nodes}
        # a node is asked once per activation: one that restarts (its key keeps its node id)
        # or signs on again is asked anew, even if it was refused before
        activated = {info.node_id: str(info.last_activated_at) for info in nodes}
        new = [n for n in keys if self._asked.get(n) != activated[n]]
        if not new:
            return
        self._asked.update({n: activated[n] for n in new})
        ask = [FlowerMessage(pack_key(self.key, self.refused_processes), dst_node_id=n,
                             message_type="query") for n in new]
        replies = replies_by_node(self.grid, ask, self.timeout)
        self.failed.update({node: m.error.reason or "an error without a reason"
                            for node, m in replies.items() if m.has_error()})
        for node, reply in good_replies(replies).items():
            claim = reply.content.config_records.get("client")
            client = None if claim is None else claim.get("id")
            exchange = None if claim is None else claim.get("exchange", NO_EXCHANGE)
            if claim is None or not isinstance(client, int):
                self.failed[node] = "its reply names no client id"
            elif not isinstance(exchange, int):
                self.failed[node] = "its reply's last exchange is not a number"
            elif "refuses" in claim:  # it has finished this run: never continued
                refusal = str(claim["refuses"])
                why = f"node {node} (client {client}) refuses the run: {refusal}"
                if not self._answered_here:  # a finished run resumed: stop before it starts
                    raise ConfigError(why)
                # mid-run, one node's word does not stop the others: recorded, not admitted
                self.failed[node] = why
                self.note(max(self._exchanges - 1, 0), self._round, "failed", [client], why)
            else:
                self.admit(node, client, str(claim.get("token", "")), keys[node],
                           str(claim.get("process", "")), exchange)
        if len(self.node_of) < self.n_clients:  # a node still busy (with a stopped run's
            for node in set(new) - set(replies):  # message, say) is asked again
                del self._asked[node]

    def finish(self) -> None:
        """Tell every client's node that the run has ended (``query.done``: the clients
        remove their states and refuse the run's key from then on); a node that does not
        answer within :attr:`timeout` is not waited for."""
        done = [FlowerMessage(pack_key(self.key), dst_node_id=node, message_type="query.done")
                for node in self.node_of.values()]
        replies_by_node(self.grid, done, self.timeout)

    def admit(self, node: int, client: int, token: str, key: bytes, process: str = "",
              exchange: int = NO_EXCHANGE) -> bool:
        """Let ``node`` speak for ``client`` if its claim holds (module docstring); a refused
        claim is recorded. ``token`` names the node's state folder, ``key`` is the public key
        the SuperLink knows the node by, ``process`` the nonce of the node process that
        claims and ``exchange`` the latest exchange its state folder holds a state of
        (:attr:`fedmc.flower.client_state.StateStore.held_exchange`).

        A claim by another process than the one admitted for ``client`` is a restart or a
        copy of the node's key and state folder, which no key or token tells apart. It is
        refused when its folder is older than the server's record (the client's last
        included exchange: a copy made before it), and when the process admitted still
        answers (:meth:`_alive`); otherwise (the admitted process is gone) it takes the
        client over. A refused process is told so in every message it may pull, and stops."""
        if not 0 <= client < self.n_clients:
            return self._refuse(node, client, f"client {client} is not in 0..{self.n_clients - 1}")
        if self.roster is not None:
            if self.roster.get(client) != key:
                return self._refuse(node, client, f"its key is not client {client}'s key in "
                                                  f"the roster")
        elif self.token_of.setdefault(client, token) != token:
            return self._refuse(node, client, f"client {client} is held by another node (a "
                                              f"state folder of its own)")
        admitted = self.process_of.get(client, "")
        if admitted and process != admitted:
            latest = self.last_included.get(client, NO_EXCHANGE)
            if exchange < latest:  # whether it is depends on the client's (secret) sampling
                return self._refuse(node, client, f"its state folder is older than the "
                                    f"server's record (it holds exchange {exchange}, the "
                                    f"server included client {client} in exchange {latest}): "
                                    f"a copy of an earlier folder", process,
                                    listed=not self.private)
            if self._alive(client):
                return self._refuse(node, client, f"the process admitted for client {client} "
                                    f"still answers: a second live process (a copy of the "
                                    f"node's key and state folder?)", process)
        self.node_of[client] = node  # the same identity on a new node: a restarted client
        self.process_of[client] = process
        return True

    def _alive(self, client: int) -> bool:
        """Whether the process admitted for ``client`` answers a probe (``query.probe``,
        naming the process by its tag) within :data:`PROBE_WINDOW` seconds. Processes that
        share a node id (one key) pull its messages in turn; one that is not the process
        probed answers and keeps off the SuperLink for a while
        (:func:`fedmc.flower.client_app.probe`), so the probes go on until the admitted one
        answers or the window ends."""
        node, process = self.node_of[client], self.process_of[client]
        deadline = time.monotonic() + PROBE_WINDOW
        while (left := deadline - time.monotonic()) > 0:
            probe = FlowerMessage(pack_key(self.key, self.refused_processes,
                                           probe=process_tag(process)),
                                  dst_node_id=node, message_type="query.probe")
            replies = good_replies(replies_by_node(self.grid, [probe], left))
            if node in replies and reply_process(replies[node].content) == process:
                return True
            if node not in replies:  # an error (the node offline, say): ask again shortly
                time.sleep(min(0.2, max(deadline - time.monotonic(), 0.0)))
        return False

    def _refuse(self, node: int, client: int, reason: str, process: str = "",
                listed: bool = True) -> bool:
        """Refuse a claim: ``process`` (if named) is told in the next message it pulls and
        stops; the refusal is recorded (``claims_refused``, a progress line) where
        ``listed``."""
        if process:
            self.refused_processes.add(process_tag(process))
        if listed:
            self.refusals.append(Refusal(self._round, node, client, reason))
            self.note(max(self._exchanges - 1, 0), self._round, "claim refused", [client],
                       f"node {node} claims client {client}: {reason}")
        return False

    def _begin(self, round_: int, phase: str, clients: np.ndarray) -> int:
        number = self._exchanges
        self._exchanges += 1
        self._round = round_
        if self.on_exchange is not None:
            self.on_exchange(number, round_, phase, sorted(set(clients.tolist())))
        return number

    def _end(self, number: int, round_: int, phase: str, asked: np.ndarray,
             included: list[int]) -> None:
        self.log.append(Record(number, round_, phase, sorted(set(asked.tolist())),
                               list(included)))

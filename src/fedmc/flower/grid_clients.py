"""The clients of a real federation, as the server loop (:mod:`fedmc.sim.loop`) sees them.

:class:`GridClients` is a client population (:class:`fedmc.sim.clients.ClientPopulation`)
whose clients are ClientApps on SuperNodes: an exchange sends the message to the nodes of the
clients it names and waits up to ``timeout`` seconds for their replies. Plain exchanges sum
the uploads that came back (:func:`fedmc.core.uploads.sum_uploads`, in client order, so a
federation without losses reproduces the simulation's sums bit for bit); secure ones get only
the sum from SecAgg+ (:mod:`fedmc.flower.secagg`). A client whose reply did not come is left
out: the server step is handed the message as it was carried out, and the client drops the
state it computed (:mod:`fedmc.flower.client_state`).

Clients are known by the id in their node configuration: nodes that appear on the SuperLink
are asked for it (``query``), so a node restarted under a new Flower node id takes its
client's place again. A claim is checked before it is admitted (:meth:`GridClients.admit`):
with a roster (``fedmc federate server``) the node's public key, which the SuperLink has
verified on every request the node signed, must be the key the roster names for that client;
without one, the node must present the token of the state folder that first claimed the
client (a node restarted on its folder does; a second node with client 1's configuration
and a folder of its own does not). A refused claim is recorded (:class:`Refusal`: the
``refused`` column of the history and a line of ``progress.jsonl``) and its node is never
sent a message: which node speaks for a client never depends on the order of replies.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from flwr.app import Message as FlowerMessage
from flwr.app import RecordDict
from flwr.serverapp import Grid

from fedmc.core.protocol import Message
from fedmc.core.uploads import sum_uploads, upload_nbytes
from fedmc.errors import ConfigError
from fedmc.flower.transport import good_replies, send_and_receive
from fedmc.flower.wire import (
    Envelope,
    pack_message,
    unpack_sums,
    unpack_uploads,
)
from fedmc.sim.clients import Exchange, carried_out

if TYPE_CHECKING:
    from fedmc.flower.secagg import SecureSum

Shapes = Mapping[str, tuple[int, ...]]


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
class Refusal:
    """A node's claim to be a client, refused: when, which node, which client, why."""

    round: int
    node: int
    client: int
    reason: str


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
    roster
        The public key (PEM, as Flower records a node's) of every client, when the operator
        gave a roster (:func:`fedmc.flower.certs.read_roster`).
    on_refused
        Called with every refused claim (progress reports).
    """

    grid: Grid
    n_clients: int
    timeout: float
    secure: SecureSum | None = None
    on_exchange: Callable[[int, int, str, list[int]], None] | None = None
    roster: Mapping[int, bytes] | None = None
    on_refused: Callable[[Refusal], None] | None = None
    log: list[Record] = field(default_factory=list)
    refusals: list[Refusal] = field(default_factory=list)
    node_of: dict[int, int] = field(default_factory=dict)
    token_of: dict[int, str] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)
    last_included: dict[int, int] = field(default_factory=dict)
    _asked: set[int] = field(default_factory=set)
    _round: int = 0
    _exchanges: int = 0
    folds_evaluation: bool = True

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

    def exchange(self, msg: Message, shapes: Shapes,
                 evaluate: Mapping[str, np.ndarray] | None = None,
                 dp_std: float = 0.0) -> Exchange:
        """Send ``msg`` to its clients (and ``evaluate``, the previous round's model, to every
        client with it); the sum of the uploads that came back. With secure aggregation the
        clients add the DP noise ``dp_std`` in shares (distributed DP); without it the server
        adds it (central DP: the server process sees every upload anyway)."""
        sums, dp_share = None, 0.0
        previous = self._round
        number = self._begin(msg.round, msg.phase, msg.compute)
        if self.secure is not None and (len(msg.upload) or evaluate is not None):
            done = self.secure.exchange(self, number, msg, shapes, evaluate, dp_std)
            summed, included, nbytes = done.summed, done.included, done.nbytes
            dp_share = done.dp_share
            if evaluate is not None:
                sums = done.sums
                self._end(number, previous, "evaluate", self.everyone, done.evaluated)
        else:
            replies = self._send(number, msg, evaluate)
            included = sorted(set(replies) & set(msg.compute.tolist()))
            weight = dict(zip(*np.unique(msg.upload, return_counts=True), strict=True))
            batches = [(unpack_uploads(replies[c], shapes), np.array([weight[c]]))
                       for c in included if c in weight]
            summed = sum_uploads(batches, shapes)
            nbytes = sum(upload_nbytes(uploads) for uploads, _ in batches)
            if evaluate is not None:
                sums = self._added_sums(number, previous, replies)
        for c in included:
            self.last_included[c] = number
        self._end(number, msg.round, msg.phase, msg.compute, included)
        return Exchange(summed, nbytes, carried_out(msg, np.array(included, dtype=np.int64)),
                        noised=True, sums=sums, dp_share=dp_share)

    def evaluate(self, model: Mapping[str, np.ndarray]) -> dict[str, float]:
        """Every client's evaluation sums under ``model``, added up (in client order): a
        message that asks no client for a step, with the model."""
        none = self.everyone[:0]
        msg = Message(self._round, "evaluate", none, none, {})
        number = self._begin(msg.round, msg.phase, self.everyone)
        if self.secure is not None:
            total, included = self.secure.evaluate(self, number, msg, model)
            self._end(number, msg.round, "evaluate", self.everyone, included)
            return total
        return self._added_sums(number, msg.round, self._send(number, msg, model))

    def _added_sums(self, number: int, round_: int,
                    replies: Mapping[int, RecordDict]) -> dict[str, float]:
        """The evaluation sums of every client's reply, added up in client order (and the
        evaluation of round ``round_`` logged)."""
        total: dict[str, float] = {}
        for c in sorted(replies):
            for key, value in unpack_sums(replies[c]).items():
                total[key] = total.get(key, 0.0) + value
        self._end(number, round_, "evaluate", self.everyone, sorted(replies))
        return total

    @property
    def everyone(self) -> np.ndarray:
        """Every client id, ``0 .. p-1``."""
        return np.arange(self.n_clients, dtype=np.int64)

    def user_factors(self) -> np.ndarray:
        """Not available: user factors never leave the clients."""
        raise ConfigError("in a federation the user factors stay on the clients")

    def envelope(self, number: int, msg: Message, clients: Iterable[int],
                 model: Mapping[str, np.ndarray] | None = None, **extra: object) -> Envelope:
        """The exchange as ``clients`` receive it (with ``model`` to evaluate, if any)."""
        return Envelope(number, msg, {c: self.last_included[c] for c in clients
                                      if c in self.last_included}, extra, model)

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
        replies = good_replies(send_and_receive(self.grid, out, self.timeout))
        return {client_of[node]: m.content for node, m in replies.items()}

    def _refresh(self) -> None:
        """Ask nodes that appeared since the last look which client they are."""
        keys = {info.node_id: bytes(info.public_key) for info in self.grid.get_nodes()}
        new = [n for n in keys if n not in self._asked]
        if not new:
            return
        self._asked.update(new)
        ask = [FlowerMessage(RecordDict(), dst_node_id=n, message_type="query") for n in new]
        replies = send_and_receive(self.grid, ask, self.timeout)
        self.failed.update({m.metadata.src_node_id: m.error.reason for m in replies
                            if m.has_error()})
        for node, reply in good_replies(replies).items():
            claim = reply.content.config_records["client"]
            self.admit(node, int(claim["id"]), str(claim.get("token", "")), keys[node])

    def admit(self, node: int, client: int, token: str, key: bytes) -> bool:
        """Let ``node`` speak for ``client`` if its claim holds (module docstring); a refused
        claim is recorded. ``token`` names the node's state folder, ``key`` is the public key
        the SuperLink knows the node by."""
        if not 0 <= client < self.n_clients:
            return self._refuse(node, client, f"client {client} is not in 0..{self.n_clients - 1}")
        if self.roster is not None:
            if self.roster.get(client) != key:
                return self._refuse(node, client, f"its key is not client {client}'s key in "
                                                  f"the roster")
        elif self.token_of.setdefault(client, token) != token:
            return self._refuse(node, client, f"client {client} is held by another node (a "
                                              f"state folder of its own)")
        self.node_of[client] = node  # the same identity on a new node: a restarted client
        return True

    def _refuse(self, node: int, client: int, reason: str) -> bool:
        refusal = Refusal(self._round, node, client, reason)
        self.refusals.append(refusal)
        if self.on_refused is not None:
            self.on_refused(refusal)
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

"""A SuperNode's connection to the SuperLink's Fleet API that says what went wrong.

Flower 1.41's ``http_request_response`` ends the node's process on the events a long-lived
node must survive: a 403 (the run was stopped with ``flwr stop``) raises
``RunNotRunningException``, a ``BaseException``; a 401 (the SuperLink no longer knows the
node, e.g. after a restart with in-memory state) sends the process SIGINT; a failed
activation exits. And a node killed without signing off stays ``online`` on the SuperLink
for up to two heartbeat intervals (60 s) after its last heartbeat, during which Flower
refuses to activate the same key again (412): a restarted node under SuperNode
authentication was locked out for about 50 s.

:class:`FleetConnection` speaks the same API with Flower's own client, request signing and
protobuf helpers, and turns those events into exceptions the node handles
(:func:`fedmc.deploy.node.run_node`): :class:`RunStopped` (drop the run's message, keep
serving; from flwr 1.43 the SuperLink drops a reply to a stopped run itself, and a 403 may
also refuse a reply whose source is not this node, which is not a stopped run:
:func:`fedmc.flower.compat.refuses_run` reads the reason), :class:`Dropped` (reconnect). All
of Flower's internals come through :mod:`fedmc.flower.compat`. Transport failures and 502-504
are retried with backoff (logged once per outage). A node with a registered key remembers its
node id in its state folder and, when it starts again, first signs off the node id its
previous process left online (a ``DeactivateNode`` signed with its key, which only the key's
holder can send), so it rejoins at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any, TypeVar, cast

import httpx
from cryptography.hazmat.primitives.asymmetric import ec
from flwr.app import Message

from fedmc.flower.compat import (
    HEARTBEAT_DEFAULT_INTERVAL,
    ActivateNodeRequest,
    DeactivateNodeRequest,
    Fab,
    GetFabRequest,
    GetRunRequest,
    HeartbeatSender,
    NodeProto,
    ObjectTree,
    PullMessagesRequest,
    PushMessagesRequest,
    RegisterNodeFleetRequest,
    Run,
    SendNodeHeartbeatRequest,
    UnregisterNodeFleetRequest,
    error_message,
    fab_from_proto,
    fleet_client,
    generate_key_pairs,
    make_confirm_message_received_fn_protobuf,
    make_pull_object_fn_protobuf,
    make_push_object_fn_protobuf,
    message_from_proto,
    message_to_proto,
    public_key_to_bytes,
    refuses_run,
    remove_content_from_message,
    run_from_proto,
)

log = logging.getLogger("fedmc.node")
Keys = tuple[ec.EllipticCurvePrivateKey, ec.EllipticCurvePublicKey]
T = TypeVar("T")
FIRST_RETRY = 0.5
LONGEST_RETRY = 30.0
RETRYABLE = frozenset({502, 503, 504})


class Dropped(Exception):
    """The SuperLink does not (or no longer does) serve this node: reconnect later."""


class RunStopped(Exception):
    """The message's run is no longer running (``flwr stop``, or it ended)."""


TLS_HINT = ("TLS failed: the SuperLink may not serve TLS, or its certificate is not signed by "
            "--root-certificates or does not name the address")
PLAIN_HINT = ("this node speaks without TLS (--insecure): if the SuperLink serves TLS, give "
              "--root-certificates")


def transport_failure(exc: httpx.TransportError, tls: bool) -> str:
    """Why a request did not get through, naming TLS where it may be the cause: a TLS
    handshake that failed (``tls``), or a connection a TLS server drops when a node speaks
    plain HTTP to it (not ``tls``)."""
    what = f"{type(exc).__name__}: {exc}"
    if tls and ("SSL" in str(exc) or "certificate" in str(exc).lower()):
        return f"{TLS_HINT} ({what})"
    if not tls and isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError):
        return f"{what}; {PLAIN_HINT}"
    return what


def describe(exc: httpx.HTTPStatusError) -> str:
    """An HTTP error as the SuperLink explained it."""
    return f"HTTP {exc.response.status_code}: {error_message(exc.response)}"


class Backoff:
    """Exponential waits between retries: ``first``, doubling, at most ``longest``."""

    def __init__(self, first: float = FIRST_RETRY, longest: float = LONGEST_RETRY) -> None:
        self.first, self.longest = first, longest
        self.next = first

    def wait(self) -> float:
        """Sleep for the next wait; its length."""
        pause = self.next
        time.sleep(pause)
        self.next = min(self.longest, pause * 2)
        return pause

    def reset(self) -> None:
        """Start again from the first wait."""
        self.next = self.first


class FleetConnection:
    """One session of a node with the SuperLink at ``address`` (module docstring).

    Parameters
    ----------
    address
        The Fleet API's ``HOST:PORT``.
    root_certificates
        The CA certificate to check the SuperLink's with (None: insecure).
    keys
        The node's registered key pair (SuperNode authentication); None: a fresh pair,
        registered by the node itself (a SuperLink without authentication).
    remember
        Where the node keeps the node id of its registered key between processes.
    """

    def __init__(self, address: str, root_certificates: Path | None, keys: Keys | None,
                 remember: Path | None = None) -> None:
        self.self_registered = keys is None
        self.private, self.public = keys if keys is not None else generate_key_pairs()
        self.remember = remember
        self.tls = root_certificates is not None
        self.client = fleet_client(
            address, None if root_certificates is None else str(root_certificates),
            self.private, self.public)
        self.node: NodeProto | None = None
        self.dropped = threading.Event()
        self.why = ""
        self._heartbeats: HeartbeatSender | None = None
        self._outage: float | None = None

    # -- session ---------------------------------------------------------------------------

    def open(self) -> int:
        """Register (a fresh key), sign off a node id left online, activate; the node id.
        Raises :class:`Dropped` when the SuperLink refuses this node."""
        key = public_key_to_bytes(self.public)
        try:
            if self.self_registered:
                self.call(self.client.RegisterNode, RegisterNodeFleetRequest(public_key=key))
            else:
                self._sign_off_previous()
        except httpx.HTTPStatusError as exc:
            raise Dropped(f"the SuperLink refused to register this node ({describe(exc)}); "
                          f"a SuperLink with SuperNode authentication needs --auth-key") from None
        try:
            node_id = self.call(self.client.ActivateNode, ActivateNodeRequest(
                public_key=key, heartbeat_interval=HEARTBEAT_DEFAULT_INTERVAL)).node_id
        except httpx.HTTPStatusError as exc:
            raise Dropped(f"the SuperLink refused to activate this node ({describe(exc)}): "
                          f"its key is not registered there, or the node is still online "
                          f"(another process with this key?)") from None
        self.node = NodeProto(node_id=node_id)
        if self.remember is not None and not self.self_registered:
            self.remember.parent.mkdir(parents=True, exist_ok=True)
            self.remember.write_text(f"{node_id}\n")
        self.dropped.clear()
        self._heartbeats = HeartbeatSender(self._heartbeat)
        self._heartbeats.start()
        return node_id

    def close(self) -> None:
        """Stop the heartbeats and sign off (unregister a fresh key); never raises."""
        if self._heartbeats is not None and self._heartbeats.is_running:
            self._heartbeats.stop()
        if self.node is not None:
            node_id, self.node = self.node.node_id, None
            with suppress(httpx.HTTPError, RuntimeError):
                self.client.DeactivateNode(DeactivateNodeRequest(node_id=node_id))
            if self.self_registered:
                with suppress(httpx.HTTPError, RuntimeError):
                    self.client.UnregisterNode(UnregisterNodeFleetRequest(node_id=node_id))
        self.client.close()

    def abandon(self) -> None:
        """Stop the heartbeats and close without signing off: the node id stays online for
        another process that holds the same key (the one the server admitted)."""
        if self._heartbeats is not None and self._heartbeats.is_running:
            self._heartbeats.stop()
        self.node = None

    def __enter__(self) -> FleetConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _sign_off_previous(self) -> None:
        """Deactivate the node id an earlier process of this key left online (if any)."""
        if self.remember is None or not self.remember.is_file():
            return
        try:
            node_id = int(self.remember.read_text())
            self.call(self.client.DeactivateNode, DeactivateNodeRequest(node_id=node_id))
            log.warning("signed off node %s, which an earlier process of this node left online",
                        node_id)
        except (ValueError, Dropped, httpx.HTTPStatusError):
            pass  # not online any more, or not this key's node id on this SuperLink

    def _heartbeat(self) -> bool:
        """One heartbeat (Flower's sender retries while this returns False)."""
        if self.node is None:
            return True
        try:
            ok = self.client.SendNodeHeartbeat(SendNodeHeartbeatRequest(
                node=self.node, heartbeat_interval=HEARTBEAT_DEFAULT_INTERVAL)).success
        except httpx.TransportError:
            return False
        except httpx.HTTPStatusError as exc:
            if exc.response.status_code in RETRYABLE:
                return False
            self._drop(f"a heartbeat was refused ({describe(exc)})")
            return True
        if not ok:
            self._drop("the SuperLink does not recognize this node any more")
        return True

    def _drop(self, why: str) -> None:
        self.why = why
        self.dropped.set()

    # -- requests --------------------------------------------------------------------------

    def call(self, method: Callable[[Any], T], request: Any) -> T:
        """``method(request)``, retried with backoff while the SuperLink cannot be reached;
        401 raises :class:`Dropped`, a refusal for the request's run (a 403,
        :func:`~fedmc.flower.compat.refuses_run`) :class:`RunStopped`, other errors
        ``httpx.HTTPStatusError``."""
        backoff = Backoff()
        while True:
            if self.dropped.is_set():
                raise Dropped(self.why)
            try:
                response = method(request)
            except httpx.TransportError as exc:
                self._unreachable(transport_failure(exc, self.tls), backoff)
                continue
            except httpx.HTTPStatusError as exc:
                status = exc.response.status_code
                if status in RETRYABLE:
                    self._unreachable(describe(exc), backoff)
                    continue
                if status == 401:
                    raise Dropped(f"the SuperLink does not know this node ({describe(exc)}): "
                                  f"its key is not registered, or it restarted without "
                                  f"its state") from None
                if refuses_run(exc.response):
                    raise RunStopped(describe(exc)) from None
                raise
            if self._outage is not None:
                log.warning("the SuperLink answers again (after %.1f s)",
                            time.monotonic() - self._outage)
                self._outage = None
            return response

    def _unreachable(self, why: str, backoff: Backoff) -> None:
        if self._outage is None:
            self._outage = time.monotonic()
            log.warning("the SuperLink cannot be reached (%s); retrying with backoff", why)
        backoff.wait()

    def receive(self) -> tuple[Message, ObjectTree] | None:
        """The next message for this node and its object tree, if any."""
        response = self.call(self.client.PullMessages, PullMessagesRequest(node=self.node))
        if not response.messages_list:
            return None
        return message_from_proto(response.messages_list[0]), response.message_object_trees[0]

    def send(self, reply: Message, tree: ObjectTree, runtime: float) -> tuple[set[str], str]:
        """Announce ``reply``; the ids of the objects to push and the push session."""
        if reply.has_content():
            reply = remove_content_from_message(reply)
        response = self.call(self.client.PushMessages, PushMessagesRequest(
            node=self.node, messages_list=[message_to_proto(reply)],
            message_object_trees=[tree], clientapp_runtime_list=[runtime]))
        return set(response.objects_to_push), response.session_id

    def get_run(self, run_id: int) -> Run:
        """The run ``run_id``."""
        return run_from_proto(self.call(self.client.GetRun,
                                        GetRunRequest(node=self.node, run_id=run_id)).run)

    def get_fab(self, fab_hash: str, run_id: int) -> Fab:
        """The app of a run."""
        return fab_from_proto(self.call(self.client.GetFab, GetFabRequest(
            node=self.node, hash_str=fab_hash, run_id=run_id)).fab)

    def _joined(self) -> NodeProto:
        """This node, as the SuperLink knows it: objects move only while it is joined."""
        return cast(NodeProto, self.node)

    def pull_object(self, run_id: int, object_id: str) -> bytes:
        """One object of a message to this node."""
        return make_pull_object_fn_protobuf(lambda r: self.call(self.client.PullObject, r),
                                            self._joined(), run_id)(object_id)

    def push_object(self, run_id: int, session: str, object_id: str, content: bytes) -> None:
        """One object of a reply."""
        make_push_object_fn_protobuf(lambda r: self.call(self.client.PushObject, r),
                                     self._joined(), run_id, session)(object_id, content)

    def confirm(self, run_id: int, object_id: str) -> None:
        """Confirm that a message arrived whole."""
        make_confirm_message_received_fn_protobuf(
            lambda r: self.call(self.client.ConfirmMessageReceived, r),
            self._joined(), run_id)(object_id)

"""``fedmc federate node``: a SuperNode that runs fedmc's ClientApp in its own process.

Flower's ``flower-supernode`` starts a fresh ``flwr-clientapp`` process for every message
(here about 4 s: Python, Flower, NumPy, Numba and the client's data, each time) and, when
idle, polls the SuperLink every 3 s. This node speaks the same Fleet API with Flower's own
client (request signing for node authentication, TLS, heartbeats; :mod:`fedmc.deploy.fleet`,
which also survives ``flwr stop`` and SuperLink restarts) but keeps the ClientApp
loaded between messages and polls sparingly but promptly (:class:`Poller`: every poll is an
HTTP request that the single SuperLink process serves, about 10 ms of its CPU here, so ten
nodes polling every 0.1 s would take half of it); it also retries an object that the server
has not finished pushing after 20 ms instead of Flower's 1 s (a message is announced before
its objects arrive, so the first pull of a fresh message often finds them missing). The
ClientApp is the same either way, so a node may also be a stock ``flower-supernode`` (slower;
its state survives through the state folder).
"""

from __future__ import annotations

import fcntl
import logging
import os
import secrets
import time
from collections import deque
from functools import partial
from pathlib import Path
from typing import IO

import httpx
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import load_ssh_private_key
from flwr.app import Context, Error, Message, RecordDict

from fedmc.deploy.fleet import Backoff, Dropped, FleetConnection, RunStopped, describe, log
from fedmc.errors import ConfigError
from fedmc.flower.compat import (
    ErrorCode,
    ObjectPullError,
    get_all_nested_objects,
    get_fused_config_from_fab,
    get_object_tree,
    no_object_id_recompute,
    parse_config_args,
    pull_and_inflate_object_from_tree,
    push_object_contents_from_iterable,
)

POLL = 0.1
LONGEST_POLL = 0.5
QUIET = 0.85  # share of the shortest recent gap between messages spent without polling
LONGEST_QUIET = 2.0
OBJECT_RETRY = 0.02  # first pause before pulling a missing object again (Flower's: 1 s)
LONGEST_OBJECT_RETRY = 0.2


class Poller:
    """When a node asks the SuperLink for its next message.

    Messages come in a rhythm (one per round, or the stages of a secure sum): after a message
    arrives, the node stays quiet for :data:`QUIET` of the shortest gap between its last few
    messages (at most :data:`LONGEST_QUIET` seconds), then polls every ``poll`` seconds, the
    interval growing with the idle time (a tenth of it) up to ``longest``. A node polls a few
    times per round instead of every ``poll`` seconds, and a message that comes in the rhythm
    is still picked up within ``poll`` seconds.
    """

    def __init__(self, poll: float = POLL, longest: float = LONGEST_POLL,
                 remember: int = 4) -> None:
        self.poll = poll
        self.longest = longest
        self.arrivals: deque[float] = deque(maxlen=remember + 1)
        self.idle_since: float | None = None

    def arrived(self, now: float) -> None:
        """A message arrived at ``now``."""
        self.arrivals.append(now)

    def replied(self, now: float) -> None:
        """The node answered its message at ``now``."""
        self.idle_since = now

    def pause(self, now: float) -> float:
        """Seconds to wait before the next poll."""
        if len(self.arrivals) >= 2:
            times = list(self.arrivals)
            gap = min(b - a for a, b in zip(times, times[1:], strict=False))
            quiet_until = times[-1] + min(LONGEST_QUIET, QUIET * gap)
            if now < quiet_until:
                return quiet_until - now
        idle = now - (now if self.idle_since is None else self.idle_since)
        return min(self.longest, max(self.poll, idle / 10))


def load_auth_key(path: Path) -> tuple[ec.EllipticCurvePrivateKey, ec.EllipticCurvePublicKey]:
    """A SuperNode's authentication key pair from its OpenSSH private key file."""
    try:
        key = load_ssh_private_key(path.expanduser().read_bytes(), None)
    except (OSError, ValueError, TypeError) as exc:
        raise ConfigError(f"{path}: not a readable OpenSSH private key without a passphrase "
                          f"({getattr(exc, 'strerror', None) or exc})") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ConfigError(f"{path}: not an elliptic-curve private key")
    return key, key.public_key()


def hold_state(folder: Path) -> IO[str]:
    """Lock the state folder ``folder`` for this process (``FOLDER/node.lock``, an ``fcntl``
    lock the system drops when the process ends, which holds its pid): one live process
    per client and folder.

    Raises
    ------
    ConfigError
        Another live process holds it.
    """
    folder.mkdir(parents=True, exist_ok=True)
    lock = open(folder / "node.lock", "a+")  # noqa: SIM115 (held while the process lives)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.seek(0)
        holder = lock.read().strip() or "?"
        lock.close()
        raise ConfigError(f"{folder}: another live node process (pid {holder}) serves this "
                          f"state folder; one process per client") from None
    lock.truncate(0)
    lock.write(f"{os.getpid()}\n")
    lock.flush()
    return lock


def run_node(superlink: str, node_config: str, *, root_certificates: Path | None = None,
             auth_key: Path | None = None, poll: float = POLL,
             longest_poll: float = LONGEST_POLL) -> None:
    """Serve fedmc's ClientApp to the SuperLink at ``superlink`` (``HOST:PORT``) until the
    process is stopped; without ``root_certificates`` the connection is insecure.

    The node outlives runs and the SuperLink: a message of a run that was stopped is dropped
    (logged) and the node waits for the next; when the SuperLink cannot be reached the node
    retries with backoff; when it refuses or forgets the node (a restart without its state,
    an unregistered key) the node logs why and connects again with backoff (1 s, doubling,
    at most a minute). A node with ``auth_key`` keeps its node id in its state folder
    (``node-id``) to sign off an earlier process's session (:mod:`fedmc.deploy.fleet`).
    """
    from fedmc.flower.client_app import NODE_PROCESS_ENV, NodeSettings, ProcessRefused

    _log_to_stderr()
    settings = NodeSettings.parse(node_config)
    held = hold_state(settings.state)  # noqa: F841 (held while the process lives)
    os.environ[NODE_PROCESS_ENV] = secrets.token_hex(16)  # this process, for the server
    config = parse_config_args([node_config])
    keys = load_auth_key(auth_key) if auth_key is not None else None
    backoff = Backoff(1.0, 60.0)
    while True:
        with FleetConnection(superlink, root_certificates, keys,
                             settings.state / "node-id") as conn:
            try:
                node_id = conn.open()
                log.info("client %s: node %s connected to %s", settings.client, node_id,
                         superlink)
                backoff.reset()
                _serve(conn, node_id, config, poll, longest_poll)
            except ProcessRefused:
                conn.abandon()  # the node id is the admitted process's too: keep it online
                raise
            except (Dropped, httpx.HTTPStatusError) as exc:
                why = describe(exc) if isinstance(exc, httpx.HTTPStatusError) else exc
                log.warning("client %s: %s; connecting again in %.0f s", settings.client, why,
                            backoff.next)
        backoff.wait()


def _serve(conn: FleetConnection, node_id: int, config: dict, poll: float,
           longest_poll: float) -> None:
    """Answer messages until the connection drops (:class:`~fedmc.deploy.fleet.Dropped`)."""
    from fedmc.flower.client_app import app, forget_run, quiet_until

    contexts: dict[int, Context] = {}
    poller = Poller(poll, longest_poll)
    while True:
        if (quiet := quiet_until() - time.monotonic()) > 0:  # a probe for another process
            time.sleep(quiet)
        got = conn.receive()
        if got is None:
            time.sleep(poller.pause(time.monotonic()))
            continue
        poller.arrived(time.monotonic())
        message, tree = got
        run_id = message.metadata.run_id
        try:
            if run_id not in contexts:
                run = conn.get_run(run_id)
                fab = conn.get_fab(run.fab_hash, run_id)
                contexts[run_id] = Context(run_id, node_id, config, RecordDict(),
                                           get_fused_config_from_fab(fab.content, run),
                                           run.series_id)
            _answer(conn, app, message, tree, contexts[run_id])
        except RunStopped as exc:
            log.warning("run %s is not running any more (%s): its message is dropped, the "
                        "node waits for the next run", run_id, exc)
            contexts.pop(run_id, None)
            forget_run(run_id)
        except ObjectPullError as exc:
            log.warning("run %s: a message could not be pulled whole (%s): dropped", run_id, exc)
        poller.replied(time.monotonic())


def _answer(conn: FleetConnection, app, message: Message, tree, context: Context) -> None:
    """Pull the message's objects, run the ClientApp on it, push the reply."""
    run_id = message.metadata.run_id
    message = pull_and_inflate_object_from_tree(
        tree, partial(conn.pull_object, run_id), partial(conn.confirm, run_id),
        return_type=Message, initial_backoff=OBJECT_RETRY, backoff_cap=LONGEST_OBJECT_RETRY)
    message.metadata.__dict__["_message_id"] = tree.object_id
    from fedmc.flower.client_app import ProcessRefused

    started = time.perf_counter()
    refused = None
    try:
        reply = app(message, context)
    except Exception as exc:  # the server learns of it as an error reply
        refused = exc if isinstance(exc, ProcessRefused) else None
        reply = Message(Error(ErrorCode.CLIENT_APP_RAISED_EXCEPTION,
                              f"{type(exc).__name__}: {exc}"), reply_to=message)
    _send(reply, time.perf_counter() - started, conn.send, partial(conn.push_object, run_id))
    if refused is not None:  # said (the server need not wait for the message it took): stop
        raise refused


def _log_to_stderr() -> None:
    if not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s fedmc node: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False


def _send(reply: Message, runtime: float, send, push_object) -> None:
    """Push a reply and the objects the SuperLink does not have yet."""
    reply.metadata.__dict__["_message_id"] = reply.object_id
    with no_object_id_recompute():
        objects = get_all_nested_objects(reply)
        wanted, session = send(reply, get_object_tree(reply), runtime)
        push_object_contents_from_iterable(
            ((oid, obj.deflate()) for oid, obj in objects.items() if oid in wanted),
            partial(push_object, session))

"""``fedmc federate node``: a SuperNode that runs fedmc's ClientApp in its own process.

Flower's ``flower-supernode`` starts a fresh ``flwr-clientapp`` process for every message
(here about 4 s: Python, Flower, NumPy, Numba and the client's data, each time) and, when
idle, polls the SuperLink every 3 s. This node speaks the same Fleet API with Flower's own
connection code (registration, heartbeats, TLS, node authentication) but keeps the ClientApp
loaded between messages and polls with a short interval that grows while it is idle (from
``--poll`` after a message up to half a second). The ClientApp is the same either way, so a
node may also be a stock ``flower-supernode`` (slower; its state survives through the state
folder).
"""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import load_ssh_private_key
from flwr.app import Context, Error, Message, RecordDict
from flwr.common.config import get_fused_config_from_fab, parse_config_args
from flwr.common.constant import ErrorCode
from flwr.supercore.inflatable.inflatable_object import (
    get_all_nested_objects,
    get_object_tree,
    no_object_id_recompute,
)
from flwr.supercore.inflatable.inflatable_utils import (
    pull_and_inflate_object_from_tree,
    push_object_contents_from_iterable,
)
from flwr.supernode.fleet_http_connection import http_request_response

from fedmc.errors import ConfigError

POLL = 0.1
LONGEST_POLL = 0.5


def load_auth_key(path: Path) -> tuple[ec.EllipticCurvePrivateKey, ec.EllipticCurvePublicKey]:
    """A SuperNode's authentication key pair from its OpenSSH private key file."""
    key = load_ssh_private_key(path.expanduser().read_bytes(), None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ConfigError(f"{path}: not an elliptic-curve private key")
    return key, key.public_key()


def run_node(superlink: str, node_config: str, *, root_certificates: Path | None = None,
             auth_key: Path | None = None, poll: float = POLL,
             longest_poll: float = LONGEST_POLL) -> None:
    """Serve fedmc's ClientApp to the SuperLink at ``superlink`` (``HOST:PORT``) until the
    process is stopped; without ``root_certificates`` the connection is insecure."""
    from fedmc.flower.client_app import app

    config = parse_config_args([node_config])
    keys = load_auth_key(auth_key) if auth_key is not None else None
    contexts: dict[int, Context] = {}
    with http_request_response(superlink, root_certificates is None,
                               None if root_certificates is None else str(root_certificates),
                               keys) as conn:
        node_id, receive, send, get_run, get_fab, pull_object, push_object, confirm = conn
        idle_since = time.monotonic()
        while True:
            got = receive()
            if got is None:
                idle = time.monotonic() - idle_since
                time.sleep(min(longest_poll, max(poll, idle / 10)))
                continue
            message, tree = got
            run_id = message.metadata.run_id
            if run_id not in contexts:
                run = get_run(run_id)
                fab = get_fab(run.fab_hash, run_id)
                contexts[run_id] = Context(run_id, node_id, config, RecordDict(),
                                           get_fused_config_from_fab(fab.content, run),
                                           run.series_id)
            message = pull_and_inflate_object_from_tree(
                tree, partial(pull_object, run_id), partial(confirm, run_id),
                return_type=Message)
            message.metadata.__dict__["_message_id"] = tree.object_id
            started = time.perf_counter()
            try:
                reply = app(message, contexts[run_id])
            except Exception as exc:  # the server learns of it as an error reply
                reply = Message(Error(ErrorCode.CLIENT_APP_RAISED_EXCEPTION,
                                      f"{type(exc).__name__}: {exc}"), reply_to=message)
            _send(reply, time.perf_counter() - started, send, partial(push_object, run_id))
            idle_since = time.monotonic()


def _send(reply: Message, runtime: float, send, push_object) -> None:
    """Push a reply and the objects the SuperLink does not have yet."""
    reply.metadata.__dict__["_message_id"] = reply.object_id
    with no_object_id_recompute():
        objects = get_all_nested_objects(reply)
        wanted, session = send(reply, get_object_tree(reply), runtime)
        push_object_contents_from_iterable(
            ((oid, obj.deflate()) for oid, obj in objects.items() if oid in wanted),
            partial(push_object, session))

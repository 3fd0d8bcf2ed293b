"""A federation in one process: the ServerApp's loop (:func:`fedmc.flower.server_app.serve`)
over a Grid that hands every message straight to fedmc's ClientApp, one context per node.

No SuperLink, no node processes, no sleeps: what it checks is the server's and the clients'
code (the wire format, SecAgg+ and its scaling, the two-phase state, what the server accepts)
in a second or two, where a real deployment (``run_local``) takes half a minute. A ``mods``
list wraps chosen clients' ClientApp (a client that misbehaves).
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from flwr.app import Context, Error, Message, RecordDict
from flwr.common.config import parse_config_args
from flwr.proto.node_pb2 import NodeInfo  # pylint: disable=E0611
from flwr.supercore.task_identity import TaskIdentity

from fedmc.deploy.local import node_config
from fedmc.deploy.split import write_split
from fedmc.federation.history import History
from fedmc.flower.client_app import _PARTIES, app
from fedmc.flower.manifest import Manifest
from fedmc.flower.server_app import serve
from fedmc.flower.settings import FederatedRun
from fedmc.run.data import DataSettings

FIRST_NODE = 2**63 + 7  # Flower's node ids lie above the int64 maximum
ClientAppCallable = Callable[[Message, Context], Message]
Mod = Callable[[Message, Context, ClientAppCallable], Message]


class LoopbackGrid:
    """A Grid whose nodes answer every message as it is pushed (module docstring).

    Parameters
    ----------
    contexts
        Each node's Flower context (its node configuration names its client).
    mods
        Per client id, a mod wrapped around the ClientApp for that client's messages.
    """

    def __init__(self, contexts: dict[int, Context], mods: dict[int, Mod] | None = None):
        self.contexts = contexts
        self.mods = mods or {}
        self.replies: dict[str, Message] = {}

    def get_node_ids(self) -> list[int]:
        return list(self.contexts)

    def get_nodes(self) -> list[NodeInfo]:
        """The nodes, each with a public key of its own (as the SuperLink reports them)."""
        return [NodeInfo(node_id=n, public_key=f"key of node {n}".encode())
                for n in self.contexts]

    def push_messages(self, messages: Iterable[Message]) -> list[str]:
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
            self.replies[message_id] = copy.deepcopy(reply)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> list[Message]:
        return [self.replies.pop(m) for m in list(message_ids) if m in self.replies]


@contextmanager
def server_identity(run_id: int = 1) -> Iterator[None]:
    """Messages take their sender from the process's task identity (a ServerApp's)."""
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = run_id, 0, 1
    try:
        yield
    finally:
        TaskIdentity.run_id = TaskIdentity.node_id = TaskIdentity.task_id = None
        _PARTIES.clear()


def loopback_federation(folder: Path, data: DataSettings, run: FederatedRun,
                        mods: dict[int, Mod] | None = None,
                        split: Path | None = None, run_id: int = 1) -> History:
    """Split ``data`` into ``folder/split`` (or take the files already in ``split``), serve
    ``run`` (its ``out`` under ``folder`` unless absolute) over a :class:`LoopbackGrid` of one
    node per client; the history."""
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
    with server_identity(run_id):
        return serve(LoopbackGrid(contexts, mods), run)

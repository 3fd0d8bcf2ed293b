"""Exchanging messages with SuperNodes through the Grid, without Flower's fixed sleeps.

``Grid.send_and_receive`` pulls replies every 3 s; :func:`send_and_receive` pushes the
messages (each packed into one record, :mod:`fedmc.flower.compact`) and pulls with a short,
growing interval (10 ms, up to 100 ms: every pull is an HTTP request the single SuperLink
process must serve beside the nodes' own), so an exchange costs what the nodes take to
answer. :class:`PromptGrid` lends this loop to code written against the Grid (the SecAgg+
workflow).

Against a SuperLink (flwr 1.41's ``HttpGrid``) the replies that are ready are fetched
concurrently (:func:`pull_replies`): the stock ``pull_messages`` pulls their objects one
message after the other, and sleeps a second before retrying an object that its node has not
finished pushing; with ten replies that alone took about a second per exchange here.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import cast

from flwr.app import Error, Message
from flwr.serverapp import Grid

from fedmc.flower.compact import packed, unpacked
from fedmc.flower.compat import (
    ConfirmMessageReceivedRequest,
    HttpGrid,
    ObjectPullError,
    inflate_object_from_contents,
    iterate_object_tree,
    make_pull_object_fn_protobuf,
    pull_objects,
    pull_replies_request,
)

FIRST_POLL = 0.01
LONGEST_POLL = 0.1
OBJECT_RETRY = 0.01  # first pause before pulling a missing object again (Flower's: 1 s)
LONGEST_OBJECT_RETRY = 0.1
OBJECT_PULL_SECONDS = 30.0  # a reply whose objects do not all come within this is lost
PULLERS = 4


def pull_replies(grid: Grid, waiting: set[str], pool: ThreadPoolExecutor) -> list[Message]:
    """The replies to ``waiting`` (message ids) that are ready, as ``grid.pull_messages``
    returns them, with the replies' objects pulled concurrently on an ``HttpGrid``.

    One ``PullMessages`` request names the ready replies and their object trees; each
    reply's objects are then pulled, its receipt confirmed and the reply inflated in
    ``pool``, as flwr 1.41's ``HttpGrid.pull_messages`` does one reply at a time. A reply
    whose objects cannot all be pulled is left out (the server treats it as lost).
    """
    if not isinstance(grid, HttpGrid):
        return list(grid.pull_messages(waiting))
    client, node = grid._runtime_client, grid.node  # noqa: SLF001 (flwr 1.41 internals)
    run = grid._run  # noqa: SLF001
    assert run is not None  # a grid that has pushed messages knows its run
    run_id = cast(int, run.run_id)
    ready = client.PullMessages(pull_replies_request(waiting))
    pull = make_pull_object_fn_protobuf(client.PullObject, node, run_id)

    def fetch(proto, tree) -> Message | None:
        reply_id = proto.metadata.message_id
        try:
            contents = pull_objects([t.object_id for t in iterate_object_tree(tree)], pull,
                                    max_time=OBJECT_PULL_SECONDS,
                                    initial_backoff=OBJECT_RETRY,
                                    backoff_cap=LONGEST_OBJECT_RETRY)
        except ObjectPullError:
            return None
        client.ConfirmMessageReceived(ConfirmMessageReceivedRequest(
            node=node, run_id=run_id, message_object_id=reply_id))
        reply = cast(Message, inflate_object_from_contents(reply_id, contents))
        reply.metadata.__dict__["_message_id"] = reply_id
        return reply

    fetched = pool.map(fetch, ready.messages_list, ready.message_object_trees)
    return [reply for reply in fetched if reply is not None]


def send_and_receive(grid: Grid, messages: Iterable[Message], timeout: float | None,
                     ) -> list[Message]:
    """Push ``messages``; every reply that arrives within ``timeout`` seconds (all of them
    when None), error replies included."""
    return list(replies_by_node(grid, messages, timeout).values())


def replies_by_node(grid: Grid, messages: Iterable[Message], timeout: float | None,
                    ) -> dict[int, Message]:
    """Push ``messages`` (at most one per node); the replies that arrive within ``timeout``
    seconds (all of them when None), error replies included, by the node each message was
    sent to. An error reply that Flower makes on a node's behalf (the node is unavailable,
    signed off, its message expired) comes from the SuperLink (node id 1), not from the node:
    it is matched to its message, so it is that node's all the same."""
    messages = list(messages)
    ids = grid.push_messages([packed(m) for m in messages])
    node_of = {mid: m.metadata.dst_node_id for mid, m in zip(ids, messages, strict=True)
               if mid}
    waiting = set(node_of)
    deadline = None if timeout is None else time.monotonic() + timeout
    replies: dict[int, Message] = {}
    pause = FIRST_POLL
    with ThreadPoolExecutor(PULLERS) as pool:
        while waiting:
            for reply in pull_replies(grid, waiting, pool):
                mid = reply.metadata.reply_to_message_id
                if mid in waiting:
                    replies[node_of[mid]] = _readable(reply)
                    waiting.discard(mid)
            if not waiting or (deadline is not None and time.monotonic() >= deadline):
                break
            time.sleep(pause)
            pause = min(LONGEST_POLL, pause * 1.5)
    return replies


def _readable(reply: Message) -> Message:
    """``reply`` unpacked (:func:`fedmc.flower.compact.unpacked`); one that cannot be is
    turned into an error reply, so a client's garbage is that client's loss, never the
    server's crash."""
    try:
        return unpacked(reply)
    except Exception as exc:  # whatever the client sent
        reply.__dict__["_content"] = None
        reply.error = Error(0, f"an unreadable reply ({type(exc).__name__})")
        return reply


def good_replies(replies: Mapping[int, Message]) -> dict[int, Message]:
    """The replies of :func:`replies_by_node` without an error."""
    return {node: m for node, m in replies.items() if not m.has_error()}


class PromptGrid:
    """A Grid whose ``send_and_receive`` is :func:`send_and_receive`."""

    def __init__(self, grid: Grid) -> None:
        self.grid = grid

    def send_and_receive(self, messages: Iterable[Message], *,
                         timeout: float | None = None) -> list[Message]:
        """As ``Grid.send_and_receive``, polling promptly."""
        return send_and_receive(self.grid, messages, timeout)

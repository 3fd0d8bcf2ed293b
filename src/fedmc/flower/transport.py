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
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import cast

from flwr.app import Message
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
    run_id = cast(int, grid._run.run_id)  # noqa: SLF001
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
    waiting = {m for m in grid.push_messages([packed(m) for m in messages]) if m}
    deadline = None if timeout is None else time.monotonic() + timeout
    replies: list[Message] = []
    pause = FIRST_POLL
    with ThreadPoolExecutor(PULLERS) as pool:
        while waiting:
            got = [unpacked(m) for m in pull_replies(grid, waiting, pool)]
            replies += got
            waiting -= {m.metadata.reply_to_message_id for m in got}
            if not waiting or (deadline is not None and time.monotonic() >= deadline):
                break
            time.sleep(pause)
            pause = min(LONGEST_POLL, pause * 1.5)
    return replies


def good_replies(replies: Iterable[Message]) -> dict[int, Message]:
    """The replies without an error, by the node that sent them."""
    return {m.metadata.src_node_id: m for m in replies if not m.has_error()}


class PromptGrid:
    """A Grid whose ``send_and_receive`` is :func:`send_and_receive`."""

    def __init__(self, grid: Grid) -> None:
        self.grid = grid

    def send_and_receive(self, messages: Iterable[Message], *,
                         timeout: float | None = None) -> list[Message]:
        """As ``Grid.send_and_receive``, polling promptly."""
        return send_and_receive(self.grid, messages, timeout)

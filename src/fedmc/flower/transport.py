"""Exchanging messages with SuperNodes through the Grid, without Flower's fixed sleeps.

``Grid.send_and_receive`` pulls replies every 3 s; :func:`send_and_receive` pushes the
messages (each packed into one record, :mod:`fedmc.flower.compact`) and pulls with a short,
growing interval (10 ms, up to 100 ms: every pull is an HTTP request the single SuperLink
process must serve beside the nodes' own), so an exchange costs what the nodes take to
answer. :class:`PromptGrid` lends this loop to code written against the Grid (the SecAgg+
workflow). :func:`prompt_object_pulls` makes the Grid retry a reply's object that its node
has not finished pushing after 10 ms instead of 1 s.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from functools import partial

from flwr.app import Message
from flwr.serverapp import Grid
from flwr.supercore.inflatable.inflatable_utils import pull_objects
from flwr.superlink.grid import http_grid

from fedmc.flower.compact import packed, unpacked

FIRST_POLL = 0.01
LONGEST_POLL = 0.1
OBJECT_RETRY = 0.01
LONGEST_OBJECT_RETRY = 0.1


def prompt_object_pulls() -> None:
    """Make the Grid of this process retry a missing object after :data:`OBJECT_RETRY`
    seconds, growing to :data:`LONGEST_OBJECT_RETRY`, instead of 1 s growing to 10 s.

    A node announces its reply before pushing the reply's objects, so a pull that lands in
    between finds them missing; flwr 1.41's ``HttpGrid.pull_messages`` then sleeps a second
    (its module-level ``pull_objects`` with default back-off), which is replaced here.
    """
    http_grid.pull_objects = partial(pull_objects, initial_backoff=OBJECT_RETRY,
                                     backoff_cap=LONGEST_OBJECT_RETRY)


def send_and_receive(grid: Grid, messages: Iterable[Message], timeout: float | None,
                     ) -> list[Message]:
    """Push ``messages``; every reply that arrives within ``timeout`` seconds (all of them
    when None), error replies included."""
    waiting = {m for m in grid.push_messages([packed(m) for m in messages]) if m}
    deadline = None if timeout is None else time.monotonic() + timeout
    replies: list[Message] = []
    pause = FIRST_POLL
    while waiting:
        got = [unpacked(m) for m in grid.pull_messages(waiting)]
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

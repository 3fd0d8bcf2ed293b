"""Exchanging messages with SuperNodes through the Grid, without Flower's fixed sleeps.

``Grid.send_and_receive`` pulls replies every 3 s; :func:`send_and_receive` pushes the
messages and pulls with a short, growing interval (5 ms, up to 50 ms), so an exchange costs
what the nodes take to answer. :class:`PromptGrid` lends this loop to code written against
the Grid (the SecAgg+ workflow).
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from flwr.app import Message
from flwr.serverapp import Grid

FIRST_POLL = 0.005
LONGEST_POLL = 0.05


def send_and_receive(grid: Grid, messages: Iterable[Message], timeout: float | None,
                     ) -> list[Message]:
    """Push ``messages``; every reply that arrives within ``timeout`` seconds (all of them
    when None), error replies included."""
    waiting = {m for m in grid.push_messages(messages) if m}
    deadline = None if timeout is None else time.monotonic() + timeout
    replies: list[Message] = []
    pause = FIRST_POLL
    while waiting:
        got = list(grid.pull_messages(waiting))
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

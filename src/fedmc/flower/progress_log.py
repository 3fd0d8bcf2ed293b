"""A federation's ``progress.jsonl``: one JSON line per exchange and per round, written by the
server as the run goes (``fedmc federate`` shows it; a callback of the round loop)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from fedmc.federation.callbacks import Callback, RoundEnd

PRIVATE_EVENT_KEYS = ("event", "exchange", "round", "phase", "row")
"""What a private run's ``progress.jsonl`` keeps of an event (the row: its public columns
only); not who (``clients``, nor a refusal's or failure's ``reason``, which names the client
and may quote its error) nor how long."""


class ProgressLog(Callback):
    """``progress.jsonl``: one JSON line per exchange and per round from 1 on, with its wall
    time. In a private run (``private``) a line names no client, not even in a reason (who is
    sampled is the secret the accountant's amplification rests on) and holds no time (how long
    the clients' data take): :data:`PRIVATE_EVENT_KEYS`."""

    def __init__(self, path: Path, private: bool = False, append: bool = False) -> None:
        self.path = path
        self.private = private
        if not append:
            path.write_text("")

    def write(self, event: dict[str, Any]) -> None:
        """Append one event."""
        if self.private:
            event = {k: v for k, v in event.items() if k in PRIVATE_EVENT_KEYS}
        else:
            event["time"] = time.time()
        with open(self.path, "a") as fh:
            fh.write(json.dumps(event, default=float) + "\n")

    def exchange(self, number: int, round_: int, phase: str, clients: list[int]) -> None:
        """An exchange began: its number, round, phase and the clients it asks."""
        self.write({"event": "exchange", "exchange": number, "round": round_, "phase": phase,
                    "clients": clients})

    def after_round(self, end: RoundEnd) -> bool:
        if end.round > 0:
            self.write({"event": "round", "round": end.round, "row": end.row})
        return False

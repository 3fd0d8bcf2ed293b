"""Seconds this process has spent compiling Numba kernels (or loading them from the cache).

A listener on Numba's ``numba:compile`` events, installed on first use, adds up the time of
every outermost compilation. The simulation subtracts it from the training time it reports
(``seconds`` in ``history.csv``) and the runner reports it on its own (``compile_seconds``),
so the first run at a new rank does not look slower to train than the next.
"""

from __future__ import annotations

import threading

from numba.core import event

_lock = threading.Lock()
_listener: event.TimingListener | None = None


def compile_seconds() -> float:
    """Total seconds spent in Numba compilation in this process so far."""
    global _listener
    with _lock:
        if _listener is None:
            _listener = event.TimingListener()
            event.register("numba:compile", _listener)
        return _listener.duration if _listener.done else 0.0

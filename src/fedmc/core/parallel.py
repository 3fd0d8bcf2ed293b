"""Kernels run over ranges of their rows on a pool of threads: ``prange`` without its compile time.

Numba compiles a ``parallel=True`` kernel several times slower than the same loop written
serially (its parfor passes and the gufunc they build: FedMC-ADMM's client step took 6.2 s to
compile in parallel and 1.5 s serially, ``benchmarks/README.md``, "Compiling once"). The
kernels here are compiled serially with ``nogil=True`` over a range ``lo:hi`` of their outer
loop, and :func:`parallel_for` runs the ranges on a pool of worker threads, which run the
compiled code side by side since it holds no GIL.

Iterations must be independent (each writes only its own outputs, as every ``prange`` loop of
the package did): the result is then the same whatever the number of threads and however the
ranges fall, bit for bit.

The calling thread only waits, so a signal handler (Ctrl-C, SIGTERM:
:mod:`fedmc.cli.interrupts`) runs at once, however long the kernel: the wait is interrupted
and the exception raised; the workers are daemon threads, so the process may exit while they
finish their range.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

CHUNKS_PER_THREAD = 4
"""Ranges per worker thread: a worker that finishes early takes the next range, so rows of
unequal cost (clients of many and few ratings) balance."""


def threads() -> int:
    """The number of worker threads: ``NUMBA_NUM_THREADS`` where set (the setting Numba's own
    parallel kernels read), else the cores this process may use."""
    given = os.environ.get("NUMBA_NUM_THREADS")
    if given:
        return max(1, int(given))
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
               else os.cpu_count() or 1)


class _Call:
    """One :func:`parallel_for` call: the ranges still to run and the first error raised."""

    def __init__(self, kernel: Callable[..., Any], args: tuple[Any, ...], parts: int):
        self.kernel = kernel
        self.args = args
        self.left = parts
        self.error: BaseException | None = None
        self.lock = threading.Lock()
        self.done = threading.Event()

    def run(self, lo: int, hi: int) -> None:
        try:
            if self.error is None:
                self.kernel(lo, hi, *self.args)
        except BaseException as exc:  # handed to the caller
            self.error = exc
        with self.lock:
            self.left -= 1
            if self.left == 0:
                self.done.set()


_tasks: queue.SimpleQueue[tuple[_Call, int, int]] = queue.SimpleQueue()
_workers: list[threading.Thread] = []
_start_lock = threading.Lock()


def _work() -> None:
    while True:
        call, lo, hi = _tasks.get()
        call.run(lo, hi)
        del call  # else its arguments (the kernel's arrays) live on until the next task


def _forget_workers() -> None:
    """In a forked child: the parent's workers do not exist there (new ones start on use)."""
    global _tasks, _start_lock
    _tasks = queue.SimpleQueue()
    _start_lock = threading.Lock()
    _workers.clear()


os.register_at_fork(after_in_child=_forget_workers)


def _ensure_workers(n: int) -> None:
    with _start_lock:
        while len(_workers) < n:
            worker = threading.Thread(target=_work, name=f"fedmc-kernel-{len(_workers)}",
                                      daemon=True)
            worker.start()
            _workers.append(worker)


SIGNAL_LOOK = 0.1
"""Seconds between the calling thread's looks for a signal while a kernel runs."""


def parallel_for(kernel: Callable[..., Any], n: int, *args: Any) -> None:
    """``kernel(lo, hi, *args)`` over ranges that cover ``0:n``, on the worker threads.

    ``kernel`` is a Numba function compiled with ``nogil=True`` whose iterations are
    independent. Returns when every range is done; raises the first error a range raised. The
    kernel runs on the workers even with one thread, so that the calling thread is free to
    hear signals.
    """
    if n <= 0:
        return
    workers = threads()
    parts = min(n, workers * CHUNKS_PER_THREAD)
    _ensure_workers(workers)
    call = _Call(kernel, args, parts)
    bounds = [n * k // parts for k in range(parts + 1)]
    for k in range(parts):
        _tasks.put((call, bounds[k], bounds[k + 1]))
    try:
        # in steps: a signal that the kernel delivers to a worker thread (any thread may take
        # a signal sent to the process) is run by this thread only when it next runs Python
        while not call.done.wait(SIGNAL_LOOK):
            pass
    except BaseException as exc:  # a signal: the ranges not started yet are skipped
        call.error = exc
        raise
    if call.error is not None:
        raise call.error


def ordered_sum(part: np.ndarray) -> np.ndarray:
    """The rows of ``part`` (per-block partial sums) added one after the other, in order: the
    same numbers whatever the threads that made them (NumPy's ``sum`` adds pairwise)."""
    total = np.zeros(part.shape[1:])
    for row in part:
        total += row
    return total

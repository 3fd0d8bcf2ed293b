"""SIGINT and SIGTERM as an exception, the run folder that records them, and a worker thread
that keeps the main thread free to hear them.

An interrupted command exits ``128 + signal`` (130 for Ctrl-C, 143 for SIGTERM) with one line
saying so, never 0; its run folder's ``status.json`` says ``interrupted``, its
``history.csv`` holds the rounds done so far, and it has no ``summary.json``, so it cannot be
taken for a finished run.

Python runs a signal handler in the main thread, between bytecodes: a long compiled call in the
main thread (a Numba kernel of a large rank: minutes) would hold it off until it returns.
``fedmc run``, ``fedmc tune`` (both searches) and ``fedmc audit`` therefore do their work in
a worker thread (:func:`in_worker`) while the main thread waits; the kernels release the GIL
(``nogil=True``), so the handler runs at once, the folder is marked, and the process ends
without waiting for the kernel (:func:`worker_running`: the command line then exits with
``os._exit``, its output flushed). ``fedmc federate local`` needs no worker: its kernels run
in the deployment's processes, and its main thread, once the data are split, only starts,
polls and stops them (it must: only the main thread can hold the signals back while a
process starts, :func:`fedmc.deploy.local.signals_deferred`).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import TypeVar

from fedmc.files import write_atomic
from fedmc.run.folder import RunFolder

_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_WAIT = 0.1  # seconds between the main thread's looks at the worker
_WORKING: set[threading.Event] = set()  # one unset event per worker still running

T = TypeVar("T")


class Interrupted(BaseException):
    """A command was stopped by a signal.

    Parameters
    ----------
    signum
        The signal's number.
    """

    def __init__(self, signum: int):
        super().__init__(signum)
        self.name = signal.Signals(signum).name
        self.exit_code = 128 + signum
        self.folder: Path | None = None


def _raise(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signum)


def signal_of(exc: BaseException) -> Interrupted | None:
    """The :class:`Interrupted` that ``exc`` is or was raised from, else None.

    A signal handled while compiled code had called back into Python (Numba's parallel
    kernels unpickle their constants that way) leaves the handler's exception set when the
    kernel returns: Python reports a ``SystemError`` "returned a result with an exception
    set" whose cause is the :class:`Interrupted`.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, Interrupted):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


@contextmanager
def catch_signals() -> Iterator[None]:
    """Turn SIGINT and SIGTERM into :class:`Interrupted` (handlers restored on leaving)."""
    previous = {s: signal.signal(s, _raise) for s in _SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


@contextmanager
def interrupt_marks(folder: RunFolder,
                    partial: Mapping[str, Callable[[], str | None]] | None = None,
                    ) -> Iterator[None]:
    """Release ``folder`` as ``finished`` when the block succeeds, ``interrupted`` when a
    signal stops it (the exception then names the folder; the files of ``partial``, each
    made by its function, keep what was done: the history of the rounds so far), and undo
    its claim on an error."""
    try:
        yield
    except BaseException as exc:
        stopped = signal_of(exc)
        if stopped is None:
            folder.abandon()
            raise
        assert folder.path is not None
        for name, make in (partial or {}).items():
            text = make()
            if text is not None:
                write_atomic(folder.path / name, text)
        folder.release("interrupted")
        stopped.folder = folder.path
        if stopped is exc:
            raise
        raise stopped from None
    folder.release("finished")


def in_worker(work: Callable[[], T]) -> T:
    """``work()`` run in a daemon worker thread while this thread waits (and handles the
    signals: an :class:`Interrupted` raised here leaves the worker running, see
    :func:`worker_running`); its result, or the exception it raised, raised here."""
    outcome: list[tuple[bool, object]] = []
    finished = threading.Event()  # not Thread.is_alive: a join that a signal interrupts
    # marks the thread stopped while it still runs (CPython 3.11)

    def target() -> None:
        try:
            outcome.append((True, work()))
        except BaseException as exc:  # handed to the waiting thread, raised there
            outcome.append((False, exc))
        finally:
            finished.set()

    _WORKING.add(finished)
    threading.Thread(target=target, name="fedmc-run", daemon=True).start()
    while not finished.wait(_WAIT):
        pass
    _WORKING.discard(finished)
    done, value = outcome[0]
    if not done:
        assert isinstance(value, BaseException)
        raise value
    return value  # type: ignore[return-value]  # work()'s own result


def worker_running() -> bool:
    """Whether a worker of :func:`in_worker` is still running (its waiting thread was
    interrupted): the process must end with ``os._exit``, as the worker may be inside a kernel
    that no exception reaches."""
    return any(not finished.is_set() for finished in _WORKING)

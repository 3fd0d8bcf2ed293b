"""SIGINT and SIGTERM as an exception, and the run folder that records them.

An interrupted command exits ``128 + signal`` (130 for Ctrl-C, 143 for SIGTERM) with one line
saying so, never 0; its run folder's ``status.json`` says ``interrupted``, its
``history.csv`` holds the rounds done so far, and it has no ``summary.json``, so it cannot be
taken for a finished run.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from fedmc.files import write_atomic
from fedmc.run.folder import RunFolder

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


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

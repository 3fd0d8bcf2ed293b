"""Interrupts as exceptions that name what they left behind.

``SIGINT`` arrives in Python as ``KeyboardInterrupt``; :func:`raise_on_sigterm` makes
``SIGTERM`` (what ``kill``, ``timeout`` and schedulers send) raise :class:`Interrupted` too, so
that a run can mark its folder before it exits. The command line exits with ``128 + signal``
(130 for SIGINT, 143 for SIGTERM) and one line saying where the partial output is.
"""

from __future__ import annotations

import signal
from pathlib import Path
from types import FrameType


class Interrupted(BaseException):
    """A run stopped by a signal; ``where`` is what it left (a folder marked interrupted), if
    anything. A ``BaseException``, like ``KeyboardInterrupt``, so no ``except Exception``
    swallows it."""

    def __init__(self, signum: int, where: Path | None = None, note: str = "") -> None:
        super().__init__(signum, where)
        self.signum = signum
        self.where = where
        self.note = note

    @property
    def exit_code(self) -> int:
        """``128 + signal``, as a shell reports a process killed by it."""
        return 128 + self.signum

    def message(self) -> str:
        """One line for the user."""
        name = signal.Signals(self.signum).name
        if self.where is None:
            return f"interrupted by {name}" + (f"; {self.note}" if self.note else "")
        return (f"interrupted by {name}; {self.where} holds the unfinished run (status.json "
                f"says interrupted; no summary.json)")


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signum)


def raise_on_sigterm() -> None:
    """From now on ``SIGTERM`` raises :class:`Interrupted` in the main thread."""
    signal.signal(signal.SIGTERM, _on_sigterm)


def as_interrupted(exc: BaseException, where: Path | None = None) -> Interrupted:
    """``exc`` (a ``KeyboardInterrupt`` or :class:`Interrupted`) as :class:`Interrupted`
    naming ``where``."""
    signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
    return Interrupted(int(signum), where)


__all__ = ["Interrupted", "as_interrupted", "raise_on_sigterm"]

"""Exceptions that the command line turns into exit status 2 with a one-line reason, and the
warning it shows as one line (:class:`RunWarning`)."""

from __future__ import annotations

from pathlib import Path


class FedMCError(Exception):
    """Base class of every error caused by the user's input or settings."""


class DataError(FedMCError, ValueError):
    """A data file, data set or array is malformed or does not fit the request.

    Parameters
    ----------
    message
        What is wrong, in words the user can act on.
    path
        The file concerned, when there is one.
    line
        The 1-based line number in ``path``, when known.
    """

    def __init__(self, message: str, path: str | Path | None = None, line: int | None = None):
        self.path = None if path is None else Path(path)
        self.line = line
        where = ""
        if self.path is not None:
            where = f"{self.path}:{line}: " if line is not None else f"{self.path}: "
        super().__init__(where + message)


class ConfigError(FedMCError, ValueError):
    """A setting is out of range or settings contradict each other."""


class RunWarning(UserWarning):
    """A run is accepted but something deserves a word before it trains (ratings far outside
    the bulk of the others, a long run): the command line shows it as one line on stderr."""


def printable(text: str, limit: int = 200) -> str:
    """``text`` safe to echo to a terminal: control and other unprintable characters as
    ``\\x..``/``\\u....`` escapes, cut to ``limit`` characters."""
    shown = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text[:limit])
    return shown + ("..." if len(text) > limit else "")

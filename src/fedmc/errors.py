"""Exceptions that the command line turns into exit status 2 with a one-line reason, and the
warning it shows as one line (:class:`RunWarning`).

A message marks each setting it names in backticks, as the Python API names it
(``"`rounds=0` trains nothing"``, ``"`dp_clip` needs `dp_epsilon`"``; an algorithm's
parameter as ``params.NAME``): ``str()`` shows them unmarked (``rounds=0 trains nothing``),
:meth:`FedMCError.worded` in another vocabulary (the command line's flags:
:func:`fedmc.cli.options.in_flags`, ``--rounds 0 trains nothing``), and the error's ``field``
is the setting it is about (the first one marked, unless given).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

Wording = Callable[[str, "str | None"], str]
"""``wording(name, value)``: the words for a setting a message marks (``value``: None where
the message names the setting without a value)."""


def setting_of(span: str) -> tuple[str, str | None] | None:
    """``(name, value)`` of a marked span that names a setting (``rounds=0``, ``dp.clip``,
    ``partition='user'``), None for other marked text (a command)."""
    name, eq, value = span.partition("=")
    word = name.replace("_", "").replace(".", "")
    if not (name[:1].isalpha() and word.isascii() and word.isalnum() and name == name.lower()):
        return None
    return name, value if eq else None


def as_written(name: str, value: str | None) -> str:
    """A marked setting as the Python API writes it: ``name`` or ``name=value`` (an
    algorithm's parameter without its ``params.``)."""
    name = name.removeprefix("params.")
    return name if value is None else f"{name}={value}"


def worded(marked: str, wording: Wording) -> str:
    """``marked`` with each setting it marks in ``wording``'s words; other marked text, and a
    message whose backticks do not pair, as written."""
    parts = marked.split("`")
    if len(parts) % 2 == 0:
        return marked
    out = []
    for i, part in enumerate(parts):
        setting = setting_of(part) if i % 2 else None
        out.append(part if i % 2 == 0 else f"`{part}`" if setting is None else wording(*setting))
    return "".join(out)


class FedMCError(Exception):
    """Base class of every error caused by the user's input or settings.

    Parameters
    ----------
    message
        What is wrong, in words the user can act on, the settings it names marked (module
        docstring).
    field
        The setting the error is about (default: the first one ``message`` marks).
    """

    def __init__(self, message: str = "", field: str | None = None) -> None:
        self.marked = message
        named = [s for s in map(setting_of, message.split("`")[1::2]) if s is not None]
        self.field = field if field is not None else named[0][0] if named else None
        super().__init__(worded(message, as_written))

    def worded(self, wording: Wording) -> str:
        """The message with the settings it marks in ``wording``'s words."""
        return worded(self.marked, wording)


def marked_text(error: Mapping[str, Any]) -> str:
    """The message of one error of a pydantic ``ValidationError`` (an item of its
    ``errors()``), the settings marked where a validator raised a :class:`FedMCError`."""
    raised = error.get("ctx", {}).get("error")
    if isinstance(raised, FedMCError):
        return raised.marked
    return str(error["msg"]).removeprefix("Value error, ")


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
    field
        The setting the error is about (default: the first one ``message`` marks).
    """

    def __init__(self, message: str, path: str | Path | None = None, line: int | None = None,
                 field: str | None = None):
        self.path = None if path is None else Path(path)
        self.line = line
        where = ""
        if self.path is not None:
            where = f"{self.path}:{line}: " if line is not None else f"{self.path}: "
        super().__init__(where + message, field)


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

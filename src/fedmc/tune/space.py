"""What ``fedmc tune`` searches: the ranges an algorithm's spec declares
(:attr:`fedmc.algorithms.spec.AlgorithmSpec.search_space`), overridden by the user's.

A range is written ``LO:HI``, optionally followed by ``:log`` (a log scale) and ``:int`` (whole
numbers), e.g. ``--space rank=8:128:log:int`` or ``-P lam=1:300:log``; a choice among values is
written ``A,B[,...]``, e.g. ``--space consensus=all,rated``; ``--space name=off`` leaves a
declared range or choice out (the algorithm's default is used).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedmc.algorithms.registry import spec
from fedmc.algorithms.spec import Choice, Range, Searched
from fedmc.errors import ConfigError

OFF = "off"


def is_searched(value: Any) -> bool:
    """Whether an algorithm parameter's text is a range (``LO:HI...``) or a choice (``A,B...``)
    rather than a value."""
    return isinstance(value, str) and (
        (":" in value and value.split(":")[0].strip() != "") or "," in value)


def parse_searched(name: str, text: str) -> Searched:
    """A range (``LO:HI...``, :func:`parse_range`) or a choice (``A,B...``,
    :func:`parse_choice`)."""
    return parse_range(name, text) if ":" in text else parse_choice(name, text)


def parse_choice(name: str, text: str) -> Choice:
    """``A,B[,...]`` as a :class:`Choice` (values as typed; the algorithm's ``Config`` reads
    them as it reads ``-P NAME=A``).

    Raises
    ------
    ConfigError
        An empty value, or fewer than two different ones.
    """
    values = tuple(v.strip() for v in text.split(","))
    if not all(values) or len(set(values)) < 2:
        raise ConfigError(f"--space {name}={text}: expected two or more different values "
                          f"A,B[,...]")
    return Choice(values)


def parse_range(name: str, text: str) -> Range:
    """``LO:HI[:log][:int]`` as a :class:`Range`.

    Raises
    ------
    ConfigError
        Not two numbers with ``LO < HI``, an unknown flag, or a log scale that is not
        positive.
    """
    parts = [p.strip() for p in text.split(":")]
    flags = set(parts[2:])
    if len(parts) < 2 or flags - {"log", "int"}:
        raise ConfigError(f"--space {name}={text}: expected LO:HI, optionally :log and :int")
    try:
        low, high = float(parts[0]), float(parts[1])
    except ValueError:
        raise ConfigError(f"--space {name}={text}: LO and HI must be numbers") from None
    if not low < high:
        raise ConfigError(f"--space {name}={text}: LO must be below HI")
    if "log" in flags and low <= 0:
        raise ConfigError(f"--space {name}={text}: a log scale needs LO > 0")
    return Range(low, high, log="log" in flags, integer="int" in flags)


def search_space(algorithm: str, implicit: bool, given: Mapping[str, str],
                 fixed: Mapping[str, Any]) -> dict[str, Searched]:
    """The ranges and choices searched: the spec's (those for this kind of data, less the
    settings the user fixed with a value), then the user's ``given`` ones (``name ->
    LO:HI...``, ``A,B...`` or ``off``).

    Raises
    ------
    ConfigError
        A name that is no setting of the algorithm, or nothing left to search.
    """
    entry = spec(algorithm)
    kind = "interactions" if implicit else "ratings"
    space = {name: r for name, r in entry.search_space.items()
             if r.only in (None, kind) and name not in fixed}
    fields = entry.Config.model_fields
    for name, text in given.items():
        if name not in fields:
            raise ConfigError(f"--space {name}: {algorithm} has no setting {name} (it has "
                              f"{', '.join(fields)})")
        if text.strip() == OFF:
            space.pop(name, None)
        else:
            space[name] = parse_searched(name, text)
    if not space:
        why = ("every setting of its search space is fixed or off" if entry.search_space
               else "it declares no search space")
        raise ConfigError(f"nothing to search for {algorithm}: {why}; give ranges with "
                          f"--space NAME=LO:HI")
    return space


def suggest(trial: Any, name: str, r: Searched) -> Any:
    """The trial's value of setting ``name`` in range or choice ``r`` (an Optuna trial)."""
    if isinstance(r, Choice):
        return trial.suggest_categorical(name, list(r.values))
    if r.integer:
        return int(trial.suggest_int(name, int(r.low), int(r.high), log=r.log))
    return float(trial.suggest_float(name, r.low, r.high, log=r.log))

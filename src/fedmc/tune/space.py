"""What ``fedmc tune`` searches: the ranges an algorithm's spec declares
(:attr:`fedmc.algorithms.spec.AlgorithmSpec.search_space`), overridden by the user's.

A range is written ``LO:HI``, optionally followed by ``:log`` (a log scale) and ``:int`` (whole
numbers), e.g. ``--space rank=8:128:log:int`` or ``-P lam=1:300:log``; ``--space name=off``
leaves a declared range out (the algorithm's default is used).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedmc.algorithms.registry import spec
from fedmc.algorithms.spec import Range
from fedmc.errors import ConfigError

OFF = "off"


def is_range(value: Any) -> bool:
    """Whether an algorithm parameter's text is a range (``LO:HI...``) rather than a value."""
    return isinstance(value, str) and ":" in value and value.split(":")[0].strip() != ""


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
                 fixed: Mapping[str, Any]) -> dict[str, Range]:
    """The ranges searched: the spec's (those for this kind of data, less the settings the
    user fixed with a value), then the user's ``given`` ones (``name -> LO:HI...`` or
    ``off``).

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
            space[name] = parse_range(name, text)
    if not space:
        raise ConfigError(f"nothing to search: {algorithm} declares no search space; give "
                          f"ranges with --space NAME=LO:HI")
    return space


def suggest(trial: Any, name: str, r: Range) -> float | int:
    """The trial's value of setting ``name`` in range ``r`` (an Optuna trial)."""
    if r.integer:
        return int(trial.suggest_int(name, int(r.low), int(r.high), log=r.log))
    return float(trial.suggest_float(name, r.low, r.high, log=r.log))

"""What ``fedmc tune`` searches: the ranges an algorithm's spec declares
(:attr:`fedmc.algorithms.spec.AlgorithmSpec.search_space`), overridden by the user's.

A range is written ``LO:HI``, optionally followed by ``:log`` (a log scale) and ``:int`` (whole
numbers), e.g. ``--space rank=8:128:log:int`` or ``-P lam=1:300:log``; a choice among values is
written ``A,B[,...]``, e.g. ``--space consensus=all,rated``; ``--space name=off`` leaves a
declared range or choice out (the algorithm's default is used). ``--algorithm A,B`` or
``--algorithm auto`` searches several algorithms (:func:`candidates`), each setting going to
those that have it (:func:`settings_of`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fedmc.algorithms.registry import spec, specs
from fedmc.algorithms.spec import AlgorithmSpec, Choice, Range, Searched
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
        raise ConfigError(f"--space {name}: {text}: expected two or more different values "
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
        raise ConfigError(f"--space {name}: {text}: expected LO:HI, optionally :log and :int")
    try:
        low, high = float(parts[0]), float(parts[1])
    except ValueError:
        raise ConfigError(f"--space {name}: {text}: LO and HI must be numbers") from None
    if not low < high:
        raise ConfigError(f"--space {name}: {text}: LO must be below HI")
    if "log" in flags and low <= 0:
        raise ConfigError(f"--space {name}: {text}: a log scale needs LO > 0")
    return Range(low, high, log="log" in flags, integer="int" in flags)


AUTO = "auto"
"""``--algorithm auto``: a search over every algorithm that can take the data
(:func:`candidates`)."""


def candidates(named: str | None, implicit: bool) -> list[str]:
    """The algorithms a search chooses among: those of ``named`` written ``A,B``, every one
    that declares a search space, folds users in (so every trial is scored alike, on its
    published model: :mod:`fedmc.tune.published`) and fits this kind of data (interactions
    with ``implicit``, else ratings) for ``auto``; ``[]`` for one algorithm (``named`` alone,
    or the default).

    Raises
    ------
    ConfigError
        A name that is no algorithm, or an algorithm that cannot be among the candidates.
    """
    if named is None or ("," not in named and named.strip() != AUTO):
        return []
    if named.strip() == AUTO:
        return [name for name, entry in specs().items() if _a_candidate(entry, implicit)]
    names = list(dict.fromkeys(n.strip() for n in named.split(",")))
    for name in names:
        if not _a_candidate(spec(name), implicit):
            raise ConfigError(f"--algorithm {named}: {name} cannot be among a search's "
                              f"candidates on {'interactions' if implicit else 'ratings'} "
                              f"(those are {', '.join(candidates(AUTO, implicit))})")
    if len(names) < 2:
        raise ConfigError(f"--algorithm {named}: name two or more algorithms, or one alone")
    return names


def _a_candidate(entry: AlgorithmSpec, implicit: bool) -> bool:
    """Whether ``entry`` can be among a search's candidates (:func:`candidates`)."""
    if not entry.search_space or entry.fold_in is None or entry.data_kind != "ratings":
        return False
    if implicit:
        return bool(entry.interactions)
    return entry.needs_interactions is None or not entry.needs_interactions(entry.Config())


def search_space(algorithm: str, implicit: bool, given: Mapping[str, str],
                 fixed: Mapping[str, Any]) -> dict[str, Searched]:
    """The training settings a search tries: the spec's ranges and choices (those for this
    kind of data, less the settings the user fixed with a value), then the user's ``given``
    ones (``name -> LO:HI...``, ``A,B...`` or ``off``), fold-in settings apart
    (:func:`fold_in_space`: each trial's published model is scored at the best of them).

    Raises
    ------
    ConfigError
        A name that is no setting of the algorithm, or no training setting left to search.
    """
    entry = spec(algorithm)
    kind = "interactions" if implicit else "ratings"
    parsed = parsed_given(algorithm, given)
    space = {name: r for name, r in entry.search_space.items()
             if r.only in (None, kind) and name not in fixed}
    _override(space, {k: r for k, r in parsed.items() if k not in entry.fold_in_space})
    if not space:
        why = ("every setting of its search space is fixed or off" if entry.search_space
               else "it declares no search space")
        raise ConfigError(f"nothing to search for {algorithm}: {why}; give ranges with "
                          f"--space NAME=LO:HI")
    return space


def private_space(algorithm: str, given: Mapping[str, str], fixed: Mapping[str, Any],
                  ) -> tuple[dict[str, Searched], dict[str, Choice]]:
    """What a private search chooses (:mod:`fedmc.tune.private`): the training settings, the
    user's ``given`` ranges alone (each value tried costs a private run: the spec's declared
    space is not searched unless named), and the fold-in settings (:func:`fold_in_space`).

    Raises
    ------
    ConfigError
        A name that is no setting of the algorithm, or nothing to search or choose.
    """
    entry = spec(algorithm)
    parsed = parsed_given(algorithm, given)
    training = {k: r for k, r in parsed.items() if k not in entry.fold_in_space and r}
    fold_in = fold_in_space(algorithm, given, fixed)
    if not training and not fold_in:
        raise ConfigError(f"nothing to search for {algorithm} in a private search: name "
                          "training settings with --space NAME=LO:HI"
                          + (" (its fold-in settings are fixed or off)" if entry.fold_in_space
                             else ""))
    return training, fold_in


def fold_in_space(algorithm: str, given: Mapping[str, str],
                  fixed: Mapping[str, Any]) -> dict[str, Choice]:
    """The fold-in settings a search chooses among after training (they cost no training
    run: :mod:`fedmc.tune.published`): the spec's ``fold_in_space`` less those fixed or
    ``off``, a given choice replacing a declared one and a given range becoming
    :data:`FOLD_IN_POINTS` values spread over it (on its log scale with ``log``).

    Raises
    ------
    ConfigError
        A name that is no setting of the algorithm, or text that is no range or choice.
    """
    declared = spec(algorithm).fold_in_space
    fold_in: dict[str, Searched] = {k: c for k, c in declared.items() if k not in fixed}
    _override(fold_in, {k: r for k, r in parsed_given(algorithm, given).items()
                        if k in declared})
    return {k: as_choice(r) for k, r in fold_in.items()}


FOLD_IN_POINTS = 7
"""Values a search tries of a fold-in setting given as a range."""


def as_choice(r: Searched) -> Choice:
    """``r`` itself if a choice, else :data:`FOLD_IN_POINTS` values evenly spread over the
    range (geometrically on a log scale; rounded and deduplicated for whole numbers)."""
    if isinstance(r, Choice):
        return r
    spread = np.geomspace if r.log else np.linspace
    points = [float(x) for x in spread(r.low, r.high, FOLD_IN_POINTS)]
    return Choice(tuple(dict.fromkeys(int(round(x)) for x in points)) if r.integer
                  else tuple(points))


def parsed_given(algorithm: str, given: Mapping[str, str]) -> dict[str, Searched | None]:
    """The user's ranges and choices, parsed, ``off`` as None.

    Raises
    ------
    ConfigError
        A name that is no setting of the algorithm, or text that is no range or choice.
    """
    fields = spec(algorithm).Config.model_fields
    out: dict[str, Searched | None] = {}
    for name, text in given.items():
        if name not in fields:
            raise ConfigError(f"--space {name}: {algorithm} has no setting {name} (it has "
                              f"{', '.join(fields)})")
        out[name] = None if text.strip() == OFF else parse_searched(name, text)
    return out


def _override(space: dict[str, Searched], given: Mapping[str, Searched | None]) -> None:
    """``space`` with the ``given`` ranges and choices set and those given as None left
    out."""
    for name, r in given.items():
        if r is None:
            space.pop(name, None)
        else:
            space[name] = r


def suggest(trial: Any, name: str, r: Searched) -> Any:
    """The trial's value of setting ``name`` in range or choice ``r`` (an Optuna trial)."""
    if isinstance(r, Choice):
        return trial.suggest_categorical(name, list(r.values))
    if r.integer:
        return int(trial.suggest_int(name, int(r.low), int(r.high), log=r.log))
    return float(trial.suggest_float(name, r.low, r.high, log=r.log))


def settings_of(algorithm: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The ``settings`` (ranges or values, by name) that ``algorithm`` has: what a search
    among candidates gives each (:func:`candidates`)."""
    fields = spec(algorithm).Config.model_fields
    return {k: v for k, v in settings.items() if k in fields}


def unclaimed(algorithms: list[str], settings: Mapping[str, Any]) -> list[str]:
    """The names among ``settings`` that none of ``algorithms`` has."""
    return [k for k in settings if all(k not in settings_of(a, {k: 0}) for a in algorithms)]

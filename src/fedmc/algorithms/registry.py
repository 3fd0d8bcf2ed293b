"""Every algorithm by name: the list of algorithm packages, and lookups in their specs.

Each package under :mod:`fedmc.algorithms` writes its algorithms' facts once, in its ``spec``
module (``SPECS``: one :class:`~fedmc.algorithms.spec.AlgorithmSpec` per ``--algorithm``
name): where its protocol functions are, its ``Config``, its data kind, its fold-in (how the
saved model places a new user, :mod:`fedmc.model`), the settings its paper runs it with (what
``fedmc run --algorithm X`` takes for every such option the user does not give), settings
that go with a partition or a DP budget, how it fits interactions, whether its kernels take
the rank token, whether the audit has a target for it. This module holds only
:data:`PACKAGES` and the lookups; nothing outside an algorithm's package names it or branches
on its settings (``tests/test_architecture.py``).

Importing this module imports no algorithm: the specs are read on the first lookup, and a
spec's references (``Config``, ``Algorithm``, fold-in) are loaded on first use.

To add an algorithm: write its package (``spec``, ``config``, ``client``, ``server``,
``kernels``, ``fold_in``, ``algorithm``, which builds the ``Algorithm``; its ``__init__``
exports that lazily, :func:`fedmc._lazy.lazy_exports`, so that reading the specs, as the
command line's help does, imports no kernel: ``tests/test_cli_startup.py``), add the package to
:data:`PACKAGES` and cases to ``tests/test_conformance.py`` (a test fails for a registered
algorithm without one). The drivers, the estimators (:mod:`fedmc.estimators`), the CLI and
the outputs then work unchanged.
"""

from __future__ import annotations

from functools import cache
from importlib import import_module

from fedmc.algorithms.spec import (
    CROSS_SILO,
    DP_OPTIONS,
    IMPLICIT,
    PAPER_OPTIONS,
    SAMPLE_OPTIONS,
    AlgorithmSpec,
    load,
)
from fedmc.errors import ConfigError

__all__ = ["CROSS_SILO", "DP_OPTIONS", "IMPLICIT", "PACKAGES", "PAPER_OPTIONS",
           "SAMPLE_OPTIONS", "AlgorithmSpec", "algorithm_names", "audited_algorithms",
           "default_algorithm", "dp_baseline", "fold_in_algorithms", "interactions_algorithms",
           "load", "spec", "specs"]

PACKAGES = ("fedmc_admm", "fedmavg", "als", "felb", "rfrec", "fedals", "item_bias", "ease")
"""The algorithm packages, in the order their algorithms are listed."""

@cache
def specs() -> dict[str, AlgorithmSpec]:
    """Every algorithm's spec by name, the packages' ``SPECS`` in :data:`PACKAGES` order."""
    return {s.name: s for package in PACKAGES
            for s in import_module(f"fedmc.algorithms.{package}.spec").SPECS}


def algorithm_names() -> list[str]:
    """Names accepted by ``fedmc run --algorithm``."""
    return list(specs())


def spec(name: str) -> AlgorithmSpec:
    """The entry of ``name``.

    Raises
    ------
    ConfigError
        For a name that is not registered.
    """
    try:
        return specs()[name]
    except KeyError:
        raise ConfigError(
            f"unknown algorithm {name!r}: choose one of {', '.join(algorithm_names())}"
        ) from None


def default_algorithm(data_kind: str, implicit: bool = False) -> str:
    """The algorithm a run on ``data_kind`` data (``"ratings"`` or ``"boolean"``; with
    ``implicit``, interactions) takes when none is named: the one whose spec names that kind
    in its ``default_for``.

    Raises
    ------
    ConfigError
        For a kind of data no algorithm is the default of.
    """
    return _the_one("default_for", data_kind, implicit, "default algorithm")


def dp_baseline(data_kind: str, implicit: bool = False) -> str:
    """The DP baseline of ``data_kind`` data (with ``implicit``, interactions): the algorithm
    whose spec names that kind in its ``dp_baseline_for``, which a private run with the
    default algorithm fits where that one does not beat it.

    Raises
    ------
    ConfigError
        For a kind of data with no DP baseline.
    """
    return _the_one("dp_baseline_for", data_kind, implicit, "DP baseline")


def _the_one(role: str, data_kind: str, implicit: bool, what: str) -> str:
    """The one algorithm whose spec's ``role`` (a tuple of kinds of data) names the kind."""
    kind = "interactions" if implicit else data_kind
    found = [name for name, s in specs().items() if kind in getattr(s, role)]
    if len(found) != 1:
        raise ConfigError(f"no {what} for {kind} data: choose one of "
                          f"{', '.join(algorithm_names())}")
    return found[0]


def fold_in_algorithms() -> list[str]:
    """The algorithms whose models can fold in a new user."""
    return [name for name, s in specs().items() if s.fold_in is not None]


def audited_algorithms() -> list[str]:
    """The algorithms the privacy audit (``fedmc audit``) has a target for."""
    return [name for name, s in specs().items() if s.audited]


def interactions_algorithms() -> list[str]:
    """The algorithms that fit interactions (``--implicit``)."""
    return [name for name, s in specs().items() if s.interactions]

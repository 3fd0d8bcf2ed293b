"""Every algorithm by name: one :class:`AlgorithmSpec` each, the only table keyed by name.

A spec says where the algorithm's protocol functions are (its :class:`fedmc.core.protocol.
Algorithm`, or a choice of them by a setting), its ``Config``, its fold-in (how the saved
model places a new user, :mod:`fedmc.model`), the settings its paper runs it with (what
``fedmc run --algorithm X`` takes for every such option the user does not give),
settings that go with a partition, and its audit target (:mod:`fedmc.audit`). References
are ``"module:attribute"`` strings loaded on first use, so looking up a name imports nothing
heavy and this module imports no algorithm.

To add an algorithm: write its package (``config``, ``client``, ``server``, ``kernels``,
``fold_in``; its ``__init__`` exports the ``Algorithm``), add a spec here and cases to
``tests/test_conformance.py`` (a test fails for a registered algorithm without one). The
drivers, the estimators (:mod:`fedmc.estimators`), the CLI and the outputs then work unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import import_module
from typing import TYPE_CHECKING, Any

from fedmc.errors import ConfigError

if TYPE_CHECKING:
    from fedmc.algorithms.fold_in import FoldIn
    from fedmc.core.protocol import Algorithm

PAPER_OPTIONS = ("clients", "partition", "active", "sampling", "participation", "rounds")
"""The options of a run an algorithm's paper settings may fill (``fedmc run``'s option names:
how many clients, who they are, who takes part in a round, how many rounds)."""

_CROSS_SILO = {"clients": 100, "partition": "random", "rounds": 100}
_ONE_USER_PER_CLIENT = {"clients": 1, "partition": "user", "active": "all"}


def load(reference: str) -> Any:
    """The attribute a ``"module:attribute"`` reference names (the module imported)."""
    module, name = reference.split(":")
    return getattr(import_module(module), name)


@dataclass(frozen=True)
class AlgorithmSpec:
    """One algorithm's entry (module docstring).

    Attributes
    ----------
    name
        The ``--algorithm`` value.
    config
        Its ``Config`` (pydantic hyper-parameters).
    algorithm
        Its protocol functions: an ``Algorithm``, or, with ``selected_by``, a mapping from the
        values of that ``Config`` field to ``Algorithm`` objects; None for a centralized
        method (ALS), which runs outside the protocol.
    selected_by
        The ``Config`` field that picks one of ``algorithm``'s ``Algorithm`` objects.
    fold_in
        ``fold_in(cfg, V, items, values) -> u`` (:mod:`fedmc.algorithms.fold_in`), None when
        its models cannot place a new user.
    paper_settings
        How its paper runs it: values of :data:`PAPER_OPTIONS`.
    variants
        By partition: settings applied where the user chose that partition and did not set
        them (``Config`` fields and :data:`PAPER_OPTIONS` alike).
    audit
        Its target of the privacy audit (:mod:`fedmc.audit.run`), None when it has none.
    data_kind
        ``"ratings"`` or ``"boolean"``.
    """

    name: str
    config: str
    algorithm: str | None = None
    selected_by: str | None = None
    fold_in: str | None = None
    paper_settings: Mapping[str, Any] = field(default_factory=lambda: _CROSS_SILO)
    variants: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    audit: str | None = None
    data_kind: str = "ratings"

    @property
    def Config(self) -> type:  # noqa: N802 (a class)
        """The algorithm's ``Config`` class."""
        return load(self.config)

    @property
    def federated(self) -> bool:
        """Whether it runs on the protocol (every algorithm but the centralized ones)."""
        return self.algorithm is not None

    def algorithm_for(self, cfg: Any) -> Algorithm:
        """The protocol functions that run ``cfg`` (a validated ``Config``)."""
        if self.algorithm is None:
            raise ConfigError(f"{self.name} is not a federated algorithm")
        found = load(self.algorithm)
        return found[getattr(cfg, self.selected_by)] if self.selected_by else found

    def load_fold_in(self) -> FoldIn:
        """Its fold-in.

        Raises
        ------
        ConfigError
            When its models cannot fold in a new user.
        """
        if self.fold_in is None:
            raise ConfigError(
                f"folding in a new user is not available for {self.name} models (it is for "
                f"{', '.join(fold_in_algorithms())})"
            )
        return load(self.fold_in)

    def algorithms(self) -> list[Algorithm]:
        """Every ``Algorithm`` object of this entry."""
        if self.algorithm is None:
            return []
        found = load(self.algorithm)
        return list(found.values()) if self.selected_by else [found]


_SPECS = [
    AlgorithmSpec(
        "fedmc-admm", "fedmc.algorithms.fedmc_admm.config:FedMCADMMConfig",
        "fedmc.algorithms.fedmc_admm:BY_CONSENSUS", selected_by="consensus",
        fold_in="fedmc.algorithms.fedmc_admm.fold_in:fold_in",
        # 100 clients, 10 drawn per round (--active's default), 100 rounds.
        paper_settings=_CROSS_SILO,
        # Cross-device FedMC-ADMM: consensus on rated items (docs/algorithms.md), each
        # client in a round with probability 0.1; settings chosen on a validation cut of
        # ML-1M's training ratings (benchmarks/README.md, "One user per client").
        variants={"user": {"consensus": "rated", "beta": 0.6, "gamma": 12.0, "lam": 3.0,
                           "inner": 100, "dual_init": "zeros", "sampling": "bernoulli",
                           "participation": 0.1}},
        audit="fedmc.audit.run:ADMMTarget"),
    AlgorithmSpec(
        "fedmavg", "fedmc.algorithms.fedmavg.config:FedMAvgConfig",
        "fedmc.algorithms.fedmavg:ALGORITHM",
        fold_in="fedmc.algorithms.fedmavg.fold_in:fold_in",
        audit="fedmc.audit.run:FedMAvgTarget"),
    AlgorithmSpec(
        "fedmavg-poster", "fedmc.algorithms.fedmavg.config:FedMAvgPosterConfig",
        "fedmc.algorithms.fedmavg:POSTER",
        fold_in="fedmc.algorithms.fedmavg.fold_in:fold_in"),
    AlgorithmSpec(
        "als", "fedmc.algorithms.als.config:ALSConfig",
        fold_in="fedmc.algorithms.als.fold_in:fold_in",
        # No clients to speak of; the progress counts its sweeps (default 15).
        paper_settings={**_ONE_USER_PER_CLIENT, "rounds": 15}),
    AlgorithmSpec(
        "felb", "fedmc.algorithms.felb.config:FelbConfig", "fedmc.algorithms.felb:ALGORITHM",
        data_kind="boolean"),
    AlgorithmSpec(
        "felb-mu", "fedmc.algorithms.felb.config:FelbMUConfig",
        "fedmc.algorithms.felb:ALGORITHM_MU", data_kind="boolean"),
    AlgorithmSpec(
        # One user per client, all clients in every iteration, 400 iterations.
        "rfrec", "fedmc.algorithms.rfrec.config:RFRecConfig",
        "fedmc.algorithms.rfrec:ALGORITHM", fold_in="fedmc.algorithms.rfrec.fold_in:fold_in",
        paper_settings={**_ONE_USER_PER_CLIENT, "rounds": 400},
        audit="fedmc.audit.run:RFRecTarget"),
    AlgorithmSpec(
        "rfrecf", "fedmc.algorithms.rfrec.config:RFRecFConfig",
        "fedmc.algorithms.rfrec:ALGORITHM_F", fold_in="fedmc.algorithms.rfrec.fold_in:fold_in",
        paper_settings={**_ONE_USER_PER_CLIENT, "rounds": 400}),
]
SPECS: dict[str, AlgorithmSpec] = {spec.name: spec for spec in _SPECS}


def algorithm_names() -> list[str]:
    """Names accepted by ``fedmc run --algorithm``."""
    return list(SPECS)


def spec(name: str) -> AlgorithmSpec:
    """The entry of ``name``.

    Raises
    ------
    ConfigError
        For a name that is not registered.
    """
    try:
        return SPECS[name]
    except KeyError:
        raise ConfigError(
            f"unknown algorithm {name!r}: choose one of {', '.join(algorithm_names())}"
        ) from None


def fold_in_algorithms() -> list[str]:
    """The algorithms whose models can fold in a new user."""
    return [name for name, s in SPECS.items() if s.fold_in is not None]

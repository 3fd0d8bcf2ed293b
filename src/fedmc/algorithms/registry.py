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

import numpy as np

from fedmc.errors import ConfigError

if TYPE_CHECKING:
    from fedmc.algorithms.fold_in import FoldIn
    from fedmc.core.protocol import Algorithm
    from fedmc.core.shard import CSR

PAPER_OPTIONS = ("clients", "partition", "active", "sampling", "participation", "rounds")
"""The options of a run an algorithm's paper settings may fill (``fedmc run``'s option names:
how many clients, who they are, who takes part in a round, how many rounds)."""

DP_OPTIONS = ("dp_clip", "dp_setup_clip", "dp_setup_scale")
"""The user-level DP options (``fedmc run``'s names) that settings tuned for DP may fill."""

CROSS_SILO = {"clients": 100, "partition": "random", "rounds": 100}
"""The paper settings of most algorithms (FedMC-ADMM's: 100 clients, users split at random)."""
_ONE_USER_PER_CLIENT = {"clients": 1, "partition": "user", "active": "all"}
_ADMM_DP = {"consensus": "rated", "weights": "sqrt-items", "dual_init": "zeros",
            "offset": "item-bias", "count_scale": 0.3, "beta": 0.3, "lam": 2.0, "gamma": 10.0,
            "inner": 100, "sampling": "bernoulli", "participation": 0.1,
            "dp_setup_clip": 0.3, "dp_setup_scale": 0.5}
_BIAS_DP = {"count_scale": 0.3, "lam_user": 3.0, "dp_clip": 0.5}
_FEDALS_DP = {"sums": "fresh", "active": "all", "sampling": "uniform", "participation": None,
              "gram_scale": 0.3}
_FEDALS_RATINGS_DP = {**_FEDALS_DP, "memory": 0.9, "clip": True, "dp_clip": 1.5}
_FEDALS_CLICKS_DP = {**_FEDALS_DP, "rounds": 8, "memory": 0.85, "lam_item": 10.0, "dp_clip": 1.0}
IMPLICIT = "+implicit"
"""The suffix of a partition's name under which ``dp_variants`` holds the settings tuned for
interactions (``--implicit``)."""


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
    fold_in_rows
        Its batched form ``fold_in_rows(cfg, V, R) -> U`` (many users at once), if it has one.
    paper_settings
        How its paper runs it: values of :data:`PAPER_OPTIONS`.
    variants
        By partition: settings applied where the user chose that partition and did not set
        them (``Config`` fields and :data:`PAPER_OPTIONS` alike).
    dp_variants
        By partition, then by the budget they were tuned for: settings a run with user-level
        DP at that budget takes where the user set none of them (``Config`` fields,
        :data:`PAPER_OPTIONS` and :data:`DP_OPTIONS`; :meth:`dp_variant`); a run on
        interactions (``--implicit``) takes those of the partition's name plus
        :data:`IMPLICIT` instead.
    audit
        Its target of the privacy audit (:mod:`fedmc.audit.run`), None when it has none.
    interactions
        The ``Config`` settings with which it fits interactions (``--implicit``, implicit
        feedback: :func:`fedmc.run.data.implicit_params`); empty when it fits only ratings.
    data_kind
        ``"ratings"`` or ``"boolean"``.
    """

    name: str
    config: str
    algorithm: str | None = None
    selected_by: str | None = None
    fold_in: str | None = None
    fold_in_rows: str | None = None
    paper_settings: Mapping[str, Any] = field(default_factory=lambda: CROSS_SILO)
    variants: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    dp_variants: Mapping[str, Mapping[float, Mapping[str, Any]]] = field(default_factory=dict)
    audit: str | None = None
    interactions: Mapping[str, Any] = field(default_factory=dict)
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

    def fold_in_users(self, cfg: Any, V: Any, R: CSR) -> Any:
        """Every row of ``R`` (one user's ratings each, normalized scale) folded in: the rows
        of ``U``, by the batched fold-in where there is one, else user by user."""
        if self.fold_in_rows is not None:
            return load(self.fold_in_rows)(cfg, V, R)
        one = self.load_fold_in()
        U = np.empty((len(R.indptr) - 1, V.shape[1]))
        for t in range(len(U)):
            q = slice(R.indptr[t], R.indptr[t + 1])
            U[t] = one(cfg, V, R.indices[q].astype(np.int64), R.values[q])
        return U

    def dp_variant(self, partition: str, epsilon: float,
                   implicit: bool = False) -> Mapping[str, Any]:
        """The settings tuned for a run under ``partition`` (on interactions: ``partition +
        IMPLICIT``) at budget ``epsilon``: those of the largest tuned budget at most
        ``epsilon`` (the smallest one's below all of them); empty when none were tuned."""
        tuned = self.dp_variants.get(partition + IMPLICIT if implicit else partition, {})
        if not tuned:
            return {}
        below = [b for b in sorted(tuned) if b <= epsilon]
        return tuned[below[-1] if below else min(tuned)]

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
        fold_in_rows="fedmc.algorithms.fedmc_admm.fold_in:fold_in_rows",
        # 100 clients, 10 drawn per round (--active's default), 100 rounds.
        paper_settings=CROSS_SILO,
        # Cross-device FedMC-ADMM: consensus on rated items (docs/algorithms.md), each
        # client in a round with probability 0.1; settings chosen on a validation cut of
        # ML-1M's training ratings (benchmarks/README.md, "One user per client").
        variants={"user": {"consensus": "rated", "beta": 0.6, "gamma": 12.0, "lam": 3.0,
                           "inner": 100, "dual_init": "zeros", "sampling": "bernoulli",
                           "participation": 0.1}},
        # Tuned for user-level DP per budget on a validation cut of ML-1M's training ratings
        # (benchmarks/README.md, "DP defaults and the utility table").
        dp_variants={"user": {
            1.0: {**_ADMM_DP, "offset_lam": 8.0, "gamma": 30.0, "rounds": 60, "dp_clip": 0.01,
                  "dp_setup_scale": 0.4},
            2.0: {**_ADMM_DP, "offset_lam": 4.0, "rounds": 60, "dp_clip": 0.01},
            4.0: {**_ADMM_DP, "offset_lam": 2.0, "rounds": 90, "dp_clip": 0.02},
            8.0: {**_ADMM_DP, "offset_lam": 1.0, "rounds": 90, "dp_clip": 0.03,
                  "dp_setup_clip": 0.5},
        }},
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
    AlgorithmSpec(
        # Federated ALS: one user per client (a device), 100 rounds; each client in a round
        # with probability 0.1 (the variant), every client with --active all.
        "fedals", "fedmc.algorithms.fedals.config:FedALSConfig",
        "fedmc.algorithms.fedals:ALGORITHM", fold_in="fedmc.algorithms.fedals.fold_in:fold_in",
        fold_in_rows="fedmc.algorithms.fedals.fold_in:fold_in_rows",
        paper_settings={**_ONE_USER_PER_CLIENT, "rounds": 100},
        variants={"user": {"sampling": "bernoulli", "participation": 0.1}},
        # Tuned for user-level DP on validation cuts of ML-1M's training ratings (below
        # epsilon 8 the factors add less than their noise: rank 2, shrunk hard, and the item
        # biases' ridge grows with the noise) and interactions (epsilon 8's settings were
        # also the best tried at 2 and 4); benchmarks/README.md, "Federated ALS under
        # user-level DP".
        dp_variants={"user": {1.0: {**_FEDALS_RATINGS_DP, "rounds": 2, "rank": 2,
                                    "lam_item": 300.0, "lam_bias": 60.0},
                              2.0: {**_FEDALS_RATINGS_DP, "rounds": 3, "rank": 2,
                                    "lam_item": 300.0, "lam_bias": 25.0},
                              4.0: {**_FEDALS_RATINGS_DP, "rounds": 3, "rank": 2,
                                    "lam_item": 100.0, "lam_bias": 10.0},
                              8.0: {**_FEDALS_RATINGS_DP, "rounds": 8, "lam_item": 30.0,
                                    "lam_bias": 8.0}},
                     "user" + IMPLICIT: {1.0: {**_FEDALS_CLICKS_DP, "rounds": 3,
                                               "lam_item": 60.0},
                                         2.0: _FEDALS_CLICKS_DP, 8.0: _FEDALS_CLICKS_DP}},
        audit="fedmc.audit.run:FedALSTarget", interactions={"implicit": True}),
    AlgorithmSpec(
        # The DP baseline: one user per client, one set-up exchange answered by everyone.
        "item-bias", "fedmc.algorithms.item_bias.config:ItemBiasConfig",
        "fedmc.algorithms.item_bias:ALGORITHM",
        fold_in="fedmc.algorithms.item_bias.fold_in:fold_in",
        fold_in_rows="fedmc.algorithms.item_bias.fold_in:fold_in_rows",
        paper_settings={**_ONE_USER_PER_CLIENT, "rounds": 0},
        # Of interactions, the counts alone: the (DP) popularity list.
        interactions={"signal": "counts"},
        dp_variants={"user": {1.0: {**_BIAS_DP, "lam_item": 8.0, "dp_clip": 0.3},
                              2.0: {**_BIAS_DP, "lam_item": 4.0},
                              4.0: {**_BIAS_DP, "lam_item": 2.0},
                              8.0: {**_BIAS_DP, "lam_item": 1.0}},
                     # the popularity list: every client's weighted counts have norm
                     # count_scale, the clip (nothing clipped, nothing of it unused)
                     "user" + IMPLICIT: {1.0: {"count_scale": 0.3, "dp_clip": 0.3}}}),
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

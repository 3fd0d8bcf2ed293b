"""What one algorithm's package says of it: :class:`AlgorithmSpec`, and the options of a run
its settings may fill.

Each algorithm package writes its facts once, in its ``spec`` module (``SPECS``: one
:class:`AlgorithmSpec` per ``--algorithm`` name the package runs), which imports nothing but
this module: its references (``Config``, ``Algorithm``, fold-in) are ``"module:attribute"``
strings loaded on first use. :mod:`fedmc.algorithms.registry` lists the packages.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import import_module
from typing import TYPE_CHECKING, Any, Literal

from fedmc.errors import ConfigError

if TYPE_CHECKING:
    from pydantic import BaseModel

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

ONE_USER_PER_CLIENT = {"clients": 1, "partition": "user", "active": "all"}
"""Cross-device paper settings: every user a client, every client in every round."""

FACTOR_SUMS = {"sse_z": "nonnegative", "sse_train": "nonnegative", "n_train": "cells",
               "sse_test": "nonnegative", "sae_test": "nonnegative", "n_test": "cells",
               "reg_u": "nonnegative", "nnz_u": "count", "size_u": "count",
               "loss": "nonnegative"}
"""The evaluation sums of a factor model (:func:`fedmc.core.factors.error_sums`, and an implicit
fit's ``loss``) and what each is (:data:`fedmc.federation.bounds.SumKind`): the server refuses a
client's sums that break them."""

IMPLICIT = "+implicit"
"""The suffix of a partition's name under which ``dp_variants`` holds the settings tuned for
interactions (``--implicit``)."""
SAMPLE_OPTIONS = ("active", "participation", "sampling", "dropout")
"""The options that choose which clients take part in a round."""


@dataclass(frozen=True)
class Range:
    """A range of one setting that ``fedmc tune`` searches (:mod:`fedmc.tune.space`): from
    ``low`` to ``high``, on a log scale with ``log``, whole numbers with ``integer``; a
    range marked ``only`` ("ratings" or "interactions") is searched only on that kind of
    data."""

    low: float
    high: float
    log: bool = False
    integer: bool = False
    only: Literal["ratings", "interactions"] | None = None


@dataclass(frozen=True)
class Choice:
    """A setting that ``fedmc tune`` searches among a few ``values`` (:mod:`fedmc.tune.space`),
    e.g. a mode; a choice marked ``only`` ("ratings" or "interactions") is searched only on
    that kind of data."""

    values: tuple[str | float | int | bool, ...]
    only: Literal["ratings", "interactions"] | None = None


@dataclass(frozen=True)
class FewUsers:
    """DP settings for a population of fewer than ``users`` enrolled users: ``settings``
    replace those of the budget's ``dp_variants`` there (:attr:`AlgorithmSpec.dp_few_users`)."""

    users: int
    settings: Mapping[str, Any]


Searched = Range | Choice
"""What ``fedmc tune`` searches of one setting."""


OUTSIDERS = "+outsiders"
"""The suffix of a partition's key under which ``dp_variants`` (and its users' tables) hold the
settings tuned for a budget promised against outsiders only (``--dp-against outsiders``); a
partition without them takes the server's, which holds where every client takes part in every
exchange (the two accountings are then the same)."""


def dp_key(partition: str, implicit: bool, against: str = "server") -> str:
    """The key of a partition's DP settings: its name, plus :data:`IMPLICIT` on interactions,
    plus :data:`OUTSIDERS` for a budget against outsiders only."""
    key = partition + IMPLICIT if implicit else partition
    return key + OUTSIDERS if against == "outsiders" else key


def dp_table(tables: Mapping[str, Any], partition: str, implicit: bool, against: str) -> Any:
    """The table of ``tables`` (by :func:`dp_key`) a run under ``partition`` with a budget
    against ``against`` reads: outsiders' own where the algorithm has one, else the
    server's; None where there is neither."""
    own = tables.get(dp_key(partition, implicit, against))
    return own if own is not None else tables.get(dp_key(partition, implicit))


def by_budget(tuned: Mapping[float, Any], epsilon: float, default: Any) -> Any:
    """The value ``tuned`` (by budget) holds for ``epsilon``: that of the largest budget at
    most ``epsilon``, the smallest budget's below all of them; ``default`` when empty."""
    return tuned[budget_of(tuned, epsilon)] if tuned else default


def budget_of(tuned: Mapping[float, Any], epsilon: float) -> float:
    """The budget of ``tuned`` (not empty) that holds for ``epsilon`` (:func:`by_budget`)."""
    below = [b for b in sorted(tuned) if b <= epsilon]
    return below[-1] if below else min(tuned)


def load(reference: str) -> Any:
    """The attribute a ``"module:attribute"`` reference names (the module imported)."""
    module, name = reference.split(":")
    return getattr(import_module(module), name)


def never(cfg: Any) -> bool:
    """False, for any ``Config`` (the default of a spec's predicates)."""
    return False


def always(cfg: Any) -> bool:
    """True, for any ``Config``."""
    return True


@dataclass(frozen=True)
class AlgorithmSpec:
    """One algorithm's facts, written in its package's ``spec`` module (module docstring).

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
        them (``Config`` fields and :data:`PAPER_OPTIONS` alike). Under the partition's name
        plus :data:`IMPLICIT`, a protocol for interactions (``--implicit``) applied after it
        as a whole, or not at all where the run has a DP budget (whose settings are its
        protocol), the user gave a sample of the clients (:data:`SAMPLE_OPTIONS`) or one of
        its settings with another value (:func:`fedmc.run.settings.apply_paper_settings`).
    dp_variants
        By partition, then by the budget they were tuned for: settings a run with user-level
        DP at that budget takes where the user set none of them (``Config`` fields,
        :data:`PAPER_OPTIONS` and :data:`DP_OPTIONS`; :meth:`dp_variant`); a run on
        interactions (``--implicit``) takes those of the partition's name plus
        :data:`IMPLICIT` instead.
    dp_few_users
        By partition (with :data:`IMPLICIT` for interactions), then by a budget of
        ``dp_variants``: :class:`FewUsers`, the settings a run at that budget on a smaller
        population takes in place of the budget's (chosen on validation draws of that size,
        where the budget's lost to the DP baseline's; :meth:`dp_variant`).
    dp_least_users
        By partition (with :data:`IMPLICIT` for interactions), then by budget as
        ``dp_variants``: the fewest enrolled users with whom its DP settings at that budget
        (those of ``dp_few_users`` on fewer users than theirs) beat the DP baseline's
        (:meth:`dp_least_users_at`); none: any number.
    audited
        Whether the privacy audit (``fedmc audit``) has a target for it: the module
        ``fedmc.audit.targets.<name>`` (``-`` read as ``_``).
    interactions
        The ``Config`` settings with which it fits interactions (``--implicit``, implicit
        feedback: :func:`fedmc.run.settings.implicit_params`); empty when it fits only ratings.
    needs_interactions
        ``needs_interactions(cfg)``: whether a validated ``Config`` fits interactions only
        (then ratings are refused); None when none does.
    data_kind
        ``"ratings"`` or ``"boolean"``: the data its client steps read
        (:class:`fedmc.core.shard.RatingsShard`, :class:`fedmc.core.shard.BooleanShard`); its
        ``Algorithm`` objects take theirs from here.
    default_for
        The kinds of data (``"ratings"``, ``"boolean"``, ``"interactions"``) it is the default
        algorithm of (:func:`fedmc.algorithms.registry.default_algorithm`).
    dp_baseline_for
        The kinds of data it is the DP baseline of: what a private run with the default
        algorithm fits where that one does not beat it
        (:func:`fedmc.algorithms.registry.dp_baseline`).
    rank_token
        ``rank_token(cfg)``: whether the kernels that run a validated ``Config`` take the rank
        token (:func:`fedmc.core.kernels.rank_token`), so a run compiles them for its rank
        (:mod:`fedmc.run.precompile`).
    round_warm_up
        ``"module:function"``, ``function(cfg)``: two calls that compile the client step of
        one round of ``cfg`` in two parts sharing no compiled code, without the data's kernels,
        or None where it has none; with them, the first run has a child compile the first part
        while the run, its data loaded, compiles the rest and the second part
        (:mod:`fedmc.run.precompile`). None: no such calls.
    estimator
        The name of its scikit-learn facade in :mod:`fedmc.estimators`.
    search_space
        The ranges and choices of its settings ``fedmc tune`` searches by default
        (:class:`Range`, :class:`Choice`; a user overrides them with ``--space``); empty when
        none are declared.
    fold_in_space
        Settings only its fold-in reads (a user's factor computed from the published model),
        each with the values a private search chooses among after training
        (:mod:`fedmc.tune.private`): a choice that costs no training run.
    search_warmup
        The share of a trial's rounds before ``fedmc tune``'s pruner may stop it: the early
        rounds of a curve that starts slower and ends higher (a larger model) rank it unfairly.
    sums
        What each of its clients' evaluation sums is (``nonnegative``, ``count``, ``cells``:
        :data:`fedmc.federation.bounds.SumKind`): a federation's server refuses sums that
        break it.
    nonnegative_uploads
        Its uploads whose every entry is >= 0 (counts): the server refuses others.
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
    dp_few_users: Mapping[str, Mapping[float, FewUsers]] = field(default_factory=dict)
    dp_least_users: Mapping[str, Mapping[float, float]] = field(default_factory=dict)
    audited: bool = False
    interactions: Mapping[str, Any] = field(default_factory=dict)
    needs_interactions: Callable[[Any], bool] | None = None
    data_kind: Literal["ratings", "boolean"] = "ratings"
    default_for: tuple[str, ...] = ()
    dp_baseline_for: tuple[str, ...] = ()
    rank_token: Callable[[Any], bool] = never
    round_warm_up: str | None = None
    estimator: str = ""
    search_space: Mapping[str, Searched] = field(default_factory=dict)
    fold_in_space: Mapping[str, Choice] = field(default_factory=dict)
    search_warmup: float = 0.25
    sums: Mapping[str, str] = field(default_factory=lambda: FACTOR_SUMS)
    nonnegative_uploads: tuple[str, ...] = ()

    @property
    def Config(self) -> type[BaseModel]:  # noqa: N802 (a class)
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
            from fedmc.algorithms.registry import fold_in_algorithms

            raise ConfigError(
                f"folding in a new user is not available for {self.name} models (it is for "
                f"{', '.join(fold_in_algorithms())})"
            )
        return load(self.fold_in)

    def fold_in_users(self, cfg: Any, V: Any, R: CSR) -> Any:
        """Every row of ``R`` (one user's ratings each, normalized scale) folded in: the rows
        of ``U``, by the batched fold-in where there is one, else user by user."""
        import numpy as np  # here: the command line reads the specs without NumPy

        if self.fold_in_rows is not None:
            return load(self.fold_in_rows)(cfg, V, R)
        one = self.load_fold_in()
        U = np.empty((len(R.indptr) - 1, V.shape[1]))
        for t in range(len(U)):
            q = slice(R.indptr[t], R.indptr[t + 1])
            U[t] = one(cfg, V, R.indices[q].astype(np.int64), R.values[q])
        return U

    def dp_variant(self, partition: str, epsilon: float, implicit: bool = False,
                   users: Callable[[], int] | None = None,
                   against: str = "server") -> Mapping[str, Any]:
        """The settings tuned for a run under ``partition`` (on interactions: ``partition +
        IMPLICIT``) at budget ``epsilon`` promised against ``against`` (:func:`dp_table`):
        those of the largest tuned budget at most ``epsilon`` (the smallest one's below all
        of them), with that budget's ``dp_few_users`` settings where the data have fewer
        users than theirs (``users()``, called only where the budget lists them; None:
        unknown, taken as enough); empty when none were tuned."""
        tuned = by_budget(dp_table(self.dp_variants, partition, implicit, against) or {},
                          epsilon, {})
        few = self.dp_few_users_at(partition, epsilon, implicit, against)
        if few is not None and users is not None and users() < few.users:
            return {**tuned, **few.settings}
        return tuned

    def dp_few_users_at(self, partition: str, epsilon: float, implicit: bool = False,
                        against: str = "server") -> FewUsers | None:
        """The :class:`FewUsers` settings of the budget whose ``dp_variants`` a run at
        ``epsilon`` takes (:meth:`dp_variant`); None where it lists none."""
        tuned = dp_table(self.dp_variants, partition, implicit, against)
        few = dp_table(self.dp_few_users, partition, implicit, against) or {}
        return few.get(budget_of(tuned, epsilon)) if tuned else None

    def dp_least_users_at(self, partition: str, epsilon: float, implicit: bool,
                          against: str = "server") -> float:
        """The fewest enrolled users with whom its DP settings at budget ``epsilon`` (against
        ``against``) beat the DP baseline's under ``partition`` (on interactions: ``partition
        + IMPLICIT``): its ``dp_least_users`` at the largest budget listed at most
        ``epsilon`` (the smallest one's below all of them); 0 where none are listed,
        infinity where no population measured was enough."""
        least = dp_table(self.dp_least_users, partition, implicit, against) or {}
        return by_budget(least, epsilon, 0)

    def algorithms(self) -> list[Algorithm]:
        """Every ``Algorithm`` object of this entry."""
        if self.algorithm is None:
            return []
        found = load(self.algorithm)
        return list(found.values()) if self.selected_by else [found]

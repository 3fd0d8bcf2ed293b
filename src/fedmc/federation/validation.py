"""Evaluation on the clients' validation cut, and early stopping on it.

A run with a validation cut (``--validation-fraction F``: each client keeps back F of its own
training ratings, :func:`fedmc.run.data.validation_mask`) evaluates every evaluated round on
the cut as on the test ratings: :func:`with_validation` gives the algorithm an ``evaluate``
that adds the sums of the same evaluation on the cut (each key prefixed with
:data:`PREFIX`; a client computes them from what it holds, they travel as sums as the test
sums do) and a ``metrics`` that turns them into ``validation_*`` history columns (the
algorithm's ``test_*`` columns of those sums, renamed). With a ranking cut-off ``k``
(interactions, judged by their top-``k`` lists) each client also ranks its users' unseen items
once per evaluation and scores the lists against both its test and its validation items: the
``ndcg@k``... and ``validation_ndcg@k``... columns (:mod:`fedmc.core.ranking`). A validation
list leaves out the user's training items; a test list leaves out its validation items too
(both are the user's known history), so that nothing about a test item shapes a validation
number.

:class:`EarlyStop` watches one validation column during the round loop
(:func:`fedmc.federation.loop.run_rounds`): it keeps the model of the best evaluated round and
says when ``patience`` rounds have passed without an improvement of more than ``min_delta``.
The initial model (round 0) is never the best: a run that trains publishes a trained model, and
a search scores what training gave. Nothing here reads the test ratings to choose anything:
the test columns are reported, the validation columns decide.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from fedmc.core.protocol import Algorithm, FederationInfo
from fedmc.core.ranking import ranking_metrics, ranking_sums
from fedmc.core.shard import CSR
from fedmc.errors import ConfigError
from fedmc.federation.callbacks import Callback, RoundEnd
from fedmc.federation.settings import EarlyStopping, Schedule

PREFIX = "validation."
"""Prefix of the evaluation sums of the validation cut."""
VALIDATION = "validation_"
"""Prefix of the history columns of the validation cut."""
RANKING_SUMS = {"rank_precision": "per_user", "rank_recall": "per_user",
                "rank_ndcg": "per_user", "rank_map": "per_user",
                "rank_hit_rate": "per_user", "rank_users": "users"}
"""The ranking sums an evaluation at a cut-off sends and what each is
(:data:`fedmc.federation.bounds.SumKind`)."""


def sum_kind(declared: Mapping[str, str], key: str) -> str | None:
    """What the evaluation sum ``key`` is: as the algorithm declares its own sums, the cut's
    sums as the same sums of the test ratings, the ranking sums as :data:`RANKING_SUMS`;
    None for a sum nobody declared."""
    base = key.removeprefix(PREFIX)
    return declared.get(base, RANKING_SUMS.get(base))


def with_validation(algorithm: Algorithm, ranking_k: int | None = None) -> Algorithm:
    """``algorithm`` with the evaluation of the module docstring: on a shard with a
    validation cut (``shard.validation``) its evaluation sums gain the cut's, prefixed with
    :data:`PREFIX`; with ``ranking_k``, both the test and the validation ranking sums at that
    cut-off. A shard without a cut (and no ``ranking_k``) is evaluated as before: the
    history of a run without a cut is unchanged."""
    if algorithm.data_kind != "ratings":
        return algorithm
    base_evaluate, base_metrics = algorithm.evaluate, algorithm.metrics

    def evaluate(cfg: Any, shard: Any, state: Any,
                 model: Mapping[str, np.ndarray]) -> dict[str, float]:
        sums = dict(base_evaluate(cfg, shard, state, model))
        cut = getattr(shard, "validation", None)
        if cut is not None:
            held = shard.validation_shard()
            sums.update({PREFIX + k: v for k, v in
                         base_evaluate(cfg, held, state, model).items()})
        if ranking_k is not None:
            U = algorithm.user_factors(cfg, shard, state)
            known = shard if cut is None else _Lists(shard.known_items, shard.test)
            sums.update(_scalar(ranking_sums(known, U, model["V"], ranking_k)))
            if cut is not None:
                sums.update({PREFIX + k: v for k, v in _scalar(
                    ranking_sums(held, U, model["V"], ranking_k)).items()})
        return sums

    def metrics(cfg: Any, server: Any, sums: Mapping[str, float],
                info: FederationInfo) -> dict[str, float]:
        own = {k: v for k, v in sums.items() if not k.startswith(PREFIX)}
        held = {k.removeprefix(PREFIX): v for k, v in sums.items() if k.startswith(PREFIX)}
        out = base_metrics(cfg, server, _without_ranking(own), info)
        if ranking_k is not None:
            out.update(_ranking_columns(own, ranking_k))
        if held:
            of_cut = base_metrics(cfg, server, _without_ranking(held), info)
            out.update({VALIDATION + k.removeprefix("test_"): v for k, v in of_cut.items()
                        if k.startswith("test_")})
            if ranking_k is not None:
                out.update({VALIDATION + k: v for k, v in
                            _ranking_columns(held, ranking_k).items()})
        return out

    return dataclasses.replace(algorithm, evaluate=evaluate, metrics=metrics)


class _Lists(NamedTuple):
    """What :func:`fedmc.core.ranking.ranking_sums` reads: the items left out of the lists
    (``train``) and the items the lists are scored against (``test``)."""

    train: CSR
    test: CSR


def _scalar(sums: Mapping[str, float | np.ndarray]) -> dict[str, float]:
    """The ranking sums that travel every evaluation: the scalar ones (the per-item counts of
    the catalogue coverage are left to the ranking after training)."""
    return {k: float(v) for k, v in sums.items() if np.ndim(v) == 0}


def _without_ranking(sums: Mapping[str, float]) -> dict[str, float]:
    return {k: v for k, v in sums.items() if not k.startswith("rank_")}


def _ranking_columns(sums: Mapping[str, float], k: int) -> dict[str, float]:
    """The ranking columns of :func:`fedmc.core.ranking.ranking_metrics` but the coverage."""
    no_items: dict[str, float | np.ndarray] = {**sums, "rank_items": np.zeros(0)}
    return {name: v for name, v in ranking_metrics(no_items, k).items()
            if not name.startswith("coverage@")}


def stopping_column(stopping: EarlyStopping, ranking_k: int | None) -> tuple[str, bool]:
    """The history column early stopping watches and whether larger is better: the one the
    user named, else ``validation_ndcg@K`` with a ranking cut-off (interactions), else
    ``validation_rmse``."""
    column = stopping.metric
    if column is None:
        column = f"ndcg@{ranking_k}" if ranking_k is not None else "rmse"
    column = column if column.startswith(VALIDATION) else VALIDATION + column
    larger = column.removeprefix(VALIDATION).split("@")[0] in (
        "ndcg", "recall", "precision", "map", "hit_rate", "f1", "accuracy")
    return column, larger


@dataclass
class BestRound:
    """The best evaluated round so far: its number, its validation value and its published
    model (copies: the server's state moves on)."""

    round: int
    value: float
    model: dict[str, np.ndarray]


class EarlyStop(Callback):
    """Early stopping on one validation column (module docstring): a callback of the round
    loop that keeps the best round's model and stops the loop once ``patience`` rounds have
    brought nothing better.

    Parameters
    ----------
    stopping
        Patience (in rounds), smallest improvement, the column.
    ranking_k
        The run's per-evaluation ranking cut-off (chooses the default column).
    """

    def __init__(self, stopping: EarlyStopping, ranking_k: int | None) -> None:
        self.patience = stopping.patience
        self.min_delta = stopping.min_delta
        self.column, self.larger = stopping_column(stopping, ranking_k)
        self.best: BestRound | None = None
        self.last = 0

    def observe(self, round: int, row: Mapping[str, float],
                model: Mapping[str, np.ndarray], answered: bool = True) -> None:
        """Take the evaluation of ``round`` (its history row and the model it evaluated); an
        evaluation nobody ``answered`` (a federation's round where every client was lost)
        counts towards the patience only, as does round 0 (the initial model)."""
        self.last = round
        if not answered or round == 0:
            return
        if self.column not in row:
            raise ConfigError(f"early stopping watches {self.column}, which the evaluation "
                              f"does not give (a validation cut: `validation_fraction`)")
        value = float(row[self.column])
        if not np.isfinite(value):
            return
        if self.best is None or self._score(value) > self._score(self.best.value) + self.min_delta:
            self.best = BestRound(round, value, {k: np.array(v, copy=True)
                                                 for k, v in model.items()})

    @classmethod
    def of(cls, schedule: Schedule) -> EarlyStop | None:
        """The watcher of ``schedule``'s early stopping (its ``eval_k`` chooses the default
        column), or None without."""
        stopping = schedule.early_stopping
        return None if stopping is None else cls(stopping, schedule.eval_k)

    def begin(self, start: int) -> bool:
        """A resumed run whose watcher had stopped stops at once."""
        return self.stopped

    def after_round(self, end: RoundEnd) -> bool:
        """Observe an evaluated round; stop once :attr:`stopped`."""
        if end.row is not None:
            self.observe(end.round, end.row, end.model, end.answered)
        return self.stopped

    def _score(self, value: float) -> float:
        return value if self.larger else -value

    @property
    def stopped(self) -> bool:
        """Whether ``patience`` rounds have passed since the best round."""
        return self.best is not None and self.last - self.best.round >= self.patience

    def report(self, rounds: int) -> dict[str, Any]:
        """What ``summary.json`` says of it: the published round, the column and its value,
        and why the run ended (``patience`` or ``rounds``, all ``rounds`` done)."""
        best = self.best
        return {"round": None if best is None else best.round, "metric": self.column,
                "value": None if best is None else best.value,
                "stopped_at": self.last,
                "reason": (f"no improvement of {self.column} by more than {self.min_delta:g} "
                           f"in {self.patience} rounds" if self.stopped
                           else f"all {rounds} rounds done")}

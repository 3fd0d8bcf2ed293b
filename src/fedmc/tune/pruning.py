"""A search's pruning, as a callback of the round loop: each evaluated round's validation
value goes to the trial; when Optuna's pruner says so, the loop stops, and the trial's
objective declares it pruned once the run has returned (:mod:`fedmc.tune.search`)."""

from __future__ import annotations

import math
from typing import Any

from fedmc.federation.callbacks import Callback, RoundEnd


class Pruning(Callback):
    """Reports ``column`` of every evaluated round to ``trial`` (an Optuna trial) and stops the
    run where the trial should be pruned: :attr:`pruned_at` is then that round, and
    :attr:`value` the value it was pruned on."""

    def __init__(self, trial: Any, column: str) -> None:
        self.trial = trial
        self.column = column
        self.pruned_at: int | None = None
        self.value = math.nan

    def after_round(self, end: RoundEnd) -> bool:
        if end.round == 0 or end.row is None \
                or not math.isfinite(end.row.get(self.column, math.nan)):
            return False
        self.trial.report(end.row[self.column], end.round)
        if self.trial.should_prune():
            self.pruned_at, self.value = end.round, end.row[self.column]
            return True
        return False

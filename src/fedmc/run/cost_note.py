"""A run whose rough cost is large is announced before it trains (a
:class:`~fedmc.errors.RunWarning`): a rank the data cannot support is refused where the
factors are set up (:meth:`fedmc.core.factors.FactorConfig.check_rank`), a rank it can but that
takes long (rank 1,400 of the 1,500 items of the synthetic set) is said.

The cost is a lower bound of the arithmetic of the rounds: every round, each rating of the
clients taking part enters an ``r x r`` product (a Gram matrix, a normal-equation update or
a factor-copy step), ``rounds * share * ratings * r^2`` operations, ``share`` the clients per
round over the clients. At one operation a nanosecond (a small machine's sustained rate on
these kernels) a run above a minute is announced. FedMC-ADMM on the embedded synthetic data
(160,000 training ratings, 10 of 100 clients a round) trains rank 300 at 7.8 s a round on
a shared 2-core machine, where the bound says 1.4 s: the bound is a floor, not a forecast.
"""

from __future__ import annotations

import warnings
from typing import Any

from fedmc.errors import RunWarning
from fedmc.federation.settings import Schedule

RATE = 1e9
"""Operations a second the note's time assumes."""
LONG = 60.0
"""A run whose bound exceeds this many seconds is announced."""


def announce_cost(config: Any, schedule: Schedule, ratings: int, clients: int) -> None:
    """Warn (:class:`RunWarning`, one line) when the run's bound of the module's rule, for
    ``ratings`` training ratings over ``clients`` clients, exceeds :data:`LONG` seconds."""
    rank = getattr(config, "rank", None)
    if rank is None or schedule.rounds == 0:
        return
    share = 1.0 if schedule.active is None else min(1.0, schedule.active / clients)
    operations = schedule.rounds * share * ratings * rank**2
    seconds = operations / RATE
    if seconds > LONG:
        warnings.warn(f"rank {rank} over {schedule.rounds} rounds is at least "
                      f"{operations:.1g} operations, {_duration(seconds)} or more at 1e9 a "
                      "second: a smaller --rank or fewer --rounds is faster; Ctrl-C stops the "
                      "run and keeps its history", RunWarning, stacklevel=3)


def _duration(seconds: float) -> str:
    """``seconds`` in words: ``4 minutes``, ``2.5 hours``."""
    if seconds < 5400:
        return f"{seconds / 60:.0f} minutes"
    return f"{seconds / 3600:.1f} hours"

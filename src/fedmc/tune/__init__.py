"""``fedmc tune``: a search over an algorithm's settings on the clients' validation cut
(:mod:`fedmc.tune.space`: what is searched, :mod:`fedmc.tune.search`: the study,
:mod:`fedmc.tune.report`: its table and plots, :mod:`fedmc.tune.private`: the private search
of ``--dp-epsilon``). From Python: :func:`tune` (:mod:`fedmc.tune.api`), imported lazily so
that ``import fedmc.tune`` is cheap.

>>> from fedmc.tune import tune
>>> found = tune({"lam": "1:100:log"}, algorithm="fedals", dataset="synthetic",
...              clients=4, rounds=4, trials=3)  # doctest: +SKIP
>>> found.settings, found.result.summary["test_rmse"]  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

PRUNERS = ("median", "halving", "none")
"""What stops a trial early: the median of the others' curves, successive halving, nothing."""
PRUNER = "median"
"""The pruner of a search that names none."""
TRIALS = 20
"""Trials a search finishes when it is not told how many."""
STUDY_NAME = "fedmc"
"""The study's name in its database when none is given."""
TUNE_EVALUATIONS = 20
"""Evaluations of a trial's validation curve by default (what its pruning and its best round
read): each ranks or scores every validation rating, which at rank 128 on ML-1M costs more
than the round it follows."""


def __getattr__(name: str) -> Any:
    if name in ("tune", "Tuned"):
        from fedmc.tune import api

        return getattr(api, name)
    raise AttributeError(f"module 'fedmc.tune' has no attribute {name!r}")

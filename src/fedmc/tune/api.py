"""A search from Python: :func:`tune`, what ``fedmc tune`` does without its output folder."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fedmc.errors import ConfigError
from fedmc.run.options import RunOptions
from fedmc.run.runner import RunResult, execute
from fedmc.run.settings import TUNE_VALIDATION, resolve
from fedmc.run.spec import RunSpec
from fedmc.tune import PRUNERS, TRIALS, TUNE_EVALUATIONS
from fedmc.tune import search as steps
from fedmc.tune.search import Search
from fedmc.tune.space import fold_in_space, search_space


@dataclass
class Tuned:
    """What a search found.

    Attributes
    ----------
    study
        Optuna's study: every trial (``study.trials_dataframe()`` is ``trials.csv``).
    settings
        The best trial's settings.
    run
        The final run: those settings on every training rating for the best trial's best
        round's number of rounds.
    result
        Its result: ``result.trained`` what training left (:class:`fedmc.run.train.Trained`),
        ``result.summary`` its test metrics, ``result.artifact`` its model
        (:class:`fedmc.model.FactorModel`).
    """

    study: Any
    settings: dict[str, Any]
    run: RunSpec
    result: RunResult


def tune(space: Mapping[str, str] | None = None, *, trials: int = TRIALS,
         storage: str | None = None, study_name: str = Search.study_name,
         pruner: str = Search.pruner, timeout: float | None = None, **options: Any) -> Tuned:
    """Search an algorithm's settings on the clients' validation cut, then train the best ones
    on every training rating, as ``fedmc tune`` does (``docs/tuning.md``).

    Parameters
    ----------
    space
        Ranges and choices searched, by setting, as ``--space`` writes them
        (``{"rank": "8:128:log:int", "consensus": "all,rated", "beta": "off"}``), over the
        algorithm's declared space; None: the declared space alone.
    trials
        Trials to finish (completed or pruned), over every process on the study.
    storage
        The study's database URL (several processes given one work on one search, and a
        search stopped part way continues where it stopped); None: in memory.
    study_name
        The study's name in ``storage``.
    pruner
        ``median``, ``halving`` or ``none``.
    timeout
        Seconds after which no new trial starts (None: no limit).
    **options
        The run's options, any field of :class:`fedmc.run.options.RunOptions`
        (``algorithm="fedals"``, ``dataset="ml-100k"``, ``implicit=True``, ``rounds=50``,
        ``params={"rank": 16}`` to fix a setting, ``validation_fraction``: default 0.2).

    Raises
    ------
    ConfigError
        Options or a space the search refuses (checked before any trial), or no trial
        completed.
    """
    if trials < 1:
        raise ConfigError(f"trials must be >= 1, got {trials}")
    if pruner not in PRUNERS:
        raise ConfigError(f"pruner takes {'|'.join(PRUNERS)}, got {pruner!r}")
    run_options = RunOptions(**{"validation_fraction": TUNE_VALIDATION, **options})
    if not run_options.validation_fraction:
        raise ConfigError("`validation_fraction`: a search scores its trials on a validation cut")
    base = resolve(run_options)
    search = Search(run_options.model_copy(update={"algorithm": base.algorithm}),
                    search_space(base.algorithm, base.data.implicit, space or {},
                                 run_options.params),
                    trials, storage, study_name, pruner,
                    seed=run_options.seed if storage is None else None, timeout=timeout,
                    trial_eval_every=None if "eval_every" in options else max(
                        1, base.schedule.rounds // TUNE_EVALUATIONS),
                    exclusive=storage is None, given=tuple(space or {}),
                    fold_in=fold_in_space(base.algorithm, space or {}, run_options.params))
    steps.check_space(search, None)
    study = steps.open_study(search)
    loaded = steps.trial_data(search)
    search = steps.fit_to_data(search, None if loaded is None else loaded[0])[0]
    study = steps.run_study(search, study, loaded)
    if not any(t.state.name == "COMPLETE" for t in study.trials):
        raise ConfigError("no trial completed")
    final = steps.final_run(search, study)
    best = study.best_trial
    return Tuned(study, {**best.params, **best.user_attrs.get("fold_in", {})}, final,
                 execute(final))

"""The study of ``fedmc tune``: Optuna's, each trial one run on the clients' validation cut.

Why Optuna: it searches in-process with a database (``--storage``) that several processes, on
one machine or many, work on together; its pruners stop a trial from the reports of its
running curve (here: the validation column of every evaluated round, so a federated run that
falls behind is stopped early); and its samplers (TPE by default) take any mix of log-scale,
integer and real ranges. Ray Tune would bring a cluster scheduler that one federated run at a
time on one machine does not need.

The first trial of a new study is the run's own settings (:func:`default_values`), so a
search never ends below the untuned run on the validation cut. Each trial resolves the run's
options with its settings (:func:`fedmc.run.settings.resolve`),
trains once on the training ratings without the validation cut
(:func:`fedmc.run.runner.execute`, without a refit) and finds the best evaluated round of its
validation column (the column early stopping watches: validation RMSE for ratings, validation
NDCG@K for interactions), whose model it publishes. It is scored on that model as it will be
used (:mod:`fedmc.tune.published`): every user folded in from the published item side and
its own fitting ratings, at the best of the algorithm's fold-in settings (``fold_lam``), as
``fedmc evaluate`` scores a test split; where there is no fold-in (Boolean models, a column
without a fold-in version), on the clients' own rows. The final run (:func:`final_run`) is
the best trial's settings, fold-in ones included, trained on every training rating for its
best round's number of rounds: the refit of an early-stopped run
(:meth:`fedmc.run.spec.RunSpec.refit`). Nothing reads the test ratings to choose.

A study resumes (Optuna's ``create_study(load_if_exists=True)``, :func:`open_study`): a search
stopped by a signal closes its running trial as interrupted and queues its settings again
(:func:`close_interrupted`), and the same search opened again runs until its trials have
finished, the finished ones kept.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from fedmc.algorithms.registry import spec
from fedmc.algorithms.spec import Choice, Range, Searched
from fedmc.core.compile_time import compile_seconds
from fedmc.data import FederatedData
from fedmc.errors import ConfigError
from fedmc.federation.settings import EarlyStopping
from fedmc.federation.validation import stopping_column
from fedmc.run.data import federated_data
from fedmc.run.options import RunOptions
from fedmc.run.runner import execute
from fedmc.run.settings import resolve
from fedmc.run.spec import RunSpec
from fedmc.tune import PRUNER, STUDY_NAME
from fedmc.tune.pruning import Pruning
from fedmc.tune.published import cut_held_out, published_score, scores_published
from fedmc.tune.space import suggest


@dataclass(frozen=True)
class Search:
    """What a search is: the run's options (with a validation cut), the ranges searched, how
    many trials, where the study lives, how trials are pruned and sampled.

    Parameters
    ----------
    options
        The run's options; every trial is them with its settings among ``params``.
    space
        The ranges searched, by setting.
    trials
        Trials to finish (completed or pruned), counted over every process on the study.
    storage
        The study's database URL (``sqlite:///...`` by default, in the output folder; None:
        in memory, :func:`fedmc.tune.api.tune`'s default).
    study_name
        The study's name in that database.
    pruner
        ``median`` (a trial whose curve is below the median of the others' at the same round
        is stopped, after 3 trials and the algorithm's ``search_warmup`` share of the rounds,
        a quarter unless its spec says otherwise), ``halving`` (successive halving from that
        round) or ``none``.
    seed
        The sampler's seed (None: fresh entropy, for processes that share a study).
    timeout
        Seconds after which this process starts no new trial (None: no limit).
    trial_eval_every
        A trial evaluates every this many rounds (None: as ``options`` say); the final run
        evaluates as ``options`` say.
    exclusive
        Whether the study is this search's alone (its output folder's database, held by the
        folder's lock): a trial found running in it was left by a process that died.
    given
        The settings whose ranges the user gave (never clipped to the data).
    fold_in
        The fold-in settings each trial's published model is scored at, the best kept
        (:mod:`fedmc.tune.published`; none: the algorithm's fold-in as it is).
    """

    options: RunOptions
    space: dict[str, Searched]
    trials: int
    storage: str | None
    study_name: str = STUDY_NAME
    pruner: str = PRUNER
    seed: int | None = 0
    timeout: float | None = None
    trial_eval_every: int | None = None
    exclusive: bool = True
    given: tuple[str, ...] = ()
    fold_in: dict[str, Choice] = field(default_factory=dict)

    def trial_spec(self, values: dict[str, Any]) -> RunSpec:
        """The run of one trial: the options with the trial's ``values`` among the params,
        evaluated every ``trial_eval_every`` rounds, trained once (an early stop is scored,
        not refitted). Where the search scores the published model (:attr:`scores_published`)
        the trial publishes its best evaluated round's model, as early stopping does (the
        run's own, or one whose patience outlasts the rounds): the model of the round the
        final run trains for."""
        cadence = {} if self.trial_eval_every is None else {"eval_every": self.trial_eval_every}
        run = resolve(self.options.model_copy(
            update={"params": {**self.options.params, **values}, **cadence})).without_refit()
        schedule = run.schedule
        if not self.scores_published or schedule.early_stopping is not None:
            return run
        keep = EarlyStopping(patience=max(schedule.rounds, 1), refit=False)
        return run.model_copy(update={"schedule": schedule.model_copy(
            update={"early_stopping": keep})})

    @cached_property
    def scores_published(self) -> bool:
        """Whether a trial is scored on its published model, users folded in
        (:func:`fedmc.tune.published.scores_published`), rather than on the clients' own
        user rows."""
        return scores_published(self.base.algorithm, self.column()[0])

    @cached_property
    def base(self) -> RunSpec:
        """The run's options resolved, once: what the run without a search would be."""
        return resolve(self.options)

    def planned_trials(self) -> int:
        """Trials to finish: ``trials``, or a grid's size where that is smaller
        (:func:`grid_of`)."""
        grid = grid_of(self)
        return self.trials if grid is None else min(self.trials, len(grid))

    def column(self) -> tuple[str, bool]:
        """The validation column scored and whether larger is better."""
        schedule = self.base.schedule
        return stopping_column(schedule.early_stopping or EarlyStopping(), schedule.eval_k)


def open_study(search: Search) -> Any:
    """The search's study, created in its database when it is not there yet (with the trials
    a new study starts from: :func:`grid_of` or :func:`default_values`), else taken up where
    it stopped; opened before any data are read, so a storage that cannot be opened costs no
    loading. In a study of its own (``exclusive``) a trial still marked running was left by a
    process that died: it is closed as interrupted (:func:`close_interrupted`).

    Raises
    ------
    ConfigError
        A storage that is no database URL, whose driver is not installed or that cannot be
        opened, or a study in it whose direction is not this search's.
    """
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    _, larger = search.column()
    warmup = max(1, int(search.base.schedule.rounds * spec(search.base.algorithm).search_warmup))
    pruner = {"median": lambda: optuna.pruners.MedianPruner(n_startup_trials=3,
                                                            n_warmup_steps=warmup),
              "halving": lambda: optuna.pruners.SuccessiveHalvingPruner(min_resource=warmup),
              "none": optuna.pruners.NopPruner}[search.pruner]()
    sampler = optuna.samplers.TPESampler(
        seed=search.seed, n_startup_trials=min(10, max(3, search.trials // 3)))
    study = _open_study(search, "maximize" if larger else "minimize", sampler, pruner)
    if search.exclusive:
        close_interrupted(study, [t.number for t in study.get_trials(deepcopy=False)])
    if not study.trials:  # a new study starts from the run's own settings (or its grid)
        for values in grid_of(search) or [default_values(search)]:
            study.enqueue_trial(values)
    return study


def trial_data(search: Search) -> tuple[FederatedData, dict[str, Any]] | None:
    """The data every trial reads (only the algorithm's settings differ between trials),
    loaded once, the searched values checked on them (:func:`check_space`); None for Boolean
    data, which each trial loads.

    Raises
    ------
    ConfigError
        Data that cannot be loaded, or a searched value the algorithm refuses.
    """
    first = search.base
    loaded = None if spec(first.algorithm).data_kind == "boolean" else federated_data(first.data)
    data = None if loaded is None else loaded[0]
    check_space(fit_to_data(search, data)[0], data)
    return loaded


def fit_to_data(search: Search, data: FederatedData | None) -> tuple[Search, list[str]]:
    """``search`` with each declared range clipped to what ``data`` allow (the ``Config``'s
    ``data_bounds``: the rank, at most min(users, items)), and a line for each range
    clipped. A range the user gave (``given``) is left as typed: :func:`check_space` refuses
    it where the data cannot take it.

    Raises
    ------
    ConfigError
        A declared range that lies wholly above what the data allow.
    """
    cfg = search.base.config()
    if data is None or not hasattr(cfg, "data_bounds"):
        return search, []
    space, notes = dict(search.space), []
    for name, top in cfg.data_bounds(data.n_users, data.n_items).items():
        declared = space.get(name)
        if not isinstance(declared, Range) or name in search.given or declared.high <= top:
            continue
        if declared.low > top:
            raise ConfigError(f"the data allow {name} <= {top}, below its searched range "
                              f"{declared.low:g} to {declared.high:g}: give one with "
                              f"--space {name}=LO:HI")
        space[name] = dataclasses.replace(declared, high=float(top))
        notes.append(f"{name} searched from {declared.low:g} to {top} (what the data allow), "
                     f"not to {declared.high:g}")
    return dataclasses.replace(search, space=space), notes


def run_study(search: Search, study: Any,
              loaded: tuple[FederatedData, dict[str, Any]] | None,
              on_trial: Callable[[Any, Any], None] | None = None,
              mine: list[int] | None = None) -> Any:
    """Run the search's trials in ``study`` (:func:`open_study`) on ``loaded``
    (:func:`trial_data`) until :meth:`Search.planned_trials` have finished over every process
    on it (a process starts no trial once the trials finished or running in every process are
    enough; a trial drawn past a grid's last point is not run: :data:`SURPLUS`); the study
    (every trial so far, this process's and others').

    Trials run on the generic kernels at a rank whose specialized ones are not compiled
    (``kernels="auto"``, :mod:`fedmc.run.precompile`): compiled once for every rank, not once
    per rank tried, before the first trial (:func:`warm_up`). A trial's ``seconds`` leave out
    the time it spent compiling (its ``compile_seconds``,
    :func:`fedmc.core.compile_time.compile_seconds`), so a trial that compiles looks no slower
    than the others. Whatever stops the search from outside its
    trials (a signal) first closes this process's running trial as interrupted
    (:func:`close_interrupted`). ``mine`` receives the number of each trial as it starts:
    a thread that hears the signal while the search runs in another closes them itself.
    """
    import optuna

    compile_seconds()  # counting from here
    column, larger = search.column()
    grid = grid_of(search) is not None
    mine = [] if mine is None else mine
    held = (cut_held_out(loaded[0], search.base.data.implicit)
            if search.scores_published and loaded is not None else None)

    def objective(trial: Any) -> float:
        mine.append(trial.number)
        queued = study._storage.get_trial(trial._trial_id).system_attrs.get("fixed_params")
        if grid and not queued:  # drawn, not a queued point
            trial.study.stop()  # the grid's points were all taken by other processes
            trial.set_user_attr(SURPLUS, True)
            raise _Surplus
        values = {name: suggest(trial, name, r) for name, r in search.space.items()}
        run = search.trial_spec(values)
        started, compiling = time.perf_counter(), compile_seconds()

        def timed() -> None:  # the trial's training seconds, its compiling apart
            compiled = compile_seconds() - compiling
            trial.set_user_attr("seconds", time.perf_counter() - started - compiled)
            trial.set_user_attr("compile_seconds", compiled)

        pruning = Pruning(trial, column)
        try:
            result = execute(run, callback=pruning, loaded=loaded, kernels="auto")
        except ConfigError as exc:  # settings the run refuses: the trial fails, with why
            trial.set_user_attr("error", str(exc))
            raise
        timed()
        if pruning.pruned_at is not None:  # the run stopped where the pruner said
            raise optuna.TrialPruned(f"round {pruning.pruned_at}: {column} "
                                     f"{pruning.value:.4f}")
        best_round, value = best_of(result.history.rows, column, larger,
                                    result.summary.get("early_stopping"))
        trial.set_user_attr("best_round", best_round)
        if held is not None and result.artifact is not None:  # the model as it is used
            trial.set_user_attr("clients_value", value)
            value, chosen = published_score(result.artifact, held, column, larger,
                                            search.fold_in)
            trial.set_user_attr("fold_in", chosen)
        return value

    finished = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    wanted = search.planned_trials()
    # after each trial: stop once the trials finished or running in any process are enough
    # (a process does not start a trial past a grid's last point while another runs it)
    callbacks: list[Callable[[Any, Any], None]] = [optuna.study.MaxTrialsCallback(
        wanted, states=(*finished, optuna.trial.TrialState.RUNNING))]
    if on_trial is not None:
        callbacks.append(on_trial)
    try:
        if sum(t.state in finished for t in study.trials) < wanted:
            warm_up(search, loaded)
            study.optimize(objective, n_trials=wanted, timeout=search.timeout,
                           callbacks=callbacks, catch=(ConfigError, _Surplus))
    except BaseException:
        close_interrupted(study, mine)
        raise
    return study


SURPLUS = "surplus"
"""The user attribute of a trial a process began past a grid's last point (two processes took
the last points at once): failed before it ran, left out of ``trials.csv``."""


class _Surplus(Exception):
    """A trial drawn where a grid's points are all taken: not run."""


def warm_up(search: Search, loaded: tuple[FederatedData, dict[str, Any]] | None) -> None:
    """Compile the kernels the trials run before the first one: the run's own settings
    (:func:`default_values`) for one round on ``loaded``, evaluated, the result thrown away.
    A trial that runs other kernels (another consensus mode of FedMC-ADMM, a rank whose
    specialized kernels are compiled) compiles them itself, which its ``compile_seconds``
    say; settings the run refuses are left to the trials."""
    run = search.trial_spec(default_values(search))
    try:
        execute(run.model_copy(update={"schedule": run.schedule.model_copy(
            update={"rounds": 1, "eval_every": 1})}), loaded=loaded, kernels="auto")
    except ConfigError:
        return


def close_interrupted(study: Any, numbers: list[int]) -> None:
    """Close the trials ``numbers`` of ``study`` that are still running: failed, with the user
    attribute ``interrupted``, their settings queued again so that the search, continued,
    tries them first."""
    import optuna

    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        if t.number in numbers:
            study._storage.set_trial_user_attr(t._trial_id, "interrupted", True)
            study.tell(t.number, state=optuna.trial.TrialState.FAIL)
            # a queued trial's settings whole (a signal may come between two suggestions)
            study.enqueue_trial({**t.params, **t.system_attrs.get("fixed_params", {})})


def check_space(search: Search, data: FederatedData | None) -> None:
    """Refuse a searched value the algorithm refuses on its own: each end of a range and each
    value of a choice, with the other settings as the run takes them, against the bounds of
    the algorithm's ``Config`` on that setting and, with ``data``, the rank the data allow.
    A value refused only together with another setting (a rule between two) is left to the
    trials, which skip such settings.

    Raises
    ------
    ConfigError
        A value refused, named by its ``--space`` setting.
    """
    from pydantic import ValidationError

    for name, searched in search.space.items():
        ends = (searched.values if isinstance(searched, Choice) else
                (int(searched.low), int(searched.high)) if searched.integer else
                (searched.low, searched.high))
        for value in ends:
            try:
                cfg = search.trial_spec({name: value}).config()
                if data is not None and hasattr(cfg, "check_rank"):
                    cfg.check_rank(data.n_users, data.n_items)
            except ValidationError as exc:
                mine = [e for e in exc.errors() if tuple(e["loc"][:1]) == (name,)]
                if mine:
                    raise ConfigError(f"--space {name}: {value} is refused "
                                      f"({mine[0]['msg']})") from None
            except ConfigError as exc:
                raise ConfigError(f"--space {name}: {value} is refused ({exc})") from None


def grid_of(search: Search) -> list[dict[str, Any]] | None:
    """When every searched setting is a choice, every combination once: the run's own settings
    first (:func:`default_values`), the others in an order drawn from the search's seed;
    else None (the sampler draws)."""
    choices = {n: r.values for n, r in search.space.items() if isinstance(r, Choice)}
    if len(choices) < len(search.space):
        return None
    combos = [dict(zip(choices, values, strict=True))
              for values in itertools.product(*choices.values())]
    own = default_values(search)
    first = [c for c in combos if all(c[n] == v for n, v in own.items())][:1]
    rest = [c for c in combos if c not in first]
    random.Random(search.seed).shuffle(rest)
    return first + rest


def default_values(search: Search) -> dict[str, Any]:
    """The searched settings as the run without a search would take them (the algorithm's
    defaults for this protocol, or a variant's), each brought into its range (a value no
    choice offers is left to the sampler): the first trial of a new study, so a search never
    ends below the untuned run on the validation cut."""
    cfg = search.base.config()
    values: dict[str, Any] = {}
    for name, searched in search.space.items():
        value = getattr(cfg, name)
        if value is None:
            continue
        if isinstance(searched, Choice):
            offered = [v for v in searched.values if _same(v, value)]
            if offered:
                values[name] = offered[0]
        else:
            value = min(max(value, searched.low), searched.high)
            values[name] = int(round(value)) if searched.integer else float(value)
    return values


def _same(offered: Any, value: Any) -> bool:
    """Whether a choice's value (as typed: ``"50"``) is a setting's value (``50.0``)."""
    try:
        return float(offered) == float(value)
    except (TypeError, ValueError):
        return str(offered) == str(value)


def _open_study(search: Search, direction: Literal["minimize", "maximize"], sampler: Any,
                pruner: Any) -> Any:
    """The search's study, created if it is not in its database yet. Processes started
    together on a new database race to create its tables: the loser tries again."""
    import optuna
    from sqlalchemy.exc import ArgumentError, DBAPIError

    where = f"--storage {search.storage}"
    for attempt in range(10):
        try:
            return optuna.create_study(
                study_name=search.study_name, storage=search.storage, load_if_exists=True,
                direction=direction, sampler=sampler, pruner=pruner)
        except ArgumentError:
            raise ConfigError(f"{where}: not a database URL (sqlite:///PATH, "
                              "postgresql://USER@HOST/DB, ...)") from None
        except ImportError:
            raise ConfigError(f"{where}: the Python driver of that database is not "
                              "installed") from None
        except DBAPIError as exc:
            # the table, or its version row, made meanwhile by the other process
            if attempt == 9 or not _a_race(exc):
                reason = " ".join(str(exc.orig).split())
                raise ConfigError(f"{where}: cannot open the database ({reason})") from None
            time.sleep(0.2 * (attempt + 1))
        except ValueError as exc:  # another search's study under that name
            raise ConfigError(f"{where}: {exc}") from None
    raise AssertionError("unreachable")


def _a_race(exc: Exception) -> bool:
    """Whether a database error is that of two processes creating one study's tables at
    once (worth trying again) rather than a database that cannot be opened."""
    from sqlalchemy.exc import IntegrityError

    text = str(exc).lower()
    return isinstance(exc, IntegrityError) or "already exists" in text or "locked" in text


def best_of(rows: list[dict[str, float]], column: str, larger: bool,
            stopped: dict[str, Any] | None = None) -> tuple[int, float]:
    """A trial's best evaluated round and its value of ``column``: early stopping's, when the
    run stopped early, else the best of its history after round 0 (the initial model is never
    chosen, as early stopping's is not; round 0 alone where the protocol is one exchange)."""
    if stopped is not None and stopped["round"] is not None:
        return int(stopped["round"]), float(stopped["value"])
    trained = [r for r in rows if int(r["round"]) > 0] or rows
    scored = [(r[column], int(r["round"])) for r in trained
              if column in r and math.isfinite(r[column])]
    if not scored:
        raise ConfigError(f"the runs give no finite {column}")
    value, k = (max if larger else min)(scored, key=lambda s: s[0])
    return k, float(value)


def final_run(search: Search, study: Any) -> RunSpec:
    """The best trial's settings (its fold-in values among them) on every training rating,
    for its best round's number of rounds."""
    best = study.best_trial
    options = search.options.model_copy(update={"params": {
        **search.options.params, **best.params, **best.user_attrs.get("fold_in", {})}})
    return resolve(options).refit(int(best.user_attrs["best_round"]))

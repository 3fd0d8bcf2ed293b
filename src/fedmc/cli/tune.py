"""``fedmc tune``: search an algorithm's settings on the clients' validation cut, then train
the best settings on every training rating (:mod:`fedmc.tune`).

``--out DIR`` (checked and locked as a run's folder, :mod:`fedmc.run.folder`) receives the
study (``study.db``, unless ``--storage`` names a shared database), ``trials.csv``,
``best.json``, ``search.png``, ``settings.png`` and the final run as an ordinary run folder,
``DIR/best/`` (``fedmc evaluate DIR/best`` works). An interrupted search's ``DIR`` is
continued by the same command (the folder records it: :func:`_search_command`). With
``--dp-epsilon`` the search is private (:mod:`fedmc.tune.private`) and ``DIR`` receives
``best.json`` and ``DIR/best/`` alone.
"""

from __future__ import annotations

import inspect
import shlex
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from typing import Annotated, Any

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from fedmc.cli.display import err, summary_table
from fedmc.cli.options import OPTIONS, command_words, parse_params, run_options, with_options
from fedmc.errors import ConfigError
from fedmc.tune import PRUNER, PRUNERS, STUDY_NAME, TRIALS, TUNE_EVALUATIONS

TUNE_FILES = ("study.db", "trials.csv", "best.json", "search.png", "settings.png",
              "status.json")
TUNE_ONLY = ("trials", "space", "storage", "study_name", "pruner", "timeout", "jobs", "out_dir",
             "overwrite", "quiet")
"""Options of ``fedmc tune`` that are no run options (left out of ``best.json``'s
command)."""
FINAL_SETS = ("rounds", "validation_fraction", "early_stopping", "patience", "min_delta",
              "refit")
"""Run options the final run sets itself: its rounds, no validation cut, no early stopping."""


SEARCH = "Search"


def _extra(name: str, annotation: Any, default: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation,
                             default=default)


def _search(help: str) -> Any:
    return typer.Option(help=help, rich_help_panel=SEARCH)


_EXTRAS = (
    _extra("trials", Annotated[int | None, _search(
        f"Trials to finish (completed or pruned), over every process on the study (default "
        f"{TRIALS}); with --dp-epsilon, the mean of the random number of trials of the "
        f"training settings named with --space.")], None),
    _extra("space", Annotated[list[str] | None, _search(
        "A range searched, NAME=LO:HI[:log][:int], a choice, NAME=A,B[,...], or NAME=off "
        "(repeatable; default the algorithm's declared space, with --dp-epsilon none: its "
        "fold-in settings alone; -P NAME=LO:HI is the same).")],
        None),
    _extra("storage", Annotated[str | None, _search(
        "The study's database URL (default sqlite:///OUT/study.db); several processes given "
        "one URL work on one search.")], None),
    _extra("study_name", Annotated[str | None, _search(
        f"The study's name in its database (default {STUDY_NAME}; a search among algorithms "
        f"adds -ALGORITHM for each).")], None),
    _extra("pruner", Annotated[str | None, _search(
        "median (default: stop a trial whose validation curve falls below the median of the "
        "others') | halving (successive halving) | none.")], None),
    _extra("timeout", Annotated[float | None, _search(
        "Seconds after which no new trial starts.")], None),
    _extra("jobs", Annotated[int | None, _search(
        "Trials at once, in this many processes on this machine, over one study (default: "
        "this process alone; "
        "each loads the data; pays where one trial leaves cores idle).")], None),
)
_HELPS = {"algorithm": "Algorithm, or several, A,B: each searched in turn and the best on the "
                       "cut kept; auto: every one that can take the data (with its search "
                       "space and a fold-in); default: the data's.",
          "eval_every": "Evaluate every this many rounds (default: a search's trials "
                        f"every rounds/{TUNE_EVALUATIONS}, at least 1; a private search "
                        "scores each trial once).",
          "out_dir": "Output folder (default runs/<time>-tune-<algorithm>-<data>).",
          "overwrite": "Replace an earlier search in --out.",
          "quiet": "No progress bar."}


def register(app: typer.Typer) -> None:
    """Add ``fedmc tune`` to ``app``."""
    app.command("tune")(tune)


@with_options(*OPTIONS, extra=_EXTRAS, defaults={"eval_every": None}, helps=_HELPS)
def tune(**typed: Any) -> None:
    """Search an algorithm's settings on the clients' validation cut (Optuna, with pruning),
    then train the best ones on every training rating: DIR/best is an ordinary run folder.
    With --dp-epsilon E the whole search is private within E: one private run (or, for the
    training settings named with --space, a random search of a random number of private
    trials, the best one published), then the fold-in's settings chosen by the exponential
    mechanism (docs/privacy.md)."""
    trials = TRIALS if typed["trials"] is None else typed["trials"]
    if trials < 1:
        raise ConfigError(f"--trials must be >= 1, got {trials}")
    pruner = typed["pruner"] or PRUNER
    if pruner not in PRUNERS:
        raise ConfigError(f"--pruner takes {'|'.join(PRUNERS)}, got {pruner!r}")
    _check_search_inputs(typed)  # these refusals before the search's machinery is imported
    options = run_options(typed)
    from fedmc.cli.evaluate import COUNTS, evaluated
    from fedmc.cli.interrupts import in_worker, interrupt_marks
    from fedmc.cli.tune_jobs import finish_jobs, start_jobs, stop_jobs
    from fedmc.files import write_atomic
    from fedmc.run.folder import RunFolder
    from fedmc.run.runner import execute, write_outputs
    from fedmc.run.settings import TUNE_VALIDATION
    from fedmc.tune.report import plot_search, trial_rows, trials_text, write_best
    from fedmc.tune.search import (
        check_space,
        close_interrupted,
        final_run,
        fit_to_data,
        open_study,
        run_study,
        trial_data,
    )
    from fedmc.tune.space import OFF, candidates, is_searched

    ranges = {k: v for k, v in options.params.items() if is_searched(v)}
    ranges.update(parse_params(typed["space"] or []))
    # a value typed with -P stays fixed when --space NAME=off takes NAME out of the search
    fixed = {k: v for k, v in options.params.items()
             if k not in ranges or (not is_searched(v) and ranges[k].strip() == OFF)}
    if options.validation_fraction is None:
        options = options.model_copy(update={"validation_fraction": TUNE_VALIDATION})
    options = options.model_copy(update={"params": fixed})
    among = candidates(options.algorithm, options.implicit)
    if options.private:
        if among:
            raise ConfigError(f"--algorithm {options.algorithm}: a private search fits one "
                              "algorithm (each candidate would cost a search of the budget)")
        _private_tune(typed, options, ranges, fixed, trials)
        return
    if not options.validation_fraction:  # a private search says why in its own words
        raise ConfigError(f"--validation-fraction {options.validation_fraction:g}: a search "
                          f"scores its trials on a validation cut; give a share above 0 "
                          f"(default {TUNE_VALIDATION:g})")
    searches = _searches(typed, options, among, ranges, fixed, trials, pruner)
    first = searches[0]
    column, larger = first.column()
    name = "+".join(among) if among else first.base.algorithm
    folder = RunFolder(typed["out_dir"], f"tune-{name}-{first.base.data.source}",
                       typed["overwrite"], TUNE_FILES, command=_search_command(typed))
    target = folder.claim()
    storage = typed["storage"] or f"sqlite:///{(target / 'study.db').resolve()}"
    searches = [replace(s, storage=storage) for s in searches]
    opened: dict[str, Any] = {}  # each algorithm's study, once open: trials.csv on an interrupt
    mine: list[int] = []  # this process's trials, closed here when a signal stops the worker
    jobs: list[Any] = []  # the other processes running trials (--jobs)

    def rows_of(studies: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"algorithm": a, **row} if among else row for a, study in studies.items()
                for row in trial_rows(study)]

    def trials_so_far() -> str | None:
        stop_jobs(jobs)  # each closes its own running trial
        if not opened:
            return None
        for study in opened.values():
            close_interrupted(study, [t.number for t in study.get_trials(deepcopy=False)]
                              if first.exclusive else mine)  # a study of its own: all left
        return trials_text(rows_of(opened))

    def prepared(search: Any) -> tuple[Any, Any, Any, list[str]]:
        check_space(search, None)
        opened[search.base.algorithm] = open_study(search)
        loaded = trial_data(search)
        return (opened[search.base.algorithm], loaded,
                *fit_to_data(search, None if loaded is None else loaded[0]))

    # the work in a worker thread: this one hears the signals meanwhile (fedmc.cli.interrupts)
    with interrupt_marks(folder, {"trials.csv": trials_so_far}):
        done: list[tuple[Any, Any]] = []  # (search, study) of each algorithm
        for planned in searches:
            mine.clear()
            study, loaded, search, clipped = in_worker(partial(prepared, planned))
            if among and not typed["quiet"]:
                err.print(f"searching {search.base.algorithm}", soft_wrap=True)
            for line in [] if typed["quiet"] else clipped:
                err.print(f"note: {line}", soft_wrap=True)
            if folder.resumed and not typed["quiet"]:
                finished = sum(t.state.is_finished() and not t.user_attrs.get("interrupted")
                               for t in study.trials)
                err.print(f"continuing the interrupted search in {target}: {finished} trials "
                          "finished", soft_wrap=True)
            jobs.extend(start_jobs(search, (typed["jobs"] or 1) - 1))
            try:
                with _trial_bar(typed["quiet"], search.planned_trials(), column) as shown:
                    in_worker(partial(run_study, search, study, loaded, shown, mine))
            except Exception:  # this process failed: the others stop with it (a signal: above)
                stop_jobs(jobs)
                raise
            for line in in_worker(lambda: finish_jobs(jobs)):
                err.print(f"warning: {line}", soft_wrap=True)
            jobs.clear()
            done.append((search, study))
        write_atomic(target / "trials.csv", trials_text(rows_of(opened)))
        finished_any = [(s, st) for s, st in done if _best_value(st) is not None]
        if not finished_any:
            raise ConfigError(f"no trial completed{_first_error(done[0][1])}")
        search, study = (max if larger else min)(finished_any,
                                                 key=lambda d: d[1].best_value)
        plot_search(target, trial_rows(study), column, larger, search.space)
        final = final_run(search, study)
        if (target / "best").exists():
            shutil.rmtree(target / "best")
        result = in_worker(lambda: execute(final))
        write_outputs(target / "best", result)
        # the published model scored as it is used, every test user folded in
        published = (in_worker(lambda: evaluated(target / "best"))
                     if search.scores_published and result.artifact is not None else None)
        compared = ({s.base.algorithm: _best_value(st) for s, st in done} if among
                    else None)
        write_best(target / "best.json", search, study, final, result.config,
                   _run_words(typed), column, published, compared)
    if not typed["quiet"]:
        best = study.best_trial
        trials_run = sum(len(trial_rows(st)) for _, st in done)
        summary_table(result.summary, f"best of {trials_run} trials: {final.algorithm} "
                      f"{_shown({**best.params, **best.user_attrs.get('fold_in', {})})}")
    if published is not None:  # the test figure of the model as it is used
        shown = ", ".join(f"{k} {published[k]:.4f}" for k in published["metrics"]
                          if k not in COUNTS)
        err.print(f"test, every user folded in from the published model as by fedmc evaluate: "
                  f"{shown} (the table: the clients' own user rows)", soft_wrap=True)
    err.print(f"wrote {target}/trials.csv, best.json, search.png, settings.png and the final "
              f"run in {target}/best", soft_wrap=True)


def _best_value(study: Any) -> float | None:
    """The best completed trial's score of ``study``, None where no trial completed."""
    return study.best_value if any(t.state.name == "COMPLETE" for t in study.trials) else None


def _searches(typed: dict[str, Any], options: Any, among: list[str], ranges: dict[str, str],
              fixed: dict[str, Any], trials: int, pruner: str) -> list[Any]:
    """The search of each algorithm (one, or each of ``among``: the candidates, each with the
    ranges and fixed settings it has, in a study of its own named after it), checked before
    anything starts (the study's storage is set once the folder is claimed).

    Raises
    ------
    ConfigError
        Options or a space a search refuses; a setting no candidate has; candidates that
        would be scored apart.
    """
    from fedmc.run.settings import resolve
    from fedmc.tune.search import Search
    from fedmc.tune.space import fold_in_space, search_space, settings_of, unclaimed

    for name in unclaimed(among, {**ranges, **fixed}) if among else []:
        raise ConfigError(f"{name}: no candidate of --algorithm {options.algorithm} "
                          f"({', '.join(among)}) has a setting {name}")
    searches = []
    each: list[str | None] = [*among] or [None]  # None: the algorithm named, or the default
    for algorithm in each:
        mine, kept = ((ranges, fixed) if algorithm is None
                      else (settings_of(algorithm, ranges), settings_of(algorithm, fixed)))
        wanted = options.model_copy(update={"params": kept, **(
            {"algorithm": algorithm} if algorithm is not None else {})})
        base = resolve(wanted)  # the options checked before anything starts
        study_name = typed["study_name"] or Search.study_name
        searches.append(Search(
            wanted.model_copy(update={"algorithm": base.algorithm}),
            search_space(base.algorithm, base.data.implicit, mine, kept), trials, None,
            study_name if algorithm is None else f"{study_name}-{algorithm}", pruner,
            seed=options.seed if typed["storage"] is None else None, timeout=typed["timeout"],
            trial_eval_every=None if typed["eval_every"] is not None else max(
                1, base.schedule.rounds // TUNE_EVALUATIONS),
            exclusive=typed["storage"] is None, given=tuple(mine),
            fold_in=fold_in_space(base.algorithm, mine, kept)))
    if among and not all(s.scores_published and s.column() == searches[0].column()
                         for s in searches):
        raise ConfigError(f"--algorithm {options.algorithm}: the candidates' trials would not "
                          "be scored alike")
    return searches



def _check_search_inputs(typed: dict[str, Any]) -> None:
    """Exit 2 (one line naming the flag) on a search option no search can run with, before
    anything is read or the search's machinery imported: ``--space`` items that are not
    ``NAME=...``, a search without rounds, a time limit that is no time, no process."""
    for item in typed["space"] or []:
        name, sep, _ = item.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"--space expects NAME=LO:HI[:log][:int], NAME=A,B[,...] or "
                              f"NAME=off, got {item!r}")
    if typed["rounds"] is not None and typed["rounds"] < 1:
        raise ConfigError(f"--rounds {typed['rounds']}: a search compares trained models; "
                          "give at least 1 round")
    if typed["timeout"] is not None and not typed["timeout"] > 0:
        raise ConfigError(f"--timeout must be > 0 seconds, got {typed['timeout']}")
    if typed["jobs"] is not None and typed["jobs"] < 1:
        raise ConfigError(f"--jobs must be >= 1, got {typed['jobs']}")
    if (typed["jobs"] or 1) > 1 and typed["backend"] == "ray" and not typed["ray_address"]:
        raise ConfigError(f"--jobs {typed['jobs']} with --backend ray would start a Ray in "
                          "each process: start one (ray start --head) and give --ray-address "
                          "auto")


def _search_command(typed: dict[str, Any]) -> str:
    """The search as a command: the ``fedmc tune`` options that decide its study (every run
    option but ``--out``, ``--overwrite`` and ``--quiet``; ``--space``, ``--storage``,
    ``--study-name`` and ``--pruner``), what a continued search must repeat. ``--trials`` and
    ``--timeout`` are left out: a continued search may ask for more trials or time."""
    words = command_words(typed, ("out_dir", "overwrite", "quiet"))
    for name in ("space", "storage", "study_name", "pruner"):
        values = typed[name] if isinstance(typed[name], list) else [typed[name]]
        words += [w for v in values if v is not None
                  for w in (f"--{name.replace('_', '-')}", str(v))]
    return shlex.join(["fedmc", "tune", *words])


def _first_error(study: Any) -> str:
    """``: trial N: why`` of the first trial a refused setting failed, else nothing."""
    for t in study.trials:
        if "error" in t.user_attrs:
            return f": trial {t.number}: {t.user_attrs['error']}"
    return ""


PRIVATE_REFUSED = {
    "storage": "a private search keeps no study (its trials are not released)",
    "study_name": "a private search keeps no study (its trials are not released)",
    "pruner": "a private search does not prune (a trial stopped on its validation curve "
              "would release that curve)",
    "timeout": "a private search runs its secret number of trials (one stopped by time stops "
               "at a time that depends on the data)",
    "jobs": "a private search runs its trials in one process",
}
"""Search options a private search refuses when given, and why."""


def _refuse_in_private(typed: dict[str, Any], options: Any) -> None:
    """Exit 2 (one line naming the flag) on an option given that a private search cannot
    honour."""
    for name, why in PRIVATE_REFUSED.items():
        if typed[name] is not None:
            raise ConfigError(f"--{name.replace('_', '-')}: {why}")
    if options.dp_noise is not None:
        raise ConfigError("--dp-noise: a private search calibrates every trial's noise to "
                          "--dp-epsilon, the whole search's budget")
    if options.early_stopping:
        raise ConfigError("--early-stopping: a private trial is scored once, on its last "
                          "round's model (every validation round would be a release)")
    if options.implicit:
        raise ConfigError("--implicit: a private search scores ratings (the validation "
                          "error); a private search on interactions is not available yet")


def _private_tune(typed: dict[str, Any], options: Any, ranges: dict[str, str],
                  fixed: dict[str, Any], trials: int) -> None:
    """``fedmc tune --dp-epsilon E`` (:mod:`fedmc.tune.private`; ``trials``: the mean number
    of trials): ``best.json`` and the chosen trial's run in ``DIR/best``; no study, trials
    table, plot or progress of the trials."""
    from fedmc.cli.interrupts import in_worker, interrupt_marks
    from fedmc.run.folder import RunFolder
    from fedmc.run.runner import write_outputs
    from fedmc.tune.private import PrivateSearch, run_private_search
    from fedmc.tune.report import write_private_best
    from fedmc.tune.space import private_space

    _refuse_in_private(typed, options)
    base = PrivateSearch(options, {}, trials).base()
    try:
        space, fold_in = private_space(base.algorithm, ranges, fixed)
    except ConfigError as refused:
        if "algorithm" not in base.defaulted or not base.notes:
            raise  # else the algorithm was chosen for the user: say why (the first note)
        raise ConfigError(f"{refused}; {base.notes[0]}") from None
    if not space and typed["trials"] is not None:
        raise ConfigError("--trials: a private search without training settings runs one "
                          "run; name the settings to search with --space NAME=LO:HI")
    search = PrivateSearch(options.model_copy(update={"algorithm": base.algorithm}), space,
                           trials, fold_in=fold_in)
    folder = RunFolder(typed["out_dir"], f"tune-{base.algorithm}-{base.data.source}",
                       typed["overwrite"], TUNE_FILES)
    target = folder.claim()
    with interrupt_marks(folder):
        if not typed["quiet"]:
            steps = [f"{trials} trials on average (their number is secret)" if space
                     else "one run at the given settings"]
            if fold_in:
                steps.append(f"then a choice of {', '.join(fold_in)}")
            err.print(f"private search: {', '.join(steps)}; no trial is shown, only the time "
                      "it has run", soft_wrap=True)
        with _running(typed["quiet"], "private search"):
            chosen = in_worker(lambda: run_private_search(search, base=base))
        if (target / "best").exists():
            shutil.rmtree(target / "best")
        write_outputs(target / "best", chosen.result)
        write_private_best(target / "best.json", search, chosen, _run_words(typed))
    if not typed["quiet"]:
        summary_table(chosen.result.summary, f"private search: {base.algorithm} "
                      f"{_shown(chosen.settings)}")
    err.print(f"wrote {target}/best.json and the chosen trial's run in {target}/best",
              soft_wrap=True)


def _shown(settings: dict[str, Any]) -> str:
    """Settings as the summary's title shows them (a number to 4 digits, a choice as it is)."""
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                     for k, v in settings.items())


def _run_words(typed: dict[str, Any]) -> list[str]:
    """The run options the user typed, as words of ``best.json``'s ``fedmc run`` command: the
    tune-only options, those the final run sets itself and the searched ``-P`` ranges left
    out."""
    from fedmc.tune.space import is_searched

    return command_words(typed, (*TUNE_ONLY, *FINAL_SETS),
                         keep_param=lambda item: not is_searched(item.partition("=")[2]))


@contextmanager
def _running(quiet: bool, what: str) -> Iterator[None]:
    """A spinner with the time elapsed while the block runs, or nothing when quiet: a private
    search shows no count of its trials (their number is secret)."""
    if quiet:
        yield
        return
    with Progress(SpinnerColumn(), TextColumn(f"[bold]{what}"), TimeElapsedColumn(),
                  console=err, transient=True) as shown:
        shown.add_task(what, total=None)
        yield


class _trial_bar:
    """A Rich progress bar of the trials with the best validation value so far, or nothing
    when quiet."""

    def __init__(self, quiet: bool, trials: int, column: str):
        self.quiet, self.trials, self.column = quiet, trials, column

    def __enter__(self):
        if self.quiet:
            return None
        self.bar = Progress(TextColumn("[bold]trials"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("{task.fields[best]}"), TimeElapsedColumn(), console=err)
        self.bar.start()
        task = self.bar.add_task("trials", total=self.trials, best="")

        def shown(study: Any, trial: Any) -> None:
            done = [t for t in study.trials if t.value is not None
                    and t.state.name == "COMPLETE"]
            best = f"best {self.column} {study.best_value:.4f}" if done else ""
            self.bar.update(task, completed=len([t for t in study.trials
                                                 if t.state.is_finished()]), best=best)

        return shown

    def __exit__(self, *exc):
        if not self.quiet:
            self.bar.stop()
        return False

"""Run the missing runs of an experiment, in this process or in a pool of worker processes.

Each run is :func:`fedmc.run.runner.execute` followed by :func:`fedmc.run.runner.write_outputs` into
its own folder, so a run killed at any point leaves no ``summary.json`` and is redone on the
next start. With ``jobs > 1`` runs go to a :class:`~concurrent.futures.ProcessPoolExecutor`
with the ``spawn`` start method (Numba's threads do not survive a fork). Progress: runs done of
the total, elapsed time and an estimate of the time left (Rich).
"""

from __future__ import annotations

import ctypes
import multiprocessing
import shutil
import signal
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from fedmc.errors import FedMCError
from fedmc.experiments.expand import PlannedRun, validation_text
from fedmc.experiments.store import run_dir
from fedmc.federation.loop import RoundCallback

ERROR_FILE = "error.txt"
PR_SET_PDEATHSIG = 1  # prctl(2)


@dataclass
class Outcome:
    """What one invocation ran: seconds per finished run, and the error of each failed run."""

    seconds: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


def run_one(spec: PlannedRun, out: Path, callback: RoundCallback | None = None) -> str | None:
    """Run ``spec`` into the folder ``out`` (emptied first); the error text, or ``None``.

    An error in the user's settings or data gives its one-line message; anything else the
    traceback. Either is also written to ``out/error.txt``.
    """
    from fedmc.run.data import enrolled_users
    from fedmc.run.runner import execute, write_outputs
    from fedmc.run.settings import resolve

    shutil.rmtree(out, ignore_errors=True)
    try:
        run = resolve(spec.run_options(), enrolled_users)  # as fedmc run resolves it
        result = execute(run, callback=callback)
        write_outputs(out, result)
    except ValidationError as exc:  # a setting a model refuses: its first error, one line
        return _failed(out, validation_text(exc, spec.algorithm))
    except (FedMCError, ValueError) as exc:
        return _failed(out, str(exc))
    except Exception:  # a bug in a run must not lose the other runs
        return _failed(out, traceback.format_exc())
    return None


def _failed(out: Path, text: str) -> str:
    out.mkdir(parents=True, exist_ok=True)
    (out / ERROR_FILE).write_text(text + "\n")
    return text.strip().splitlines()[-1]


def _die_with_parent() -> None:
    """Worker initializer: on Linux, end this worker when the experiment process dies.

    Without it, a worker of a killed experiment would finish its run and write into a folder
    that a resumed experiment may be redoing.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: workers end when their queue closes
        pass


def _timed(spec: PlannedRun, out: Path) -> tuple[str | None, float]:
    """:func:`run_one` in a worker process, with its wall-clock seconds."""
    t0 = time.perf_counter()
    error = run_one(spec, out)
    return error, time.perf_counter() - t0


def run_all(
    folder: Path,
    pending: list[PlannedRun],
    total: int,
    jobs: int = 1,
    console: Console | None = None,
    quiet: bool = False,
) -> Outcome:
    """Run the ``pending`` runs of an experiment of ``total`` runs into ``folder``.

    Parameters
    ----------
    folder
        The experiment folder; each run goes to ``runs/<run id>``.
    pending
        The runs still to do.
    total
        The number of runs of the whole experiment (for the progress bar).
    jobs
        Worker processes; 1 runs everything in this process.
    console
        Where the progress bar goes (default: stderr).
    quiet
        No progress bar.
    """
    console = console or Console(stderr=True)
    outcome = Outcome()
    progress = Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("runs"), TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(),
        TextColumn("{task.fields[note]}"), console=console, disable=quiet,
    )
    with progress:
        task = progress.add_task("experiment", total=total, completed=total - len(pending),
                                 note="")
        if jobs <= 1:
            _serial(folder, pending, progress, task, outcome)
        else:
            _parallel(folder, pending, jobs, progress, task, outcome)
    return outcome


def _serial(folder: Path, pending: list[PlannedRun], progress: Progress, task: TaskID,
            outcome: Outcome) -> None:
    for spec in pending:
        def callback(k: int, row: dict | None, spec: PlannedRun = spec):
            progress.update(task, note=f"{spec.run_id}: round {k}")

        t0 = time.perf_counter()
        error = run_one(spec, run_dir(folder, spec.run_id), callback)
        _record(outcome, spec.run_id, error, time.perf_counter() - t0)
        progress.update(task, advance=1, note="")


def _parallel(folder: Path, pending: list[PlannedRun], jobs: int, progress: Progress,
              task: TaskID, outcome: Outcome) -> None:
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context,
                             initializer=_die_with_parent) as pool:
        futures: dict[Future, PlannedRun] = {
            pool.submit(_timed, spec, run_dir(folder, spec.run_id)): spec for spec in pending
        }
        try:
            remaining = set(futures)
            while remaining:
                done, remaining = wait(remaining, return_when=FIRST_COMPLETED)
                for future in done:
                    error, seconds = future.result()
                    _record(outcome, futures[future].run_id, error, seconds)
                    progress.update(task, advance=1)
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise


def _record(outcome: Outcome, run_id: str, error: str | None, seconds: float) -> None:
    if error is None:
        outcome.seconds[run_id] = seconds
    else:
        outcome.errors[run_id] = error

"""One invocation of an experiment: pick or make its folder, run what is missing, report.

The folder is ``<root>/<timestamp>/`` with ``<root>`` = ``runs/<name>`` unless given. Unless
``fresh`` is set, the newest unfinished folder under ``<root>`` made for the same expanded
runs (same hash) is resumed: its finished runs are kept and only the others run. So the same
command, after any interruption (Ctrl-C, SIGKILL, a crash, a reboot), completes the
experiment; a command that changes any run (another seed count, data set or parameter) gets a
new folder.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

from rich.console import Console

from fedmc.errors import FedMCError
from fedmc.experiments.config import ExperimentConfig
from fedmc.experiments.expand import Expansion, PlannedRun, expand
from fedmc.experiments.launch import ERROR_FILE, Outcome, run_all
from fedmc.experiments.report import write_report
from fedmc.experiments.store import (
    find_resumable,
    is_done,
    locked,
    new_folder,
    record_timing,
    run_dir,
)


@dataclass
class ExperimentRun:
    """Where an experiment went and what this invocation did."""

    folder: Path
    expansion: Expansion
    resumed: bool
    outcome: Outcome
    report: Path


def default_root(config: ExperimentConfig) -> Path:
    """``runs/<name>``."""
    return Path("runs") / config.name


def run_experiment(
    config: ExperimentConfig,
    root: Path | None = None,
    jobs: int = 1,
    *,
    data_dir: Path | None = None,
    fresh: bool = False,
    console: Console | None = None,
    quiet: bool = False,
) -> ExperimentRun:
    """Run (or finish) ``config`` and write its report.

    Parameters
    ----------
    config
        The experiment.
    root
        Parent of the timestamped folders (default ``runs/<name>``).
    jobs
        Runs at the same time, each in its own process.
    data_dir
        The data folder (else ``$FEDMC_DATA``, else ``~/.cache/fedmc``).
    fresh
        Start a new folder even when an unfinished one could be resumed.
    console, quiet
        Where the progress bar goes, or none at all.

    Raises
    ------
    FedMCError
        An invalid experiment (before anything runs), or runs that failed (after the others
        finished; the same command retries them).
    """
    if jobs < 1:
        raise FedMCError(f"--jobs must be at least 1, got {jobs}")
    expansion = expand(config, data_dir)
    local_ray = [r.run_id for r in expansion.runs if r.options.get("backend") == "ray"
                 and not r.options.get("ray_address")]
    if jobs > 1 and local_ray:
        raise FedMCError(f"--jobs {jobs} with a Ray backend (run {local_ray[0]}) would start a Ray "
                         "in each process: start one (ray start --head) and give "
                         "`ray_address=\"auto\"`, or run the runs one at a time")
    root = root or default_root(config)
    digest = expansion.digest
    folder = None if fresh else find_resumable(root, digest)
    resumed = folder is not None
    if folder is None:
        folder = new_folder(root, {
            "name": config.name,
            "hash": digest,
            "created": datetime.now().isoformat(timespec="seconds"),
            "config": config.model_dump(mode="json"),
            "notes": expansion.notes,
            "runs": [asdict(r) for r in expansion.runs],
        })
    with locked(folder):
        outcome = _run_missing(folder, expansion, jobs, resumed, console, quiet)
        return ExperimentRun(folder, expansion, resumed, outcome,
                             write_report(folder, config, expansion))


def fetch_data(runs: list[PlannedRun], progress: bool = False) -> None:
    """Download the named data sets of ``runs`` that are missing, once, before any run starts.

    Parallel runs would otherwise download the same archive at the same time; a set without an
    official download (Netflix) stops the experiment here, with instructions.
    """
    from fedmc.data.registry import DATASETS, download_dataset

    wanted = {(r.options.get("dataset"), r.options.get("data_dir")) for r in runs}
    for name, data_dir in sorted(wanted, key=str):
        if name in DATASETS:
            download_dataset(name, data_dir, progress=progress)


def _run_missing(folder: Path, expansion: Expansion, jobs: int, resumed: bool,
                 console: Console | None, quiet: bool) -> Outcome:
    """Run the runs without a ``summary.json``; record the timings; raise if any failed."""
    pending = [r for r in expansion.runs if not is_done(folder, r.run_id)]
    fetch_data(pending, progress=not quiet)
    started = datetime.now().isoformat(timespec="seconds")
    t0 = time.perf_counter()
    outcome = run_all(folder, pending, len(expansion.runs), jobs, console, quiet)
    record_timing(folder, {
        "started": started,
        "wall_seconds": round(time.perf_counter() - t0, 3),
        "jobs": jobs,
        "resumed": resumed,
        "runs_seconds": {k: round(v, 3) for k, v in outcome.seconds.items()},
        "failed": sorted(outcome.errors),
    })
    if outcome.errors:
        first, message = next(iter(outcome.errors.items()))
        raise FedMCError(
            f"{len(outcome.errors)} of {len(expansion.runs)} runs failed, e.g. {first}: "
            f"{message} (details in {run_dir(folder, first) / ERROR_FILE}); the same command "
            "retries only the missing runs"
        )
    return outcome

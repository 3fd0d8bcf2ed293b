"""Experiment folders on disk, and which of them to resume.

Layout of one experiment folder ``<root>/<timestamp>/`` (``<root>`` defaults to
``runs/<name>``)::

    experiment.json      the expanded runs and their hash (written first)
    runs/<run id>/       config.json, history.csv, summary.json of each run (fedmc run's contract)
    plots/*.png          the report's figures
    report.md            written last: its presence marks the experiment finished
    timing.json          wall-clock times of each invocation (kept out of the report)
    .lock                locked while a process works in the folder

A run is done when its ``summary.json`` exists (the runner writes it last, atomically). A
started command resumes the newest unfinished folder under ``<root>`` whose hash equals its own
expansion's, unless told to start afresh.
"""

from __future__ import annotations

import fcntl
import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from fedmc.errors import FedMCError
from fedmc.files import strict_json, write_atomic

EXPERIMENT_FILE = "experiment.json"
REPORT_FILE = "report.md"
TIMING_FILE = "timing.json"
RUNS_FOLDER = "runs"
SUMMARY_FILE = "summary.json"
LOCK_FILE = ".lock"


def run_dir(folder: Path, run_id: str) -> Path:
    """The folder of one run."""
    return folder / RUNS_FOLDER / run_id


def is_done(folder: Path, run_id: str) -> bool:
    """Whether a run finished (its ``summary.json`` exists)."""
    return (run_dir(folder, run_id) / SUMMARY_FILE).is_file()


def is_finished(folder: Path) -> bool:
    """Whether the experiment's report was written."""
    return (folder / REPORT_FILE).is_file()


def read_meta(folder: Path) -> dict[str, Any] | None:
    """The ``experiment.json`` of a folder, or ``None`` when it has none (or a broken one)."""
    try:
        return json.loads((folder / EXPERIMENT_FILE).read_text())
    except (OSError, ValueError):
        return None


def find_resumable(root: Path, digest: str) -> Path | None:
    """The newest unfinished folder under ``root`` made for the expansion ``digest``."""
    if not root.is_dir():
        return None
    for folder in sorted((p for p in root.iterdir() if p.is_dir()), reverse=True):
        meta = read_meta(folder)
        if meta is not None and meta.get("hash") == digest and not is_finished(folder):
            return folder
    return None


def new_folder(root: Path, meta: dict[str, Any]) -> Path:
    """Create ``<root>/<timestamp>/`` (``-2``, ``-3``, ... on a clash) with ``experiment.json``."""
    root.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    for k in range(1, 1000):
        folder = root / (stamp if k == 1 else f"{stamp}-{k}")
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        write_atomic(folder / EXPERIMENT_FILE, json.dumps(meta, indent=2, default=str) + "\n")
        return folder
    raise FileExistsError(f"cannot create a new folder under {root}")


@contextmanager
def locked(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``folder`` (released by the OS even if the process is killed).

    Raises
    ------
    FedMCError
        Another process is running this experiment folder.
    """
    with open(folder / LOCK_FILE, "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise FedMCError(
                f"{folder} is in use by another running experiment; wait for it, or use --fresh"
            ) from None
        yield


def record_timing(folder: Path, entry: dict[str, Any]) -> None:
    """Append one invocation's timings to ``timing.json``."""
    path = folder / TIMING_FILE
    try:
        entries = json.loads(path.read_text())
    except (OSError, ValueError):
        entries = []
    entries.append(entry)
    write_atomic(path, strict_json(entries))

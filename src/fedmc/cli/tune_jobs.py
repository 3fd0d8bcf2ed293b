"""``fedmc tune --jobs N``: trials in N processes at once, over one study.

The command's own process opens the study (creating it, with its grid or the run's own
settings queued: :func:`fedmc.tune.search.open_study`), then starts ``N - 1`` more processes,
``python -m fedmc.cli.tune_jobs``, each handed the search (pickled, on its standard input). Each
loads the data itself, compiles before its first trial as the command does
(:func:`fedmc.tune.search.warm_up`) and runs trials on the shared study
(:func:`fedmc.tune.search.run_study`) until the planned trials have finished or started over
every process; the command runs trials too, then waits for them before it writes
``trials.csv`` and trains the best settings. Optuna's storage is what they share: a trial
queued (a grid's point, an interrupted trial's settings) is taken by one process only.

Each process gets ``cores / N`` of the kernels' threads (``NUMBA_NUM_THREADS``; the results do
not depend on it). What it prints goes to a file the command reads back when it ends: a
process that failed is reported in one line, its trials left to the others.

A signal that stops the command stops them too: each closes its running trial as interrupted
(:func:`fedmc.tune.search.close_interrupted`, its settings queued again) within a few seconds,
else it is killed and the command closes what it left running in a study of its own.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import IO, Any

from fedmc.core.parallel import threads

STOP_GRACE = 5.0
"""Seconds the processes have to close their running trials after a signal, then killed."""


@dataclass
class Job:
    """One process running trials beside the command's."""

    process: subprocess.Popen
    log: IO[bytes]


def start_jobs(search: Any, count: int) -> list[Job]:
    """Start ``count`` processes running ``search``'s trials on its study (already open);
    they share it with this one (none of them seeds its sampler: their draws differ)."""
    shared = dataclasses.replace(search, exclusive=False, seed=None)
    env = {**os.environ, "NUMBA_NUM_THREADS": str(max(1, threads() // (count + 1)))}
    jobs = []
    for _ in range(count):
        log = tempfile.TemporaryFile()
        process = subprocess.Popen([sys.executable, "-m", "fedmc.cli.tune_jobs"],
                                   stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                   stderr=log, env=env)
        assert process.stdin is not None
        process.stdin.write(pickle.dumps(shared))
        process.stdin.close()
        jobs.append(Job(process, log))
    return jobs


def finish_jobs(jobs: list[Job]) -> list[str]:
    """Wait for ``jobs`` to end; a line for each that failed (its exit code and the last line
    it wrote)."""
    failed = []
    for number, job in enumerate(jobs, start=2):
        code = job.process.wait()
        if code != 0:
            job.log.seek(0)
            lines = job.log.read().decode(errors="replace").strip().splitlines()
            failed.append(f"trial process {number} of {len(jobs) + 1} exited with code {code}"
                          + (f": {lines[-1]}" if lines else ""))
        job.log.close()
    return failed


def stop_jobs(jobs: list[Job], grace: float = STOP_GRACE) -> None:
    """Ask ``jobs`` to stop (SIGINT: each closes its running trial), kill those still running
    after ``grace`` seconds."""
    for job in jobs:
        if job.process.poll() is None:
            job.process.send_signal(signal.SIGINT)
    deadline = time.monotonic() + grace
    for job in jobs:
        try:
            job.process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            job.process.kill()
            job.process.wait()
        job.log.close()


def _run(search: Any, mine: list[int], opened: dict[str, Any]) -> None:
    """One process's share of the search: open the study, load the data, run trials."""
    from fedmc.tune.search import fit_to_data, open_study, run_study, trial_data

    opened["study"] = open_study(search)
    loaded = trial_data(search)
    search = fit_to_data(search, None if loaded is None else loaded[0])[0]
    run_study(search, opened["study"], loaded, mine=mine)


def main() -> None:
    """The entry of a process started by :func:`start_jobs`: the search on standard input."""
    from fedmc.cli.interrupts import Interrupted, catch_signals, in_worker
    from fedmc.tune.search import close_interrupted

    search = pickle.loads(sys.stdin.buffer.read())
    mine: list[int] = []
    opened: dict[str, Any] = {}
    with catch_signals():
        try:
            in_worker(lambda: _run(search, mine, opened))
        except Interrupted as stopped:
            if opened:
                close_interrupted(opened["study"], mine)
            sys.stderr.flush()
            os._exit(stopped.exit_code)  # the worker thread may be inside a kernel


if __name__ == "__main__":
    main()

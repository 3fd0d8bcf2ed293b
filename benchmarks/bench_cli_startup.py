"""Time the answers that need no data, and a warm ``fedmc run``'s wall time outside its run.

Each command runs ``--repeat`` times in a fresh process after one untimed call; the table gives
the median wall time and the range, and the median CPU time (user + system) of the process,
which a machine that other jobs share inflates less. The warm ``fedmc run`` (the default run:
FedMC-ADMM on the embedded synthetic set, its kernels compiled by the untimed call and the
background compile it may start) reports its
wall time, its summary's ``total_seconds`` (data, set-up, training, evaluation: what the run
measures of itself) and the difference, the overhead outside the run (start-up, imports,
settings, writing the folder, exit). Issue 39's targets: ``fedmc --help``, ``--version`` and
``data list`` under 0.5 s, the overhead under 1 s, on a quiet 2-core machine.

Byte code is cached as after installing the package (``pip install`` compiles it): the commands
run with ``PYTHONPYCACHEPREFIX`` in a temporary folder and without ``PYTHONDONTWRITEBYTECODE``,
which would have every process compile fedmc's sources again.

Example (benchmarks/README.md, "Instant commands")::

    python benchmarks/bench_cli_startup.py --repeat 5
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_compile import wait_for_background_compiles

COMMANDS = (["--help"], ["--version"], ["data", "list"], ["run", "--help"])
TARGET = 0.5
"""Seconds of wall time an instant answer takes at most (issue 39, acceptance 1)."""
OVERHEAD_TARGET = 1.0
"""Seconds of a warm ``fedmc run``'s wall time outside its ``total_seconds`` at most."""


def fedmc_command() -> list[str]:
    """The ``fedmc`` script beside this interpreter, else ``python -m fedmc``."""
    script = Path(sys.executable).with_name("fedmc")
    return [str(script)] if script.exists() else [sys.executable, "-m", "fedmc"]


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run of ``argv`` (its output discarded; a failure raises)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, check=True, env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def spread(values: list[float]) -> str:
    """``median (min-max)`` in seconds."""
    return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--no-run", action="store_true", help="skip the warm fedmc run")
    ns = ap.parse_args()
    fedmc = fedmc_command()
    work = Path(tempfile.mkdtemp(prefix="fedmc-startup-"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    print(f"load average before: {os.getloadavg()[0]:.2f}; {os.cpu_count()} cores")
    print(f"| command | wall (s), median of {ns.repeat} (range) | CPU (s), median | target |")
    print("|---|---|---|---|")
    try:
        for args in COMMANDS:
            timed([*fedmc, *args], env)  # byte code compiled and cached
            walls, cpus = zip(*(timed([*fedmc, *args], env) for _ in range(ns.repeat)),
                              strict=True)
            target = f"< {TARGET} s" if args != ["run", "--help"] else ""
            print(f"| `fedmc {' '.join(args)}` | {spread(list(walls))} | "
                  f"{statistics.median(cpus):.2f} | {target} |")
        if not ns.no_run:
            run = [*fedmc, "run", "-q", "--out"]
            timed([*run, str(work / "warm-up")], env)  # compiles what is not compiled yet
            wait_for_background_compiles()  # a fresh cache's specialized kernels: its child
            walls, cpus, totals = [], [], []
            for k in range(ns.repeat):
                out = work / f"run{k}"
                wall, cpu = timed([*run, str(out)], env)
                walls.append(wall)
                cpus.append(cpu)
                totals.append(json.loads((out / "summary.json").read_text())["total_seconds"])
            overhead = [w - t for w, t in zip(walls, totals, strict=True)]
            print(f"| `fedmc run` (warm): wall | {spread(walls)} | "
                  f"{statistics.median(cpus):.2f} | |")
            print(f"| `fedmc run` (warm): its `total_seconds` | {spread(totals)} | | |")
            print(f"| `fedmc run` (warm): wall outside `total_seconds` | {spread(overhead)} | | "
                  f"< {OVERHEAD_TARGET} s |")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

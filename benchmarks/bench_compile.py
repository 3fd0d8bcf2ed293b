"""How long the README's first commands compile on a fresh install (issue 39, "Compiling once").

Each command runs as a user would type it, in a fresh process, on an empty Numba cache and an
empty fedmc cache (both in a temporary folder): first the default ``fedmc run``, then each other
path on the cache the default left (what a new user meets next), once the background compile
a run may start (``fedmc.run.precompile``) has finished. Per command it prints the wall
time of the whole command, ``compile_seconds`` from its ``summary.json`` (the time Numba spent
compiling or loading kernels) and the same in CPU seconds of this process tree, which a loaded
machine inflates less than wall time.

    python benchmarks/bench_compile.py            # the README's commands
    python benchmarks/bench_compile.py --repeat 2 # each path twice (the second: cached)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMANDS = {
    "default": [],
    "--partition user": ["--partition", "user"],
    "--algorithm rfrec": ["--algorithm", "rfrec", "--rounds", "20"],
    "-a fedals --implicit": ["-a", "fedals", "--implicit"],
    "-a felb": ["-a", "felb", "--rounds", "20"],
}
"""The README's commands; rfrec and felb for 20 rounds of their 400 and 100 (what they compile
does not depend on the rounds, and their whole runs take minutes)."""


def run(args: list[str], env: dict[str, str], out: Path) -> dict[str, float]:
    """One ``fedmc run`` (quiet) into ``out``: wall and CPU seconds, ``compile_seconds``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "fedmc", "run", *args, "--quiet", "--out", str(out)],
                   env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    summary = json.loads((out / "summary.json").read_text())
    return {"wall": wall, "cpu": (after.ru_utime - before.ru_utime)
            + (after.ru_stime - before.ru_stime),
            "compile": summary.get("compile_seconds", float("nan"))}


def wait_for_background_compiles() -> None:
    """Wait until no ``fedmc.run.precompile`` process (started by a run at a rank whose
    specialized kernels were not compiled yet) is left, so it takes no core from the next."""
    # a command line that starts with Python running the module: not a shell that names it
    while subprocess.run(["pgrep", "-f", r"^\S*python\S* -m fedmc\.run\.precompile"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0:
        time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="runs of each command")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "NUMBA_CACHE_DIR": f"{tmp}/numba", "XDG_CACHE_HOME": f"{tmp}/xdg",
               "FEDMC_KERNELS": os.environ.get("FEDMC_KERNELS", "auto")}
        print(f"{'command':<24} {'wall s':>8} {'cpu s':>8} {'compile s':>10}")
        for label, args in COMMANDS.items():
            for k in range(opts.repeat):
                wait_for_background_compiles()
                found = run(args, env, Path(tmp) / f"run-{len(label)}-{k}-{time.time_ns()}")
                print(f"{'fedmc run ' + label:<24} {found['wall']:8.1f} {found['cpu']:8.1f} "
                      f"{found['compile']:10.1f}", flush=True)


if __name__ == "__main__":
    main()

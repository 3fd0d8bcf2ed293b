"""Compare two versions' compile times of a first run's kernels, paired against the machine's
drift (issue 39, "Compiling once").

A first run compiles its generic kernels in two processes at once (``fedmc.run.precompile``:
the child's part and the run's). This times each part of each README command the way the run
compiles it, ``python -m fedmc.run.precompile ALGORITHM PARAMS PART``, on an empty Numba cache,
for two source trees *at the same time*, one core each: a shared machine whose speed drifts by
a third within the hour then slows both alike, and the ratio of the pair is what to read.

    python benchmarks/bench_compile_ab.py OLD/src NEW/src --repeat 4

(``OLD/src``: e.g. ``git worktree add /tmp/old <commit>`` then ``/tmp/old/src``.) Prints one
line per part and repeat: the two wall times in seconds (the process's imports included).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from fedmc.algorithms.registry import spec
from fedmc.run import precompile
from fedmc.run.options import RunOptions
from fedmc.run.settings import resolve

COMMANDS: dict[str, dict[str, object]] = {
    "default": {},
    "--partition user": {"partition": "user"},
    "-a fedals --implicit": {"algorithm": "fedals", "implicit": True},
    "--algorithm rfrec": {"algorithm": "rfrec"},
}
"""The README's commands whose first run compiles in a child (felb compiles nothing there)."""


def parts(options: dict[str, object]) -> list[list[str]]:
    """The ``precompile`` arguments of each part the command's first run compiles."""
    run = resolve(RunOptions(**options))
    cfg = run.config()
    params = json.dumps(cfg.model_dump(mode="json"))
    flag = [precompile.ONE_USER] if run.data.one_user else []
    split = precompile.round_warm_up(spec(run.algorithm), cfg) is not None
    names = [precompile.ROUND, precompile.SETUP] if split else [precompile.GENERIC]
    return [[run.algorithm, params, name, *flag] for name in names]


def start(src: str, argv: list[str]) -> tuple[subprocess.Popen, float]:
    """``precompile`` from the tree ``src`` on fresh caches, one thread."""
    fresh = tempfile.mkdtemp()
    env = {**os.environ, "PYTHONPATH": src, "NUMBA_NUM_THREADS": "1",
           "NUMBA_CACHE_DIR": f"{fresh}/numba", "XDG_CACHE_HOME": f"{fresh}/home"}
    child = subprocess.Popen([sys.executable, "-m", "fedmc.run.precompile", *argv], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return child, time.perf_counter()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", help="the first version's src folder")
    ap.add_argument("new", help="the second version's src folder")
    ap.add_argument("--repeat", type=int, default=4)
    args = ap.parse_args()
    for command, options in COMMANDS.items():
        for argv in parts(options):
            pairs = []
            for _ in range(args.repeat):
                running = [start(src, argv) for src in (args.old, args.new)]
                times = [0.0, 0.0]
                while not all(times):
                    time.sleep(0.02)
                    for k, (child, started) in enumerate(running):
                        if not times[k] and child.poll() is not None:
                            if child.returncode != 0:
                                raise SystemExit(f"{command} {argv[2]}: precompile failed")
                            times[k] = time.perf_counter() - started
                pairs.append(times)
                print(f"{command:22s} {argv[2]:14s} old {times[0]:5.2f} s  new {times[1]:5.2f} s",
                      flush=True)
            ratio = statistics.median(new / old for old, new in pairs)
            print(f"{command:22s} {argv[2]:14s} median new/old {ratio:.2f}", flush=True)


if __name__ == "__main__":
    main()

"""Time the whole ``fedmc run`` command (start-up, loading, training, evaluation, writing).

Runs the command ``--repeat`` times in fresh processes and prints wall seconds of each, the
per-phase split from ``summary.json`` (data, training, evaluation + set-up) and test RMSE.
The first run after a code change or a fresh install also compiles the Numba kernels: run
with ``--cold`` to clear the kernel cache first and report that run separately.

Example (acceptance 3 of the core issue, the paper's protocol on ML-1M)::

    FEDMC_DATA=../shared/data python benchmarks/bench_speed.py --cold --repeat 3 -- \
        --dataset ml-1m --clients 100 --active 10 --rounds 100 --inner 10 --rank 5 \
        --reg-u l2 --lam 1e-6 --reg-v l2 --gamma 1e-6 --beta 1e4 --init-scale 2e-4 \
        --steps paper --no-biases --normalize zscore
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import fedmc


def run_once(args: list[str], out: Path) -> tuple[float, dict]:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "fedmc", "run", *args, "-q", "--out", str(out)],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    return wall, json.loads((out / "summary.json").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cold", action="store_true", help="clear the Numba cache first")
    ap.add_argument("--seeds", type=int, default=1, help="vary --seed over the repeats")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    ns = ap.parse_args()
    args = [a for a in ns.args if a != "--"]
    if ns.cold:
        for cache in Path(fedmc.__file__).parent.rglob("__pycache__"):
            for f in list(cache.glob("*.nbi")) + list(cache.glob("*.nbc")):
                f.unlink()
    tmp = Path(tempfile.mkdtemp())
    walls, rmses = [], []
    for k in range(ns.repeat):
        seed_args = ["--seed", str(k % ns.seeds)] if ns.seeds > 1 else []
        wall, s = run_once(args + seed_args, tmp / str(k))
        label = "cold" if ns.cold and k == 0 else "warm"
        evals = s["total_seconds"] - s["data_seconds"] - s["train_seconds"]
        print(f"run {k} ({label}): wall {wall:.2f} s | data {s['data_seconds']:.2f} s, train "
              f"{s['train_seconds']:.2f} s, eval+setup {evals:.2f} s | test_rmse "
              f"{s['test_rmse']:.4f} | peak {s['peak_memory_mb']:.0f} MiB")
        if not (ns.cold and k == 0):
            walls.append(wall)
        rmses.append(s["test_rmse"])
    if walls:
        print(f"warm wall: median {statistics.median(walls):.2f} s over {len(walls)} runs")
    print(f"test RMSE: mean {statistics.mean(rmses):.4f}"
          + (f" +- {statistics.stdev(rmses):.4f}" if len(rmses) > 1 else ""))
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()

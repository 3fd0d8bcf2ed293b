"""Time the whole ``fedmc run`` command (start-up, loading, training, evaluation, writing).

Runs the command ``--repeat`` times in fresh processes and prints wall seconds of each, the
per-phase split from ``summary.json`` (data, training, evaluation + set-up), the cost of one
round (training: the ``seconds`` column of ``history.csv`` from round 0 to the last round,
set-up excluded; evaluation: what is left of the run after data and training, per evaluation)
and test RMSE.
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
import csv
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import fedmc


def run_once(args: list[str], out: Path) -> tuple[float, dict, list[dict]]:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "fedmc", "run", *args, "-q", "--out", str(out)],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    with open(out / "history.csv", newline="") as fh:
        history = list(csv.DictReader(fh))
    return wall, json.loads((out / "summary.json").read_text()), history


def per_round_ms(s: dict, history: list[dict]) -> tuple[float, float]:
    """Milliseconds of training per round and of one evaluation."""
    rounds = int(history[-1]["round"]) - int(history[0]["round"])
    train = float(history[-1]["seconds"]) - float(history[0]["seconds"])
    evals = s["total_seconds"] - s["data_seconds"] - s["train_seconds"]
    return 1e3 * train / max(rounds, 1), 1e3 * evals / len(history)


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
    walls, rounds_ms = [], []
    rmses: dict[int, float] = {}  # one per seed: repeats of a seed give the same number
    for k in range(ns.repeat):
        seed_args = ["--seed", str(k % ns.seeds)] if ns.seeds > 1 else []
        wall, s, history = run_once(args + seed_args, tmp / str(k))
        label = "cold" if ns.cold and k == 0 else "warm"
        evals = s["total_seconds"] - s["data_seconds"] - s["train_seconds"]
        train_ms, eval_ms = per_round_ms(s, history)
        print(f"run {k} ({label}): wall {wall:.2f} s | data {s['data_seconds']:.2f} s, train "
              f"{s['train_seconds']:.2f} s, eval+setup {evals:.2f} s | per round: train "
              f"{train_ms:.2f} ms + eval {eval_ms:.2f} ms | test_rmse {s['test_rmse']:.4f} | "
              f"peak {s['peak_memory_mb']:.0f} MiB")
        if not (ns.cold and k == 0):
            walls.append(wall)
            rounds_ms.append(train_ms + eval_ms)
        rmses[k % ns.seeds] = s["test_rmse"]
    if walls:
        print(f"warm wall: median {statistics.median(walls):.2f} s over {len(walls)} runs; one "
              f"round with its evaluation: median {statistics.median(rounds_ms):.2f} ms")
    values = list(rmses.values())
    print(f"test RMSE over {len(values)} seed(s): mean {statistics.mean(values):.4f}"
          + (f" +- {statistics.stdev(values):.4f}" if len(values) > 1 else ""))
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()

"""RFRec / RFRecF acceptance runs: test RMSE/MAE over seeds (mean +- std) via ``fedmc run``.

Each run is a separate ``fedmc run`` process (so ``peak_memory_mb`` is that run's own), one
user per client, every client's upload expected each round (``--active`` = number of users;
``--dropout`` removes a share of them, Table 3). Example::

    FEDMC_DATA=../shared/data python benchmarks/bench_rfrec.py --dataset ml-100k \\
        --algorithm rfrec --rounds 400 --seeds 0 1 2
    FEDMC_DATA=../shared/data python benchmarks/bench_rfrec.py --dataset ml-100k \\
        --algorithm rfrecf --rounds 1200 --seeds 0 1 2

Extra algorithm parameters pass through as ``-P key=value``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

USERS = {"ml-100k": 943, "ml-1m": 6040}
KEYS = ("test_rmse", "test_mae", "comm_rounds", "train_seconds", "peak_memory_mb")


def run_one(args: argparse.Namespace, seed: int, out: Path) -> dict:
    """One ``fedmc run``; returns its summary."""
    cmd = [
        sys.executable, "-m", "fedmc", "run", "-q", "--algorithm", args.algorithm,
        "--dataset", args.dataset, "--partition", "user", "--active", str(USERS[args.dataset]),
        "--rounds", str(args.rounds), "--eval-every", str(args.rounds), "--seed", str(seed),
        "--dropout", str(args.dropout), "--out", str(out),
    ]
    for p in args.param:
        cmd += ["-P", p]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return json.loads((out / "summary.json").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", choices=sorted(USERS), default="ml-100k")
    ap.add_argument("--algorithm", choices=["rfrec", "rfrecf"], default="rfrec")
    ap.add_argument("--rounds", type=int, default=400)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("-P", "--param", action="append", default=[])
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            summary = run_one(args, seed, Path(tmp) / str(seed))
            rows.append([summary.get(k, np.nan) for k in KEYS])
            shown = "  ".join(f"{k}={v:.4f}" for k, v in zip(KEYS, rows[-1], strict=True))
            print(f"seed {seed}: {shown}", flush=True)
    a = np.array(rows, dtype=float)
    label = f"{args.algorithm} {args.dataset} rounds={args.rounds} dropout={args.dropout} " + \
        " ".join(args.param)
    print(label)
    std = a.std(0, ddof=1) if len(a) > 1 else np.zeros(len(KEYS))
    for k, mean, sd in zip(KEYS, a.mean(0), std, strict=True):
        print(f"  {k}: {mean:.4f} +- {sd:.4f}")


if __name__ == "__main__":
    main()

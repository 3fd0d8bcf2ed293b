"""Acceptance figures of FedMAvg and centralized ALS (issue 3, items 2 and 3).

Run from the repository root with the MovieLens files in ``$FEDMC_DATA``::

    FEDMC_DATA=../shared/data python benchmarks/bench_peers.py [compare|als|all] [--seeds 0 1 2]

``compare`` runs FedMC-ADMM, FedMAvg (both settings of ``u_update``) and the poster's FedMAvg
with the FedMC-ADMM paper's protocol on ML-1M at the same rank; ``als`` runs
``fedmc run --algorithm als`` with its default settings, then times its training again
in-process with the CPU time next to the wall time (on a shared machine the wall time depends
on the load, the CPU time much less). Every run is the exact ``fedmc run`` command printed
above its numbers; each seed is the seed of the split, the partition, the initialization and
the client sampling. Prints mean +- std over the seeds.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numba
import numpy as np

PROTOCOL = (
    "--dataset ml-1m --clients 100 --active 10 --rounds 100 --rank 5 --inner 10 --lam 1e-6 "
    "--gamma 1e-6 --init-scale 2e-4 --no-biases --no-clip --normalize zscore"
)
COMPARE = {
    "fedmc-admm": f"--algorithm fedmc-admm {PROTOCOL} --beta 1e4 --steps paper",
    "fedmavg": f"--algorithm fedmavg {PROTOCOL}",
    "fedmavg (u_update=sampled)": f"--algorithm fedmavg {PROTOCOL} -P u_update=sampled",
    "fedmavg-poster": f"--algorithm fedmavg-poster {PROTOCOL}",
}
ALS = "--algorithm als --dataset ml-1m"


def run(args: str, seed: int, out: Path) -> dict[str, float]:
    """``fedmc run ARGS --seed SEED`` into ``out``; its ``summary.json``."""
    cmd = [sys.executable, "-m", "fedmc", "run", *shlex.split(args), "--seed", str(seed),
           "--quiet", "--out", str(out)]
    done = subprocess.run(cmd, env=os.environ.copy(), capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"failed: {shlex.join(cmd)}\n{done.stderr}")
    return json.loads((out / "summary.json").read_text())


def report(label: str, args: str, seeds: list[int], keys: tuple[str, ...]) -> None:
    """Run one command over the seeds and print mean +- std of ``keys``."""
    print(f"\n## {label}\n    fedmc run {args} --seed {{{','.join(map(str, seeds))}}}")
    with tempfile.TemporaryDirectory() as tmp:
        rows = [run(args, s, Path(tmp) / str(s)) for s in seeds]
    for key in keys:
        vals = np.array([r[key] for r in rows])
        print(f"    {key:14s} {vals.mean():.4f} +- {vals.std(ddof=1) if len(vals) > 1 else 0:.4f}"
              f"   (per seed: {', '.join(f'{v:.4f}' for v in vals)})")


def als_cpu_time(seeds: list[int]) -> None:
    """Train ALS with its defaults in-process: wall and CPU seconds of the training only."""
    from fedmc.estimators import ALS as ALSModel
    from fedmc.run.data import DataSettings, federate, load_ratings

    print(f"\n## ALS training only, in-process ({numba.get_num_threads()} Numba threads)")
    for seed in seeds:
        settings = DataSettings(dataset="ml-1m", seed=seed)
        data = federate(load_ratings(settings), settings)
        ALSModel(sweeps=1, random_state=seed).fit(data)  # load the compiled kernels
        model = ALSModel(random_state=seed, eval_every=100)
        wall, cpu = time.perf_counter(), time.process_time()
        history = model.fit(data).history_
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        print(f"    seed {seed}: test RMSE {history.last('test_rmse'):.4f}, "
              f"train {history.last('seconds'):.2f} s wall (sweeps), {wall:.2f} s wall and "
              f"{cpu:.2f} s CPU with one evaluation, load average {os.getloadavg()[0]:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", nargs="?", default="all", choices=("compare", "als", "all"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--only", nargs="+", choices=sorted(COMPARE), default=sorted(COMPARE),
                        help="algorithms of compare to run")
    args = parser.parse_args()
    if args.what in ("compare", "all"):
        for label in args.only:
            report(label, COMPARE[label], args.seeds, ("objective", "test_rmse", "train_seconds"))
    if args.what in ("als", "all"):
        report("als (defaults)", ALS, args.seeds, ("test_rmse", "train_seconds"))
        als_cpu_time(args.seeds)


if __name__ == "__main__":
    main()

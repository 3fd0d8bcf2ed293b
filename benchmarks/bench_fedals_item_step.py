"""Federated ALS's item step alone: one round's exact and conjugate-gradient item solves.

Run from the repository root (no data needed)::

    python benchmarks/bench_fedals_item_step.py [--rank 32] [--items 3706] [--repeats 10]
    NUMBA_NUM_THREADS=1 python benchmarks/bench_fedals_item_step.py   # one thread

It builds random running sums of ML-1M's shape (3,706 items and the Gramian's row, each item's
statistics from 8 random raters) and times ``item_solves`` on them, alternating the exact
solves (Cholesky) and 3 warm-started conjugate-gradient steps after one call of each
(compilation never counts): milliseconds a round, each the mean of ``--repeats`` calls.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from fedmc.algorithms.fedals.kernels import item_solves
from fedmc.core.uploads import svec_pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rank", type=int, default=32)
    parser.add_argument("--items", type=int, default=3706)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--cg-steps", type=int, default=3)
    args = parser.parse_args()
    d, n = args.rank, args.items
    rng = np.random.default_rng(0)
    rows, cols, coef = svec_pairs(d)
    B = rng.normal(size=(n + 1, d, 8))
    S = np.einsum("nik,njk->nij", B, B)
    total = np.zeros((n + 1, len(rows) + d))
    total[:, : len(rows)] = coef * S[:, rows, cols]
    total[:, len(rows):] = rng.normal(size=(n + 1, d))
    divisor = np.concatenate([coef, np.ones(d)])
    lam = np.full(d, 5.0)
    start = rng.normal(size=(n, d))
    solvers = {"exact": 0, "cg": args.cg_steps}
    times: dict[str, list[float]] = {label: [] for label in solvers}
    nothing = np.zeros((0, 0))  # no round's sums to add first
    for steps in solvers.values():  # compiles
        item_solves(total, nothing, 1.0, n, n, lam, rows, cols, divisor, steps, start.copy())
    for _ in range(2):
        for label, steps in solvers.items():
            X = start.copy()
            t0 = time.perf_counter()
            for _ in range(args.repeats):
                item_solves(total, nothing, 1.0, n, n, lam, rows, cols, divisor, steps, X)
            times[label].append((time.perf_counter() - t0) / args.repeats * 1e3)
    for label, ms in times.items():
        print(f"{label}: {', '.join(f'{t:.1f}' for t in ms)} ms a round (rank {d}, {n} items)")


if __name__ == "__main__":
    main()

"""Acceptance 1 of the tuning issue: a run with ``--early-stopping`` against the best round of
the same run without it (whose test curve is read here, after the fact, to judge; nothing in
either run reads it to choose).

Run from the repository root with the MovieLens files in ``$FEDMC_DATA``::

    FEDMC_DATA=../shared/data python benchmarks/bench_early_stopping.py --dataset ml-100k \\
        --partition user --rounds 300
    FEDMC_DATA=../shared/data python benchmarks/bench_early_stopping.py --dataset ml-100k \\
        --algorithm fedals --implicit

Prints one Markdown row: the run without early stopping (its best round and test value, its
last round's), the early-stopped run (the round it chose on the validation cut, where it
stopped, its published test value, which refits on every training rating) and the gap
between the published value and the best round's. For interactions the run without early
stopping ranks every round (``eval_k``: fedmc's NDCG@10 on the test items, per round).
"""

from __future__ import annotations

import argparse
import time

from fedmc.run.options import RunOptions
from fedmc.run.runner import execute
from fedmc.run.settings import resolve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="ml-100k")
    parser.add_argument("--algorithm")
    parser.add_argument("--implicit", action="store_true")
    parser.add_argument("--partition")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    options = RunOptions(dataset=args.dataset, algorithm=args.algorithm,
                         implicit=args.implicit, partition=args.partition,
                         rounds=args.rounds, seed=args.seed)
    plain = resolve(options)
    column, larger = ("ndcg@10", True) if args.implicit else ("test_rmse", False)
    if args.implicit:  # a test ranking every round, to find the best round afterwards
        plain = plain.model_copy(update={"schedule": plain.schedule.model_copy(
            update={"eval_k": plain.ranking_k})})
    t0 = time.perf_counter()
    curve = [(r[column], r["round"]) for r in execute(plain).history.rows if column in r]
    plain_s = time.perf_counter() - t0
    best_value, best_round = (max if larger else min)(curve)
    last_value, last_round = curve[-1]
    t0 = time.perf_counter()
    stopped = execute(resolve(options.model_copy(update={"early_stopping": True})))
    stopped_s = time.perf_counter() - t0
    report = stopped.summary["early_stopping"]
    published = stopped.summary[column]
    gap = (published / best_value - 1) * 100 * (-1 if larger else 1)
    print(f"| {args.dataset}, {plain.algorithm}{' --implicit' if args.implicit else ''}, "
          f"{plain.data.partition}, {plain.schedule.rounds} rounds | {column} | "
          f"{best_value:.4f} (round {best_round}) | {last_value:.4f} (round {last_round}) | "
          f"{published:.4f} (chose round {report['round']}, stopped at {report['stopped_at']})"
          f" | {gap:+.2f}% | {plain_s:.0f} s / {stopped_s:.0f} s |", flush=True)


if __name__ == "__main__":
    main()

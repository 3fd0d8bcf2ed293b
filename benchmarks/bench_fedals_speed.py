"""Federated ALS's training time beside the ``implicit`` library's ALS, and where it goes.

Run from the repository root with the MovieLens files in ``$FEDMC_DATA``::

    pip install implicit==0.7.3   # the benchmark's only extra; not a dependency of fedmc
    FEDMC_DATA=../shared/data python benchmarks/bench_fedals_speed.py [--rank 32] [--lam 50] \
        [--param solver=exact]

On ML-1M read as interactions (the seed-0 80/20 split of ``fedmc run --implicit``, one user
per client), it fits ``fedmc``'s federated ALS (``--algorithm fedals --implicit``: 100 rounds,
each client in a round with probability 0.1, evaluated once at the end, as ``fedmc run``'s
``train_seconds`` counts) and ``implicit`` 0.7.3's ALS at the same rank, regularization and
confidence of a click (its ``alpha`` is ours plus one; 15 iterations, conjugate gradient;
federated ALS with its default solver, 3 warm-started conjugate-gradient steps a row, or
``--param solver=exact``), alternating the two ``--repeats`` times after one warm-up fit of
each (compilation never counts), so that both see the same load on a shared machine. It
prints each fit's seconds, their ratio, NDCG@10 of both, and a profile of one more federated
fit: the seconds of each function that took at least 1% of it (``cProfile``'s own time; a
Numba kernel is one entry).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

from tune_fedals import implicit_als  # benchmarks/ is the script's folder

from fedmc.api import load_federated
from fedmc.core.ranking import ranking_metrics, ranking_sums
from fedmc.estimators import FedALS

K = 10


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rank", type=int, default=32)
    parser.add_argument("--lam", type=float, default=50.0)
    parser.add_argument("--alpha", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=100,
                        help="federated rounds (fewer: a round costs the same whatever its "
                        "number, so the time of 100 is this one's times 100 / rounds)")
    parser.add_argument("--participation", default="0.1",
                        help="each client's probability of taking part in a round, or 'all' "
                        "(every client every round: -P item_step=exchanges needs it)")
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                        help="a further fedals setting (e.g. solver=exact, cg_steps=2, "
                        "upload=factors), repeatable")
    args = parser.parse_args()
    clicks = load_federated("ml-1m", partition="user", seed=0, implicit=True)
    extra = {k: _value(v) for k, v in (p.split("=", 1) for p in args.param)}
    every = args.participation == "all"
    protocol = ({"active": None} if every else
                {"sampling": "bernoulli", "participation": float(args.participation)})
    settings = {"implicit": True, "rank": args.rank, "lam": args.lam, "alpha": args.alpha,
                "random_state": 0, **protocol, **extra}

    def fedals(rounds: int = args.rounds) -> FedALS:
        return FedALS(rounds=rounds, eval_every=rounds, **settings).fit(clicks)

    def library() -> tuple:
        return implicit_als(clicks, args.rank, args.alpha, args.lam, 0)

    fedals(2)  # compiles
    implicit_als(clicks, args.rank, args.alpha, args.lam, 0, iterations=1)
    ours, theirs = [], []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        est = fedals()
        ours.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        U, V = library()
        theirs.append(time.perf_counter() - t0)
    ndcg = est.ranking_metrics(clicks, K)[f"ndcg@{K}"]
    their_ndcg = ranking_metrics(ranking_sums(clicks, U, V, K), K)[f"ndcg@{K}"]
    print("| fit | seconds, each repeat | median |")
    print("|---|---|---|")
    for label, times in (("fedals", ours), ("implicit", theirs)):
        print(f"| {label} | {', '.join(f'{t:.2f}' for t in times)} | "
              f"{sorted(times)[len(times) // 2]:.2f} |")
    ratio = sorted(ours)[len(ours) // 2] / sorted(theirs)[len(theirs) // 2]
    print(f"\nratio of medians {ratio:.2f} ({args.rounds} rounds); ndcg@{K}: fedals "
          f"{ndcg:.4f}, implicit {their_ndcg:.4f}; fedals bytes_up "
          f"{est.history_.last('bytes_up'):,.0f}\n")
    if args.no_profile:
        return
    profile = cProfile.Profile()
    profile.enable()
    fedals()
    profile.disable()
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    total = sum(row[2] for row in stats.values())
    print(f"| function (one profiled fit, {total:.2f} s of own time) | seconds | share |")
    print("|---|---|---|")
    for (path, line, name), row in sorted(stats.items(), key=lambda kv: -kv[1][2]):
        if row[2] >= 0.01 * total:
            where = path.split("/src/")[-1] if "/src/" in path else path.rsplit("/", 1)[-1]
            print(f"| `{where}:{line}({name})` | {row[2]:.2f} | {row[2] / total:.0%} |")


def _value(text: str) -> object:
    """A setting's value: a number where it reads as one."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


if __name__ == "__main__":
    main()

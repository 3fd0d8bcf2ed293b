"""Peak memory per process of a run batched and on Ray actors that load their own shards
(issue 42, acceptance 2 and 3).

Runs one ``fedmc run`` in this process (a fresh process per configuration: its peak resident
memory is the driver's) and prints one JSON line: the driver's peak, each actor's (polled from
``/proc`` while the run lasts: ``VmHWM`` of the ``ray::ShardHost`` processes), the training
seconds a round (the history's ``seconds`` over the rounds), the whole run's wall time and, on
Ray, the pickled bytes of an exchange to the actors and back (the message and the aggregator
down, one partial sum up per shard). Run it once batched and once with ``--workers N``:

    python benchmarks/bench_ray_scale.py --dataset synthetic-netflix --partition user \\
        --active 4802 --rounds 20
    python benchmarks/bench_ray_scale.py --dataset synthetic-netflix --partition user \\
        --active 4802 --rounds 20 --workers 2
"""

from __future__ import annotations

import argparse
import json
import pickle
import resource
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_ray import peak_of_actors  # noqa: E402

from fedmc.run.options import RunOptions  # noqa: E402
from fedmc.run.runner import execute  # noqa: E402
from fedmc.run.settings import resolve  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="synthetic-netflix")
    parser.add_argument("--partition", default="user")
    parser.add_argument("--active", type=int, default=4802)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--eval-every", type=int, default=1)
    parser.add_argument("--workers", type=int, default=0, help="0: batched, in this process")
    args = parser.parse_args()
    extra = {"backend": "ray", "workers": args.workers} if args.workers else {}
    spec = resolve(RunOptions(dataset=args.dataset, partition=args.partition,
                              active=args.active, rounds=args.rounds,
                              eval_every=args.eval_every, **extra))
    traffic = {"calls": 0, "down": 0, "up": 0}
    if args.workers:
        from fedmc.sim.ray_shards import RayActors

        original = RayActors.call

        def counted(actors, hosts, method, call_args):
            results = original(actors, hosts, method, call_args)
            if method == "call" and call_args[0][0] == "partial":
                traffic["calls"] += 1
                traffic["down"] += len(pickle.dumps(call_args[0]))  # stored once, read by all
                traffic["up"] += sum(len(pickle.dumps(r)) for r in results)
            return results

        RayActors.call = counted  # type: ignore[method-assign]
    peaks: dict[int, int] = {}
    stop = threading.Event()
    poll = threading.Thread(target=peak_of_actors, args=(stop, peaks), daemon=True)
    poll.start()
    began = time.perf_counter()
    result = execute(spec)
    wall = time.perf_counter() - began
    stop.set()
    poll.join()
    rows = result.history.rows
    calls = max(traffic["calls"], 1)
    print(json.dumps({
        "dataset": args.dataset, "partition": args.partition, "workers": args.workers,
        "rounds": args.rounds, "eval_every": args.eval_every,
        "driver_peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "actor_peaks_mb": sorted(round(kb / 1024) for kb in peaks.values()),
        "seconds_a_round": round(rows[-1]["seconds"] / args.rounds, 3),
        "wall_s": round(wall, 1),
        "test_rmse": rows[-1].get("test_rmse"),
        "exchange_mb_down": round(traffic["down"] / calls / 1e6, 2),
        "exchange_mb_up": round(traffic["up"] / calls / 1e6, 2),
    }), flush=True)


if __name__ == "__main__":
    main()

"""The batched simulation against its clients in Ray actors (``--backend ray``, issue 42).

For each protocol it trains the same run twice in this process, batched and with ``--workers``
shards as Ray actors started on this machine, and prints: the seconds per round (the
history's ``seconds``: training alone batched; on Ray also the evaluation each round's message
carries), the wall time of the whole run, the largest history difference, this (the driver's)
process's peak resident memory and the actors' (polled from ``/proc`` while they run), and the
bytes that cross to and from the actors per round (the pickled arguments and results of the
shards' calls: the message and the aggregator down, one partial sum up per shard).

    FEDMC_DATA=../shared/data python benchmarks/bench_ray.py                # ML-1M, both protocols
    FEDMC_DATA=../shared/data python benchmarks/bench_ray.py --workers 3 --rounds 20
"""

from __future__ import annotations

import argparse
import pickle
import resource
import threading
import time
from pathlib import Path

from fedmc.run.options import RunOptions
from fedmc.run.runner import execute
from fedmc.run.settings import resolve
from fedmc.sim.ray_shards import RayActors

PROTOCOLS = {
    "ML-1M paper protocol": {"dataset": "ml-1m"},
    "ML-1M one user per client": {"dataset": "ml-1m", "partition": "user"},
}


class Traffic:
    """The pickled bytes of every call to the actors (RayActors.call wrapped)."""

    def __init__(self) -> None:
        self.down = self.up = self.calls = 0
        original = RayActors.call

        def counted(actors, hosts, method, args):
            results = original(actors, hosts, method, args)
            if method == "call" and args[0][0] == "partial":  # a round's or set-up's exchange
                self.calls += 1
                self.down += sum(len(pickle.dumps(a)) for a in args)
                self.up += sum(len(pickle.dumps(r)) for r in results)
            return results

        RayActors.call = counted  # type: ignore[method-assign]


def peak_of_actors(stop: threading.Event, peaks: dict[int, int]) -> None:
    """Poll the actors' peak resident memory (VmHWM, kB) until ``stop``."""
    while not stop.wait(0.5):
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                if b"ray::Shard" not in (proc / "cmdline").read_bytes():
                    continue
                for line in (proc / "status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        peaks[int(proc.name)] = max(peaks.get(int(proc.name), 0),
                                                    int(line.split()[1]))
            except OSError:
                continue


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    traffic = Traffic()
    for name, options in PROTOCOLS.items():
        histories, seconds, walls = {}, {}, {}
        peaks: dict[int, int] = {}
        for backend in ("batched", "ray"):
            extra = {"backend": "ray", "workers": args.workers} if backend == "ray" else {}
            spec = resolve(RunOptions(**options, rounds=args.rounds, **extra))
            stop = threading.Event()
            poll = threading.Thread(target=peak_of_actors, args=(stop, peaks), daemon=True)
            poll.start()
            calls_before = traffic.calls
            down_before, up_before = traffic.down, traffic.up
            began = time.perf_counter()
            result = execute(spec)
            walls[backend] = time.perf_counter() - began
            stop.set()
            poll.join()
            rows = result.history.rows
            histories[backend] = rows
            seconds[backend] = rows[-1]["seconds"] / args.rounds
            if backend == "ray":
                calls = traffic.calls - calls_before
                down = (traffic.down - down_before) / calls
                up = (traffic.up - up_before) / calls
        worst = max(abs(a[k] - b[k]) / max(abs(a[k]), 1e-300)
                    for a, b in zip(histories["batched"], histories["ray"], strict=True)
                    for k in a if k != "seconds" and isinstance(a[k], float))
        driver = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{name}, {args.rounds} rounds, {args.workers} workers: "
              f"{seconds['batched']:.3f} s a round batched, {seconds['ray']:.3f} s on Ray "
              f"(the history's seconds; Ray's include the evaluation it carries); the whole "
              f"run {walls['batched']:.1f} s batched, {walls['ray']:.1f} s on Ray (its start "
              f"and actors included); "
              f"largest relative history difference {worst:.1e}; peak memory: this process "
              f"{driver:.0f} MB (both runs), each actor "
              f"{', '.join(f'{kb / 1024:.0f}' for kb in sorted(peaks.values()))} MB; "
              f"per exchange {down / 1e6:.2f} MB to the actors, {up / 1e6:.2f} MB back",
              flush=True)


if __name__ == "__main__":
    start = time.perf_counter()
    main()
    print(f"({time.perf_counter() - start:.0f} s in all)")

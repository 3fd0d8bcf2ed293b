"""How far honest plain uploads lie from the default bound's reference (``max-upload-norm =
"auto"``, :class:`fedmc.federation.bounds.NormReference`, issue 40 item 2).

Runs in-process federations (the test suite's loopback: fedmc's ServerApp and ClientApps
exchanging Flower messages without a SuperLink) on a real data set, split into clients of
power-law sizes and into one user per client, and prints, per algorithm and phase, the
largest ratio of a client's upload norm per square root of its users to its phase's reference
norm at that exchange (the default refuses above 100), and any upload refused.

Example::

    FEDMC_DATA=../shared/data python benchmarks/bench_upload_norms.py
    FEDMC_DATA=../shared/data python benchmarks/bench_upload_norms.py --dataset ml-1m \
        --algorithms fedmc-admm,fedals --rounds 4
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import conftest  # noqa: E402 (the loopback federation)

from fedmc.federation import bounds  # noqa: E402
from fedmc.federation.settings import Schedule  # noqa: E402
from fedmc.flower.settings import FederatedRun  # noqa: E402
from fedmc.run.data import DataSettings  # noqa: E402
from fedmc.run.spec import RunSpec  # noqa: E402

worst: dict[str, float] = {}
_bound = bounds.NormReference.bound


def _recorded(self: bounds.NormReference, phase: str, norms) -> float:
    """The bound, with the exchange's largest ratio to its reference kept in ``worst``."""
    bound = _bound(self, phase, norms)
    values = [v for v in norms.values() if math.isfinite(v)]
    if math.isfinite(bound) and values:
        worst[phase] = max(worst.get(phase, 0.0), max(values) / (bound / self.growth))
    return bound


bounds.NormReference.bound = _recorded  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="ml-100k")
    parser.add_argument("--algorithms", default="fedmc-admm,fedals,rfrec")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--clients", type=int, default=30, help="power-law split's clients")
    parser.add_argument("--active", type=int, default=30, help="clients a round (user split)")
    args = parser.parse_args()
    data_dir = Path(os.environ.get("FEDMC_DATA", "../shared/data"))
    for algorithm in args.algorithms.split(","):
        for partition, clients, active in (("powerlaw", args.clients, args.clients // 3),
                                           ("user", 1, args.active)):
            worst.clear()
            data = DataSettings(dataset=args.dataset, data_dir=data_dir, partition=partition,
                                clients=clients)
            run = FederatedRun(spec=RunSpec(algorithm=algorithm, schedule=Schedule(
                rounds=args.rounds, active=active, seed=0)), out=Path("out"))
            with tempfile.TemporaryDirectory() as folder:
                conftest._loopback_federation(Path(folder), data, run)
                events = [json.loads(line) for line in
                          (Path(folder) / "out" / "progress.jsonl").read_text().splitlines()]
            refused = [e["reason"] for e in events if e["event"] == "refused"]
            print(f"{args.dataset} {algorithm:11s} {partition:8s} largest ratio per phase "
                  f"{ {p: round(r, 2) for p, r in worst.items()} }, refused {len(refused)}",
                  flush=True)


if __name__ == "__main__":
    main()

"""Time a real federation on this machine (``fedmc federate local``) against ``fedmc run``.

Starts a SuperLink and one SuperNode per client (``fedmc.flower.local.run_local``), runs the
rounds with every client sampled, and prints from the server's ``progress.jsonl``: start-up
(until every node answered), and per round (the first round, which loads the kernels, left
out) the median wall time of the round and of its two exchanges, the client step (message,
uploads, sum, server step) and the evaluation (every client's sums). The same settings under
``fedmc run`` (the batched simulation in this process) give the reference per-round time.

Example (issue 12, acceptance 4)::

    FEDMC_DATA=../shared/data python benchmarks/bench_federation.py --clients 10 --rounds 12
    FEDMC_DATA=../shared/data python benchmarks/bench_federation.py --clients 10 --rounds 12 \
        --secagg
    FEDMC_DATA=../shared/data python benchmarks/bench_federation.py --clients 10 --rounds 4 \
        --stock-nodes
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from fedmc.algorithms.fedmc_admm import ALGORITHM
from fedmc.flower.local import run_local
from fedmc.flower.settings import FederatedRun
from fedmc.pipeline import DataSettings, federate, load_ratings
from fedmc.runner import RunSettings
from fedmc.sim.loop import simulate
from fedmc.sim.sampling import make_sampler


def phases(events: list[dict]) -> dict[str, list[float]]:
    """Per round after the first: round, step-exchange and evaluation wall seconds."""
    out: dict[str, list[float]] = {"round": [], "step": [], "evaluate": []}
    begin: dict[tuple[int, str], float] = {}
    ends: dict[int, float] = {}
    for e in events:
        if e["event"] == "exchange":
            begin[(e["round"], e["phase"])] = e["time"]
        elif e["event"] == "round":
            ends[e["round"]] = e["time"]
    for k in sorted(ends):
        if k < 2 or k - 1 not in ends:
            continue
        step, evaluate = begin[(k, "round")], begin[(k, "evaluate")]
        out["round"].append(ends[k] - ends[k - 1])
        out["step"].append(evaluate - step)
        out["evaluate"].append(ends[k] - evaluate)
    return out


def simulated_round(data_settings: DataSettings, rounds: int) -> float:
    """Seconds per round of the batched simulation (training and evaluation)."""
    data = federate(load_ratings(data_settings), data_settings)
    sampler = make_sampler(data.n_clients, None)
    cfg = ALGORITHM.Config()
    simulate(ALGORITHM, cfg, data, sampler, 1, 0)  # load the compiled kernels
    start = time.perf_counter()
    simulate(ALGORITHM, cfg, data, make_sampler(data.n_clients, None), rounds, 0)
    return (time.perf_counter() - start) / rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="ml-100k")
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--secagg", action="store_true")
    parser.add_argument("--stock-nodes", action="store_true")
    args = parser.parse_args()
    data = DataSettings(dataset=args.dataset, clients=args.clients)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        run = FederatedRun(RunSettings(rounds=args.rounds, active=None), {},
                           secagg=args.secagg, timeout=120.0, out=work / "out")
        start = time.perf_counter()
        run_local(run, data, work / "work", args.stock_nodes)
        wall = time.perf_counter() - start
        events = [json.loads(line) for line in
                  (work / "out" / "progress.jsonl").read_text().splitlines()]
    connected = next(e for e in events if e["event"] == "connected")
    times = phases(events)
    median = {k: statistics.median(v) for k, v in times.items()}
    mode = ("SecAgg+" if args.secagg else "plain") + (", stock nodes" if args.stock_nodes
                                                      else "")
    print(f"{args.dataset}, {args.clients} nodes, all sampled, {mode}: whole command "
          f"{wall:.1f} s, server up to every node joined {connected['seconds']:.1f} s")
    print(f"per round (median of {len(times['round'])}): {median['round']:.3f} s = client "
          f"step {median['step']:.3f} s + evaluation {median['evaluate']:.3f} s "
          f"(min {min(times['round']):.3f}, max {max(times['round']):.3f})")
    print(f"fedmc run, same settings: {simulated_round(data, args.rounds):.4f} s per round")


if __name__ == "__main__":
    main()

"""Time a real federation on this machine (``fedmc federate local``) against ``fedmc run``.

Starts a SuperLink and one SuperNode per client (``fedmc.deploy.local.run_local``), runs the
rounds with every client sampled, and prints from the server's ``progress.jsonl``: start-up
(until every node answered), and per round (the first round, which loads the kernels, left
out) the median wall time of a round (message, client steps, uploads, sum, server step, and
the previous round's evaluation, which travels with the message; with SecAgg+ the evaluation
is a secure sum of its own, timed apart) and the CPU seconds the SuperLink and the nodes spent
in it. The same settings under ``fedmc run`` (the batched simulation in this process) give
the reference per-round time.

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
import os
import statistics
import tempfile
import time
from pathlib import Path

from fedmc.algorithms.fedmc_admm import PAPER
from fedmc.deploy.local import run_local
from fedmc.federation.loop import Rounds
from fedmc.federation.sampling import make_sampler
from fedmc.federation.settings import Schedule
from fedmc.flower.settings import FederatedRun
from fedmc.run.data import DataSettings, federate, load_ratings
from fedmc.run.spec import RunSpec
from fedmc.sim import simulate


def phases(events: list[dict]) -> dict[str, list[float]]:
    """Per round after the first: the round's wall seconds (from the start of its client step
    exchange to the next one's) and, when the evaluation is an exchange of its own (SecAgg+),
    the evaluation's part of it."""
    out: dict[str, list[float]] = {"round": [], "evaluate": []}
    step = {e["round"]: e["time"] for e in events
            if e["event"] == "exchange" and e["phase"] == "round"}
    evaluate = {e["round"]: e["time"] for e in events
                if e["event"] == "exchange" and e["phase"] == "evaluate"}
    for k in sorted(step):
        if k >= 2 and k + 1 in step:
            out["round"].append(step[k + 1] - step[k])
            if k in evaluate:
                out["evaluate"].append(step[k + 1] - evaluate[k])
    return out


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """CPU seconds of the SuperLink and of all nodes together at the start of each round's
    client step (read when the progress line is seen, within 0.1 s)."""

    def __init__(self) -> None:
        self.marks: dict[int, tuple[float, float]] = {}

    def __call__(self, event: dict, fed) -> None:
        if event["event"] == "exchange" and event["phase"] == "round":
            pids = {name: p.pid for name, p in fed.processes.items()}
            nodes = sum(cpu_seconds(pid) for name, pid in pids.items() if name != "superlink")
            self.marks[event["round"]] = (cpu_seconds(pids["superlink"]), nodes)

    def per_round(self) -> tuple[float, float]:
        """Median CPU seconds per round after the first: SuperLink, nodes."""
        rounds = sorted(k for k in self.marks if k >= 2 and k + 1 in self.marks)
        deltas = [[b - a for a, b in zip(self.marks[k], self.marks[k + 1], strict=True)]
                  for k in rounds]
        return (statistics.median(d[0] for d in deltas), statistics.median(d[1] for d in deltas))


def simulated_round(data_settings: DataSettings, rounds: int) -> float:
    """Seconds per round of the batched simulation (training and evaluation)."""
    data = federate(load_ratings(data_settings), data_settings)
    sampler = make_sampler(data.n_clients, None)
    cfg = PAPER.Config()
    simulate(PAPER, cfg, data, rounds=Rounds(sampler, 1))  # load the compiled kernels
    start = time.perf_counter()
    simulate(PAPER, cfg, data, rounds=Rounds(make_sampler(data.n_clients, None), rounds))
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
        run = FederatedRun(spec=RunSpec(schedule=Schedule(rounds=args.rounds)), secagg=args.secagg,
                           timeout=120.0, out=work / "out")
        meter = CpuMeter()
        start = time.perf_counter()
        run_local(run, data, work / "work", args.stock_nodes, meter)
        wall = time.perf_counter() - start
        events = [json.loads(line) for line in
                  (work / "out" / "progress.jsonl").read_text().splitlines()]
    connected = next(e for e in events if e["event"] == "connected")
    times = phases(events)
    median = {k: statistics.median(v) for k, v in times.items() if v}
    mode = ("SecAgg+" if args.secagg else "plain") + (", stock nodes" if args.stock_nodes
                                                      else "")
    print(f"{args.dataset}, {args.clients} nodes, all sampled, {mode}: whole command "
          f"{wall:.1f} s, server up to every node joined {connected['seconds']:.1f} s")
    evaluation = (f", of which the evaluation's exchange {median['evaluate']:.3f} s"
                  if times["evaluate"] else " (the evaluation travels with the next message)")
    print(f"per round (median of {len(times['round'])}): {median['round']:.3f} s{evaluation} "
          f"(mean {statistics.mean(times['round']):.3f}, min {min(times['round']):.3f}, "
          f"max {max(times['round']):.3f} in round "
          f"{2 + times['round'].index(max(times['round']))})")
    superlink, nodes = meter.per_round()
    print(f"CPU per round: SuperLink {superlink:.2f} s, all {args.clients} nodes {nodes:.2f} s")
    print(f"fedmc run, same settings: {simulated_round(data, args.rounds):.4f} s per round")


if __name__ == "__main__":
    main()

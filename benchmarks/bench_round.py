"""Time one FedMC-ADMM round in process, split into client steps, summing the uploads plus the
server step, and evaluation.

Loads the data once, warms the kernels up, then runs ``--passes`` passes of ``--rounds``
rounds and prints, per phase, the fastest pass and the median pass (milliseconds per round).
On a shared machine the fastest pass is the steadiest number to compare two versions of a
kernel; ``bench_speed.py`` times the whole command.

Example (the paper's protocol on ML-1M, as in acceptance 3 of the core issue)::

    FEDMC_DATA=../shared/data python benchmarks/bench_round.py --dataset ml-1m
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from fedmc import load_federated
from fedmc.algorithms.fedmc_admm import BY_CONSENSUS, FedMCADMMConfig
from fedmc.core.uploads import sum_uploads
from fedmc.federation.aggregator import Aggregator
from fedmc.federation.sampling import UniformSampler
from fedmc.sim.clients import BatchedClients

PAPER = dict(rank=5, inner=10, lam=1e-6, gamma=1e-6, beta=1e4, init_scale=2e-4,
             steps="paper", biases=False, clip=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="ml-1m")
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--active", type=int, default=10)
    ap.add_argument("--passes", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=30, help="rounds per pass")
    ap.add_argument("--defaults", action="store_true",
                    help="FedMC-ADMM's own defaults instead of the paper's settings")
    ns = ap.parse_args()
    data = load_federated(ns.dataset, clients=ns.clients, normalize="zscore", seed=0)
    cfg = FedMCADMMConfig(**({} if ns.defaults else PAPER))
    alg = BY_CONSENSUS[cfg.consensus]
    rng = np.random.default_rng(0)
    info = data.federation_info()
    draws = alg.draws(cfg, data.federation_info(), rng)
    clients = BatchedClients(alg, cfg, data, draws, info)
    server = alg.init_server(cfg, info, draws.server)
    shapes = alg.upload_shapes(cfg, info)
    aggregator = Aggregator(alg, cfg, info)  # no DP: the uploads as they are
    sampler = UniformSampler(ns.clients, ns.active)

    def exchange(msg):
        summed = sum_uploads(clients.run(msg, aggregator), shapes)
        return alg.server_step(cfg, server, summed, msg)

    server = exchange(alg.setup(cfg, server, info))
    server = exchange(alg.message(cfg, server, 1, sampler.sample(rng), rng))  # compiles
    clients.evaluate(alg.model(cfg, server))
    passes = []
    for _ in range(ns.passes):
        spent = np.zeros(3)
        for k in range(ns.rounds):
            msg = alg.message(cfg, server, k + 2, sampler.sample(rng), rng)
            t0 = time.perf_counter()
            batches = list(clients.run(msg, aggregator))
            t1 = time.perf_counter()
            server = alg.server_step(cfg, server, sum_uploads(batches, shapes), msg)
            t2 = time.perf_counter()
            alg.metrics(cfg, server, clients.evaluate(alg.model(cfg, server)), info)
            t3 = time.perf_counter()
            spent += (t1 - t0, t2 - t1, t3 - t2)
        passes.append(1e3 * spent / ns.rounds)
    table = np.array(passes)
    for label, row in (("fastest", table[table.sum(axis=1).argmin()]),
                       ("median", np.median(table, axis=0))):
        print(f"{label} pass: clients {row[0]:.2f} ms + sum and server {row[1]:.2f} ms + "
              f"evaluation "
              f"{row[2]:.2f} ms = {row.sum():.2f} ms per round")


if __name__ == "__main__":
    main()

"""The curious server's rated-item-set attack on FedMC-ADMM (issue 13, ``fedmc.privacy.audit``).

ML-100K, one user per client, 20 rounds. Plain and SecAgg: 10 clients per round (uniform);
DP: Poisson sampling at the same rate, epsilon 8 at delta 1e-6 over the whole run. Modes:
``rated`` (consensus on rated items: every exchange read) and ``all`` (the paper's consensus:
only the set-up upload ``Y_i^0`` is read). Prints one JSON line per (mode, server view,
attack) with precision, recall and the base rate.

Example::

    FEDMC_DATA=../shared/data python benchmarks/audit_leakage.py
"""

from __future__ import annotations

import json

import numpy as np

from fedmc.algorithms.fedmc_admm import ALGORITHM
from fedmc.algorithms.fedmc_admm.rated import UPLOAD
from fedmc.pipeline import DataSettings, federate, load_ratings
from fedmc.privacy.accounting import UserDP
from fedmc.privacy.audit import observations, rated_sets, set_scores
from fedmc.sim.sampling import make_sampler
from fedmc.testing import record_boundary

ROUNDS = 20
ACTIVE = 10
SETTINGS = {"rated": {"consensus": "rated", "beta": 0.6, "gamma": 12, "lam": 5, "inner": 20},
            "all": {"dual_init": "paper"}}
DP = UserDP(clip=0.3, epsilon=8.0, delta=1e-6)


def truth(data) -> dict[int, np.ndarray]:
    """Every client's training items (one user per client)."""
    tr = data.train
    return {c: tr.indices[tr.indptr[c]:tr.indptr[c + 1]] for c in range(data.n_clients)}


def main() -> None:
    settings = DataSettings(dataset="ml-100k", partition="user", seed=0)
    data = federate(load_ratings(settings), settings)
    items = truth(data)
    for mode, params in SETTINGS.items():
        cfg = ALGORITHM.Config(**params)
        views = {
            "plain": (lambda: make_sampler(data.n_clients, ACTIVE), None),
            "secagg": (lambda: make_sampler(data.n_clients, ACTIVE), None),
            "secagg+dp": (lambda: make_sampler(data.n_clients, ACTIVE, "bernoulli"), DP),
        }
        for view, (sampler, dp) in views.items():
            records, sim = record_boundary(ALGORITHM, cfg, data, sampler, ROUNDS, 0, dp=dp)
            if mode == "all":
                records = [r for r in records if r.message.phase == "setup"]
            std = 0.0
            if dp is not None:
                std = float(sim.history.column("dp_noise")[-1]) * dp.clip
            obs = list(observations(records, "plain" if view == "plain" else "sum", UPLOAD))
            for attack, intersect in (("first", False), ("intersect", True)):
                scores = set_scores(rated_sets(obs, std, intersect), items, data.n_items)
                print(json.dumps({"mode": mode, "view": view, "attack": attack,
                                  **{k: round(v, 4) for k, v in scores.items()}}), flush=True)


if __name__ == "__main__":
    main()

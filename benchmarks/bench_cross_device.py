"""FedMC-ADMM with one user per client (issue 11): tuning on a validation cut, test RMSE over
seeds, and the item-mean baseline.

``validate``: the training ratings of the seed-0 80/20 split of ML-1M are cut again, 90/10
(seed 100); every setting of the grid trains on the 90% and is scored on the 10%, never on the
test ratings. ``test``: the chosen settings on the real split, seeds 0, 1, 2, test RMSE at the
given rounds, the item-mean baseline of each split, seconds per round and peak memory.

Examples::

    FEDMC_DATA=../shared/data python benchmarks/bench_cross_device.py validate \\
        --grid 'beta=0.3,0.6,1.2' --grid 'gamma=3,6,12' --at 100 --at 300
    FEDMC_DATA=../shared/data python benchmarks/bench_cross_device.py test --seeds 3 \\
        --at 100 --at 300
"""

from __future__ import annotations

import argparse
import itertools
import json
import resource
import time

import numpy as np
from sweep import parse_value

from fedmc.data import FederatedData
from fedmc.data.split import random_test_mask
from fedmc.estimators import FedMCADMM
from fedmc.run.data import DataSettings, federate, load_ratings


def validation_data(seed: int = 0, normalize: str = "zscore") -> FederatedData:
    """The training ratings of the seed's 80/20 split, cut 90/10 into fit and validation."""
    ratings = load_ratings(DataSettings(dataset="ml-1m", seed=seed))
    train = ratings.subset(~random_test_mask(ratings, 0.2, seed))
    return federate(train, DataSettings(dataset="ml-1m", partition="user", test_fraction=0.1,
                                        seed=100 + seed, normalize=normalize))


def test_data(seed: int, normalize: str = "zscore") -> FederatedData:
    """ML-1M, the seed's 80/20 split, one user per client."""
    settings = DataSettings(dataset="ml-1m", partition="user", seed=seed, normalize=normalize)
    return federate(load_ratings(settings), settings)


def item_mean_rmse(data: FederatedData) -> float:
    """Test RMSE of predicting each item's mean training rating (the global mean for an item
    without training ratings), on the original scale."""
    norm = data.normalizer
    train, test = data.train, data.test
    sums = np.bincount(train.indices, weights=train.values, minlength=data.n_items)
    counts = np.bincount(train.indices, minlength=data.n_items)
    means = np.where(counts > 0, sums / np.maximum(counts, 1), 0.0)
    error = (means[test.indices] - test.values) * norm.scale
    return float(np.sqrt(np.mean(error**2)))


def fit(data: FederatedData, rounds: int, at: list[int], seed: int, **params) -> dict:
    """One run in which each client takes part in a round with probability 0.1 (the
    cross-device protocol of ``fedmc run --partition user``); RMSE at the rounds ``at``."""
    model = FedMCADMM(**params, rounds=rounds, sampling="bernoulli", participation=0.1,
                      random_state=seed, eval_every=min(at))
    model.fit(data)
    rounds_done = model.history_.column("round")
    rmse = model.history_.column("test_rmse")
    seconds = model.history_.column("seconds")
    per_round = (seconds[-1] - seconds[0]) / max(rounds, 1)
    return {**{f"rmse@{k}": round(float(rmse[rounds_done == k][0]), 4) for k in at},
            "s/round": round(per_round, 4)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("validate", "test"))
    ap.add_argument("--grid", action="append", default=[], help="KEY=V1,V2,...")
    ap.add_argument("--fixed", action="append", default=[], help="KEY=VALUE")
    ap.add_argument("--at", action="append", type=int, default=[], help="report round")
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    at = sorted(args.at or [100])
    fixed = {k: parse_value(v) for k, v in (f.split("=", 1) for f in args.fixed)}
    params = {"consensus": "rated", **fixed}
    if args.what == "validate":
        data = validation_data()
        keys = [g.split("=", 1)[0] for g in args.grid]
        values = [[parse_value(v) for v in g.split("=", 1)[1].split(",")] for g in args.grid]
        for combo in itertools.product(*values):
            setting = {**params, **dict(zip(keys, combo, strict=True))}
            result = fit(data, at[-1], at, 0, **setting)
            print(json.dumps({**setting, **result}),
                  flush=True)
        return
    for seed in range(args.seeds):
        data = test_data(seed)
        start = time.perf_counter()
        result = fit(data, at[-1], at, seed, **params)
        print(json.dumps({"seed": seed, **result,
                          "item_mean": round(item_mean_rmse(data), 4),
                          "wall_s": round(time.perf_counter() - start, 1),
                          "peak_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                                           / 2**20, 2)}), flush=True)


if __name__ == "__main__":
    main()

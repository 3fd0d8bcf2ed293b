"""Grid sweep of one algorithm's parameters on one data set: test RMSE at chosen rounds.

Example (the tuning behind the FedMC-ADMM defaults, see benchmarks/README.md)::

    FEDMC_DATA=../shared/data python benchmarks/sweep.py --dataset ml-1m \
        --grid 'beta=0.1,0.3,1' --grid 'lam=1,3' --fixed steps=per-row --fixed biases=true \
        --at 100 --at 300 --seeds 1

Each grid point prints one line: the parameters, then mean test RMSE (over seeds) at each
``--at`` round. ``gamma`` may be given as ``lam/p`` to follow lambda.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time

import numpy as np

from fedmc.estimators import estimator_class
from fedmc.run.data import DataSettings, federate, load_ratings


def parse_value(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--algorithm", default="fedmc-admm")
    ap.add_argument("--dataset", default="ml-1m")
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--active", type=int, default=10)
    ap.add_argument("--normalize", default="zscore")
    ap.add_argument("--grid", action="append", default=[], help="KEY=V1,V2,...")
    ap.add_argument("--fixed", action="append", default=[], help="KEY=VALUE")
    ap.add_argument("--at", action="append", type=int, default=[], help="report round")
    ap.add_argument("--seeds", type=int, default=1)
    args = ap.parse_args()
    at = sorted(args.at or [100])
    fixed = {k: parse_value(v) for k, v in (f.split("=", 1) for f in args.fixed)}
    keys, values = [], []
    for g in args.grid:
        k, vs = g.split("=", 1)
        keys.append(k)
        values.append([v if v == "lam/p" else parse_value(v) for v in vs.split(",")])
    cls = estimator_class(args.algorithm)
    datas = {}
    for seed in range(args.seeds):
        settings = DataSettings(dataset=args.dataset, clients=args.clients,
                                normalize=args.normalize, seed=seed)
        datas[seed] = federate(load_ratings(settings), settings)
    for combo in itertools.product(*values):
        params = {**fixed, **dict(zip(keys, combo, strict=True))}
        if params.get("gamma") == "lam/p":
            params["gamma"] = params["lam"] / args.clients
        results = []
        t0 = time.perf_counter()
        for seed, data in datas.items():
            model = cls(**params, rounds=at[-1], active=args.active, random_state=seed,
                        eval_every=min(at))
            model.fit(data)
            rounds = model.history_.column("round")
            rmse = model.history_.column("test_rmse")
            results.append([rmse[rounds == k][0] for k in at])
        mean = np.mean(results, axis=0)
        line = {"params": params, **{f"rmse@{k}": round(float(v), 4) for k, v in zip(at, mean,
                                                                                   strict=True)},
                "seconds": round(time.perf_counter() - t0, 1)}
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()

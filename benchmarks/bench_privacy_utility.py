"""Privacy-utility on ML-1M with one user per client (issue 13): RMSE against the user-level DP
budget epsilon (delta 1e-6, whole run), Poisson sampling of 10% of the clients per round.

``validate`` scores settings (clip norms, rounds) on the 90/10 validation cut of the seed-0
training ratings (``bench_cross_device.validation_data``), never on the test ratings; ``test``
runs the chosen settings on the real 80/20 split and prints the item-mean baseline. Each line
is one JSON record: algorithm, epsilon, the parameters, RMSE, seconds.

Examples::

    FEDMC_DATA=../shared/data python benchmarks/bench_privacy_utility.py validate \\
        --algorithm fedmc-admm --eps 8 --clip 0.5,1,2 --rounds 100 \\
        --fixed consensus=rated --fixed beta=0.6 --fixed gamma=12 --fixed lam=5 --fixed inner=100
    FEDMC_DATA=../shared/data python benchmarks/bench_privacy_utility.py test \\
        --algorithm fedmc-admm --eps 1,2,4,8,16,inf --clip 1 --rounds 100 --fixed ...
"""

from __future__ import annotations

import argparse
import json
import math
import time

from bench_cross_device import item_mean_rmse, test_data, validation_data
from sweep import parse_value

from fedmc.algorithms import get_algorithm


def fit(data, algorithm: str, rounds: int, eps: float, clip: float, q: float,
        setup_scale: float, **params) -> dict:
    """One run, Poisson sampling at rate ``q``; the final RMSE and the epsilon spent."""
    dp = {} if math.isinf(eps) else {"user_dp_epsilon": eps, "user_dp_clip": clip,
                                     "user_dp_delta": 1e-6, "user_dp_setup_scale": setup_scale}
    model = get_algorithm(algorithm)(**params, rounds=rounds, sampling="bernoulli",
                                     participation=q, random_state=0, eval_every=rounds, **dp)
    start = time.perf_counter()
    model.fit(data)
    last = model.history_.rows[-1]
    return {"rmse": round(float(last["test_rmse"]), 4),
            "spent": round(float(last.get("epsilon", math.inf)), 3),
            "noise": round(float(last.get("user_dp_noise", 0.0)), 3),
            "seconds": round(time.perf_counter() - start, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("validate", "test"))
    ap.add_argument("--algorithm", default="fedmc-admm")
    ap.add_argument("--eps", default="8", help="comma-separated budgets; inf: no DP")
    ap.add_argument("--clip", default="1", help="comma-separated clip norms")
    ap.add_argument("--rounds", default="100", help="comma-separated round counts")
    ap.add_argument("--q", type=float, default=0.1, help="Poisson sampling rate")
    ap.add_argument("--setup-scale", type=float, default=1.0, help="set-up noise / round noise")
    ap.add_argument("--fixed", action="append", default=[], help="KEY=VALUE")
    args = ap.parse_args()
    params = {k: parse_value(v) for k, v in (f.split("=", 1) for f in args.fixed)}
    data = validation_data() if args.what == "validate" else test_data(0)
    print(json.dumps({"item_mean": round(item_mean_rmse(data), 4), "data": args.what}),
          flush=True)
    for rounds in map(int, args.rounds.split(",")):
        for eps in map(float, args.eps.split(",")):
            for clip in map(float, args.clip.split(",")):
                result = fit(data, args.algorithm, rounds, eps, clip, args.q, args.setup_scale,
                             **params)
                print(json.dumps({"algorithm": args.algorithm, "eps": eps, "clip": clip,
                                  "rounds": rounds, "q": args.q,
                                  "setup_scale": args.setup_scale, **params, **result}),
                      flush=True)


if __name__ == "__main__":
    main()

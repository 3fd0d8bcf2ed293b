"""Choose federated EASE's settings, with and without user-level DP, on the validation cut of
ML-1M's training interactions that ``tune_fedals.py`` uses: the test interactions are never
looked at.

Run from the repository root with the MovieLens files in ``$FEDMC_DATA``::

    # lambda without DP, then lambda and the clip at epsilon 8 (delta 1e-6), every
    # combination of the --grid values (max_items=none: every item, the clip alone bounds)
    FEDMC_DATA=../shared/data python benchmarks/tune_ease.py --grid lam=100,300,1000
    FEDMC_DATA=../shared/data python benchmarks/tune_ease.py --eps 8 --clip 16,32,64 \\
        --grid lam=3000,5000,8000

Every setting is fitted (one set-up exchange, one user per client) on the fitting part and
scored by NDCG@10 and recall@10 on the validation part, every user folded in from its fitting
interactions against the published model (what ``fedmc evaluate`` measures). Prints one
Markdown row per setting.
"""

from __future__ import annotations

import argparse
import itertools
import math
import time

from tune_fedals import dp_settings, folded_in, validation_cut, values

from fedmc.estimators import Ease


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eps", default="inf", help="DP budgets (inf: no DP)")
    parser.add_argument("--clip", default="1", help="DP clip norms of one upload")
    parser.add_argument("--grid", action="append", default=[], help="KEY=V1,V2,...")
    args = parser.parse_args()
    grid = {k: values(v) for k, v in (g.split("=", 1) for g in args.grid)}
    data = validation_cut(args.seed)
    print(f"fitting {data.train.nnz} / validation {data.test.nnz} interactions, "
          f"{data.n_users} users, {data.n_items} items\n")
    print("| setting | ndcg@10 | recall@10 | epsilon | s |")
    print("|---" * 5 + "|", flush=True)
    budgets = itertools.product(values(args.eps), values(args.clip))
    for (eps, clip), combo in itertools.product(list(budgets), itertools.product(*grid.values())):
        params = {k: None if v == "none" else v for k, v in zip(grid, combo, strict=True)}
        dp = dp_settings(eps, clip)
        t0 = time.perf_counter()
        est = Ease(implicit=True, rounds=0, random_state=args.seed, **params, **dp).fit(data)
        m = folded_in(est, data)
        spent = est.history_.rows[-1].get("epsilon", math.inf)
        budget = f"eps {eps:g}, clip {clip:g}" if dp else "no DP"
        shown = ", ".join(f"{k}={v}" for k, v in params.items())
        print(f"| {budget}, {shown} | {m['ndcg@10']:.4f} | {m['recall@10']:.4f} | "
              f"{spent:.3g} | {time.perf_counter() - t0:.1f} |", flush=True)


if __name__ == "__main__":
    main()

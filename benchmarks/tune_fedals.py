"""Choose federated ALS's implicit-feedback defaults, with and without user-level DP, on a
validation cut of ML-1M's training interactions: the test interactions are never looked at.

Run from the repository root with the MovieLens files in ``$FEDMC_DATA``::

    pip install implicit   # the benchmark's only extra; not a dependency of fedmc
    FEDMC_DATA=../shared/data python benchmarks/tune_fedals.py --ranks 32 --alphas 1 2 4 \\
        --lams 1 5 20 --rounds 50 100
    # under user-level DP (epsilon 8, delta 1e-6, the whole run), every client each round,
    # the item step on fresh sums; every combination of the --grid values runs:
    FEDMC_DATA=../shared/data python benchmarks/tune_fedals.py --skip-implicit --eps 8 \\
        --rounds 5 --participation 1 --clip 1 --fixed sums=fresh --grid memory=0,0.8 \\
        --grid gram_scale=0.3,1
    # the DP popularity list at the same budget (item-bias on interactions, counts only):
    FEDMC_DATA=../shared/data python benchmarks/tune_fedals.py --popularity --eps 8 \\
        --clip 0.3 --grid count_scale=0.3 --grid weights=sqrt-items,equal

The split is the pipeline's (``fedmc run --implicit --dataset ml-1m``: every rating an
interaction, a random 80/20 split with ``--seed``); its training interactions are cut again,
20% at random (seed ``seed + 1``), into a fitting part and a validation part. Every setting
is fitted on the fitting part and scored by NDCG@10 (and recall@10) on the validation part with
fedmc's evaluator (:mod:`fedmc.core.ranking`): federated ALS with one user per client, each
client in a round with probability ``--participation`` (0.1, the run protocol; 1: every
client every round), and the ``implicit`` library's ALS at the same rank and regularization,
its confidence ``alpha_implicit = 1 + alpha`` (its confidence of a click is
``alpha_implicit``, ours ``1 + alpha``), 15 iterations. ``ndcg@10`` ranks with the user rows
each user folds in from its fitting interactions against the published ``V`` (what ``fedmc
evaluate`` measures; :func:`fedmc.run.evaluation.evaluate_model`), ``run ndcg@10`` with the
rows training left (none for the popularity list). Prints one Markdown row per setting.
"""

from __future__ import annotations

import argparse
import itertools
import math
import time

import numpy as np
from sweep import parse_value

from fedmc.core.ranking import ranking_metrics, ranking_sums
from fedmc.data import FederatedData, partition_users
from fedmc.data.interactions import as_interactions
from fedmc.data.registry import load_dataset
from fedmc.data.split import random_test_mask
from fedmc.estimators import FedALS, ItemBias
from fedmc.model import FactorModel
from fedmc.privacy.accounting import UserDP
from fedmc.run.evaluation import HeldOut, evaluate_model

K = 10


def validation_cut(seed: int) -> FederatedData:
    """The fitting and validation interactions (module docstring), one user per client."""
    inter = as_interactions(load_dataset("ml-1m"))
    train = inter.subset(~random_test_mask(inter, 0.2, seed))
    clients = partition_users(train.n_users, 1, "user", seed)
    return FederatedData.from_split(train, random_test_mask(train, 0.2, seed + 1), clients,
                                    "none")


def implicit_als(data: FederatedData, rank: int, alpha: float, lam: float, seed: int,
                 iterations: int = 15) -> tuple[np.ndarray, np.ndarray]:
    """The ``implicit`` library's ALS (conjugate gradient) on the training interactions of
    ``data``: user and item factors in fedmc's rows and columns."""
    import scipy.sparse as sp
    from implicit.cpu.als import AlternatingLeastSquares

    tr = data.train
    user_items = sp.csr_matrix((tr.values, tr.indices, tr.indptr),
                               shape=(data.n_users, data.n_items))
    model = AlternatingLeastSquares(factors=rank, regularization=lam, alpha=1.0 + alpha,
                                    iterations=iterations, random_state=seed)
    model.fit(user_items, show_progress=False)
    return (np.asarray(model.user_factors, dtype=np.float64),
            np.asarray(model.item_factors, dtype=np.float64))


def folded_in(model, data: FederatedData) -> dict[str, float]:
    """Ranking metrics of the published model (a fitted estimator's, or a run's
    ``FactorModel``), every user folded in from its fitting interactions (``fedmc
    evaluate``)."""
    held = HeldOut(data.train, data.test, np.arange(data.n_users), implicit=True)
    published = model if isinstance(model, FactorModel) else FactorModel.from_estimator(model)
    return evaluate_model(published, held, K)


def dp_settings(eps: float, clip: float) -> dict:
    """The estimators' user-level DP parameters at budget ``eps`` (inf: none), promised
    against outsiders (amplified by the sampling, as these grids measured before issue 38;
    with every client in every round, ``--participation 1``, the same as against the
    server)."""
    if math.isinf(eps):
        return {}
    return {"dp": UserDP(epsilon=eps, clip=clip, delta=1e-6, against="outsiders")}


def values(text: str) -> list:
    """The comma-separated values of an option, parsed."""
    return [parse_value(v) for v in text.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ranks", type=int, nargs="+", default=[32])
    parser.add_argument("--alphas", type=float, nargs="+", default=[2.0])
    parser.add_argument("--lams", type=float, nargs="+", default=[50.0])
    parser.add_argument("--rounds", type=int, nargs="+", default=[100])
    parser.add_argument("--participation", type=float, default=0.1)
    parser.add_argument("--skip-implicit", action="store_true")
    parser.add_argument("--eps", default="inf", help="DP budgets (inf: no DP)")
    parser.add_argument("--clip", default="1", help="DP clip norms of one upload")
    parser.add_argument("--fixed", action="append", default=[], help="KEY=VALUE")
    parser.add_argument("--grid", action="append", default=[], help="KEY=V1,V2,...")
    parser.add_argument("--popularity", action="store_true",
                        help="the (DP) popularity list instead of the factor models")
    args = parser.parse_args()
    fixed = {k: parse_value(v) for k, v in (f.split("=", 1) for f in args.fixed)}
    grid = {k: values(v) for k, v in (g.split("=", 1) for g in args.grid)}
    data = validation_cut(args.seed)
    print(f"fitting {data.train.nnz} / validation {data.test.nnz} interactions, "
          f"{data.n_users} users, {data.n_items} items\n")
    print("| setting | method | ndcg@10 | recall@10 | run ndcg@10 | epsilon | s |")
    print("|---" * 7 + "|", flush=True)
    dp_grid = list(itertools.product(values(args.eps), values(args.clip)))
    for (eps, clip), combo in itertools.product(dp_grid, itertools.product(*grid.values())):
        params = {**fixed, **dict(zip(grid, combo, strict=True))}
        dp = dp_settings(eps, clip)
        shown = ", ".join(f"{k}={v}" for k, v in params.items())
        budget = f"eps {eps:g}, clip {clip:g}" if dp else "no DP"
        if args.popularity:
            t0 = time.perf_counter()
            model = ItemBias(signal="counts", rounds=0, random_state=args.seed,
                             **params, **dp).fit(data)
            m = folded_in(model, data)
            spent = model.history_.rows[-1].get("epsilon", math.inf)
            print(f"| {budget}, {shown} | popularity | {m['ndcg@10']:.4f} | "
                  f"{m['recall@10']:.4f} | – | {spent:.3g} | {time.perf_counter() - t0:.1f} |",
                  flush=True)
            continue
        for rank, alpha, lam in itertools.product(args.ranks, args.alphas, args.lams):
            cells = f"| {budget}, rank {rank}, alpha {alpha:g}, lam {lam:g}, {shown} |"
            if not args.skip_implicit and not dp:
                t0 = time.perf_counter()
                U, V = implicit_als(data, rank, alpha, lam, args.seed)
                m = ranking_metrics(ranking_sums(data, U, V, K), K)
                print(f"{cells} implicit ALS, 15 iterations | – | – | {m['ndcg@10']:.4f} | – | "
                      f"{time.perf_counter() - t0:.1f} |", flush=True)
            for rounds in args.rounds:
                t0 = time.perf_counter()
                est = FedALS(implicit=True, rank=rank, alpha=alpha, lam=lam, rounds=rounds,
                             sampling="bernoulli", participation=args.participation,
                             eval_every=rounds, random_state=args.seed, **params,
                             **dp).fit(data)
                m = folded_in(est, data)
                run = est.ranking_metrics(data, K)
                spent = est.history_.rows[-1].get("epsilon", math.inf)
                print(f"{cells} fedals, {rounds} rounds | {m['ndcg@10']:.4f} | "
                      f"{m['recall@10']:.4f} | {run['ndcg@10']:.4f} | {spent:.3g} | "
                      f"{time.perf_counter() - t0:.1f} |", flush=True)


if __name__ == "__main__":
    main()

"""Choose federated ALS's implicit-feedback defaults on a validation cut of ML-1M's training
interactions: the test interactions are never looked at.

Run from the repository root with the MovieLens files in ``$FEDMC_DATA``::

    pip install implicit   # the benchmark's only extra; not a dependency of fedmc
    FEDMC_DATA=../shared/data python benchmarks/tune_fedals.py --ranks 32 --alphas 1 2 4 \\
        --lams 1 5 20 --rounds 50 100

The split is the pipeline's (``fedmc run --implicit --dataset ml-1m``: every rating an
interaction, a random 80/20 split with ``--seed``); its training interactions are cut again,
20% at random (seed ``seed + 1``), into a fitting part and a validation part. Every setting
is fitted on the fitting part and scored by NDCG@10 (and recall@10) on the validation part with
fedmc's evaluator (:mod:`fedmc.core.ranking`): federated ALS with one user per client, each
client in a round with probability 0.1 (the run protocol), and the ``implicit`` library's ALS
at the same rank and regularization, its confidence ``alpha_implicit = 1 + alpha`` (its
confidence of a click is ``alpha_implicit``, ours ``1 + alpha``), 15 iterations. Prints one
Markdown row per setting.
"""

from __future__ import annotations

import argparse
import itertools
import time

import numpy as np

from fedmc.algorithms.fedals import FedALS
from fedmc.core.ranking import ranking_metrics, ranking_sums
from fedmc.data import FederatedData, partition_users
from fedmc.data.interactions import as_interactions
from fedmc.data.registry import load_dataset
from fedmc.data.split import random_test_mask

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ranks", type=int, nargs="+", default=[32])
    parser.add_argument("--alphas", type=float, nargs="+", default=[2.0])
    parser.add_argument("--lams", type=float, nargs="+", default=[5.0])
    parser.add_argument("--rounds", type=int, nargs="+", default=[100])
    parser.add_argument("--participation", type=float, default=0.1)
    parser.add_argument("--skip-implicit", action="store_true")
    args = parser.parse_args()
    data = validation_cut(args.seed)
    print(f"fitting {data.train.nnz} / validation {data.test.nnz} interactions, "
          f"{data.n_users} users, {data.n_items} items\n")
    print("| rank | alpha | lam | method | ndcg@10 | recall@10 | s |")
    print("|---" * 7 + "|", flush=True)
    for rank, alpha, lam in itertools.product(args.ranks, args.alphas, args.lams):
        cells = f"| {rank} | {alpha:g} | {lam:g} |"
        if not args.skip_implicit:
            t0 = time.perf_counter()
            U, V = implicit_als(data, rank, alpha, lam, args.seed)
            m = ranking_metrics(ranking_sums(data, U, V, K), K)
            print(f"{cells} implicit ALS, 15 iterations | {m['ndcg@10']:.4f} | "
                  f"{m['recall@10']:.4f} | {time.perf_counter() - t0:.1f} |", flush=True)
        for rounds in args.rounds:
            t0 = time.perf_counter()
            est = FedALS(implicit=True, rank=rank, alpha=alpha, lam=lam, rounds=rounds,
                         sampling="bernoulli", participation=args.participation,
                         eval_every=rounds, random_state=args.seed).fit(data)
            m = est.ranking_metrics(data, K)
            print(f"{cells} fedals, {rounds} rounds | {m['ndcg@10']:.4f} | "
                  f"{m['recall@10']:.4f} | {time.perf_counter() - t0:.1f} |", flush=True)


if __name__ == "__main__":
    main()

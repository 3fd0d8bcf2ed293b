"""Acceptance 2 of the tuning issue: ``fedmc tune`` for federated ALS on interactions against
the ``implicit`` library's ALS tuned on a validation cut of the same training data, both
scored on the seed-0 test split with one NDCG definition.

Run from the repository root with the MovieLens files in ``$FEDMC_DATA``::

    pip install implicit==0.7.3   # the benchmark's only extra; not a dependency of fedmc
    FEDMC_DATA=../shared/data fedmc tune --algorithm fedals --implicit --dataset ml-100k \\
        --trials 20 --out runs/tuned-ml-100k
    FEDMC_DATA=../shared/data python benchmarks/bench_tune.py --dataset ml-100k \\
        --tuned runs/tuned-ml-100k

The split is the run's (``--implicit --dataset NAME``: every rating an interaction, the
random 80/20 split of ``--seed``). ``implicit``'s ALS (conjugate gradient, 15 iterations, its
confidence ``1 + alpha``) is tuned over ``--factors`` x ``--regs`` x ``--alphas`` on the same
validation cut ``fedmc tune`` uses (``--validation-fraction``, 0.2 as its default: fedmc's own
cut of the training interactions), refitted on every training interaction with the best setting, and
its top-10 lists scored on the test interactions; the tuned run's model (``TUNED/best``) is
scored with every test user folded in from its training interactions (``fedmc evaluate``).
Both with NDCG's two common rank weights: ``1/log2(i+1)`` (the usual one, which the issue's
reference numbers use) and LensKit's ``1/max(1, log2 i)`` (fedmc's ``ndcg@10``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path

import numpy as np

from fedmc.algorithms.registry import spec
from fedmc.core.ranking import list_metrics, top_n
from fedmc.core.shard import CSR
from fedmc.model import load_model
from fedmc.run.data import federated_data
from fedmc.run.data_settings import DataSettings
from fedmc.run.evaluation import HeldOut, held_out_split

K = 10


def ndcgs(U: np.ndarray, V: np.ndarray, seen: CSR, test: CSR) -> tuple[float, float]:
    """NDCG@K of every user with test items, with weights ``1/log2(i+1)`` and LensKit's."""
    items, _ = top_n(np.ascontiguousarray(U), np.ascontiguousarray(V), seen.indptr,
                     seen.indices, K)
    lenskit = list_metrics(items, test.indptr, test.indices)
    weight = 1.0 / np.log2(np.arange(2, K + 2))
    scores = []
    for t in range(len(items)):
        mine = test.indices[test.indptr[t]:test.indptr[t + 1]]
        if len(mine) == 0 or items[t, 0] < 0:
            continue
        hits = np.isin(items[t], mine) & (items[t] >= 0)
        scores.append(weight[hits].sum() / weight[:min(len(mine), K)].sum())
    return float(np.mean(scores)), float(lenskit[lenskit[:, 5] > 0, 2].mean())


def implicit_als(train: CSR, n_items: int, factors: int, reg: float, alpha: float,
                 seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``implicit``'s ALS on ``train`` (15 iterations, confidence ``1 + alpha``)."""
    import scipy.sparse as sp
    from implicit.cpu.als import AlternatingLeastSquares

    user_items = sp.csr_matrix((train.values, train.indices, train.indptr),
                               shape=(len(train.indptr) - 1, n_items))
    model = AlternatingLeastSquares(factors=factors, regularization=reg, alpha=1.0 + alpha,
                                    iterations=15, random_state=seed)
    model.fit(user_items, show_progress=False)
    return (np.asarray(model.user_factors, dtype=np.float64),
            np.asarray(model.item_factors, dtype=np.float64))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="ml-100k")
    parser.add_argument("--tuned", type=Path, help="the output folder of fedmc tune")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--validation-fraction", type=float, default=0.2)
    parser.add_argument("--factors", type=int, nargs="+", default=[32, 64, 128])
    parser.add_argument("--regs", type=float, nargs="+", default=[1, 5, 20, 50, 100])
    parser.add_argument("--alphas", type=float, nargs="+", default=[1, 2, 5, 10])
    args = parser.parse_args()
    settings = DataSettings(dataset=args.dataset, implicit=True, partition="user",
                            seed=args.seed)
    full, _ = federated_data(settings)
    cut, _ = federated_data(settings.model_copy(
        update={"validation_fraction": args.validation_fraction}))
    print(f"| method | setting | ndcg@{K} (1/log2(i+1)) | ndcg@{K} (LensKit) | s |")
    print("|---" * 5 + "|", flush=True)
    best = None
    for factors, reg, alpha in itertools.product(args.factors, args.regs, args.alphas):
        U, V = implicit_als(cut.train, cut.n_items, factors, reg, alpha, args.seed)
        score = ndcgs(U, V, cut.train, cut.validation)[0]
        if best is None or score > best[0]:
            best = (score, factors, reg, alpha)
    assert best is not None
    _, factors, reg, alpha = best
    t0 = time.perf_counter()
    U, V = implicit_als(full.train, full.n_items, factors, reg, alpha, args.seed)
    seconds = time.perf_counter() - t0
    usual, lenskit = ndcgs(U, V, full.train, full.test)
    print(f"| implicit 0.7.3 ALS, tuned on the cut (validation ndcg {best[0]:.4f}) | factors "
          f"{factors}, regularization {reg:g}, alpha {alpha:g} | {usual:.4f} | {lenskit:.4f} | "
          f"{seconds:.1f} |", flush=True)
    if args.tuned is not None:
        model = load_model(args.tuned / "best")
        config = json.loads((args.tuned / "best" / "config.json").read_text())
        held: HeldOut = held_out_split(model, config["data"])
        U = spec(model.algorithm).fold_in_users(model.config, model.V, held.train)
        usual, lenskit = ndcgs(U, model.V, held.train, held.test)
        chosen = json.loads((args.tuned / "best.json").read_text())
        summary = json.loads((args.tuned / "best" / "summary.json").read_text())
        shown = ", ".join(f"{k} {_shown(v)}" for k, v in chosen["settings"].items())
        print(f"| fedals, fedmc tune (validation {chosen['metric']} {chosen['value']:.4f}) | "
              f"{shown}, {chosen['best_round']} rounds | {usual:.4f} | {lenskit:.4f} | "
              f"{summary['train_seconds']:.1f} |")


def _shown(value: object) -> str:
    """A setting as chosen: a number to four digits, a choice (typed text) as it is."""
    return f"{value:.4g}" if isinstance(value, int | float) else str(value)


if __name__ == "__main__":
    main()

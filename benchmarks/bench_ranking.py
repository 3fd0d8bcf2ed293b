"""Top-10 ranking quality on MovieLens 1M: fedmc's factor models beside cornac's, on one split.

Run from the repository root with the MovieLens files in ``$FEDMC_DATA``::

    pip install cornac implicit   # the benchmark's only extras; not dependencies of fedmc
    FEDMC_DATA=../shared/data python benchmarks/bench_ranking.py [--seed 0] [--split random]

Every method is trained on the training ratings of the same split (fedmc's pipeline: ML-1M,
80/20 random split by rating or per-user holdout; 100 clients, 10 per round, for FedMC-ADMM;
one user per client, all of them every round, 400 rounds, for RFRec as in ``docs/rfrec.md``;
one user per client, each in a round with probability 0.1, for federated ALS, on the ratings
and on the same ratings read as interactions, ``--implicit``, whose split holds out the same
pairs) and scored by one evaluator, :func:`fedmc.core.ranking.ranking_sums` (LensKit's definitions,
``docs/model.md``): each user's top 10 among the items it has not rated in training, against
its test items. cornac's models are turned into the same ``U V^T`` layout (their biases in the
bias columns), so the lists are ranked, and ties broken, the same way; so are the ``implicit``
library's ALS factors (trained on the interactions, at federated ALS's rank, regularization and
confidence of a click). Prints one Markdown table: test RMSE where the method predicts ratings,
the ranking metrics, training seconds.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from tune_fedals import implicit_als  # benchmarks/ is the script's folder

from fedmc.algorithms.fedals import FedALSConfig
from fedmc.api import load_federated
from fedmc.core.ranking import ranking_metrics, ranking_sums
from fedmc.data import FederatedData
from fedmc.estimators import ALS, FedALS, FedMCADMM, RFRec

K = 10


def rmse(data: FederatedData, U: np.ndarray, V: np.ndarray, offset: float = 0.0) -> float:
    """Test RMSE on the 1-5 scale of predictions ``offset + U[t] . V[j]`` (clipped)."""
    te = data.test
    rows = te.rows()
    pred = np.clip(offset + np.einsum("ij,ij->i", U[rows], V[te.indices]), 1.0, 5.0)
    truth = data.normalizer.inverse(te.values)
    return float(np.sqrt(np.mean((pred - truth) ** 2)))


def cornac_factors(model, data: FederatedData, biases: str) -> tuple[np.ndarray, np.ndarray]:
    """A fitted cornac model as ``U V^T`` over fedmc's rows and columns: ``[u | b_u | 1]`` and
    ``[v | 1 | b_i]``; items cornac never saw (only in test) get a score of -inf."""
    ts = model.train_set
    rows = np.array([ts.uid_map[u] for u in data.user_ids.tolist()])
    known = np.array([i in ts.iid_map for i in data.item_ids.tolist()])
    cols = np.array([ts.iid_map.get(i, 0) for i in data.item_ids.tolist()])
    k = model.u_factors.shape[1]
    b_u = model.u_biases[rows] if biases == "both" else np.zeros(len(rows))
    b_i = np.where(known, model.i_biases[cols], -np.inf)
    U = np.column_stack((model.u_factors[rows], b_u, np.ones(len(rows))))
    V = np.column_stack((np.where(known[:, None], model.i_factors[cols], 0.0),
                         np.ones(len(cols)), b_i))
    assert U.shape[1] == V.shape[1] == k + 2
    return U, V


def implicit_version() -> str:
    """The installed ``implicit`` library's version."""
    import implicit

    return implicit.__version__


def fit_cornac(model, data: FederatedData):
    """Train a cornac model on the training ratings of ``data`` (raw ids, original scale)."""
    import cornac

    tr = data.train
    triples = list(zip(data.user_ids[tr.rows()].tolist(), data.item_ids[tr.indices].tolist(),
                       data.normalizer.inverse(tr.values).tolist(), strict=True))
    return model.fit(cornac.data.Dataset.from_uir(triples, seed=0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--split", choices=("random", "user"), default="random")
    parser.add_argument("--only", help="run only the methods whose label holds this text "
                        "(and popularity)")
    args = parser.parse_args()
    from cornac.models import BPR, MF

    data = load_federated("ml-1m", clients=100, split=args.split, seed=args.seed)
    results: list[tuple[str, float, dict[str, float], float]] = []

    def wanted(label: str) -> bool:
        return args.only is None or args.only in label

    def record(label: str, U, V, seconds: float, error: float = float("nan"),
               on: FederatedData = data) -> None:
        """Score the factors ``U`` (rows in the order of ``on``) and ``V``."""
        metrics = ranking_metrics(ranking_sums(on, U, V, K), K)
        results.append((label, error, metrics, seconds))
        print(f"done: {label}", flush=True)

    counts = np.bincount(data.train.indices, minlength=data.n_items).astype(float)
    record("popularity (most rated in training)", np.ones((data.n_users, 1)), counts[:, None],
           0.0)
    one_per_client = load_federated("ml-1m", partition="user", split=args.split, seed=args.seed)
    clicks = load_federated("ml-1m", partition="user", split=args.split, seed=args.seed,
                            implicit=True)
    assert np.array_equal(clicks.test.indices, one_per_client.test.indices)  # the same pairs
    tenth = {"rounds": 100, "sampling": "bernoulli", "participation": 0.1, "eval_every": 100,
             "random_state": args.seed}
    implicit_cfg = FedALSConfig(implicit=True)
    rank, alpha, lam = implicit_cfg.rank, implicit_cfg.alpha, implicit_cfg.lam
    for label, est, federation in (
        ("fedmc-admm (defaults: rank 8, 100 rounds, 10 of 100 clients)",
         FedMCADMM(rounds=100, active=10, random_state=args.seed), data),
        ("rfrec (defaults: rank 20, Adam, 400 rounds, every one of 6,040 one-user clients)",
         RFRec(rounds=400, eval_every=400, random_state=args.seed), one_per_client),
        ("als (defaults: rank 10, 15 sweeps, centralized)", ALS(random_state=args.seed), data),
        ("fedals (defaults: rank 10, 100 rounds, one-user clients w.p. 0.1 per round)",
         FedALS(**tenth), one_per_client),
        ("fedals, every one-user client every round, 15 rounds",
         FedALS(rounds=15, eval_every=15, random_state=args.seed), one_per_client),
        (f"fedals --implicit (defaults: rank {rank}, alpha {alpha:g}, lambda {lam:g}, 100 "
         "rounds, one-user clients w.p. 0.1 per round)", FedALS(implicit=True, **tenth), clicks),
    ):
        if not wanted(label):
            continue
        t0 = time.perf_counter()
        est.fit(federation)
        seconds = time.perf_counter() - t0
        metrics = est.ranking_metrics(federation, K)  # the same split; rows in its own order
        error = est.history_.rows[-1].get("test_rmse", float("nan"))  # none for clicks
        results.append((label, error, metrics, seconds))
        print(f"done: {label}", flush=True)
    label = (f"implicit {implicit_version()} ALS (factors {rank}, alpha {1 + alpha:g}, "
             f"regularization {lam:g}, 15 iterations, centralized)")
    if wanted(label):
        t0 = time.perf_counter()
        U, V = implicit_als(clicks, rank, alpha, lam, args.seed)
        record(label, U, V, time.perf_counter() - t0, on=clicks)
    for label, model, biases in (
        ("cornac MF (k=10, 25 epochs SGD, lr 0.01, reg 0.02, biases)",
         MF(k=10, max_iter=25, learning_rate=0.01, lambda_reg=0.02, use_bias=True,
            seed=args.seed), "both"),
        ("cornac BPR (k=10, 200 epochs, lr 0.001, reg 0.01)",
         BPR(k=10, max_iter=200, learning_rate=0.001, lambda_reg=0.01, seed=args.seed),
         "item"),
        (f"cornac BPR (k={rank}, the same settings)",
         BPR(k=rank, max_iter=200, learning_rate=0.001, lambda_reg=0.01, seed=args.seed),
         "item"),
    ):
        if not wanted(label):
            continue
        t0 = time.perf_counter()
        fit_cornac(model, data)
        seconds = time.perf_counter() - t0
        U, V = cornac_factors(model, data, biases)
        error = rmse(data, U, np.where(np.isfinite(V), V, 0.0), model.global_mean) if (
            biases == "both") else float("nan")
        record(label, U, V, seconds, error)

    names = [f"{m}@{K}" for m in ("ndcg", "recall", "precision", "map", "hit_rate",
                                  "coverage")]
    print(f"\nML-1M, {args.split} split, seed {args.seed}, {data.n_users} users, "
          f"{data.n_items} items, {data.train.nnz} train / {data.test.nnz} test ratings\n")
    print("| method | test RMSE | " + " | ".join(names) + " | train s |")
    print("|---" * (len(names) + 3) + "|")
    for label, error, metrics, seconds in results:
        cells = [f"{metrics[n]:.4f}" for n in names]
        rmse_text = f"{error:.4f}" if np.isfinite(error) else "–"
        print(f"| {label} | {rmse_text} | " + " | ".join(cells) + f" | {seconds:.1f} |")


if __name__ == "__main__":
    main()

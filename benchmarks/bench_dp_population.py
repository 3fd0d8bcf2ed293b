"""DP defaults against the DP baseline by population (issue 27, item 5): how many enrolled users
the factor model's per-budget DP defaults need to beat the DP item-bias baseline (ratings) or
the DP popularity list (interactions) at the same budget.

``validate`` draws populations of several sizes from ML-1M's seed-0 *training* ratings, less
every rating of the users of the acceptance sample (``sample --users 600 --seed 0``, whose own
80/20 split is a test split of the acceptance table), cuts each population's ratings 90/10 into
fitting and validation parts (seed ``100 + draw``) and runs, at each budget, what ``fedmc run
--dp-epsilon E`` runs for each algorithm named (its DP defaults, one user per client, secret
noise), scored by the fold-in (``fedmc evaluate``: RMSE for ratings, NDCG@10 with
``--implicit``); ``--set KEY=V1,V2`` (repeatable) gives every run those settings as a user
would, every combination in turn (how the settings for fewer users were chosen). No test
rating of any acceptance cell is read. One JSON line per run.

``table`` prints the acceptance table from run folders ``DIR/<data>-<default|baseline>-e<E>-r<R>``
(each run then ``fedmc evaluate``: ``evaluation.json``), the test metric's mean ± standard
deviation [smallest, largest] per cell, what the default fitted (where it is the baseline, the
same run with other noise), and in how many paired runs the default was not worse than the
baseline.

``sample`` writes the ratings of ``--users`` users of ML-1M drawn at random (``--seed``) to a
CSV file (``user,item,rating``): the acceptance table's small data set, run with ``fedmc run
--ratings FILE --rating-scale 1,5``.

Examples (``FEDMC_DATA=../shared/data``, from the repository root)::

    python benchmarks/bench_dp_population.py validate --users 300,600,1200,2400 \\
        --eps 1,2,4,8 --draws 2
    python benchmarks/bench_dp_population.py validate --implicit --users 600,2400 \\
        --eps 2,8 --algorithms fedals,item-bias
    python benchmarks/bench_dp_population.py validate --users 600,1200 --eps 8 --draws 2 \\
        --algorithms fedmc-admm --set offset_lam=2,4 --set rounds=30,90
    python benchmarks/bench_dp_population.py sample --users 600 --seed 0 --out /tmp/ml1m-600.csv
    python benchmarks/bench_dp_population.py table --runs runs/dp-population
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import re
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from bench_privacy_utility import folded_in_rmse
from tune_fedals import folded_in

from fedmc.data import FederatedData, Ratings, partition_users
from fedmc.data.interactions import as_interactions
from fedmc.data.split import random_test_mask
from fedmc.run.data import DataSettings, load_ratings
from fedmc.run.options import RunOptions
from fedmc.run.runner import execute
from fedmc.run.settings import resolve

ML_1M = DataSettings(dataset="ml-1m")


def drawn_users(ratings: Ratings, n: int, seed: int) -> np.ndarray:
    """Whether each rating's user is one of ``n`` users drawn at random (``seed``)."""
    chosen = np.random.default_rng(seed).choice(ratings.n_users, size=n, replace=False)
    return np.isin(ratings.users, chosen)


def ratings_of(ratings: Ratings, mask: np.ndarray) -> Ratings:
    """The ratings ``mask`` selects, re-indexed: only their users and items remain."""
    return Ratings.from_raw(ratings.user_ids[ratings.users[mask]],
                            ratings.item_ids[ratings.items[mask]], ratings.values[mask],
                            name=ratings.name, meta=ratings.meta)


def validation_pool(acceptance_users: int, acceptance_seed: int) -> Ratings:
    """ML-1M's seed-0 training ratings less those of the acceptance sample's users."""
    ratings = load_ratings(ML_1M)
    kept = ~random_test_mask(ratings, 0.2, 0) & ~drawn_users(ratings, acceptance_users,
                                                               acceptance_seed)
    return ratings_of(ratings, kept)


def validation_cut(pool: Ratings, n: int, draw: int, implicit: bool) -> FederatedData:
    """``n`` users of ``pool`` (draw ``draw``), their ratings cut 90/10, one user per
    client, the public normalizer (none for interactions)."""
    ratings = ratings_of(pool, drawn_users(pool, n, 1000 + draw))
    if implicit:
        ratings = as_interactions(ratings)
    clients = partition_users(ratings.n_users, 1, "user", draw)
    settings = DataSettings(dataset="ml-1m", partition="user",
                            normalize="none" if implicit else "public")
    return FederatedData.from_split(ratings, random_test_mask(ratings, 0.1, 100 + draw),
                                    clients, settings.normalizer_kind,
                                    None if implicit else settings.public_scale())


def score(algorithm: str, eps: float, data: FederatedData, implicit: bool,
          given: dict[str, Any] | None = None) -> dict:
    """One private run with ``algorithm``'s DP defaults at ``eps`` for the users of ``data``
    (``fedmc run --algorithm A --dp-epsilon E``; ``default``: the algorithm ``fedmc run
    --dp-epsilon E`` chooses), with the settings ``given`` as a user would give them (run
    options by name, the algorithm's parameters otherwise), scored by the fold-in."""
    named = None if algorithm == "default" else algorithm
    given = given or {}
    options = {k: v for k, v in given.items() if k in RunOptions.model_fields}
    params = {k: v for k, v in given.items() if k not in options}
    spec = resolve(RunOptions(algorithm=named, dataset="ml-1m", partition="user",
                              dp_epsilon=eps, implicit=implicit, params=params, **options),
                   lambda _: data.n_users)
    start = time.perf_counter()
    result = execute(spec, loaded=(data, {}))
    metric = ({"ndcg@10": round(folded_in(result.artifact, data)["ndcg@10"], 4)} if implicit
              else {"rmse": round(folded_in_rmse(result.artifact, data), 4)})
    return {**metric, "fitted": spec.algorithm, "seconds": round(time.perf_counter() - start, 1)}


def grid(settings: list[str]) -> list[dict[str, Any]]:
    """Every combination of ``--set KEY=V1,V2`` values (numbers where they parse as one)."""
    axes = []
    for item in settings:
        key, _, values = item.partition("=")
        axes.append([(key, number(v)) for v in values.split(",")])
    return [dict(point) for point in itertools.product(*axes)]


def number(text: str) -> Any:
    """``text`` as an int or a float where it is one, else as it is."""
    for kind in (int, float):
        with contextlib.suppress(ValueError):
            return kind(text)
    return text


def table(runs: Path, metric: str) -> None:
    """The acceptance table (module docstring) of the run folders under ``runs``."""
    cells: dict[tuple[str, float], dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for folder in sorted(runs.iterdir()):
        found = re.fullmatch(r"(.+)-(default|baseline)-e([\d.]+)-r(\d+)", folder.name)
        if found is None or not (folder / "evaluation.json").exists():
            continue
        data, kind, eps, _ = found.groups()
        value = json.loads((folder / "evaluation.json").read_text())[metric]
        fitted = json.loads((folder / "config.json").read_text())["algorithm"]
        cells[(data, float(eps))][kind].append((folder.name, value, fitted))
    better = 1 if metric.startswith("ndcg") else -1
    print(f"| data | epsilon | default fits | default {metric} | DP baseline | default not "
          f"worse (paired) |\n|---|---|---|---|---|---|")
    for (data, eps), cell in sorted(cells.items()):
        own = [v for _, v, _ in cell["default"]]
        base = [v for _, v, _ in cell["baseline"]]
        fitted = {f for _, _, f in cell["default"]}
        held = sum(better * (a - b) >= 0 for a, b in zip(own, base, strict=False))
        same = fitted == {f for _, _, f in cell["baseline"]}  # the baseline's own settings
        print(f"| {data} | {eps:g} | {', '.join(sorted(fitted))} | {spread(own)} | "
              f"{spread(base)} | {held} of {min(len(own), len(base))}"
              f"{' (the baseline itself)' if same else ''} |")


def spread(values: list[float]) -> str:
    """Mean ± standard deviation [smallest, largest], 4 decimals."""
    v = np.asarray(values)
    return (f"{v.mean():.4f} ± {v.std(ddof=1) if len(v) > 1 else 0:.4f} "
            f"[{v.min():.4f}, {v.max():.4f}]")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("validate", "sample", "table"))
    ap.add_argument("--users", default="600", help="population sizes (comma-separated)")
    ap.add_argument("--eps", default="1,2,4,8", help="budgets")
    ap.add_argument("--draws", type=int, default=1, help="populations drawn per size")
    ap.add_argument("--implicit", action="store_true", help="interactions (NDCG@10)")
    ap.add_argument("--algorithms", default="fedmc-admm,item-bias")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=V1,V2",
                    help="validate: settings given to every algorithm named, every "
                         "combination in turn (repeatable)")
    ap.add_argument("--seed", type=int, default=0, help="the acceptance sample's draw")
    ap.add_argument("--acceptance-users", type=int, default=600)
    ap.add_argument("--out", type=Path, help="sample: the CSV file to write")
    ap.add_argument("--runs", type=Path, help="table: the folder of the run folders")
    ap.add_argument("--metric", default="test_rmse", help="table: evaluation.json's metric")
    args = ap.parse_args()
    if args.what == "table":
        table(args.runs, args.metric)
        return
    if args.what == "sample":
        ratings = load_ratings(ML_1M)
        mask = drawn_users(ratings, int(args.users), args.seed)
        rows = np.column_stack([ratings.user_ids[ratings.users[mask]],
                                ratings.item_ids[ratings.items[mask]], ratings.values[mask]])
        np.savetxt(args.out, rows, fmt=["%d", "%d", "%g"], delimiter=",",
                   header="user,item,rating", comments="")
        return
    pool = validation_pool(args.acceptance_users, args.seed)
    for n in (int(v) for v in args.users.split(",")):
        for draw in range(args.draws):
            data = validation_cut(pool, n, draw, args.implicit)
            for eps in (float(v) for v in args.eps.split(",")):
                for algorithm in args.algorithms.split(","):
                    for given in grid(args.set):
                        print(json.dumps({"users": n, "draw": draw, "eps": eps,
                                          "algorithm": algorithm, **given,
                                          **score(algorithm, eps, data, args.implicit,
                                                  given)}), flush=True)


if __name__ == "__main__":
    main()

"""The canary audit: an empirical lower bound on the epsilon of everything a run publishes.

Two neighbouring data sets differ in one user's data, the *canary*'s: its ratings are in
``D_in`` and absent from ``D_out`` (its client stays enrolled: the zero-out neighbours of
``docs/privacy.md``), everyone else's ratings, split and partition identical. The run is
repeated ``runs`` times on each, the way ``fedmc run`` runs it, and every file it publishes
(``config.json``, ``history.csv``, ``summary.json``, ``model.json``, ``model.npz``, a
federation's ``progress.jsonl`` and a private search's ``best.json``) is read back. A
distinguisher guesses from one run's files which data set it saw; if a run is ``(epsilon,
delta)``-DP, no test does better than ``TPR <= e^epsilon FPR + delta`` (and the same with the
roles swapped), so a test's observed rates bound epsilon from below.

The candidate tests are

* one per published value (a JSON entry, a CSV column, an array): "in" when it takes a value
  seen only in ``D_in``'s runs (a deterministic leak: a count, an exact metric, a model that
  depends on the data without noise);
* the canary's own loss: the canary folds itself in from its ratings with the published model
  (what anyone who knows its ratings can do) and scores them; "in" when the loss is below a
  threshold (a membership-inference test on the model).

The first ``calibration`` share of each data set's runs chooses one test (and its threshold);
the rest evaluate it, so the bound needs no correction for the choice.

The server's view (:func:`server_view`, :func:`server_view_bound`) is audited the same way on
what the server step is handed instead of the published files: every exchange's noised cohort
sum, reduced to the canary's rows. With one-sided
Clopper-Pearson intervals at ``confidence`` (split between the two rates), the lower bound is
``log((TPR_low - delta) / FPR_high)``, the larger of the two directions.
"""

from __future__ import annotations

import csv
import json
import math
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from fedmc.data import FederatedData, Ratings
from fedmc.data.partition import partition_users
from fedmc.model import load_model

Artifacts = dict[str, Any]  # one run's published values by name, and its canary loss


@dataclass(frozen=True)
class Canary:
    """The audited user: its ratings of some items (dense item indices of the base data)."""

    items: np.ndarray
    ratings: np.ndarray


def pick_canary(ratings: Ratings, n_items: int = 20, seed: int = 0) -> Canary:
    """A canary that stands out: among the items rated by at least two users, the ``n_items``
    rated least, each rated at the end of the scale opposite to its mean rating."""
    counts = np.bincount(ratings.items, minlength=ratings.n_items)
    sums = np.bincount(ratings.items, weights=ratings.values, minlength=ratings.n_items)
    lo, hi = float(ratings.values.min()), float(ratings.values.max())
    rated = np.flatnonzero(counts >= 2)
    order = rated[np.lexsort((np.random.default_rng(seed).random(len(rated)), counts[rated]))]
    items = np.sort(order[:n_items])
    means = sums[items] / counts[items]
    return Canary(items.astype(np.int32), np.where(means > 0.5 * (lo + hi), lo, hi))


def neighbours(ratings: Ratings, canary: Canary, test_fraction: float, seed: int,
               normalize: str, scale: tuple[float, float] | None,
               validation_fraction: float = 0.0) -> tuple[FederatedData, FederatedData]:
    """``D_in`` and ``D_out``: ``ratings`` plus a new user, one user per client, split at
    random per rating with ``seed`` (the same split of everyone else's ratings in both); the
    canary's ratings are all training ratings of ``D_in`` and absent from ``D_out``, where its
    client holds none. With ``validation_fraction``, everyone else's training ratings keep
    back about that share as their validation cut (the same in both; a private search's)."""
    from fedmc.data.split import random_test_mask
    from fedmc.run.data import validation_mask
    from fedmc.run.data_settings import DataSettings

    base_test = random_test_mask(ratings, test_fraction, seed)
    # the cut a run with this seed draws
    cut = validation_mask(ratings, base_test, DataSettings(
        seed=seed, validation_fraction=validation_fraction))

    canary_user = ratings.n_users
    n = len(canary.items)
    user_ids = None if ratings.user_ids is None else np.append(
        ratings.user_ids, ratings.user_ids.max() + 1)
    worlds = []
    for present in (True, False):
        k = n if present else 0
        both = Ratings(
            users=np.concatenate([ratings.users, np.full(k, canary_user, np.int32)]),
            items=np.concatenate([ratings.items, canary.items[:k]]).astype(np.int32),
            values=np.concatenate([ratings.values, canary.ratings[:k]]),
            n_users=ratings.n_users + 1, n_items=ratings.n_items, user_ids=user_ids,
            item_ids=ratings.item_ids, name=ratings.name)
        is_test = np.concatenate([base_test, np.zeros(k, dtype=bool)])
        is_validation = None if cut is None else np.concatenate([cut, np.zeros(k, dtype=bool)])
        clients = partition_users(both.n_users, 1, "user", seed)
        worlds.append(FederatedData.from_split(both, is_test, clients, normalize, scale,
                                               is_validation=is_validation))
    return worlds[0], worlds[1]


def read_artifacts(folder: Path, canary: Canary) -> Artifacts:
    """Every value a run's folder publishes, by name (JSON entries by their path, a CSV's
    columns, the arrays of ``model.npz``), and the canary's loss under the published model."""
    values: Artifacts = {}
    for name in ("config.json", "summary.json", "model.json", "best.json"):
        path = folder / name
        if path.exists():
            values.update(_flat(json.loads(path.read_text()), name))
    with open(folder / "history.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    for column in rows[0]:
        values[f"history.csv:{column}"] = tuple(row[column] for row in rows)
    progress = folder / "progress.jsonl"
    if progress.exists():  # a federation's: every line's values by event and position
        for k, line in enumerate(progress.read_text().splitlines()):
            values.update(_flat(json.loads(line), f"progress.jsonl:{k}"))
    with np.load(folder / "model.npz", allow_pickle=False) as npz:
        values.update({f"model.npz:{k}": npz[k].tobytes() for k in npz.files})
    model = load_model(folder)
    items = model.item_ids[canary.items]
    me = model.fold_in(items, canary.ratings)
    values[LOSS] = float(np.mean((model.predict(me, items) - canary.ratings) ** 2))
    return values


LOSS = "canary loss"
"""The name of the canary's loss among a run's values."""


def _flat(doc: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    """``(path, value)`` of every leaf of a JSON document (lists kept whole)."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from _flat(value, f"{prefix}:{key}")
    else:
        yield prefix, json.dumps(doc, sort_keys=True)


@dataclass(frozen=True)
class Bound:
    """The audit's result: the test chosen on the calibration runs, the rates it got on the
    evaluation runs and the lower bound on epsilon they give (0 when no test separates)."""

    test: str
    tpr: float
    fpr: float
    epsilon: float
    runs: int


def epsilon_lower_bound(inside: list[Artifacts], outside: list[Artifacts],
                        calibration: float = 0.2, *, confidence: float = 0.95,
                        delta: float = 0.0) -> Bound:
    """The lower bound of the module docstring from the runs on ``D_in`` (``inside``) and
    ``D_out`` (``outside``): the candidate tests of the published files, one chosen on the
    calibration runs."""
    cut = max(1, int(calibration * min(len(inside), len(outside))))
    return _chosen_bound(_candidate_tests(inside[:cut], outside[:cut]), inside[cut:],
                         outside[cut:], confidence, delta)


Test = tuple[float, Callable[[Artifacts], bool]]  # its score on the calibration runs, the test


def _chosen_bound(tests: dict[str, Test], inside: list[Artifacts], outside: list[Artifacts],
                  confidence: float, delta: float) -> Bound:
    """The bound of the one test of ``tests`` that separated the calibration runs best
    (ties: the first), evaluated on the other runs ``inside`` and ``outside`` alone: one
    test, so the bound needs no correction for the choice."""
    if not tests:
        return Bound("none", 0.0, 0.0, 0.0, len(inside))
    name = max(tests, key=lambda n: tests[n][0])
    return _evaluated(name, tests[name][1], inside, outside, confidence, delta)


def _evaluated(name: str, guess: Callable[[Artifacts], bool], inside: list[Artifacts],
               outside: list[Artifacts], confidence: float, delta: float) -> Bound:
    """The lower bound one test's rates on the evaluation runs give (module docstring), in
    the better of its two directions."""
    alpha = (1.0 - confidence) / 2.0  # one side each for the two rates
    hits_in = sum(guess(a) for a in inside)
    hits_out = sum(guess(a) for a in outside)
    n_in, n_out = len(inside), len(outside)
    best = Bound(name, hits_in / n_in, hits_out / n_out, 0.0, n_in)
    for tp, n_p, fp, n_n in ((hits_in, n_in, hits_out, n_out),
                             (n_out - hits_out, n_out, n_in - hits_in, n_in)):
        low = stats.beta.ppf(alpha, tp, n_p - tp + 1) if tp > 0 else 0.0
        high = stats.beta.ppf(1 - alpha, fp + 1, n_n - fp) if fp < n_n else 1.0
        eps = math.log((low - delta) / high) if low > delta else 0.0
        if eps > best.epsilon:
            best = Bound(name, tp / n_p, fp / n_n, eps, n_p)
    return best


def _value_in(name: str, values: frozenset[Any]) -> Callable[[Artifacts], bool]:
    """The test that a run's published value ``name`` is one of ``values``."""
    return lambda a: a.get(name) in values


def _threshold_test(name: str, inside: list[Artifacts], outside: list[Artifacts]) -> Test:
    """The test that a run's number ``name`` lies on one side of a threshold: the threshold
    and side that separate the calibration runs best, and how well (the difference of the
    two data sets' shares on the "in" side)."""
    x_in = np.array([a[name] for a in inside])
    x_out = np.array([a[name] for a in outside])
    candidates = np.unique(np.concatenate([x_in, x_out]))
    score = (np.mean(x_in[:, None] <= candidates, axis=0)
             - np.mean(x_out[:, None] <= candidates, axis=0))
    k = int(np.argmax(np.abs(score)))
    threshold, below = float(candidates[k]), bool(score[k] >= 0)
    return abs(float(score[k])), lambda a: bool((a[name] <= threshold) == below)


def _candidate_tests(inside: list[Artifacts], outside: list[Artifacts]) -> dict[str, Test]:
    """The tests the calibration runs suggest (module docstring): per published value, the
    values seen only inside, where one of them repeats (a deterministic leak; a noised value
    differs in every run, and its test would only name the calibration runs' values); for
    the canary's loss, the threshold that separates the calibration runs best."""
    tests: dict[str, Test] = {}
    for name in inside[0]:
        if name == LOSS:
            continue
        seen_in = [a.get(name) for a in inside]
        only_in = set(seen_in) - {a.get(name) for a in outside}
        hits = sum(value in only_in for value in seen_in)
        if only_in and len(only_in) < hits:
            tests[name] = (hits / len(inside), _value_in(name, frozenset(only_in)))
    tests[LOSS] = _threshold_test(LOSS, inside, outside)
    return tests


# --- the server's view ------------------------------------------------------------------

def server_view(records: list[Any], canary: Canary) -> Artifacts:
    """What the server step is handed in one run (every exchange's cohort sum, noised under
    DP: what a server under secure aggregation, or a simulation's, holds;
    :func:`fedmc.audit.boundary.record_boundary`'s records), as the statistics a server that
    knows the canary's ratings would test: of every array of an exchange's sum with a row
    per item, the sum and the sum of squares of its rows at the canary's items, where the
    canary's upload lands."""
    values: Artifacts = {}
    for k, record in enumerate(records):
        if record.summed is None:
            continue
        for name, array in record.summed.arrays.items():
            rows = np.asarray(array)
            if rows.ndim == 0 or len(rows) <= int(canary.items.max()):
                continue
            rows = rows[canary.items]
            values[f"server:{k}:{name}:sum"] = float(rows.sum())
            values[f"server:{k}:{name}:squares"] = float(np.sum(rows**2))
    return values


def server_views(run: Any, inside: FederatedData, outside: FederatedData, canary: Canary,
                 runs: int, progress: Callable[[int], None] | None = None,
                 ) -> tuple[list[Artifacts], list[Artifacts]]:
    """``runs`` runs of the :class:`~fedmc.run.spec.RunSpec` ``run`` on each data set,
    alternating, recorded at the server step (:func:`fedmc.audit.boundary.record_boundary`):
    the two lists of their :func:`server_view` statistics."""
    from fedmc.algorithms.registry import spec
    from fedmc.audit.boundary import record_boundary
    from fedmc.federation.loop import Rounds

    cfg = run.config()
    algorithm = spec(run.algorithm).algorithm_for(cfg)
    views: tuple[list[Artifacts], list[Artifacts]] = ([], [])
    for r in range(runs):
        for side, data in enumerate((inside, outside)):
            records, _ = record_boundary(algorithm, cfg, data, seed=run.schedule.seed,
                                         rounds=Rounds.of(run.schedule, data.n_clients))
            views[side].append(server_view(records, canary))
        if progress is not None:
            progress(r + 1)
    return views


def server_view_bound(inside: list[Artifacts], outside: list[Artifacts],
                      calibration: float = 0.2, *, confidence: float = 0.95,
                      delta: float = 0.0) -> Bound:
    """The lower bound on the epsilon of the server's view: on the calibration share of the
    runs, every statistic of :func:`server_view` gets the threshold and side that separate
    the two data sets' runs best, and the one statistic that separates them best is the
    test, which the rest of the runs evaluate."""
    cut = max(1, int(calibration * min(len(inside), len(outside))))
    tests = {name: _threshold_test(name, inside[:cut], outside[:cut]) for name in inside[0]}
    return _chosen_bound(tests, inside[cut:], outside[cut:], confidence, delta)


def audit_runs(run_once: Callable[[FederatedData, Path], None], inside: FederatedData,
               outside: FederatedData, canary: Canary, runs: int,
               progress: Callable[[int], None] | None = None,
               ) -> tuple[list[Artifacts], list[Artifacts]]:
    """``runs`` runs on each data set, alternating (``run_once(data, folder)`` writes one run's
    files into ``folder``), each read back at once; the two lists of artifacts."""
    out: tuple[list[Artifacts], list[Artifacts]] = ([], [])
    with tempfile.TemporaryDirectory(prefix="fedmc-canary-") as tmp:
        for r in range(runs):
            for side, data in enumerate((inside, outside)):
                folder = Path(tmp) / f"{side}-{r}"
                run_once(data, folder)
                out[side].append(read_artifacts(folder, canary))
            if progress is not None:
                progress(r + 1)
    return out

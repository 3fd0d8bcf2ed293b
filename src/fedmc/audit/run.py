"""The curious server's audit of one algorithm on one data set (``fedmc audit``).

:func:`run_audit` runs the algorithm once per server view with its boundary recorded
(:func:`fedmc.audit.boundary.record_boundary`), takes what the server holds in that view
(:func:`fedmc.audit.attacks.observations`) and scores two attacks against the truth:

* the rated-item-set attack (:func:`fedmc.audit.attacks.rated_sets`), from each client's first
  observation and from the intersection over every round it took part in;
* rating reconstruction of one-user clients, by the decoder of the algorithm's client step
  (its :class:`fedmc.audit.targets.Target`), scored as RMSE and like/dislike accuracy against
  predicting the mean; in the ``secagg`` view also from the cohort's sum split into its
  members (:meth:`fedmc.audit.targets.Target.split`, ``split ratings``), and the
  rated-item-set attack of the split groups linked across cohorts, which names clients
  (``linked``, :func:`fedmc.audit.attacks.link_groups`).

Views: ``plain`` (each client's upload; ``active`` clients per round, uniform), ``secagg``
(the cohort's sum; same sampling) and ``dp`` (the sum of clipped uploads plus the Gaussian
noise of user-level DP, Poisson sampling at rate ``active / p``; ``docs/privacy.md``). On a sum
the decoders treat the cohort's mean upload as one client's, the best a server without the
individual uploads can do with the same closed form.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from scipy import stats

from fedmc.algorithms.registry import audited_algorithms, default_algorithm, spec
from fedmc.audit import defaults, targets
from fedmc.audit.attacks import (
    Group,
    Observation,
    link_groups,
    observations,
    rated_sets,
    rating_scores,
    set_scores,
)
from fedmc.audit.boundary import record_boundary
from fedmc.audit.targets import Target
from fedmc.data.federated import FederatedData
from fedmc.errors import ConfigError
from fedmc.federation.loop import RoundCallback, Rounds
from fedmc.federation.sampling import make_sampler
from fedmc.privacy.accounting import UserDP

VIEWS = ("plain", "secagg", "dp")
LIKE = 4.0  # a rating of 4 stars or more is a like
RECONSTRUCTIONS = ("ratings", "split ratings", "split ratings, rounds")  # they decode ratings


@dataclass(frozen=True)
class AuditSettings:
    """What :func:`run_audit` runs: ``algorithm`` with ``params`` for ``rounds`` rounds of
    ``active`` clients (all when None), in each of ``views``, with user-level DP ``dp`` in the
    ``dp`` view, from ``seed`` (the audit's DP noise comes from the seed too, ``reproducible``:
    its runs are experiments on the mechanism, repeatable seed by seed, not private runs)."""

    algorithm: str = field(default_factory=lambda: default_algorithm("ratings"))
    params: Mapping[str, Any] = field(default_factory=dict)
    rounds: int = defaults.ROUNDS
    active: int | None = defaults.ACTIVE
    views: Sequence[str] = VIEWS
    dp: UserDP = UserDP(clip=defaults.DP_CLIP, epsilon=defaults.DP_EPSILON, reproducible=True)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.algorithm not in audited_algorithms():
            raise ConfigError(f"the audit knows {', '.join(audited_algorithms())}, not "
                              f"{self.algorithm!r}")
        unknown = set(self.views) - set(VIEWS)
        if unknown or not self.views:
            raise ConfigError(f"--view takes {', '.join(VIEWS)} or all, got "
                              f"{', '.join(sorted(unknown)) or 'nothing'}")
        if self.rounds < 1:
            raise ConfigError(f"--rounds must be >= 1, got {self.rounds}")

    def config(self) -> Any:
        """The algorithm's validated ``Config`` from ``params``."""
        return spec(self.algorithm).Config(**self.params)


def rated_items(data: FederatedData) -> dict[int, np.ndarray]:
    """Every client's training items."""
    tr, ptr = data.train, data.client_ptr
    return {c: np.unique(tr.indices[tr.indptr[ptr[c]]:tr.indptr[ptr[c + 1]]])
            for c in range(data.n_clients)}


def reconstruction(target: Target, obs: Sequence[Observation],
                   decode: Callable[[Observation], tuple[np.ndarray, np.ndarray] | None],
                   ) -> dict[str, float]:
    """Decode every observation ``decode`` can (items and ratings); score each client once
    (its first decoded observation), on its training ratings of the items decoded for it
    (of a cohort's observation: every member's), on the original scale, against predicting
    the mean training rating."""
    data = target.data
    tr, ptr, norm = data.train, data.client_ptr, data.normalizer
    predicted, true, done = [], [], set()
    for o in obs:
        fresh = [c for c in o.clients.tolist() if c not in done]
        if not fresh:
            continue
        decoded = decode(o)
        if decoded is None:
            continue
        lookup = dict(zip(*(x.tolist() for x in decoded), strict=True))
        for c in fresh:
            done.add(c)
            for q in range(tr.indptr[ptr[c]], tr.indptr[ptr[c + 1]]):
                if tr.indices[q] in lookup:
                    predicted.append(lookup[tr.indices[q]])
                    true.append(tr.values[q])
    mean = float(norm.inverse(tr.values).mean())
    if not true:
        return {"rmse": np.nan, "accuracy": np.nan, "rmse_mean": np.nan,
                "accuracy_mean": np.nan, "accuracy_constant": np.nan, "ratings": 0, "clients": 0}
    scores = rating_scores(norm.inverse(np.array(predicted)), norm.inverse(np.array(true)),
                           mean, LIKE)
    return {**scores, "ratings": len(true), "clients": len(done)}


def run_audit(data: FederatedData, settings: AuditSettings,
              progress: Callable[[str], RoundCallback | None] | None = None,
              ) -> list[dict[str, Any]]:
    """The audit's rows (module docstring): per view, the rated-set attack from the first
    observation (``first``), intersected over rounds (``intersect``) and, when there is a
    set-up upload, from the first round's observation (``first-round``), and the
    reconstruction (``ratings``); in the ``secagg`` view also ``split ratings`` (with a
    set-up sum, which covers every client first, also from the rounds alone: ``split
    ratings, rounds``) and ``linked``;
    each row names the algorithm, the view, and in the ``dp`` view the noise multiplier and
    the epsilon spent."""
    cfg = settings.config()
    algorithm = spec(settings.algorithm).algorithm_for(cfg)
    items = rated_items(data)
    norm, tr = data.normalizer, data.train
    grid = norm.transform(np.unique(norm.inverse(tr.values)))
    out: list[dict[str, Any]] = []
    for view in settings.views:
        callback = None if progress is None else progress(view)
        dp = settings.dp if view == "dp" else None
        kind: Literal["bernoulli", "uniform"] = "bernoulli" if dp is not None else "uniform"
        records, sim = record_boundary(
            algorithm, cfg, data, seed=settings.seed, callback=callback, rounds=Rounds(
                make_sampler(data.n_clients, settings.active, kind), settings.rounds, dp=dp))
        head: dict[str, Any] = {"algorithm": settings.algorithm, "view": view}
        std = 0.0
        if dp is not None:
            noise = float(sim.history.column("dp_noise")[-1])
            std = noise * dp.clip
            head.update(dp_noise=noise, epsilon=float(sim.history.column("epsilon")[-1]))
        target = targets.target(settings.algorithm)(cfg, data, records, grid)
        mode = "plain" if view == "plain" else "sum"
        obs = list(observations(records, mode, target.upload))
        shown = obs if target.sets == (target.upload,) else list(
            observations(records, mode, target.sets))
        attacks = [("first", shown, False), ("intersect", shown, True)]
        if any(o.round == 0 for o in shown):  # a set-up upload: the rounds' on their own too
            attacks.append(("first-round", [o for o in shown if o.round > 0], False))
        for attack, seen, intersect in attacks:
            out.append({**head, "attack": attack, **_set_row(
                rated_sets(seen, target.reference, std, intersect), items, data.n_items)})
        out.append({**head, "attack": "ratings",
                    **reconstruction(target, obs, functools.partial(target.decode,
                                                                    noise_std=std))})
        if view == "secagg":
            splits = {id(o): target.split(o) for o in obs}
            split_of = functools.partial(_split_of, splits)
            out.append({**head, "attack": "split ratings",
                        **reconstruction(target, obs, split_of)})
            if any(o.round == 0 for o in obs):  # a set-up sum scores every client first
                out.append({**head, "attack": "split ratings, rounds", **reconstruction(
                    target, [o for o in obs if o.round > 0], split_of)})
            out.append({**head, "attack": "linked", **_set_row(
                link_groups([g for o in obs for g in splits[id(o)]]), items, data.n_items)})
    return out


def _set_row(guesses: dict[int, np.ndarray], truth: dict[int, np.ndarray],
             n_items: int) -> dict[str, Any]:
    """:func:`fedmc.audit.attacks.set_scores` with the lift (precision over base rate)."""
    scores = set_scores(guesses, truth, n_items)
    return {**scores, "ratio": scores["precision"] / scores["base_rate"]}


def _split_of(splits: Mapping[int, Sequence[Group]], o: Observation,
              ) -> tuple[np.ndarray, np.ndarray] | None:
    """The items and ratings of the groups split from ``o`` (``splits``, by the observation's
    ``id``), together; None for none."""
    groups = splits[id(o)]
    if not groups:
        return None
    return (np.concatenate([g.items for g in groups]),
            np.concatenate([g.ratings for g in groups]))


def pool_runs(runs: Sequence[Sequence[Mapping[str, Any]]], level: float = 0.95,
              ) -> list[dict[str, Any]]:
    """One row per (view, attack) over ``runs``, the rows of :func:`run_audit` for several
    seeds (``fedmc audit --repeat``): one run's precision rests on a few dozen cohorts' guesses,
    so under DP it varies from run to run by about a third of the base rate.

    Rated sets: precision over every guessed client of every run, recall and base rate over
    every scored client, ``ratio`` the pooled precision over the pooled base rate, and
    ``ratio_low``/``ratio_high`` its ``level`` interval from the spread of the runs' own ratios
    (Student's t over the runs with a guess; runs are independent, a run's clients are not).
    Ratings: every decoded rating of every run (RMSE and accuracies pooled by their counts)."""
    pooled: list[dict[str, Any]] = []
    keys = list(dict.fromkeys((r["view"], r["attack"]) for run in runs for r in run))
    for view, attack in keys:
        rows = [r for run in runs for r in run if (r["view"], r["attack"]) == (view, attack)]
        row = dict(rows[0])
        if attack in RECONSTRUCTIONS:
            for key in ("rmse", "rmse_mean"):
                row[key] = float(np.sqrt(_weighted(rows, key, "ratings", power=2)))
            for key in ("accuracy", "accuracy_mean", "accuracy_constant"):
                row[key] = _weighted(rows, key, "ratings")
            row.update(ratings=sum(r["ratings"] for r in rows),
                       clients=sum(r["clients"] for r in rows))
            pooled.append(row)
            continue
        row.update(precision=_weighted(rows, "precision", "guessed"),
                   recall=_weighted(rows, "recall", "clients"),
                   base_rate=_weighted(rows, "base_rate", "clients"),
                   guessed=sum(r["guessed"] for r in rows),
                   clients=sum(r["clients"] for r in rows))
        row["ratio"] = row["precision"] / row["base_rate"]
        ratios = np.array([r["ratio"] for r in rows if r["guessed"]])
        if len(ratios) > 1:
            half = (stats.t.ppf(0.5 + level / 2, len(ratios) - 1)
                    * ratios.std(ddof=1) / np.sqrt(len(ratios)))
            row.update(ratio_low=row["ratio"] - half, ratio_high=row["ratio"] + half)
        pooled.append(row)
    return pooled


def _weighted(rows: Sequence[Mapping[str, Any]], key: str, weight: str,
              power: int = 1) -> float:
    """The mean of ``rows[key] ** power`` weighted by ``rows[weight]`` (NaN when no row has
    weight: nothing scored)."""
    kept = [r for r in rows if r[weight]]
    if not kept:
        return np.nan
    w = np.array([r[weight] for r in kept], dtype=float)
    return float(w @ np.array([r[key] for r in kept]) ** power / w.sum())

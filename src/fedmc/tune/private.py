"""A private search: ``fedmc tune --dp-epsilon E``, the whole search inside ``E``.

It chooses two kinds of settings (``docs/privacy.md``, "A private search"):

- **Training settings**, those the user names (``--space``, ``-P NAME=LO:HI``): every value
  tried costs a private run, so they are searched by Papernot and Steinke's random search with
  a random number of trials (steps 1-3 below), which costs about twice one run's Renyi DP.
  Without any, the search trains once, at the run's own settings (its DP defaults).
- **Fold-in settings** (:attr:`fedmc.algorithms.spec.AlgorithmSpec.fold_in_space`): they act
  only when a device computes its user factor from the published model, so choosing them costs
  no training run. On the published model every candidate is scored on the cut and one is
  drawn by the exponential mechanism (:func:`fedmc.privacy.selection.choose_by_score`), whose
  price at :data:`CHOICE_SHARE` of the budget is small (the training noise rises 1-1.5%).

The random search of training settings (:mod:`fedmc.privacy.selection`):

1. ``K``, the number of trials, is drawn from the truncated negative binomial of mean
   ``--trials`` (logarithmic by default, :data:`SHAPE`) from the operating system's entropy,
   never from ``--seed``;
2. every trial draws its settings uniformly from the ranges and choices (log-uniformly on a
   log scale; among those the algorithm accepts, :func:`draw_valid`), from the same secret
   stream, without looking at any data (random search: no sampler that learns from earlier
   trials, no pruning), trains a private run on
   the training ratings without the validation cut, with the noise multiplier calibrated
   for the whole search (:func:`fedmc.privacy.selection.calibrate_search`), and releases one
   noised score of its published model on the cut (:func:`noised_score`);
3. only the trial of the best (lowest) score is kept: its settings, its noised score and its
   model, which is the published model (no refit: a refit would be one more private run the
   budget would have to pay for, and the chosen trial's model is what the theorem covers).

Nothing else of any trial leaves this module: not ``K``, not which trial won, not the other
scores, settings or models, not how long anything took; of the fold-in choice only the chosen
values (not the candidates' scores). An interrupted search publishes
nothing (stopping at a time that depends on the data would truncate ``K`` by the data).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from fedmc.algorithms.registry import spec
from fedmc.algorithms.spec import Choice, Searched
from fedmc.core.factors import predict
from fedmc.data import FederatedData
from fedmc.errors import ConfigError
from fedmc.federation.aggregator import NEIGHBOURS
from fedmc.federation.sampling import poisson_rate
from fedmc.model import FactorModel
from fedmc.privacy.accounting import Plan, Spent, UserDP
from fedmc.privacy.selection import (
    calibrate_search,
    choose_by_score,
    draw_trials,
    event_epsilon,
    search_epsilon,
    trial_event,
)
from fedmc.run.data import enrolled_users, federated_data
from fedmc.run.options import RunOptions
from fedmc.run.runner import RunResult, execute
from fedmc.run.settings import resolve
from fedmc.run.spec import RunSpec
from fedmc.tune.published import fold_in_candidates

SHAPE = 0.0
"""The shape ``eta`` of the distribution of the number of trials: 0, the logarithmic
distribution, the cheapest of Theorem 2's family (its ``(1 + eta)`` factor is 1; at ML-1M's
epsilon-8 plan and 10 trials on average it allows noise 2.28 per trial against 2.61 for the
geometric, ``eta = 1``), at the price of a longer tail (about one search in twenty runs more
than five times the mean)."""
SCORE_SCALE = 2.0
"""The score's noise multiplier over the rounds' (its RDP at order ``lambda`` is
``lambda / (2 (2 Z)^2)``, a quarter of one Gaussian release at multiplier ``Z`` and a
sixteenth of ML-1M's set-up release at ``0.5 Z``; on 6,040 users its standard deviation on the
mean squared error is ``2 Z 4 / 6040``, 0.003 at ``Z = 2.3``)."""
CHOICE_SHARE = 1 / 16
"""The fold-in choice's bounded-range ``epsilon`` as a share of the search's budget ``E``
(:func:`fedmc.privacy.selection.choose_by_score`; zCDP ``epsilon^2 / 8``): at every budget of
ML-1M's DP defaults (1 to 8) it raises the training noise by 1.1-1.4% (1.588 to 1.610 at
``E = 8``). At ``E = 8`` (``epsilon`` 0.5) a candidate whose clipped squared errors sum to
``g`` more than the best one's is drawn ``exp(-0.5 g / B)`` times as often (``B`` = 4 on 1-5:
ML-1M's fold-in lambda of 2 sums about 41 more than 0.5 on a 5% cut: 0.006 times as
often)."""
SCORE = "validation_mse"
"""The name of the released score: the clipped mean squared error per user, noised."""


@dataclass(frozen=True)
class PrivateSearch:
    """What a private search is.

    Parameters
    ----------
    options
        The run's options: ``dp_epsilon`` is the whole search's budget, ``validation_fraction``
        the cut each trial is scored on; every trial is them with its settings among
        ``params``.
    space
        The ranges and choices of training settings searched, by setting; empty: one run at
        the options' settings.
    trials
        The mean number of trials (``K`` is random, :mod:`fedmc.privacy.selection`) when
        ``space`` has settings.
    shape
        The shape of ``K``'s distribution (:data:`SHAPE`).
    score_scale
        The score's noise multiplier over the rounds' (:data:`SCORE_SCALE`).
    fold_in
        The fold-in settings chosen on the published model, each with its candidate values
        (every combination is a candidate); empty: none.
    choice_share
        The fold-in choice's bounded-range ``epsilon`` over the budget (:data:`CHOICE_SHARE`).
    """

    options: RunOptions
    space: dict[str, Searched]
    trials: float
    shape: float = SHAPE
    score_scale: float = SCORE_SCALE
    fold_in: dict[str, Choice] = field(default_factory=dict)
    choice_share: float = CHOICE_SHARE

    def budget(self) -> float:
        """The whole search's ``epsilon`` (``dp_epsilon``).

        Raises
        ------
        ConfigError
            Options without one, or without secret noise.
        """
        if self.options.dp_epsilon is None or not self.options.private:
            raise ConfigError("a private search needs `dp_epsilon`, the whole search's budget, "
                              "and secret noise")
        return self.options.dp_epsilon

    @property
    def choice_epsilon(self) -> float:
        """The fold-in choice's bounded-range ``epsilon``: its share of the budget."""
        return self.choice_share * self.budget()

    @property
    def mean_trials(self) -> float | None:
        """The mean number of trials accounted, None without training settings (one run, no
        score released)."""
        return self.trials if self.space else None

    @property
    def accounted_choice(self) -> float | None:
        """The fold-in choice's ``epsilon`` accounted, None without fold-in settings."""
        return self.choice_epsilon if self.fold_in else None

    def base(self) -> RunSpec:
        """The run of every trial but its settings: the options resolved without the cut (a
        private run refuses one: its evaluation would be exact releases), the cut put back
        (no trial evaluates on it: a private run's server asks for no evaluation)."""
        options = self.options
        self.budget()  # refuses options without one
        if not options.validation_fraction:
            raise ConfigError("`validation_fraction`: a private search scores its trials on a "
                              "validation cut")
        # the DP defaults know the population, as a private run's do (its public enrolment)
        run = resolve(options.model_copy(update={"validation_fraction": None}), enrolled_users)
        return run.model_copy(update={"data": run.data.model_copy(
            update={"validation_fraction": options.validation_fraction})})

    def trial_spec(self, base: RunSpec, values: dict[str, Any], noise: float) -> RunSpec:
        """The run of one trial: ``base`` with the trial's settings among its parameters and
        the noise multiplier of the search (no budget of its own)."""
        params = {**base.params, **values}
        dp = user_dp(base).model_copy(update={"noise": noise, "epsilon": None})
        return base.model_copy(update={"params": params, "schedule": base.schedule.model_copy(
            update={"dp": dp})})


@dataclass
class Chosen:
    """What a private search publishes: the chosen trial's run (its model is the published
    model; ``spec``: its run), its settings (the fold-in's among them), its noised score
    (:data:`SCORE`; None when the search ran one run and released no score) and the search's
    guarantee (a run's ``privacy``, :meth:`fedmc.federation.aggregator.Aggregator.guarantee`,
    for the whole search)."""

    result: RunResult
    spec: RunSpec
    settings: dict[str, Any]
    score: float | None
    guarantee: dict[str, Any]


def user_dp(run: RunSpec) -> UserDP:
    """``run``'s user-level DP settings.

    Raises
    ------
    ConfigError
        A run without user-level DP.
    """
    if run.schedule.dp is None:
        raise ConfigError("a private search needs user-level DP")
    return run.schedule.dp


def published_model(result: RunResult, algorithm: str) -> FactorModel:
    """The factor model a run published.

    Raises
    ------
    ConfigError
        A run of an algorithm whose model is not a factor model (nothing to score).
    """
    if result.artifact is None:
        raise ConfigError(f"a private search scores a factor model; {algorithm} is not one")
    return result.artifact


def plan_of(run: RunSpec, data: FederatedData) -> Plan:
    """What every trial releases, as the accountant charges it: a set-up exchange (counted
    whether or not the algorithm has one: at most that much), ``rounds`` rounds at the
    sampler's Poisson rate. Only public facts enter it: the schedule and the enrolment."""
    return Plan(run.schedule.rounds, poisson_rate(run.schedule.sampler(data.n_clients)), True,
                user_dp(run).setup_scale)


def draw_settings(space: dict[str, Searched], rng: np.random.Generator) -> dict[str, Any]:
    """One draw of every setting, independent of the data: one of a choice's values, each
    as likely; uniform on a range (on the log of its range with ``log``), rounded to the
    nearest whole number with ``integer``."""
    values: dict[str, Any] = {}
    for name, r in space.items():
        if isinstance(r, Choice):
            values[name] = r.values[int(rng.integers(len(r.values)))]
            continue
        if r.log:
            x = math.exp(rng.uniform(math.log(r.low), math.log(r.high)))
        else:
            x = float(rng.uniform(r.low, r.high))
        values[name] = int(round(x)) if r.integer else x
    return values


def draw_valid(space: dict[str, Searched], base: RunSpec, rng: np.random.Generator,
               attempts: int = 1000) -> dict[str, Any]:
    """:func:`draw_settings` again until the algorithm accepts the settings with ``base``'s
    parameters (a choice of one mode may need another's: FedMC-ADMM's item-bias offset needs
    the rated consensus): the draw is uniform on the settings it accepts, which no data
    decide.

    Raises
    ------
    ConfigError
        No draw of ``attempts`` accepted.
    """
    config = spec(base.algorithm).Config
    for _ in range(attempts):
        values = draw_settings(space, rng)
        try:
            config(**{**base.params, **values})
        except (ConfigError, ValueError):  # pydantic's ValidationError is a ValueError
            continue
        return values
    raise ConfigError(f"no settings drawn from the space in {attempts} tries are settings "
                      f"{base.algorithm} accepts: narrow the space (--space NAME=off)")


def score_bound(model: FactorModel) -> float:
    """The clip ``B`` of one user's mean squared error: a quarter of the square of the
    prediction range (the rating scale in a private run: 4 on 1-5), which a user's error
    reaches only when it is off by half the scale on average.

    Raises
    ------
    ConfigError
        A model whose predictions are not clipped to a finite range.
    """
    low, high = model.clip
    if not math.isfinite(high - low):
        raise ConfigError("a private search scores a model whose predictions are clipped to the "
                          "rating scale")
    return (high - low) ** 2 / 4


def clipped_error_sum(model: FactorModel, data: FederatedData) -> float:
    """The exact sum over users of a model's clipped validation error (never released as it
    is): every user folds itself in from the published model and its own training ratings (as
    ``fedmc evaluate`` does), computes its mean squared error on its validation cut, clipped
    to ``B`` (:func:`score_bound`; 0 without a cut). One user present or absent changes the
    sum by at most ``B``."""
    cut = data.validation
    if cut is None:
        raise ConfigError("a private search scores its trials on a validation cut")
    U = spec(model.algorithm).fold_in_users(model.config, model.V, data.train)
    rows = cut.rows()
    error = predict(U, model.V, rows, cut.indices, model.normalizer, model.clip) \
        - data.normalizer.inverse(cut.values)
    n = data.n_users
    counts = np.bincount(rows, minlength=n)
    squares = np.bincount(rows, weights=error**2, minlength=n)
    per_user = np.divide(squares, counts, out=np.zeros(n), where=counts > 0)
    return float(np.minimum(per_user, score_bound(model)).sum())


def noised_score(model: FactorModel, data: FederatedData, std: float,
                 rng: np.random.Generator) -> float:
    """One trial's released score: :func:`clipped_error_sum` plus Gaussian noise of standard
    deviation ``std``, divided by the number of enrolled users (public). With ``std = z B`` it
    is the Gaussian mechanism of multiplier ``z``."""
    return float((clipped_error_sum(model, data) + rng.normal(0.0, std)) / data.n_users)


def choose_fold_in(search: PrivateSearch, chosen: Chosen, data: FederatedData,
                   rng: np.random.Generator) -> Chosen:
    """The fold-in settings of the published model, drawn by the exponential mechanism
    (:func:`fedmc.privacy.selection.choose_by_score`, ``epsilon`` :attr:`PrivateSearch.
    choice_epsilon`) on every candidate's :func:`clipped_error_sum`; ``chosen`` with them in
    its model, configuration, run and settings. Only the chosen values leave."""
    model = published_model(chosen.result, chosen.spec.algorithm)
    candidates = fold_in_candidates(model.algorithm, model.params, search.fold_in)
    sums = np.array([clipped_error_sum(replace(model, params={**model.params, **c}), data)
                     for c in candidates])
    values = candidates[choose_by_score(sums, score_bound(model), search.choice_epsilon, rng)]
    result = chosen.result
    config = {**result.config, "params": {**result.config["params"], **values}}
    result = replace(result, config=config,
                     artifact=replace(model, params={**model.params, **values}))
    run = chosen.spec.model_copy(update={"params": {**chosen.spec.params, **values}})
    return Chosen(result, run, {**chosen.settings, **values}, chosen.score, chosen.guarantee)


def run_private_search(search: PrivateSearch, rng: np.random.Generator | None = None,
                       loaded: tuple[FederatedData, dict[str, Any]] | None = None,
                       base: RunSpec | None = None) -> Chosen:
    """Run the search of the module docstring: the trials of the training settings (or one
    run without them), then the fold-in choice on the published model; what it publishes.

    ``rng`` is the secret stream of ``K``, the settings, the scores' noise and the fold-in
    choice: fresh entropy from the operating system when None (the only sound choice outside
    tests; each trial's training noise is its run's own secret stream). ``loaded``: the data
    (with their validation cut) and their notes, already built (the canary audit's
    neighbours), else loaded as the options say. ``base``: :meth:`PrivateSearch.base`, already
    resolved (it counts the enrolled users, which may read the data).

    Raises
    ------
    ConfigError
        Options a private search refuses, nothing to search, or a budget no noise meets.
    """
    rng = np.random.default_rng() if rng is None else rng
    base = search.base() if base is None else base
    dp = user_dp(base)
    if dp.mechanism == "skellam":
        raise ConfigError("`dp.mechanism=skellam`: a private search accounts its trials as "
                          "Gaussian mechanisms; search with the Gaussian, then run the choice "
                          "under the Skellam mechanism")
    if not search.space and not search.fold_in:
        raise ConfigError("a private search needs training settings to search or fold-in "
                          "settings to choose")
    data, notes = loaded or federated_data(base.data)
    plan = plan_of(base, data)
    noise = calibrate_search(dp.accounted(plan), search.budget(), dp.delta, search.score_scale,
                             search.mean_trials, search.shape, search.accounted_choice)
    if search.space:
        best = best_trial(search, base, (data, notes), noise, rng)
    else:  # one run, nothing to choose among: on every training rating, the cut's too
        run = search.trial_spec(base, {}, noise)
        run = run.model_copy(update={"data": run.data.model_copy(
            update={"validation_fraction": 0.0})})
        best = Chosen(execute(run, loaded=(data.every_training_rating(), notes)), run, {},
                      None, {})
    if search.fold_in:
        best = choose_fold_in(search, best, data, rng)
    def spend(accounted: Plan) -> float:
        return search_epsilon(accounted, noise, search.score_scale, search.mean_trials,
                              search.shape, dp.delta, search.accounted_choice)

    spent, known = spend(plan), plan.known_cohorts()
    server = spent if known == plan else spend(known)  # every client every round: the same
    best.guarantee = guarantee(search, plan, noise, {"outsiders": spent, "server": server}, dp)
    # the published model's epsilon is the search's (its training's alone: history.csv)
    summary = {**best.result.summary, "privacy": best.guarantee}
    if "epsilon" in summary:
        summary["epsilon"] = spent
    if "epsilon_server" in summary:
        summary["epsilon_server"] = server
    best.result.summary = summary
    return best


def best_trial(search: PrivateSearch, base: RunSpec,
               loaded: tuple[FederatedData, dict[str, Any]], noise: float,
               rng: np.random.Generator) -> Chosen:
    """Steps 1-3 of the module docstring: ``K`` trials of drawn training settings at
    ``noise``, each scored once; the one of the best (lowest) noised score."""
    data = loaded[0]
    best: Chosen | None = None
    best_score = math.inf
    for _ in range(draw_trials(search.trials, search.shape, rng)):
        values = draw_valid(search.space, base, rng)
        run = search.trial_spec(base, values, noise)
        result = execute(run, loaded=loaded)
        model = published_model(result, base.algorithm)
        score = noised_score(model, data, search.score_scale * noise * score_bound(model), rng)
        if best is None or score < best_score:
            best, best_score = Chosen(result, run, values, score, {}), score
    if best is None:
        raise AssertionError("K >= 1: the truncated negative binomial has no zero")
    return best


def guarantee(search: PrivateSearch, plan: Plan, noise: float, spent: dict[str, float],
              dp: UserDP) -> dict[str, Any]:
    """The search's ``privacy`` (a run's keys, :mod:`fedmc.federation.aggregator`, and
    ``search``: how it was accounted). Outsiders, who read the output folder, get
    ``spent["outsiders"]``; clients get none: each receives the rounds of every trial, which
    the selection does not hide; the server, which knows the cohorts and is handed noised
    sums (as in a run), ``spent["server"]``: the search accounted on the plan without
    amplification."""
    delta = dp.delta
    how: dict[str, Any] = {"noise": noise, "training_epsilon": Spent(plan, noise, delta)()}
    if search.space:
        how.update({
            "mechanism": "random search with a random number of trials, the best one "
                         "published (Papernot and Steinke, ICLR 2022, Theorem 2)",
            "trials_mean": search.trials, "trials_shape": search.shape,
            "score_noise": search.score_scale * noise,
            "trial_epsilon": event_epsilon(trial_event(plan, noise, search.score_scale),
                                           delta)})
    else:
        how["mechanism"] = "one private run at the given settings"
    if search.fold_in:
        how["fold_in_choice"] = {
            "mechanism": "exponential mechanism on the clipped validation errors, zCDP "
                         "epsilon^2/8 (bounded range: Cesar and Rogers, ALT 2021)",
            "epsilon": search.choice_epsilon, "share": search.choice_share, "candidates": {
                name: list(c.values) for name, c in search.fold_in.items()}}
    return {
        "private": True, "unit": dp.unit, "neighbouring": NEIGHBOURS, "delta": delta,
        "epsilon": {"outsiders": spent["outsiders"], "clients": None,
                    "server": spent["server"]},
        "calibrated_against": dp.against,
        "noise_seed": "secret", "search": how,
    }

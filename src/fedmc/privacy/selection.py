"""The budget of a private search: a random number of private trials, only the best published.

Papernot and Steinke, "Hyperparameter tuning with Renyi differential privacy" (ICLR 2022,
arXiv:2110.03620v2): let ``Q`` be one trial (draw settings without looking at the data, train
privately, release a noised validation score) and let ``A`` run ``Q`` independently ``K``
times, ``K`` drawn from the truncated negative binomial distribution ``D_{eta,gamma}`` (their
Definition 1: ``P[K = k] = (1 - gamma)^k / (gamma^-eta - 1) * prod_{l<k} (l + eta) / (l + 1)``
for ``k >= 1``; ``eta = 1`` is the geometric distribution of mean ``1 / gamma``, ``eta = 0``
the logarithmic one), and output only the trial of the best score. Their Theorem 2: if ``Q``
is ``(lambda, eps)``- and ``(lambdahat, epshat)``-RDP, ``A`` is ``(lambda, eps')``-RDP with

    eps' = eps + (1 + eta) (1 - 1/lambdahat) epshat + (1 + eta) log(1/gamma) / lambdahat
           + log(E[K]) / (lambda - 1)                                                 (1)

``dp_accounting``'s ``RepeatAndSelectDpEvent`` applies (1) at every order ``lambda`` of the
accountant, minimised over ``lambdahat`` among the same orders, then takes the bound of any
larger order where it is smaller (RDP grows with the order); :func:`search_epsilon` converts
that curve to ``(epsilon, delta)`` as every run's budget is converted
(:mod:`fedmc.privacy.accounting`). ``Q``'s own RDP is the composition of its exchanges (the
set-up release, the Poisson-subsampled rounds) and of the score's Gaussian release
(:func:`trial_event`).

A search without training settings is one run (:func:`run_event`), no score. The fold-in
choice that follows either (:func:`choose_by_score`) is the exponential mechanism on sums of
per-user terms in ``[0, B]``, ``epsilon``-bounded range, hence ``epsilon^2 / 8``-zCDP
(:func:`choice_event`), composed with the rest (:func:`search_event`).

The argument, and what (1) needs of the implementation (``K`` secret and independent of the
data, the trials independent and identically distributed, nothing but the chosen trial
released), is in ``docs/privacy.md``, "A private search".
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedmc.errors import ConfigError
from fedmc.privacy.accounting import ORDERS, Plan, dp_accounting, smallest_noise


def run_event(plan: Plan, noise: float) -> Any:
    """One private run's release as a ``dp_accounting`` event: the set-up exchange (when the
    plan has one; multiplier ``plan.setup_scale * noise``), then the rounds a user takes part
    in (:meth:`Plan.participations`: all of them but under cyclic participation) of the
    Poisson-subsampled Gaussian mechanism (rate ``plan.q``, multiplier ``noise``), as
    :class:`fedmc.privacy.accounting.Spent` composes a run."""
    events = [dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(
        plan.q, dp_accounting.GaussianDpEvent(noise)), plan.participations(plan.rounds))]
    if plan.setup:
        events.insert(0, dp_accounting.GaussianDpEvent(plan.setup_scale * noise))
    return dp_accounting.ComposedDpEvent(events)


def trial_event(plan: Plan, noise: float, score_scale: float) -> Any:
    """One trial's release as a ``dp_accounting`` event: its run (:func:`run_event`), then the
    noised validation score (a Gaussian mechanism of multiplier ``score_scale * noise``)."""
    return dp_accounting.ComposedDpEvent([
        run_event(plan, noise), dp_accounting.GaussianDpEvent(score_scale * noise)])


def choice_event(epsilon: float) -> Any:
    """The choice among fold-in settings (:func:`choose_by_score`) as a ``dp_accounting``
    event: an ``epsilon``-bounded-range mechanism is ``epsilon^2 / 8``-zCDP (Cesar and Rogers,
    ALT 2021), RDP ``lambda epsilon^2 / 8`` at every order."""
    return dp_accounting.dp_event.ZCDpEvent(epsilon**2 / 8)


def search_event(plan: Plan, noise: float, score_scale: float, mean: float | None,
                 shape: float, choice_epsilon: float | None = None) -> Any:
    """The whole search as a ``dp_accounting`` event: :func:`trial_event` repeated a random
    number of times of mean ``mean`` from the truncated negative binomial of shape ``shape``
    (``eta``), the best one selected (module docstring, Theorem 2), or with ``mean`` None one
    run and no score (:func:`run_event`: nothing to select among); then, with
    ``choice_epsilon``, the choice among fold-in settings on the published model
    (:func:`choice_event`), composed."""
    events = [run_event(plan, noise) if mean is None else
              dp_accounting.dp_event.RepeatAndSelectDpEvent(
                  trial_event(plan, noise, score_scale), mean, shape)]
    if choice_epsilon is not None:
        events.append(choice_event(choice_epsilon))
    return dp_accounting.ComposedDpEvent(events)


def rdp_of(event: Any) -> np.ndarray:
    """The RDP curve of ``event`` at :data:`fedmc.privacy.accounting.ORDERS`."""
    accountant = dp_accounting.rdp.RdpAccountant(list(ORDERS))
    accountant.compose(event)
    return np.asarray(accountant.rdp)


def event_epsilon(event: Any, delta: float) -> float:
    """``epsilon`` at ``delta`` of ``event``, from its RDP curve (:func:`rdp_of`) as every
    run's budget is converted."""
    eps, _ = dp_accounting.rdp.compute_epsilon(list(ORDERS), rdp_of(event), delta)
    return float(eps)


def search_epsilon(plan: Plan, noise: float, score_scale: float, mean: float | None,
                   shape: float, delta: float, choice_epsilon: float | None = None) -> float:
    """``epsilon`` at ``delta`` of the whole search (:func:`search_event`); infinite without
    noise."""
    if noise <= 0:
        return float("inf")
    return event_epsilon(search_event(plan, noise, score_scale, mean, shape, choice_epsilon),
                         delta)


def calibrate_search(plan: Plan, target_epsilon: float, delta: float, score_scale: float,
                     mean: float | None, shape: float,
                     choice_epsilon: float | None = None) -> float:
    """The smallest noise multiplier of every trial (to 0.1%) at which the whole search
    (:func:`search_event`) spends at most ``target_epsilon`` at ``delta``."""
    if mean is not None:
        check_repetitions(mean, shape)
    return smallest_noise(
        lambda noise: search_epsilon(plan, noise, score_scale, mean, shape, delta,
                                     choice_epsilon),
        target_epsilon, delta)


def choose_by_score(scores: np.ndarray, bound: float, epsilon: float,
                    rng: np.random.Generator) -> int:
    """The exponential mechanism on scores to minimise, each a sum over users of a term in
    ``[0, bound]``: candidate ``j`` with probability proportional to ``exp(-epsilon *
    scores[j] / bound)``, drawn as the smallest ``epsilon * scores[j] / bound - G_j`` with
    ``G_j`` standard Gumbel (the Gumbel-max form of the same draw). One user present or
    absent moves every score the same way by at most ``bound``, so the log-ratio of a
    candidate's probability on neighbours ranges over an interval of width at most
    ``epsilon``: ``epsilon``-bounded range (Durfee and Rogers, NeurIPS 2019), accounted by
    :func:`choice_event`. ``rng`` must be secret: the draw is what the guarantee hides."""
    noisy = epsilon * np.asarray(scores, dtype=np.float64) / bound - rng.gumbel(size=len(scores))
    return int(np.argmin(noisy))


def check_repetitions(mean: float, shape: float) -> None:
    """Refuse a distribution of the number of trials the theorem does not cover here.

    Raises
    ------
    ConfigError
        ``mean < 1`` (at least one trial is always run) or ``shape < 0``.
    """
    if not mean >= 1:
        raise ConfigError(f"trials: a private search runs {mean:g} trials on average; it needs "
                          "at least 1")
    if not shape >= 0:
        raise ConfigError(f"the shape of the number of trials must be >= 0, got {shape:g}")


def halting_probability(mean: float, shape: float) -> float:
    """``gamma`` of the truncated negative binomial of ``shape`` with ``mean``: the one the
    accountant analyses (``dp_accounting``'s own inversion of the mean, so that the ``K``
    drawn is the ``K`` accounted)."""
    check_repetitions(mean, shape)
    return float(dp_accounting.rdp.rdp_privacy_accountant._gamma_truncated_negative_binomial(
        shape, mean))


def draw_trials(mean: float, shape: float, rng: np.random.Generator) -> int:
    """The number of trials ``K``, drawn from the truncated negative binomial of ``shape``
    and ``mean`` (Definition 1): the logarithmic distribution for ``shape == 0`` (numpy's
    ``logseries`` of ``p = 1 - gamma``), else the negative binomial (failures before
    ``shape`` successes of probability ``gamma``) conditioned on ``K >= 1``. ``rng`` must be
    secret (never a published seed): ``K`` is part of what the guarantee hides."""
    gamma = halting_probability(mean, shape)
    if gamma >= 1:
        return 1
    if shape == 0:
        return int(rng.logseries(1 - gamma))
    while (k := int(rng.negative_binomial(shape, gamma))) == 0:
        pass
    return k

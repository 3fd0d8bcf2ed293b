"""The privacy budget of user-level DP on summed uploads, accounted with ``dp_accounting``.

A run releases, per exchange, the noised cohort sum of clipped uploads (:mod:`fedmc.privacy.
gaussian`): a Gaussian mechanism with noise multiplier ``z`` (noise standard deviation over the
clip norm). A set-up exchange that every client answers is one such mechanism on the whole
federation; a round with Poisson (Bernoulli) sampling of rate ``q`` is the Poisson-subsampled
Gaussian mechanism. Neighbouring data sets add or remove one user (one client): that user's
whole upload, over all its named arrays, is at most the clip norm ``C`` in L2, so the sum's
sensitivity is ``C``. The budget of the run is the composition of all exchanges, their RDP
added at integer orders and converted to ``(epsilon, delta)`` as ``dp_accounting``'s RDP
accountant does (:class:`Spent`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from fedmc._lazy import lazy_import
from fedmc.errors import ConfigError

dp_accounting = lazy_import("dp_accounting")  # 1.5 s to import: only runs with DP pay it

ORDERS = (*range(2, 129), 160, 192, 256, 384, 512, 1024)
"""Integer Renyi orders: exact for the subsampled Gaussian (fractional orders below 2 make
``dp_accounting`` iterate, sometimes without converging)."""


@dataclass(frozen=True)
class Plan:
    """The exchanges a run releases: an optional set-up exchange answered by every client,
    with a noise multiplier ``setup_scale`` times that of the rounds, then ``rounds`` rounds with
    Poisson sampling rate ``q``."""

    rounds: int
    q: float
    setup: bool
    setup_scale: float = 1.0


class Spent:
    """``epsilon`` at ``delta`` after the set-up and ``k`` rounds of ``plan`` at noise
    multiplier ``noise``, for any ``k``: the RDP of the set-up and of one round are computed
    once (the expensive part, tens of ms each) and composed additively, as the RDP accountant
    composes them."""

    def __init__(self, plan: Plan, noise: float, delta: float) -> None:
        self.plan, self.noise, self.delta = plan, noise, delta
        if noise > 0:
            self.setup = self._rdp(dp_accounting.GaussianDpEvent(plan.setup_scale * noise),
                                   plan.setup)
            self.round = self._rdp(dp_accounting.PoissonSampledDpEvent(
                plan.q, dp_accounting.GaussianDpEvent(noise)), True)

    @staticmethod
    def _rdp(event: Any, present: bool) -> Any:
        accountant = dp_accounting.rdp.RdpAccountant(list(ORDERS))
        if present:
            accountant.compose(event)
        return accountant.rdp

    def __call__(self, rounds: int | None = None) -> float:
        """``epsilon`` after the set-up and ``rounds`` rounds (all planned when None); zero
        when nothing was released yet, infinite without noise."""
        k = self.plan.rounds if rounds is None else rounds
        if k == 0 and not self.plan.setup:
            return 0.0
        if self.noise <= 0:
            return math.inf
        eps, _ = dp_accounting.rdp.rdp_privacy_accountant.compute_epsilon(
            list(ORDERS), self.setup + k * self.round, self.delta)
        return float(eps)


def epsilon(plan: Plan, noise: float, delta: float, rounds: int | None = None) -> float:
    """``epsilon`` at ``delta`` after the set-up and ``rounds`` rounds of ``plan``
    (:class:`Spent`)."""
    return Spent(plan, noise, delta)(rounds)


def calibrate(plan: Plan, target_epsilon: float, delta: float) -> float:
    """The smallest noise multiplier (to a relative tolerance of 1e-3) at which ``plan``
    spends at most ``target_epsilon`` at ``delta``."""
    if target_epsilon <= 0 or not 0 < delta < 1:
        raise ConfigError(f"need --dp-epsilon > 0 and 0 < --dp-delta < 1, "
                          f"got {target_epsilon}, {delta}")
    if plan.rounds == 0 and not plan.setup:
        return 0.0
    low, high = 1e-3, 1.0
    while epsilon(plan, high, delta) > target_epsilon:
        low, high = high, 2 * high
        if high > 1e6:
            raise ConfigError(f"no noise meets epsilon={target_epsilon} at delta={delta}")
    while high - low > 1e-3 * high:
        mid = 0.5 * (low + high)
        low, high = (mid, high) if epsilon(plan, mid, delta) > target_epsilon else (low, mid)
    return high


@dataclass(frozen=True)
class UserDP:
    """User-level DP settings of a run: a budget (``epsilon``, the noise calibrated to the
    planned exchanges) or a noise multiplier (``noise``, the budget reported), or both (the run
    is refused if the noise spends more than the budget); ``clip`` is the L2 bound of one
    client's upload; ``setup_scale`` multiplies the noise of a set-up exchange (which every
    client answers, so sampling does not amplify it); ``setup_clip`` is the L2 bound of a
    set-up upload (``clip`` when None), to which that exchange's noise is scaled: its
    multiplier, and so its accounting, is ``setup_scale`` times the rounds' whatever the bound.

    ``unit`` is what one contribution is: a ``"user"`` (every client holds one user: the
    guarantee is per user) or a ``"client"`` (clients of several users, asked for explicitly:
    the guarantee is per client). ``reproducible`` draws the noise and the client sampling from
    the run's seed (research only: anyone who knows the seed can remove the noise, so such a
    run is not private and says so); by default they come from the operating system's entropy,
    a secret of the run (``docs/privacy.md``, "What a run publishes")."""

    clip: float
    delta: float = 1e-6
    epsilon: float | None = None
    noise: float | None = None
    setup_scale: float = 1.0
    setup_clip: float | None = None
    unit: Literal["user", "client"] = "user"
    reproducible: bool = False

    def __post_init__(self) -> None:
        if self.epsilon is None and self.noise is None:
            raise ConfigError("user-level DP needs --dp-epsilon or --dp-noise")
        if not self.clip > 0:
            raise ConfigError(f"--dp-clip must be > 0, got {self.clip}")
        if self.setup_clip is not None and not self.setup_clip > 0:
            raise ConfigError(f"--dp-setup-clip must be > 0, got {self.setup_clip}")
        if not 0 < self.delta < 1:
            raise ConfigError(f"--dp-delta must lie in (0, 1), got {self.delta}")
        if not self.setup_scale > 0:
            raise ConfigError(f"the set-up noise scale must be > 0, got {self.setup_scale}")
        if self.noise is not None and self.noise < 0:
            raise ConfigError(f"--dp-noise must be >= 0, got {self.noise}")

    @property
    def private(self) -> bool:
        """Whether the run's outputs carry the guarantee: its noise is secret."""
        return not self.reproducible

    def clip_of(self, phase: str) -> float:
        """The L2 bound of one client's upload in an exchange of ``phase``."""
        return self.clip if phase != "setup" or self.setup_clip is None else self.setup_clip

    def multiplier(self, plan: Plan) -> float:
        """The noise multiplier of the run: ``noise``, or the one calibrated to ``epsilon``.

        Raises
        ------
        ConfigError
            When ``noise`` spends more than ``epsilon`` over the plan.
        """
        if self.noise is None:
            return calibrate(plan, self.epsilon, self.delta)
        if self.epsilon is not None:
            spent = epsilon(plan, self.noise, self.delta)
            if spent > self.epsilon:
                raise ConfigError(
                    f"the plan ({plan.rounds} rounds at sampling rate {plan.q:g}"
                    f"{', a set-up upload' if plan.setup else ''}) spends epsilon={spent:.3g} "
                    f"at delta={self.delta:g} with noise {self.noise:g}, over the budget "
                    f"{self.epsilon:g}: raise --dp-noise, or lower --rounds or the sampling rate")
        return self.noise


def user_dp(clip: float | None, delta: float, epsilon: float | None, *, noise: float | None,
            setup_scale: float = 1.0, setup_clip: float | None = None,
            unit: Literal["user", "client"] = "user",
            reproducible: bool = False) -> UserDP | None:
    """The run's :class:`UserDP` from its options, None when DP is off (neither a budget nor
    a noise multiplier); a clip alone, or a budget without a clip, is refused."""
    if epsilon is None and noise is None:
        if clip is not None:
            raise ConfigError("--dp-clip needs --dp-epsilon or --dp-noise")
        return None
    if clip is None:
        raise ConfigError("user-level DP needs --dp-clip (the L2 bound of one upload)")
    return UserDP(clip, delta, epsilon, noise, setup_scale, setup_clip, unit, reproducible)

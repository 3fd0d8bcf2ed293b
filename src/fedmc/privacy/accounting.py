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

Against whom: the amplification by sampling holds against those who do not know the cohorts
(outsiders, who see the published model). The server samples the cohorts, so against it a
round is the Gaussian mechanism without amplification for a user in its cohort, and a user
may be in every round: its budget is the plan's with ``q = 1`` (:meth:`Plan.known_cohorts`,
the worst case over participations). ``UserDP.against`` says which of the two a budget
promises; the server's is the default (``docs/privacy.md``, "Against the server").
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fedmc._lazy import lazy_import
from fedmc.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np

dp_accounting = lazy_import("dp_accounting")  # 1.5 s to import: only runs with DP pay it

ORDERS = (*range(2, 129), 160, 192, 256, 384, 512, 1024)
"""Integer Renyi orders: exact for the subsampled Gaussian (fractional orders below 2 make
``dp_accounting`` iterate, sometimes without converging)."""


@dataclass(frozen=True)
class Plan:
    """The exchanges a run releases: an optional set-up exchange answered by every client,
    with a noise multiplier ``setup_scale`` times that of the rounds, then ``rounds`` rounds with
    Poisson sampling rate ``q``, in which a user takes part at most once in every ``cycle``
    consecutive rounds (cyclic participation, ``q = 1``: :class:`fedmc.federation.sampling.
    CyclicSampler`; 1: in every round)."""

    rounds: int
    q: float
    setup: bool
    setup_scale: float = 1.0
    cycle: int = 1

    def participations(self, rounds: int) -> int:
        """The most rounds of the first ``rounds`` a user takes part in."""
        return -(-rounds // self.cycle)

    def known_cohorts(self) -> Plan:
        """The plan as the party that samples the cohorts (the server) accounts it: no
        amplification, and a user in every round (``q = 1``, the worst case of every
        participation; with full participation the plan itself)."""
        return replace(self, q=1.0)


RdpOf = Callable[[str, float], "np.ndarray"]
"""The Renyi DP at :data:`ORDERS` of one exchange of a phase (``"setup"`` or a round's) at a
noise multiplier, without amplification: a mechanism other than the Gaussian
(:class:`fedmc.privacy.skellam.SkellamSum`)."""


class Spent:
    """``epsilon`` at ``delta`` after the set-up and ``k`` rounds of ``plan`` at noise
    multiplier ``noise``, for any ``k``: the RDP of the set-up and of one round are computed
    once (the expensive part, tens of ms each) and composed additively, as the RDP accountant
    composes them, over the rounds a user can take part in (:meth:`Plan.participations`).
    The Gaussian mechanism (Poisson-subsampled at the plan's rate), or the mechanism ``rdp``
    describes, whose rounds get no credit for the sampling."""

    def __init__(self, plan: Plan, noise: float, delta: float,
                 rdp: RdpOf | None = None) -> None:
        self.plan, self.noise, self.delta = plan, noise, delta
        if noise > 0 and rdp is not None:
            self.round = rdp("round", noise)
            self.setup = (rdp("setup", plan.setup_scale * noise) if plan.setup else
                          0.0 * self.round)
        elif noise > 0:
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
        k = self.plan.participations(self.plan.rounds if rounds is None else rounds)
        if k == 0 and not self.plan.setup:
            return 0.0
        if self.noise <= 0:
            return math.inf
        eps, _ = dp_accounting.rdp.rdp_privacy_accountant.compute_epsilon(
            list(ORDERS), self.setup + k * self.round, self.delta)
        return float(eps)


def epsilon(plan: Plan, noise: float, delta: float, rounds: int | None = None,
            rdp: RdpOf | None = None) -> float:
    """``epsilon`` at ``delta`` after the set-up and ``rounds`` rounds of ``plan``
    (:class:`Spent`)."""
    return Spent(plan, noise, delta, rdp)(rounds)


def calibrate(plan: Plan, target_epsilon: float, delta: float,
              rdp: RdpOf | None = None) -> float:
    """The smallest noise multiplier (to a relative tolerance of 1e-3) at which ``plan``
    spends at most ``target_epsilon`` at ``delta`` (the Gaussian mechanism, or ``rdp``'s)."""
    if target_epsilon <= 0 or not 0 < delta < 1:
        raise ConfigError(f"need `dp.epsilon` > 0 and 0 < `dp.delta` < 1, "
                          f"got {target_epsilon}, {delta}")
    if plan.rounds == 0 and not plan.setup:
        return 0.0
    return smallest_noise(lambda noise: epsilon(plan, noise, delta, rdp=rdp), target_epsilon,
                          delta)


def smallest_noise(spend: Callable[[float], float], target_epsilon: float,
                   delta: float) -> float:
    """The smallest noise multiplier (to a relative tolerance of 1e-3) whose ``spend(noise)``
    (epsilon at ``delta``, decreasing in the noise) is at most ``target_epsilon``: bisection.

    Raises
    ------
    ConfigError
        When no multiplier up to 1e6 meets the budget.
    """
    low, high = 1e-3, 1.0
    while spend(high) > target_epsilon:
        low, high = high, 2 * high
        if high > 1e6:
            raise ConfigError(f"no noise meets epsilon={target_epsilon} at delta={delta}")
    while high - low > 1e-3 * high:
        mid = 0.5 * (low + high)
        low, high = (mid, high) if spend(mid) > target_epsilon else (low, mid)
    return high


class UserDP(BaseModel):
    """User-level DP settings of a run: a budget (``epsilon``, the noise calibrated to the
    planned exchanges, against the party ``against`` names) or a noise multiplier (``noise``,
    the budget reported), or both (the run is refused if the noise spends more than the
    budget); ``clip`` is the L2 bound of one
    client's upload; ``setup_scale`` multiplies the noise of a set-up exchange (which every
    client answers, so sampling does not amplify it); ``setup_clip`` is the L2 bound of a
    set-up upload (``clip`` when None), to which that exchange's noise is scaled: its
    multiplier, and so its accounting, is ``setup_scale`` times the rounds' whatever the bound.

    ``unit`` is what one contribution is: a ``"user"`` (every client holds one user: the
    guarantee is per user) or a ``"client"`` (clients of several users, asked for explicitly:
    the guarantee is per client). ``against`` is whom ``epsilon`` is promised against: the
    ``"server"`` (the default: it samples the cohorts, so the budget is accounted without the
    sampling's amplification, :meth:`Plan.known_cohorts`) or ``"outsiders"`` only (who see
    the published model; amplified: less noise for the same epsilon, and the server gets
    more). ``mechanism`` is the noise: ``"gaussian"`` on the sum, or ``"skellam"``, integer
    shares the members add inside the secure sum (:mod:`fedmc.privacy.skellam`; a simulation
    draws the same integers); unset, the secure sum's (Skellam) under secure aggregation and
    the Gaussian otherwise. ``reproducible`` draws the noise and the client sampling from the
    run's seed
    (research only: anyone who knows the seed can remove the noise, so such a run is not
    private and says so); by default they come from the operating system's entropy,
    a secret of the run (``docs/privacy.md``, "What a run publishes").

    Errors name the fields (``dp.clip``, ...): the command line reports them by its flags
    (``--dp-clip``, :mod:`fedmc.cli.options`).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    clip: float = Field(gt=0, allow_inf_nan=False, description="L2 bound of one upload")
    delta: float = Field(1e-6, gt=0, lt=1, description="delta of the budget")
    epsilon: float | None = Field(None, gt=0, allow_inf_nan=False,
                                  description="the run's budget")
    noise: float | None = Field(None, ge=0, allow_inf_nan=False,
                                description="noise multiplier (noise std / clip)")
    setup_scale: float = Field(1.0, gt=0, allow_inf_nan=False,
                               description="set-up noise multiplier / the rounds'")
    setup_clip: float | None = Field(None, gt=0, allow_inf_nan=False,
                                     description="L2 bound of a set-up upload (default clip)")
    unit: Literal["user", "client"] = Field("user", description="what one contribution is")
    against: Literal["server", "outsiders"] = Field(
        "server", description="whom epsilon is promised against: the server (which knows the "
        "cohorts) or outsiders only (amplified by the secret sampling)")
    reproducible: bool = Field(False, description="noise and sampling from the seed (not "
                               "private: research only)")
    mechanism: Literal["gaussian", "skellam"] | None = Field(
        None, description="the noise: Gaussian on the sum, or Skellam integers inside the "
        "secure sum (default: skellam under secure aggregation, gaussian otherwise)")

    @model_validator(mode="after")
    def _budget_or_noise(self) -> UserDP:
        if self.epsilon is None and self.noise is None:
            raise ValueError("user-level DP needs dp.epsilon or dp.noise")
        return self

    @property
    def private(self) -> bool:
        """Whether the run's outputs carry the guarantee: its noise is secret."""
        return not self.reproducible

    def clip_of(self, phase: str) -> float:
        """The L2 bound of one client's upload in an exchange of ``phase``."""
        return self.clip if phase != "setup" or self.setup_clip is None else self.setup_clip

    def accounted(self, plan: Plan) -> Plan:
        """The plan as accounted against the party of :attr:`against`: the server's
        (:meth:`Plan.known_cohorts`) or outsiders' (``plan``)."""
        return plan.known_cohorts() if self.against == "server" else plan

    def multiplier(self, plan: Plan, rdp: RdpOf | None = None) -> float:
        """The noise multiplier of the run: ``noise``, or the one calibrated to ``epsilon``
        against :attr:`against` (:meth:`accounted`), for the Gaussian mechanism or the one
        ``rdp`` describes (which gets no credit for sampling: the same for both parties).

        Raises
        ------
        ConfigError
            When ``noise`` spends more than ``epsilon`` over the plan.
        """
        accounted = self.accounted(plan)
        if self.noise is None:
            # one of epsilon and noise is set (validated when made)
            return calibrate(accounted, cast(float, self.epsilon), self.delta, rdp)
        if self.epsilon is not None:
            spent = epsilon(accounted, self.noise, self.delta, rdp=rdp)
            if spent > self.epsilon:
                lower = ("the rounds or the sampling rate" if self.against == "outsiders" else
                         "the rounds (the server knows the cohorts: sampling does not help "
                         "against it), or promise it to outsiders only: `dp.against=outsiders`")
                raise ConfigError(
                    f"the plan ({plan.rounds} rounds at sampling rate {plan.q:g}"
                    f"{', a set-up upload' if plan.setup else ''}) spends epsilon={spent:.3g} "
                    f"at delta={self.delta:g} against {self.against} with noise "
                    f"{self.noise:g}, over the budget {self.epsilon:g}: raise `dp.noise`, or "
                    f"lower {lower}")
        return self.noise

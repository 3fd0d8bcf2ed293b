"""The schedule of a federated run: rounds, client sampling, evaluation, seed, user-level DP.

One pydantic model, :class:`Schedule`, that every entry point parses into: the estimators'
run parameters (:mod:`fedmc.estimators`, ``seed`` under its scikit-learn name
``random_state``), ``fedmc run``'s settings (:class:`fedmc.run.settings.RunSettings` adds the
algorithm and what the command does after training) and a Flower run's configuration
(:mod:`fedmc.flower.settings`, which carries it as one JSON value).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from fedmc.federation.sampling import Sampler, SamplingKind, make_sampler
from fedmc.privacy.accounting import UserDP, user_dp


class Schedule(BaseModel):
    """How a federated run proceeds, besides the algorithm's own parameters."""

    model_config = ConfigDict(extra="forbid")

    rounds: int = Field(100, ge=0, description="communication rounds K")
    active: int | None = Field(None, ge=1, description="clients per round (None: all)")
    sampling: SamplingKind = Field("uniform", description="uniform|bernoulli|replacement")
    participation: float | None = Field(
        None, gt=0, le=1, description="p_i of every client for Bernoulli sampling "
        "(default active/clients)")
    dropout: float = Field(0.0, ge=0, lt=1, description="share of drawn clients that drop out")
    eval_every: int = Field(1, ge=1, description="evaluate every this many rounds")
    seed: int = Field(0, ge=0, description="seed of the initial draws and the server's stream")
    user_dp_epsilon: float | None = Field(None, gt=0, description="user-level DP budget")
    user_dp_delta: float = Field(1e-6, gt=0, lt=1, description="delta of the DP budget")
    user_dp_noise: float | None = Field(None, ge=0, description="DP noise / clip")
    user_dp_clip: float | None = Field(None, gt=0, description="L2 bound of one upload")
    user_dp_setup_scale: float = Field(1.0, gt=0, description="set-up noise / round noise")
    user_dp_setup_clip: float | None = Field(None, gt=0, description="L2 bound of a set-up "
                                             "upload (default: user_dp_clip)")
    user_dp_unit: Literal["user", "client"] = Field(
        "user", description="what one DP contribution is: a user (one user per client) or a "
        "client (several users each, asked for explicitly)")
    user_dp_reproducible: bool = Field(
        False, description="draw the DP noise and the sampling from the seed (research only: "
        "the run is then not private)")

    def sampler(self, n_clients: int) -> Sampler:
        """The client sampler of the run (:func:`fedmc.federation.sampling.make_sampler`)."""
        return make_sampler(n_clients, self.active, self.sampling,
                            participation=self.participation, dropout=self.dropout)

    def privacy(self) -> UserDP | None:
        """The run's user-level DP settings, None when off."""
        return user_dp(self.user_dp_clip, self.user_dp_delta, self.user_dp_epsilon,
                       noise=self.user_dp_noise, setup_scale=self.user_dp_setup_scale,
                       setup_clip=self.user_dp_setup_clip, unit=self.user_dp_unit,
                       reproducible=self.user_dp_reproducible)

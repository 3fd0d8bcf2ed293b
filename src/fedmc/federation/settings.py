"""The schedule of a federated run: rounds, client sampling, evaluation, seed, user-level DP.

One pydantic model, :class:`Schedule`, that every entry point parses into: the estimators' run
parameters (:mod:`fedmc.estimators`, ``seed`` under its scikit-learn name ``random_state``,
user-level DP as ``dp=UserDP(...)``), a run's :class:`fedmc.run.settings.RunSpec` (which adds
the algorithm, the data and what follows training) and a Flower run's configuration
(:mod:`fedmc.flower.settings`, which carries the spec as one JSON value).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from fedmc.federation.sampling import Sampler, SamplingKind, make_sampler
from fedmc.privacy.accounting import UserDP


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
    dp: UserDP | None = Field(None, description="user-level DP (None: off)")

    def sampler(self, n_clients: int) -> Sampler:
        """The client sampler of the run (:func:`fedmc.federation.sampling.make_sampler`)."""
        return make_sampler(n_clients, self.active, self.sampling,
                            participation=self.participation, dropout=self.dropout)

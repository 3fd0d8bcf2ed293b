"""The schedule of a federated run: rounds, client sampling, evaluation, seed, user-level DP.

One pydantic model, :class:`Schedule`, that every entry point parses into: the estimators' run
parameters (:mod:`fedmc.estimators`, ``seed`` under its scikit-learn name ``random_state``,
user-level DP as ``dp=UserDP(...)``), a run's :class:`fedmc.run.spec.RunSpec` (which adds
the algorithm, the data and what follows training) and a Flower run's configuration
(:mod:`fedmc.flower.settings`, which carries the spec as one JSON value).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from fedmc.privacy.accounting import UserDP

if TYPE_CHECKING:  # the samplers are NumPy's: the command line reads the settings without it
    from fedmc.federation.sampling import Sampler

SamplingKind = Literal["uniform", "bernoulli", "replacement", "cyclic"]
"""How the clients of a round are drawn (:func:`fedmc.federation.sampling.make_sampler`)."""


BackendKind = Literal["batched", "ray"]
"""Where a simulation's clients live (:class:`Backend`)."""


class Backend(BaseModel):
    """Where a simulation's clients live: stacked in this process (``batched``, the default)
    or in ``workers`` shards, each a Ray actor (``ray``: :mod:`fedmc.sim.ray_shards`), on this
    machine or the cluster at ``address``. The history is the same either way (to the order
    of floating-point additions)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    kind: BackendKind = Field("batched", description="batched|ray")
    workers: int = Field(2, ge=1, description="shards of the clients, one Ray actor each")
    address: str | None = Field(None, description="the Ray cluster to join (None: start Ray "
                                "on this machine)")


class EarlyStopping(BaseModel):
    """Stop when a validation column has not improved for a while, and publish the model of
    its best round (:class:`fedmc.federation.validation.EarlyStop`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    patience: int = Field(20, ge=1, description="rounds without improvement before stopping")
    min_delta: float = Field(0.0, ge=0, description="smallest change that counts as an "
                             "improvement")
    metric: str | None = Field(None, description="the validation column watched (default: "
                               "validation_ndcg@K for interactions, validation_rmse for "
                               "ratings)")
    refit: bool = Field(True, description="train again on every training rating (the cut "
                        "included) for the best round's number of rounds, and publish that "
                        "model (fedmc.run.runner)")


class Schedule(BaseModel):
    """How a federated run proceeds, besides the algorithm's own parameters."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    rounds: int = Field(100, ge=0, description="communication rounds K")
    active: int | None = Field(None, ge=1, description="clients per round (None: all)")
    sampling: SamplingKind = Field("uniform",
                                   description="uniform|bernoulli|replacement|cyclic")
    participation: float | None = Field(
        None, gt=0, le=1, description="p_i of every client for Bernoulli sampling, "
        "1 / the cycle's rounds for cyclic participation (default active/clients)")
    dropout: float = Field(0.0, ge=0, lt=1, description="share of drawn clients that drop out")
    eval_every: int = Field(1, ge=1, description="evaluate every this many rounds")
    seed: int = Field(0, ge=0, description="seed of the initial draws and the server's stream")
    dp: UserDP | None = Field(None, description="user-level DP (None: off)")
    eval_k: int | None = Field(None, ge=1, description="cut-off K of ranking metrics computed "
                               "at every evaluation, on the test and validation items")
    early_stopping: EarlyStopping | None = Field(None, description="early stopping on the "
                                                 "validation cut (None: off)")

    def sampler(self, n_clients: int) -> Sampler:
        """The client sampler of the run (:func:`fedmc.federation.sampling.make_sampler`)."""
        from fedmc.federation.sampling import make_sampler

        return make_sampler(n_clients, self.active, self.sampling,
                            participation=self.participation, dropout=self.dropout)

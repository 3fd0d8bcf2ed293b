"""Hyper-parameters of FedMC-ADMM (names as in the paper, ``fedmc-admm.md``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Literal, Self

from pydantic import Field, model_validator

from fedmc.core.factors import FactorConfig
from fedmc.core.prox import RegKind, Regularizer


class FedMCADMMConfig(FactorConfig):
    """Hyper-parameters of FedMC-ADMM (names as in the paper).

    The defaults are the best settings measured on MovieLens 1M with the paper's client
    protocol (100 clients, 10 per round; ``benchmarks/README.md``). They use two options of
    ours, ``steps="per-row"`` and ``biases=True``; the paper's own settings are
    ``steps="paper", biases=False, beta=1e4, init_scale=2e-4, lam=gamma=1e-6, rank=5``.
    """

    rank: int = 8
    inner: int = Field(10, ge=1, description="N: inner steps on U_i and on W_i per round")
    beta: float = Field(0.08, gt=0, description="penalty parameter beta of (5)")
    reg_u: RegKind = "l2"
    lam: float = Field(4.0, ge=0, description="lambda: weight of R_i")
    fold_lam: float | None = Field(
        None, ge=0, description="lambda of a user's fold-in from the published model (R_i's "
        "weight when a device computes its factor, fold_in.py); lam when None. Training does "
        "not read it: a private search chooses it after training (fedmc.tune.private)")
    reg_v: RegKind = "l2"
    gamma: float = Field(0.01, ge=0, description="gamma: weight of R")
    l1_ratio: float = Field(0.5, ge=0, le=1, description="l1 share of the elastic net")
    box_lo: float = 0.0
    box_hi: float = 1.0
    steps: Literal["paper", "per-row"] = "per-row"
    consensus: Literal["all", "rated"] = Field(
        "all",
        description="all: W_i = V on every item (Algorithm 1); rated: only on the items a "
        "client rated, with the exact W-step and U-steps against V^k (the cross-device mode, "
        "docs/algorithms.md)",
    )
    dual_init: Literal["paper", "zeros"] = "paper"
    weights: Literal["equal", "sqrt-items"] = Field(
        "equal",
        description="consensus on rated items: equal: every client weighs 1; sqrt-items: "
        "client i weighs 1/sqrt(|J_i|) over its |J_i| rated items, so its rater counts have "
        "norm 1 (user-level DP, docs/privacy.md)",
    )
    count_scale: float = Field(1.0, gt=0, description="consensus on rated items: kappa, the "
                               "factor on the uploaded rater counts (the server divides it out;"
                               " below 1 it moves a DP set-up release's noise onto the counts)")
    offset: Literal["none", "item-bias"] = Field(
        "none",
        description="item-bias: the set-up exchange also uploads the item-bias baseline's "
        "residual sums, the server sets the ridge item biases b0 from them and the factors "
        "are fitted to the ratings less b0 (published in V's bias column); needs "
        "consensus=rated, dual_init=zeros and biases (docs/privacy.md)",
    )
    offset_lam: float = Field(3.0, ge=0, description="ridge weight of the offset's item biases "
                              "(in weighted rater counts)")
    offset_lam_user: float = Field(5.0, ge=0, description="ridge weight of a user's own bias "
                                   "in the offset's residuals")
    rank_popularity: float = Field(
        0.0, ge=0, allow_inf_nan=False,
        description="consensus on rated items: weight of sqrt(n_j), the item's (weighted, "
        "under DP noised) rater count from the set-up release, added to the predicted rating "
        "to rank items for top-N lists; the model publishes that boost (docs/privacy.md, "
        "\"Private top-N lists\"); 0: ranked by the predicted rating alone")
    biases: bool = True
    init_scale: float = 0.1
    clip: bool = True

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.rank_popularity > 0 and self.consensus != "rated":
            raise ValueError("rank_popularity ranks with the rater counts, which only "
                             "consensus=rated releases")
        if self.weights != "equal" and self.consensus != "rated":
            raise ValueError("client weights (weights=sqrt-items) need consensus=rated")
        if self.offset != "none" and (self.consensus != "rated" or self.dual_init != "zeros"
                                      or not self.biases):
            raise ValueError("offset=item-bias needs consensus=rated, dual_init=zeros and "
                             "biases")
        return self

    def regularizers(self) -> tuple[Regularizer, Regularizer]:
        """``(R_i, R)`` as :class:`fedmc.core.prox.Regularizer` objects."""
        common = {"ratio": self.l1_ratio, "lo": self.box_lo, "hi": self.box_hi}
        return (
            Regularizer(self.reg_u, self.lam, **common),
            Regularizer(self.reg_v, self.gamma, **common),
        )

    def fold_in_regularizer(self) -> Regularizer:
        """``R_i`` of a fold-in: its weight is ``fold_lam`` where one is set, else ``lam``."""
        reg = self.regularizers()[0]
        return reg if self.fold_lam is None else replace(reg, lam=self.fold_lam)

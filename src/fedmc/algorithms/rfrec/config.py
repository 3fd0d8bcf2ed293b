"""Hyper-parameters of RFRec and RFRecF (names as in ``rfrec.md``, section 3 and 4.1.3)."""

from __future__ import annotations

from typing import Literal, Self

from pydantic import Field, model_validator

from fedmc.core.factors import FactorConfig
from fedmc.privacy.laplace import LaplaceMechanism


class RFRecConfig(FactorConfig):
    """Hyper-parameters of RFRec (names as in the paper, section 3 and 4.1.3)."""

    rank: int = Field(20, description="d: latent dimension")
    alpha: float = Field(0.005, gt=0, description="alpha: learning rate of Eq. (6)")
    lam: float = Field(100.0, ge=0, description="lambda: weight of psi in (5)")
    lam_u: float = Field(30.0, ge=0, description="lambda_u: weight of ||u_i||^2 in f_i")
    init_scale: float = Field(0.01, ge=0, description="std of the Gaussian initialization")
    delta: float | None = Field(None, gt=0, description="LDP clipping bound delta of Eq. (9)")
    s: float | None = Field(None, gt=0, description="LDP Laplace scale s of Eq. (9)")
    optimizer: Literal["gd", "adam"] = Field(
        "adam", description="gd: the paper's gradient step; adam: the notebooks' optimizer"
    )

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.biases:
            raise ValueError("RFRec's model is u^T v without biases; use biases=false")
        if self.s is not None and self.delta is None:
            raise ValueError("LDP noise s needs a clipping bound delta (Eq. 9)")
        return self

    def mechanism(self) -> LaplaceMechanism | None:
        """The LDP mechanism of Eq. (9), or ``None`` when no noise is added."""
        if self.s is None or self.delta is None:  # s needs delta (the validator above)
            return None
        return LaplaceMechanism(self.delta, self.s)


class RFRecFConfig(RFRecConfig):
    """Hyper-parameters of RFRecF: RFRec's plus the switching probability ``p``."""

    alpha: float = Field(0.01, gt=0, description="alpha: learning rate of Eq. (8)")
    lam_u: float = Field(10.0, ge=0, description="lambda_u: weight of ||u_i||^2 in f_i")
    p: float = Field(0.5, gt=0, lt=1, description="p: probability of an aggregation step")
    average_step: Literal["plain", "optimizer"] = Field(
        "optimizer",
        description="moving to average (Alg. 2 line 11): plain, the paper's step; optimizer: "
        "its gradient lambda (V_(i) - V̄) fed to the configured optimizer (Adam), like the "
        "main update",
    )

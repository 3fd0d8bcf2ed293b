"""Hyper-parameters of both FedMAvg variants, and what distinguishes them.

``FedMAvgConfig``: FedMAvg as the FedMC-ADMM paper runs it (section 5.2); ``FedMAvgPosterConfig``:
the original (the poster's Algorithm 1). Each config answers the few questions in which the two
differ (:meth:`~ModelAveragingConfig.projection`, :meth:`~ModelAveragingConfig.w_objective`,
:meth:`~ModelAveragingConfig.local_steps`, :meth:`~ModelAveragingConfig.everyone_computes`),
so the client and server functions are shared.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fedmc.core.factors import FactorConfig
from fedmc.core.prox import Regularizer


class ModelAveragingConfig(FactorConfig):
    """Settings shared by both FedMAvg variants (names as in the papers)."""

    inner: int = Field(10, ge=1, description="Q1 = Q2: local steps on U_i and on W_i")
    lam: float = Field(1e-6, ge=0, description="lambda: weight of R_i = lambda/2 ||U_i||^2")
    gamma: float = Field(1e-6, ge=0, description="gamma: weight of R = gamma/2 ||V||^2")
    gamma1: float = Field(2.0, gt=1, description="c^k = gamma1/2 (lambda_max(V V^T) + lambda)")
    gamma2: float = Field(5.0, gt=0, description="d_i^k = gamma2 lambda_max(U_i^T U_i)")
    init_scale: float = 2e-4

    def regularizers(self) -> tuple[Regularizer, Regularizer]:
        """``(R_i, R)``: the l2-squared terms of section 5.2."""
        return Regularizer("l2", self.lam), Regularizer("l2", self.gamma)

    def projection(self) -> Regularizer:
        """The constraint sets of ``U_i`` and ``V`` besides the bias layout (none here)."""
        return Regularizer("none")

    def w_objective(self, n_clients: int) -> tuple[float, float]:
        """``(f_scale, shift)``: the ``W`` steps minimize ``f_scale f_i + gamma/2 ||W||^2``
        with step ``1 / (gamma2 (lambda_max(U_i^T U_i) + shift))``; section 5.2 has
        ``f_scale = 1/p``, ``shift = 0``."""
        return 1.0 / n_clients, 0.0

    def local_steps(self, k: int) -> tuple[int, int]:
        """``(Q1, Q2)`` of round ``k``."""
        return self.inner, self.inner

    def everyone_computes(self) -> bool:
        """Whether every client's ``U_i`` moves each round (else only the sampled ones')."""
        return True


class FedMAvgConfig(ModelAveragingConfig):
    """Hyper-parameters of FedMAvg as in section 5.2."""

    u_update: Literal["all", "sampled"] = Field(
        "all", description="clients whose U_i moves each round: all (section 5.2) or S_k"
    )

    def everyone_computes(self) -> bool:
        """``u_update="all"`` (section 5.2: "for all clients i in [p]")."""
        return self.u_update == "all"


class FedMAvgPosterConfig(ModelAveragingConfig):
    """Hyper-parameters of the original FedMAvg (names as in the poster)."""

    inner: int = Field(10, ge=1, description="Q1: projected gradient steps on U_i per round")
    q_hat: int = Field(10, ge=0, description="Q_hat of Q2^s = floor(Q_hat / s) + 1")
    gamma2: float = Field(5.0, gt=0, description="d_p^s = gamma2 (lambda_max(U_i^T U_i) + gamma)")
    constraint: Literal["none", "nonneg", "box"] = Field(
        "none", description="the sets H_p and W: no constraint, U, V >= 0, or a box"
    )
    box_lo: float = 0.0
    box_hi: float = 1.0

    def projection(self) -> Regularizer:
        """``H_p`` and ``W`` (besides the bias layout), as an indicator whose prox projects."""
        return Regularizer(self.constraint, lo=self.box_lo, hi=self.box_hi)

    def w_objective(self, n_clients: int) -> tuple[float, float]:
        """``grad_V F_p = U_i^T P(U_i V - M_i) + gamma V``, ``L_W = lambda_max + gamma``."""
        return 1.0, self.gamma

    def local_steps(self, k: int) -> tuple[int, int]:
        """``Q1`` and the diminishing ``Q2^s = floor(Q_hat / s) + 1`` of round ``s = k``."""
        return self.inner, self.q_hat // k + 1

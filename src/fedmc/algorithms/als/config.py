"""Hyper-parameters of centralized ALS (:mod:`fedmc.algorithms.als`)."""

from __future__ import annotations

from pydantic import Field

from fedmc.core.factors import FactorConfig


class ALSConfig(FactorConfig):
    """Hyper-parameters of centralized ALS."""

    rank: int = 10
    biases: bool = True
    lam: float = Field(10.0, gt=0, description="ridge weight lambda (times the count if weighted)")
    weighted: bool = Field(False, description="lambda * |Omega_t| per row (ALS-WR)")
    init_scale: float = 0.1
    sweeps: int = Field(15, ge=0, description="sweeps to run; later rounds change nothing")

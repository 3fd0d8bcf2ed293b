"""FedMAvg as originally proposed (``fedmavg-poster.md``, Algorithm 1; Wang, Suwandi and Chang).

The poster's model is ``X_p ~ W H_p`` with a shared ``W`` and private ``H_p``; here the shared
factor is ``V`` and the private one ``U_i`` (client ``p`` = client ``i``). Its problem (1) is
instantiated with ``omega_p = 1/p`` and

    F_p(V, U_i) = f_i(U_i, V) + lambda/2 ||U_i||^2 + gamma/2 ||V||^2,

so that ``F = sum_p omega_p F_p`` is exactly objective (17) with l2 terms. Round ``s``:

* **server**: ``W^s = P_W((1/m) sum_{p in A^{s-1}} W_p^{s-1})`` is broadcast to *all* clients
  (``A^0`` = all clients, whose ``W_p^0`` all equal ``V^0``: the set-up);
* **every client** takes ``Q1`` projected gradient steps on ``U_i`` from ``U_i^{s-1}`` with step
  ``1/c_p^s``, then ``Q2^s = floor(Q_hat / s) + 1`` gradient steps on its copy ``W_p`` from
  ``W^s`` with step ``1/d_p^s``;
* only the ``m`` clients of ``A^s`` (drawn with replacement by ``omega_p``) upload ``W_p^s``.

Step sizes (the poster's Theorem 1 form): ``c_p^s = (gamma1/2) L_H`` and ``d_p^s = gamma2 L_W``
with ``L_H = lambda_max(V V^T) + lambda`` (a Lipschitz constant of ``grad_{U_i} F_p`` valid for
every client, see :mod:`fedmc.algorithms.fedmavg`) and ``L_W = lambda_max(U_i^T U_i) + gamma``
(that of ``grad_V F_p``). The theorem asks ``gamma1 > 1`` and a very conservative ``gamma2``;
the defaults (2 and 5) take the classical step ``1/L_H`` and the factor 5 of section 5.2 of
``fedmc-admm.md``.

Mapping onto the engine: the engine's ``clients`` array of a round is ``A^s``. With
:class:`WithReplacementSampler` it is a sorted multiset drawn with replacement (``omega_p = 1/p``)
and a client drawn twice counts twice in the average; with the engine's
:class:`fedmc.sim.sampling.UniformSampler` it is ``m`` distinct clients, and ``(1/m) sum`` is still an
unbiased estimate of ``sum_p omega_p W_p``. The ``W`` steps of clients outside ``A^s`` are
skipped: their result is never uploaded and ``W_p`` restarts from ``W^{s+1}``, so skipping them
changes nothing. The ``U`` steps of all clients are computed, so a round costs a pass over all
ratings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import Field

from fedmc.algorithms.base import Communication
from fedmc.algorithms.fedmavg import FedMAvg, ModelAveragingConfig
from fedmc.core.prox import Regularizer
from fedmc.data.federated import FederatedData
from fedmc.errors import ConfigError


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


@dataclass(frozen=True)
class WithReplacementSampler:
    """``m`` draws with replacement, uniform over ``n_clients`` (``omega_p = 1/p``).

    Returns a sorted multiset; :class:`FedMAvgPoster` averages it with multiplicities. Pass it
    to :meth:`fedmc.algorithms.base.FederatedAlgorithm.fit` as ``sampler``.
    """

    n_clients: int
    m: int

    def __post_init__(self) -> None:
        if self.n_clients < 1 or self.m < 1:
            raise ConfigError(f"need n_clients >= 1 and m >= 1, got {self.n_clients}, {self.m}")

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        """Sorted client ids of one round, repeats included."""
        return np.sort(rng.integers(0, self.n_clients, size=self.m)).astype(np.int64)


class FedMAvgPoster(FedMAvg):
    """The original FedMAvg (Algorithm 1 of the poster) on the batched simulation engine.

    Examples
    --------
    >>> from fedmc.api import load_federated
    >>> data = load_federated("synthetic", clients=20)
    >>> sampler = WithReplacementSampler(20, 5)
    >>> model = FedMAvgPoster(rank=5).fit(data, rounds=5, sampler=sampler)
    >>> model.history_.last("q2")
    3.0
    """

    name = "fedmavg-poster"
    Config = FedMAvgPosterConfig
    config: FedMAvgPosterConfig

    def _constraint(self) -> Regularizer:
        """``H_p`` and ``W`` (besides the bias layout), as an indicator whose prox projects."""
        cfg = self.config
        return Regularizer(cfg.constraint, lo=cfg.box_lo, hi=cfg.box_hi)

    def _w_objective(self, data: FederatedData) -> tuple[float, float]:
        """``grad_V F_p = U_i^T P(U_i V - M_i) + gamma V``, ``L_W = lambda_max + gamma``."""
        return 1.0, self.config.gamma

    def setup(self, data: FederatedData, rng: np.random.Generator) -> Communication:
        """Initial factors, projected onto ``H_p`` and ``W`` (the server step with ``A^0``)."""
        self.round_ = 0
        self.q2_ = 0
        return super().setup(data, rng)

    def round(self, clients: np.ndarray, rng: np.random.Generator) -> Communication:
        """Round ``s``: all clients step, ``A^s = clients`` upload, the server projects."""
        self.round_ += 1
        self.q2_ = self.config.q_hat // self.round_ + 1
        everyone = np.arange(self.data_.n_clients, dtype=np.int64)
        return self._average_round(everyone, clients, self.config.inner, self.q2_)

    def evaluate(self, data: FederatedData) -> dict[str, float]:
        """Objective (17) (= the poster's ``F``), errors, sparsity and the last ``Q2^s``."""
        return {**super().evaluate(data), "q2": float(self.q2_)}

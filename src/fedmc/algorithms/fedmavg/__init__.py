"""FedMAvg as the FedMC-ADMM paper runs it (``fedmc-admm.md``, section 5.2; the model averaging
algorithm of its reference [42], Wang and Chang 2022).

Round ``k`` with sampled clients ``S_k`` (``m = |S_k|``):

* every client ``i`` updating its ``U_i`` (all ``p`` clients by default, as section 5.2 writes
  "for all clients i in [p]"; only ``S_k`` with ``u_update="sampled"``) receives ``V^k`` and
  takes ``Q1`` gradient steps

      U_i^{k,l} = U_i^{k,l-1}
                  - [P_Omega_i(U_i^{k,l-1} V^k - M_i)(V^k)^T + lambda U_i^{k,l-1}] / c^k;

* every client of ``S_k`` starts from ``W_i^{k,0} = V^k`` and takes ``Q2`` gradient steps

      W_i^{k,l} = W_i^{k,l-1} - [(U_i^{k+1})^T P_Omega_i(U_i^{k+1} W_i^{k,l-1} - M_i) / p
                                 + gamma W_i^{k,l-1}] / d_i^k,
      d_i^k = 5 lambda_max((U_i^{k+1})^T U_i^{k+1}),

  and uploads ``W_i^{k+1} = W_i^{k,Q2}``;
* the server averages ``V^{k+1} = (1/m) sum_{i in S_k} W_i^{k+1}`` and sends it at the start of
  the next round.

Section 5.2 does not state ``c^k``. Reference [42] takes ``c = (gamma_1 / 2) L_U`` with
``gamma_1 > 1`` and ``L_U`` the Lipschitz constant of the ``U_i`` gradient. For the gradient above
that constant is at most ``lambda_max(V^k (V^k)^T) + lambda`` for every client (the Hessian of
row ``t`` is ``sum_{j in Omega_t} v_j v_j^T + lambda I``), which depends on ``V^k`` only, as the
paper's ``c^k`` (no client index) does. So

    c^k = (gamma_1 / 2) (lambda_max(V^k (V^k)^T) + lambda),   gamma_1 = 2 by default,

i.e. the classical step ``1/L``; ``d_i^k = gamma_2 lambda_max(U_i^T U_i)`` with ``gamma_2 = 5``
as in the paper. See ``docs/fedmavg.md`` for how this differs from the paper's public code.

With biases (:mod:`fedmc.core.factors`), the all-ones column of ``U`` is projected back after
every ``U`` step and the one of ``V`` on the server; the ``W`` steps are plain gradient steps.
Storage is item-major: ``V`` and the uploads are ``(n, r)``.

The original FedMAvg (``fedmavg-poster.md``, Algorithm 1; Wang, Suwandi and Chang) is the
second algorithm of this package: its model ``X_p ~ W H_p`` maps to ``M_i ~ U_i V``, its
problem (1) is objective (17) with ``F_p = f_i + lambda/2 ||U_i||^2 + gamma/2 ||V||^2``; every
client computes each round, ``Q2^s = floor(Q_hat / s) + 1`` steps on ``W_p``, step sizes
``c_p^s = (gamma1/2) L_H`` and ``d_p^s = gamma2 (lambda_max(U_i^T U_i) + gamma)``, and the
uploads ``A^s`` are drawn with replacement (``sampling="replacement"``: a client drawn twice
counts twice; with uniform sampling ``(1/m) sum`` is still an unbiased estimate of
``sum_p omega_p W_p``). The ``W`` steps of clients outside ``A^s`` are skipped: their result is
never uploaded and ``W_p`` restarts from ``W^{s+1}``. See ``docs/fedmavg.md``.
"""

from __future__ import annotations

from fedmc._lazy import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, ALGORITHM=".algorithm", POSTER=".algorithm",
                                    FedMAvgConfig=".config", FedMAvgPosterConfig=".config",
                                    ModelAveragingConfig=".config")

"""Felb and Felb-MU: federated Boolean matrix factorization (Alg. 1 of the Felb paper).

Client ``i`` holds its rows ``A_i`` and its factor ``U_i`` privately and fits
``A_i ~ U_i V_i`` under the Elb regularizer R (Eq. 3) and the proximity penalty
``P(V_i) = gamma ||V_i - V_hat||^2``, by inertial proximal alternating linearized steps
(iPALM, Eq. 8): a gradient step on ``f = 1/2 ||A_i - U V||_F^2`` followed by the Boolean prox
(Eq. 6) for U and V and the proximity prox (Eq. 7) for V. Every ``b`` local steps it uploads
``V_i`` (optionally clipped and noised, Sec. 3.3); the server averages the uploads and applies
the Boolean prox (proximal aggregation, Alg. 1 line 16); clients restart from ``V_hat``.

Felb uses one Lipschitz step per block and client; Felb-MU uses the per-entry step matrices
of Lee and Seung's multiplicative update, ``eta_U = U / (U V V^T)`` and
``eta_V = V / (U^T U V)``, for which the gradient step is exactly the MU update.

Beyond the paper, the clients fit the sharpened target ``T_i = (1+2c) A_i - c`` instead of
``A_i`` once ``sharpen_after`` syncs have passed (``c = sharpen``, default 1 after 10 syncs;
``sharpen=0`` is the paper). On binary factors ``||T_i - U_i o V||^2 = c^2 n_i m + (1+2c)
Hamming(A_i, U_i o V)``, so the Boolean objective is the same; the relaxation no longer favours
a dense fractional background, which made the factors collapse to zero at 40% XOR noise
(docs/felb.md, "High noise").

One round is one synchronization. The client side (:mod:`~fedmc.algorithms.felb.client`)
processes all sampled clients together, their factors stacked as ``(s, n_max, k)`` and
``(s, k, m)`` arrays (:class:`~fedmc.algorithms.felb.blocks.ClientBlocks`); the server
(:mod:`~fedmc.algorithms.felb.server`) holds ``V_hat`` and the schedule's counters. The
readings of the paper's gaps are options with the defaults of ``docs/felb.md`` (spec sections
2 and 6).
"""

from __future__ import annotations

from fedmc._lazy import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, ALGORITHM=".algorithm", ALGORITHM_MU=".algorithm",
                                    FelbConfig=".config", FelbMUConfig=".config")

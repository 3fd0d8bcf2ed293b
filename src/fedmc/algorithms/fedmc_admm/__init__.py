"""FedMC-ADMM: linearized ADMM with randomized client sampling (Algorithm 1 of
``fedmc-admm.md``, section 4.1).

Per round ``k`` with sampled clients ``S_k``, each client ``i`` in ``S_k``
(:mod:`~fedmc.algorithms.fedmc_admm.client`):

* (14) takes ``N`` proximal-gradient steps on ``U_i`` with ``W_i^k`` fixed, step ``1/L_W``,
  ``L_W = ||W_i W_i^T||_F``;
* (15) takes ``N`` linearized steps on ``W_i`` with ``L_U = ||U_i^T U_i||_F``;
* (13) updates its dual ``Y_i <- Y_i + beta (W_i - V^k)`` and uploads the change of
  ``beta W_i + Y_i``.

The server (:mod:`~fedmc.algorithms.fedmc_admm.server`) keeps ``sum_i (beta W_i + Y_i)`` up to
date from the summed changes and solves (16):
``V = prox_{R/(p beta)}( sum_i (beta W_i + Y_i) / (p beta) )`` — (68) for l2, (73) for l1.

``steps="per-row"`` (an option, not in the paper) replaces the scalar ``L_W`` and ``L_U`` by a
block-diagonal prox metric: ``||sum_{j in Omega_t} w_j w_j^T||_F`` per user row ``t`` and
``||sum_{t: (t,j) in Omega_i} u_t u_t^T||_F`` per item column ``j``. Each is the Lipschitz
constant of its own block of the gradient, so the descent argument of the paper carries over
block by block, with larger steps. See ``docs/algorithms.md``.

``consensus="rated"`` (the cross-device mode, ``--partition user``) is a second algorithm on
the same settings, :data:`RATED` (:mod:`~fedmc.algorithms.fedmc_admm.rated`);
:data:`BY_CONSENSUS` picks one of the two by that setting
(:mod:`fedmc.algorithms.fedmc_admm.spec`).
"""

from __future__ import annotations

from fedmc._lazy import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, BY_CONSENSUS=".algorithm", PAPER=".algorithm",
                                    RATED=".algorithm", FedMCADMMConfig=".config")

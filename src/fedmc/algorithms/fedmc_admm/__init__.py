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

from fedmc.algorithms.fedmc_admm import client, server
from fedmc.algorithms.fedmc_admm.config import FedMCADMMConfig
from fedmc.algorithms.fedmc_admm.rated import client as rated_client
from fedmc.algorithms.fedmc_admm.rated import server as rated_server
from fedmc.algorithms.fedmc_admm.spec import FEDMC_ADMM
from fedmc.core.factors import uniform_draws
from fedmc.core.protocol import Algorithm

PAPER = Algorithm.of(FEDMC_ADMM.name, FedMCADMMConfig, client, server,
                     data_kind=FEDMC_ADMM.data_kind, draws=uniform_draws, split_batches=True)
RATED = Algorithm.of(f"{FEDMC_ADMM.name}-rated", FedMCADMMConfig, rated_client, rated_server,
                     data_kind=FEDMC_ADMM.data_kind, draws=uniform_draws, evaluate=client.evaluate,
                     user_factors=client.user_factors, split_batches=True)
BY_CONSENSUS = {"all": PAPER, "rated": RATED}


__all__ = ["BY_CONSENSUS", "PAPER", "RATED", "FedMCADMMConfig"]

"""Federated alternating least squares on summed sufficient statistics, for ratings and for
implicit feedback (``docs/fedals.md``).

Round ``k`` with sampled clients ``S_k``:

* every client of ``S_k`` receives ``V^k`` and solves each of its user rows exactly, the ridge
  problem of ALS's user step (explicit) or Hu, Koren and Volinsky's Eq. (4) (implicit, every
  item the user did not interact with a zero of confidence 1, through ``V^T V``)
  (:mod:`~fedmc.algorithms.fedals.client`);
* it uploads the change, since its last upload, of its contribution to the item step's
  sufficient statistics: on each item it rated the packed ``sum w x x^T`` and ``sum y x`` of
  its users, and with implicit feedback its share of the Gramian ``sum x x^T``;
* the server adds the cohort's sum to its running statistics, which are those of every
  client's latest user factors, and solves every item's ridge problem exactly
  (:mod:`~fedmc.algorithms.fedals.server`; Hu et al.'s Eq. (5)).

A round is a block-coordinate step on the whole objective: the sampled users' rows and then
``V`` are each minimized exactly with the rest fixed, so the objective never increases, and
with every client in every round it is centralized ALS's sweep (the federated form of
Ammad-ud-din et al. 2019's FCF with the exact item step; the sums are the statistics that
Chien et al. 2021, "Private Alternating Least Squares", noise for user-level DP).

With ``item_step="exchanges"`` every client takes part in every round and the server keeps no
sums: after the user step the clients upload their shares of each item system's residual, then
of its products with the server's conjugate-gradient directions, one exchange per step (the
``implicit`` library's ALS, federated; ``docs/fedals.md``).
"""

from __future__ import annotations

from fedmc._lazy import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, ALGORITHM=".algorithm", FedALSConfig=".config")

"""Federated EASE (Steck 2019, "Embarrassingly Shallow Autoencoders for Sparse Data"): the
closed-form item-item model of top-N recommendation, from the item-item Gram matrix
``G = sum_u x_u x_u^T``, a sum over users: exactly what a federation sums.

Every client uploads its users' share of ``G`` in one set-up exchange
(:mod:`~fedmc.algorithms.ease.client`, kept by their sparse rows:
:class:`fedmc.core.gram_rows.GramRows`), the server solves ``B`` in closed form and publishes
it (:mod:`~fedmc.algorithms.ease.server`), a device scores ``x_u B`` from its own history
(:mod:`~fedmc.algorithms.ease.fold_in`). It fits interactions (``--implicit``) only.

Under user-level DP (``--dp-epsilon``) it is one Gaussian release of ``G``: each client clips
its whole upload to ``--dp-clip`` (``||x x^T||_F = |x|`` for a binary row; with ``max_items``
each user contributes at most that many items), the aggregator adds the noise, the server
symmetrizes the noised sum; the accountant charges one set-up exchange (``docs/ease.md``).
"""

from __future__ import annotations

from fedmc._lazy import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, ALGORITHM=".algorithm", EaseConfig=".config")

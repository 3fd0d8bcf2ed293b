"""The item-bias baseline: biases only, the trivial model a private federation must beat.

The model is ``z_tj ~ c_t + b_j`` on the normalized scale (with ``--normalize public`` the
centre is the rating scale's midpoint). Each user's bias ``c_t`` is computed on its device
and never sent (also at prediction time: the fold-in); the clients upload, for their rated
items, their residual sums and counts (:mod:`~fedmc.algorithms.item_bias.client`), and the
server publishes the ridge item biases (:mod:`~fedmc.algorithms.item_bias.server`). One
set-up exchange answered by every client gives the model (``--rounds 0``); each round refreshes
a cohort's user biases against the current ``b``.

Under user-level DP (``--dp-epsilon``, ``--dp-clip``) it is one Gaussian release with
``--rounds 0``: every client clips its whole upload (sums and counts together, so a clipped
client is only down-weighted, the ratio ``T_j / n_j`` stays unbiased), the sums carry the
noise, and the accountant charges one set-up exchange. With ``signal="counts"`` only the
counts are uploaded: the DP popularity list of implicit (click) data.
"""

from __future__ import annotations

from fedmc._lazy import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, ALGORITHM=".algorithm", ItemBiasConfig=".config")

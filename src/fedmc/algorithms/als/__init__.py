"""Centralized biased matrix factorization by alternating least squares (the reference the
federated methods are judged against at the same rank and split).

The federation is ignored: all training ratings are used in every sweep, nothing is
communicated. With the bias layout of :mod:`fedmc.core.factors`
(``U = [u | b_user | 1]``, ``V = [v | 1 | b_item]``) the model is ``u_t . v_j + b_t + b_j`` and
ALS minimizes

    1/2 sum_{(t,j) in Omega} (m_tj - U[t] . V[j])^2
        + lam/2 sum_t w_t ||U[t, free]||^2 + lam/2 sum_j w_j ||V[j, free]||^2,

where ``free`` are the columns that are not fixed to 1 and ``w_t = |Omega_t|``, ``w_j`` the
item's count with ``weighted=True`` (the weighted-lambda regularization of ALS-WR, Zhou et al.
2008), else ``w = 1`` (plain ridge, the default). One engine round is one sweep: every user
row solves its ``(r+1) x (r+1)`` ridge problem (normal equations)

    (sum_j f_j f_j^T + lam w_t I) x = sum_j (m_tj - b_j) f_j,   f_j = V[j, free],

with the item bias ``b_j`` (the fixed columns' share) moved to the target, then every item
column does the same with the roles swapped. Rows are independent, so each half-sweep is one
Numba kernel parallel over rows. It runs ``sweeps`` sweeps (default 15, chosen on a validation
split of the ML-1M training ratings, see ``docs/fedmavg.md``); its history has one row per
sweep. ALS is not a federated algorithm: it stays outside the protocol of
:mod:`fedmc.core.protocol` and only shares the data layout, the factor layout and the metrics.
"""

from __future__ import annotations

from fedmc._lazy import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, ALSConfig=".config", run_sweeps=".sweeps")

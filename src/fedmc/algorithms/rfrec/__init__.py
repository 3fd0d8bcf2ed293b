"""RFRec and RFRecF: regularized federated recommendation (``rfrec.md``, Algorithms 1 and 2).

Every client ``i`` keeps a local model ``x_i = (U_i, V_(i))``: the factors ``u_t`` of its
users and its own copy ``V_(i)`` of the item matrix. Problem (5) is

    F(x) = f(x) + lambda psi(x),
    f(x)   = sum_i f_i(x_i),
    f_i    = sum_{t in i} ( ||P_Omega(R_t - u_t^T V_(i))||^2 + lambda_u ||u_t||^2 ),
    psi(x) = 1/2 sum_i ||V_(i) - V̄||^2,           V̄ = mean of the V_(i).

* **RFRec** (Algorithm 1, Eq. 6): per iteration every client takes one gradient step
  ``x_i <- x_i - alpha (grad f_i(x_i) + lambda grad psi_i(x_i))`` with ``V̄`` held fixed, then
  uploads (a perturbed, Eq. 9) ``V_(i)``; the server averages the uploads into ``V̄`` and sends
  it back: two communication rounds per iteration.
* **RFRecF** (Algorithm 2, Eqs. 7-8): per iteration a coin ``zeta_k ~ Bernoulli(p)``. On
  ``zeta_k = 0`` the clients step locally: the *main update* ``x_i <- x_i - alpha/(1-p)
  grad f_i(x_i)`` if ``zeta_{k-1} = 0`` (or ``k = 0``), else the *moving to average*
  ``V_(i) <- V_(i) - (alpha/p) lambda (V_(i) - V̄)``. On ``zeta_k = 1`` the server aggregates.
  Communication happens only when the coin changes side: uploads on ``0 -> 1``, ``V̄`` sent
  down on ``1 -> 0``; in expectation ``2 p (1-p)`` rounds per iteration (Lemma 3.9).
  Options (``docs/rfrec.md``): ``optimizer=adam`` feeds the gradients to a per-client Adam
  instead of plain steps; ``average_step=optimizer`` (default) sends the moving-to-average
  gradient ``lambda (V_(i) - V̄)`` through that optimizer too (``plain``: line 11 as printed).

Names follow the paper: ``alpha`` (step), ``lam`` (lambda, weight of psi), ``lam_u``
(lambda_u), ``p``; the LDP mechanism of Eq. (9) takes ``delta`` and ``s``
(:class:`fedmc.privacy.laplace.LaplaceMechanism`).

Participation (dropped devices, Table 3): the engine's ``clients`` are the clients whose upload
reaches the server in a round. Every client still takes its local step ("clients can continue
local updates even without connection", section 3.3), the server averages over the uploads it
received and every client gets the new ``V̄``.

Storage: exact and sparse (:mod:`~fedmc.algorithms.rfrec.client`): one row per rated
(client, item) pair plus the columns every client shares. The server
(:mod:`~fedmc.algorithms.rfrec.server`) holds only ``V̄``.

Storage is item-major: ``V̄``, ``Z`` and the slots are ``(., d)`` arrays, the transposes of the
paper's ``d x m`` matrices. Predictions use the outputs of the algorithms: ``u_t^T V̄``.
"""

from __future__ import annotations

from fedmc._lazy import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, ALGORITHM=".algorithm", ALGORITHM_F=".algorithm",
                                    RFRecConfig=".config", RFRecFConfig=".config")

"""FedMC-ADMM with consensus on rated items (``consensus="rated"``): the cross-device mode.

The paper's constraint ``W_i = V`` asks every client to keep a copy of the whole item matrix,
and its V-step (16) averages over all ``p`` copies, most of which, for a client holding one
user, are stale copies of an old ``V``. Here client ``i`` keeps the constraint only on the
items it rated, ``W_ij = V_j`` for ``j in J_i``, so ``V_j`` averages over the clients that
rated ``j``. With ``f_i = 1/2 ||P_Omega_i(M_i - U_i W_i)||^2`` the augmented Lagrangian is

    L = sum_i [f_i(U_i, W_i) + R_i(U_i)] + R(V)
        + sum_i sum_{j in J_i} [<Y_ij, W_ij - V_j> + beta/2 ||W_ij - V_j||^2],

(objective (17) times ``p``: ``beta`` and ``R`` are per rated (client, item) pair and per item,
so their values do not depend on the number of clients). A visit of client ``i`` in round
``k`` (``docs/algorithms.md`` has the derivation):

* (14) ``N`` prox-gradient steps on ``U_i`` against the consensus ``V^k`` (the paper steps
  against ``W_i^k``, the client's copies from its last visit, often many rounds old);
* (11) the exact W-step (the paper's Remark 4.1) on every rated item:
  ``(sum_t u_t u_t^T + beta I) w_j = sum_t m_tj u_t + beta v_j - y_j``, an ``r x r`` solve
  (Sherman-Morrison-sized for one user);
* (13) ``Y_ij <- Y_ij + beta (W_ij - V_j^k)``; by the optimality of the W-step this is
  ``sum_t e_tj u_t`` with the residuals ``e_tj = m_tj - u_t . w_j``, so a client stores one
  scalar per rating for its duals, not a vector;
* it uploads, on its rated items only, the change of ``beta W_ij + Y_ij`` (sparse rows).

The server keeps ``T_j = sum_i (beta W_ij + Y_ij)`` and the raters ``n_j`` (both sums of
uploads; the counts come once, in the set-up exchange, and reveal each item's number of raters
over the whole federation) and sets ``V_j = prox_{R/(beta n_j)}(T_j / (beta n_j))``. With
``dual_init="zeros"`` every contribution starts at ``beta V_j^0``, so the set-up upload is the
counts alone and the server sets ``T_j^0 = beta n_j V_j^0`` itself.

**Item-bias offset** (``offset="item-bias"``, with zero duals). The set-up upload also carries,
per rated item, the client's mean residual ``a_i mean_t (z_tj - c_t)`` of the item-bias
baseline (:mod:`fedmc.core.biases`: ``c_t`` the user's own bias, computed on the device), so
the server forms the ridge item biases ``b0`` (2) from the same release as the counts, and
sends ``b0`` with every round. Each client then fits the factors to its ratings less the
offset, ``z_tj - b0_j`` (computed once, at its first visit), and the published model adds
``b0`` to ``V``'s item-bias column: the factors and the learned bias start from the DP item
biases instead of from zero, at the cost of the set-up upload's norm only.

**Client weights** (``weights="sqrt-items"``). Client ``i`` weighs ``a_i = |J_i|^(-1/2)``
(``|J_i|``: its number of rated items), fixed by its own data, and the problem becomes
``sum_i a_i [f_i + R_i + sum_{j in J_i} (<Y_ij, W_ij - V_j> + beta/2 ||W_ij - V_j||^2)]
+ R(V)`` with the duals of the weighted problem ``a_i Y_ij``. Scaling a client's whole term by
``a_i > 0`` leaves its U-, W- and dual steps unchanged, so the client computes exactly as
before and only multiplies what it uploads, contributions and counts, by ``a_i``: the server
keeps ``T_j = sum_i a_i (beta W_ij + Y_ij)`` and ``n_j = sum_i a_i`` and its V-step is the same
formula, a consensus in which heavy raters weigh less. The point is user-level DP
(``docs/privacy.md``): a client's counts then have L2 norm exactly 1 and its uploads scale with
``a_i``, so one clip norm fits every client and rarely binds, instead of scaling each client by
its own clip factor (which biases ``T_j / n_j``).

A client's state is its user rows, two residual scalars per rating (its last two duals) and
the ``V`` it saw at its last visit (for the change of its contribution). In the batched
simulation the population keeps each distinct ``V^k`` once, with a reference count, instead of
once per client (:class:`Snapshots`): a simulation specialisation, exact because every
client of a round receives the same ``V^k``. Memory: ``O(ratings + users r + items r)``.

The algorithm is :data:`fedmc.algorithms.fedmc_admm.RATED`: the paper's FedMC-ADMM with these
client and server steps (its evaluation and draws are the paper's).
"""

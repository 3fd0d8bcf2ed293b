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

With biases (:mod:`fedmc.algorithms.factor_model`), the all-ones column of ``U`` is projected
back after every ``U`` step and the one of ``V`` on the server; the ``W`` steps are plain
gradient steps. Storage is item-major: ``V`` and the uploads are ``(n, r)``.
"""

from __future__ import annotations

from typing import Literal

import numba
import numpy as np
from pydantic import Field

from fedmc.algorithms.base import Communication
from fedmc.algorithms.factor_model import FactorConfig, FactorLayout, FactorModel
from fedmc.core.kernels import (
    normal_equations,
    quad_gradient,
    rank_token,
    scratch_matrix,
    scratch_vector,
)
from fedmc.core.prox import Regularizer, prox_scalar
from fedmc.data.federated import FederatedData

BYTES = 8  # float64 payload


class ModelAveragingConfig(FactorConfig):
    """Settings shared by both FedMAvg variants (names as in the papers)."""

    inner: int = Field(10, ge=1, description="Q1 = Q2: local steps on U_i and on W_i")
    lam: float = Field(1e-6, ge=0, description="lambda: weight of R_i = lambda/2 ||U_i||^2")
    gamma: float = Field(1e-6, ge=0, description="gamma: weight of R = gamma/2 ||V||^2")
    gamma1: float = Field(2.0, gt=1, description="c^k = gamma1/2 (lambda_max(V V^T) + lambda)")
    gamma2: float = Field(5.0, gt=0, description="d_i^k = gamma2 lambda_max(U_i^T U_i)")
    init_scale: float = 2e-4

    def regularizers(self) -> tuple[Regularizer, Regularizer]:
        """``(R_i, R)``: the l2-squared terms of section 5.2."""
        return Regularizer("l2", self.lam), Regularizer("l2", self.gamma)


class FedMAvgConfig(ModelAveragingConfig):
    """Hyper-parameters of FedMAvg as in section 5.2."""

    u_update: Literal["all", "sampled"] = Field(
        "all", description="clients whose U_i moves each round: all (section 5.2) or S_k"
    )


# ----------------------------------------------------------------------------- kernels


@numba.njit(cache=True)
def gram_lambda_max(X: np.ndarray) -> float:
    """``lambda_max(X^T X)`` of a ``(k, r)`` array (an ``r x r`` eigenvalue problem)."""
    return np.linalg.eigvalsh(X.T @ X)[-1]


@numba.njit(cache=True)
def _u_gradient_steps(indptr, indices, values, row0, row1, U, V, n_steps, c, lam, proj, ones_col,
                      token):
    """``n_steps`` steps ``U_i <- P(U_i - [P_Omega_i(U_i V - M_i) V^T + lam U_i] / c)``.

    The gradient of row ``t`` is ``(A_t + lam I) u_t - b_t``
    (:func:`fedmc.core.kernels.normal_equations`), so rows are stepped one at a time. ``P`` is
    the projection ``proj`` (packed :class:`fedmc.core.prox.Regularizer` of an indicator kind, or
    ``none``) followed by setting column ``ones_col`` to 1 (when ``>= 0``).
    """
    r = len(token)
    A = scratch_matrix(token)
    b = scratch_vector(token)
    g = scratch_vector(token)
    for t in range(row0, row1):
        normal_equations(indptr, indices, values, t, V, A, b, token)
        u = U[t]
        for _ in range(n_steps):
            quad_gradient(A, b, u, g, token)
            for a in range(r):
                u[a] = prox_scalar(u[a] - (g[a] + lam * u[a]) / c, 0.0, proj)
            if ones_col >= 0:
                u[ones_col] = 1.0


@numba.njit(cache=True)
def _w_gradient_steps(g0, g1, g_item, g_ptr, g_row, g_vals, row0, row1, U, V, n_steps, f_scale,
                      gamma, gamma2, shift, W, token):
    """``W = V``, then ``n_steps`` steps ``W <- W - [f_scale U_i^T P_Omega_i(U_i W - M_i)
    + gamma W] / d`` with ``d = gamma2 (lambda_max(U_i^T U_i) + shift)``.

    The client's ratings come grouped by item (groups ``g0:g1`` of
    :class:`~fedmc.data.federated.ItemMajor`); column ``j``'s data gradient is
    ``B_j w_j - c_j`` (:func:`fedmc.core.kernels.normal_equations`). A column the client did not
    rate only shrinks, ``w <- (1 - gamma/d)^n_steps w``, applied in closed form. If ``d = 0``
    (``U_i = 0`` and ``shift = 0``) the step is undefined and ``W`` stays ``V``.
    """
    n = V.shape[0]
    r = len(token)
    W[:] = V
    d = gamma2 * (gram_lambda_max(U[row0:row1]) + shift)
    if d <= 0.0:
        return
    rho = (1.0 - gamma / d) ** n_steps
    B = scratch_matrix(token)
    cv = scratch_vector(token)
    g = scratch_vector(token)
    next_j = 0
    for k in range(g0, g1):
        j = g_item[k]
        W[next_j:j] *= rho
        next_j = j + 1
        normal_equations(g_ptr, g_row, g_vals, k, U, B, cv, token)
        w = W[j]
        for _ in range(n_steps):
            quad_gradient(B, cv, w, g, token)
            for e in range(r):
                w[e] -= (f_scale * g[e] + gamma * w[e]) / d
    W[next_j:n] *= rho


@numba.njit(cache=True, parallel=True)
def _u_updates(clients, client_ptr, indptr, indices, values, U, V, n_steps, c, lam, proj,
               ones_col, token):
    """:func:`_u_gradient_steps` for every client of ``clients``, in parallel over clients."""
    for s in numba.prange(clients.shape[0]):
        i = clients[s]
        _u_gradient_steps(indptr, indices, values, client_ptr[i], client_ptr[i + 1], U, V,
                          n_steps, c, lam, proj, ones_col, token)


@numba.njit(cache=True, parallel=True)
def _w_updates(clients, client_ptr, cols, U, V, n_steps, f_scale, gamma, gamma2, shift, W_out,
               token):
    """:func:`_w_gradient_steps` for every client of ``clients`` into ``W_out[s]``, in
    parallel over clients; ``cols`` is the item-major layout ``(client_ptr, item, ptr, row,
    values)`` of the training ratings."""
    g_client, g_item, g_ptr, g_row, g_vals = cols
    for s in numba.prange(clients.shape[0]):
        i = clients[s]
        _w_gradient_steps(g_client[i], g_client[i + 1], g_item, g_ptr, g_row, g_vals,
                          client_ptr[i], client_ptr[i + 1], U, V, n_steps, f_scale, gamma,
                          gamma2, shift, W_out[s], token)


# ----------------------------------------------------------------------------- both sides


class ModelAveragingClients:
    """The client side of FedMAvg: every client's private ratings and ``U_i``.

    The ``W`` steps minimize ``f_scale * f_i(U_i, W) + gamma/2 ||W||^2`` with step
    ``1/d_i``, ``d_i = gamma2 (lambda_max(U_i^T U_i) + shift)``: section 5.2 has
    ``f_scale = 1/p, shift = 0``; the poster's ``F_p = f_i + R_i + R`` has ``f_scale = 1,
    shift = gamma`` (:mod:`fedmc.algorithms.fedmavg_poster`). Only :meth:`local_update`'s
    return value (the uploads) reaches the server.
    """

    def __init__(
        self,
        data: FederatedData,
        U: np.ndarray,
        layout: FactorLayout,
        cfg: ModelAveragingConfig,
        f_scale: float,
        shift: float,
        proj: Regularizer,
    ):
        self.data = data
        self.U = U
        self.layout = layout
        self.cfg = cfg
        self.f_scale = f_scale
        self.shift = shift
        self.proj = proj.params

    def step_c(self, V: np.ndarray) -> float:
        """``c^k = (gamma1/2) (lambda_max(V^k (V^k)^T) + lambda)``, a function of ``V^k`` only."""
        return 0.5 * self.cfg.gamma1 * (gram_lambda_max(V) + self.cfg.lam)

    def local_update(
        self, V: np.ndarray, u_clients: np.ndarray, w_clients: np.ndarray, q1: int, q2: int
    ) -> np.ndarray:
        """``Q1`` steps on ``U_i`` for ``u_clients``, then ``Q2`` steps on ``W_i`` (from ``V``)
        for ``w_clients``; returns their ``W_i`` as a ``(len(w_clients), n, r)`` array."""
        tr = self.data.train
        cfg = self.cfg
        c = self.step_c(V)
        token = rank_token(V.shape[1])
        if c > 0.0:  # c = 0 only if V = 0 and lambda = 0: a zero gradient, nothing to do
            _u_updates(u_clients, self.data.client_ptr, tr.indptr, tr.indices, tr.values,
                       self.U, V, q1, c, cfg.lam, self.proj, self.layout.ones_col_u, token)
        W_out = np.empty((len(w_clients), *V.shape))
        im = self.data.item_major
        _w_updates(w_clients, self.data.client_ptr,
                   (im.client_ptr, im.item, im.ptr, im.row, im.values), self.U, V, q2,
                   self.f_scale, cfg.gamma, cfg.gamma2, self.shift, W_out, token)
        return W_out


class ModelAveragingServer:
    """The server side: ``V`` and the weighted average of the uploads, projected."""

    def __init__(self, V0: np.ndarray, layout: FactorLayout, proj: Regularizer):
        self.V = V0
        self.layout = layout
        self.proj = proj

    def aggregate(self, W_up: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """``V = P_W(sum_s counts[s] W_up[s] / sum(counts))``; unchanged if nothing came."""
        if len(counts):
            V = np.tensordot(counts / counts.sum(), W_up, axes=1)
            V = self.proj.prox(V, 0.0)
            self.layout.project_v(V)
            self.V = V
        return self.V


# ------------------------------------------------------------------------------ algorithm


class FedMAvg(FactorModel):
    """FedMAvg with the hyper-parameters of section 5.2 on the batched simulation engine.

    Examples
    --------
    >>> from fedmc.api import load_federated
    >>> data = load_federated("synthetic", clients=20)
    >>> model = FedMAvg(rank=5).fit(data, rounds=5, active=5)
    >>> len(model.history_)
    6
    """

    name = "fedmavg"
    Config = FedMAvgConfig
    config: FedMAvgConfig

    def _constraint(self) -> Regularizer:
        """The constraint sets of ``U_i`` and ``V`` besides the bias layout (none here)."""
        return Regularizer("none")

    def _w_objective(self, data: FederatedData) -> tuple[float, float]:
        """``(f_scale, shift)`` of :class:`ModelAveragingClients` for section 5.2."""
        return 1.0 / data.n_clients, 0.0

    def setup(self, data: FederatedData, rng: np.random.Generator) -> Communication:
        """``U^0, V^0`` on ``[0, init_scale]``; ``V^0`` reaches clients in the first round."""
        self.init_factors(data, rng)
        cfg = self.config
        self.reg_u_, self.reg_v_ = cfg.regularizers()
        proj = self._constraint()
        for X in (self.U_, self.V_):
            X[:] = proj.prox(X, 0.0)
        self.layout_.project_u(self.U_)
        self.layout_.project_v(self.V_)
        f_scale, shift = self._w_objective(data)
        self.clients_ = ModelAveragingClients(
            data, self.U_, self.layout_, cfg, f_scale, shift, proj
        )
        self.server_ = ModelAveragingServer(self.V_, self.layout_, proj)
        return Communication()

    def _average_round(
        self, u_clients: np.ndarray, uploads: np.ndarray, q1: int, q2: int
    ) -> Communication:
        """Send ``V^k`` to ``u_clients`` and the uploaders, run the local steps, average the
        uploads of the multiset ``uploads`` (a client drawn twice counts twice)."""
        w_clients, counts = np.unique(uploads, return_counts=True)
        W_up = self.clients_.local_update(self.V_, u_clients, w_clients, q1, q2)
        self.V_ = self.server_.aggregate(W_up, counts)
        size = self.V_.size * BYTES
        n_down = len(np.union1d(u_clients, w_clients))
        return Communication(bytes_up=len(w_clients) * size, bytes_down=n_down * size)

    def round(self, clients: np.ndarray, rng: np.random.Generator) -> Communication:
        """One round of section 5.2 with ``S_k = clients``."""
        cfg = self.config
        u_clients = (
            np.arange(self.data_.n_clients, dtype=np.int64) if cfg.u_update == "all" else clients
        )
        return self._average_round(u_clients, clients, cfg.inner, cfg.inner)

    def evaluate(self, data: FederatedData) -> dict[str, float]:
        """Objective (17) with the l2 terms of section 5.2, errors and sparsity."""
        return self.factor_metrics(data, self.reg_u_, self.reg_v_)

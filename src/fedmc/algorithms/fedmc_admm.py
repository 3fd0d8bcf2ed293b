"""FedMC-ADMM: linearized ADMM with randomized client sampling (Algorithm 1 of
``fedmc-admm.md``, section 4.1).

Per round ``k`` with sampled clients ``S_k``, each client ``i`` in ``S_k``:

* (14) takes ``N`` proximal-gradient steps on ``U_i`` with ``W_i^k`` fixed, step ``1/L_W``,
  ``L_W = ||W_i W_i^T||_F``;
* (15) takes ``N`` linearized steps on ``W_i`` with ``L_U = ||U_i^T U_i||_F``;
* (13) updates its dual ``Y_i <- Y_i + beta (W_i - V^k)`` and uploads ``(W_i, Y_i)``.

The server keeps the last ``(W_i, Y_i)`` of every client and solves (16):
``V = prox_{R/(p beta)}( sum_i (beta W_i + Y_i) / (p beta) )`` — (68) for l2, (73) for l1 —
keeping the sum up to date with the sampled clients' changes only.

``steps="per-row"`` (an option, not in the paper) replaces the scalar ``L_W`` and ``L_U`` by a
block-diagonal prox metric: ``||sum_{j in Omega_t} w_j w_j^T||_F`` per user row ``t`` and
``||sum_{t: (t,j) in Omega_i} u_t u_t^T||_F`` per item column ``j``. Each is the Lipschitz
constant of its own block of the gradient, so the descent argument of the paper carries over
block by block, with larger steps. See ``docs/algorithms.md``.

Storage is item-major: ``W[i]`` and ``Y[i]`` are ``(n, r)``, the transposes of the paper's
``W_i, Y_i``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numba
import numpy as np
from pydantic import Field

from fedmc.algorithms.base import Communication
from fedmc.algorithms.factor_model import FactorConfig, FactorLayout, FactorModel
from fedmc.core.kernels import (
    dot,
    fro_norm,
    gram_fro,
    normal_equations,
    quad_gradient,
    rank_token,
    scratch_matrix,
    scratch_vector,
)
from fedmc.core.prox import RegKind, Regularizer, prox_scalar
from fedmc.data.federated import FederatedData
from fedmc.errors import ConfigError

BYTES = 8  # float64 payload


class FedMCADMMConfig(FactorConfig):
    """Hyper-parameters of FedMC-ADMM (names as in the paper).

    The defaults are the best settings measured on MovieLens 1M with the paper's client
    protocol (100 clients, 10 per round; ``benchmarks/README.md``). They use two options of
    ours, ``steps="per-row"`` and ``biases=True``; the paper's own settings are
    ``steps="paper", biases=False, beta=1e4, init_scale=2e-4, lam=gamma=1e-6, rank=5``.
    """

    rank: int = 8
    inner: int = Field(10, ge=1, description="N: inner steps on U_i and on W_i per round")
    beta: float = Field(0.08, gt=0, description="penalty parameter beta of (5)")
    reg_u: RegKind = "l2"
    lam: float = Field(4.0, ge=0, description="lambda: weight of R_i")
    reg_v: RegKind = "l2"
    gamma: float = Field(0.01, ge=0, description="gamma: weight of R")
    l1_ratio: float = Field(0.5, ge=0, le=1, description="l1 share of the elastic net")
    box_lo: float = 0.0
    box_hi: float = 1.0
    steps: Literal["paper", "per-row"] = "per-row"
    dual_init: Literal["paper", "zeros"] = "paper"
    biases: bool = True
    init_scale: float = 0.1
    clip: bool = True

    def regularizers(self) -> tuple[Regularizer, Regularizer]:
        """``(R_i, R)`` as :class:`fedmc.core.prox.Regularizer` objects."""
        common = {"ratio": self.l1_ratio, "lo": self.box_lo, "hi": self.box_hi}
        return (
            Regularizer(self.reg_u, self.lam, **common),
            Regularizer(self.reg_v, self.gamma, **common),
        )


# ----------------------------------------------------------------------------- client side


@numba.njit(cache=True, fastmath=True, error_model="numpy")
def _u_steps(indptr, indices, values, row0, row1, U, Wc, n_inner, reg, ones_col, per_row, token):
    """(14) for every user row of one client: ``N`` prox-gradient steps with ``W_i`` fixed.

    ``f_i`` is a sum over rows, each quadratic in its ``u_t`` with gradient ``A_t u_t - b_t``
    (:func:`fedmc.core.kernels.normal_equations`), so the ``N`` steps are taken row by row.
    """
    r = len(token)
    A = scratch_matrix(token)
    b = scratch_vector(token)
    g = scratch_vector(token)
    u = scratch_vector(token)
    L_client = 0.0 if per_row else gram_fro(Wc, token)  # ||W_i W_i^T||_F
    for t in range(row0, row1):
        normal_equations(indptr, indices, values, t, Wc, A, b, token)
        L = fro_norm(A, token) if per_row else L_client
        if L == 0.0:  # no curvature and a zero gradient: the step is the prox of R_i alone
            L = 1e-300
        for a in range(r):
            u[a] = U[t, a]
        for _ in range(n_inner):
            quad_gradient(A, b, u, g, token)
            for a in range(r):
                u[a] = prox_scalar(u[a] - g[a] / L, 1.0 / L, reg)
            if ones_col >= 0:
                u[ones_col] = 1.0
        for a in range(r):
            U[t, a] = u[a]


@numba.njit(cache=True, fastmath=True, error_model="numpy")
def _w_steps(g0, g1, g_item, g_ptr, g_row, g_vals, row0, row1, U, Wc, Yc, V, n_inner, beta, p,
             per_row, token):
    """(15): ``N`` linearized steps on ``W_i`` with ``U_i^{k+1}`` fixed.

    The client's ratings come grouped by item (groups ``g0:g1`` of an
    :class:`~fedmc.data.federated.ItemMajor` layout). Column ``j``'s gradient is
    ``B_j w_j - c_j`` (:func:`fedmc.core.kernels.normal_equations`), and for fixed ``B_j``
    each step of (15) is the affine map ``w <- M w + k`` with
    ``M = (a I - B_j / p) / (a + beta)``, ``k = (beta v_j + c_j / p - y_j) / (a + beta)``.
    Columns the client did not rate have a zero gradient: their ``N`` steps are
    ``w <- c w + (1 - c)(v - y / beta)``, ``c = a / (a + beta)``, applied in closed form. The
    cost is that of the client's ratings plus one pass over the ``n`` items.
    """
    n = Wc.shape[0]
    r = len(token)
    a_client = 0.0 if per_row else gram_fro(U[row0:row1], token) / p  # ||U_i^T U_i||_F / p
    c_n = (a_client / (a_client + beta)) ** n_inner  # 0 in per-row mode (no curvature)
    B = scratch_matrix(token)
    cv = scratch_vector(token)
    M = scratch_matrix(token)
    kv = scratch_vector(token)
    w = scratch_vector(token)
    w_new = scratch_vector(token)
    next_j = 0
    for g in range(g0, g1):
        j = g_item[g]
        _relax_unrated(Wc, Yc, V, next_j, j, c_n, beta, token)
        next_j = j + 1
        if g_ptr[g + 1] - g_ptr[g] == 1:  # a third of the columns on ML-1M
            q = g_ptr[g]
            _rated_once(U[g_row[q]], g_vals[q], V[j], Yc[j], Wc[j], a_client, beta, p, n_inner,
                        per_row, token)
            continue
        normal_equations(g_ptr, g_row, g_vals, g, U, B, cv, token)
        a = fro_norm(B, token) / p if per_row else a_client
        inv = 1.0 / (a + beta)
        for e in range(r):
            for f in range(r):
                M[e, f] = -B[e, f] / p * inv
            M[e, e] += a * inv
            kv[e] = (beta * V[j, e] + cv[e] / p - Yc[j, e]) * inv
            w[e] = Wc[j, e]
        for _ in range(n_inner):
            for e in range(r):
                acc = kv[e]
                for f in range(r):
                    acc += M[e, f] * w[f]
                w_new[e] = acc
            for e in range(r):
                w[e] = w_new[e]
        for e in range(r):
            Wc[j, e] = w[e]
    _relax_unrated(Wc, Yc, V, next_j, n, c_n, beta, token)


@numba.njit(cache=True, fastmath=True, error_model="numpy")
def _rated_once(x, m, v, y, w, a_client, beta, p, n_inner, per_row, token):
    """``N`` steps of (15) in closed form on a column rated by one user row ``x`` (rating
    ``m``).

    Then ``B = x x^T`` and ``c = m x``, so ``M = rho I - sigma x x^T`` with
    ``rho = a / (a + beta)``, ``sigma = 1 / (p (a + beta))``: ``M`` scales by ``rho`` across
    ``x`` and by ``lam = rho - sigma |x|^2`` along it. Hence
    ``w_N = rho^N w + S(rho) k + [(lam^N - rho^N) x.w + (S(lam) - S(rho)) x.k] x / |x|^2``
    with ``S(z) = sum_{t<N} z^t`` — the ``N`` affine steps of :func:`_w_steps` without the
    ``r x r`` matrix.
    """
    r = len(token)
    xx = dot(x, x, token)
    a = xx / p if per_row else a_client  # ||x x^T||_F = |x|^2
    inv = 1.0 / (a + beta)
    rho = a * inv
    lam = rho - xx / p * inv
    rho_n = 1.0
    lam_n = 1.0
    s_rho = 0.0
    s_lam = 0.0
    for _ in range(n_inner):
        s_rho += rho_n
        s_lam += lam_n
        rho_n *= rho
        lam_n *= lam
    xw = 0.0
    xk = 0.0
    for e in range(r):
        k = (beta * v[e] + m * x[e] / p - y[e]) * inv
        xw += x[e] * w[e]
        xk += x[e] * k
        w[e] = rho_n * w[e] + s_rho * k
    if xx > 0.0:
        coef = ((lam_n - rho_n) * xw + (s_lam - s_rho) * xk) / xx
        for e in range(r):
            w[e] += coef * x[e]


@numba.njit(cache=True, fastmath=True, error_model="numpy")
def _relax_unrated(Wc, Yc, V, j0, j1, c_n, beta, token):
    """``N`` steps of (15) in closed form on the unrated columns ``j0:j1``."""
    for j in range(j0, j1):
        for e in range(len(token)):
            Wc[j, e] = c_n * Wc[j, e] + (1.0 - c_n) * (V[j, e] - Yc[j, e] / beta)


@numba.njit(cache=True, parallel=True, fastmath=True, error_model="numpy")
def _local_updates(
    clients, client_ptr, indptr, indices, values, cols, U, W, Y, V, n_inner, beta, reg,
    ones_col, per_row, token,
):
    """Steps 4(a)-(c) of Algorithm 1 for every sampled client, in parallel over clients.

    ``cols`` is the item-major layout ``(client_ptr, item, ptr, row, values)`` of the same
    ratings (:class:`~fedmc.data.federated.ItemMajor`).
    """
    g_client, g_item, g_ptr, g_row, g_vals = cols
    p = W.shape[0]
    n, r = V.shape
    for s in numba.prange(clients.shape[0]):
        c = clients[s]
        row0 = client_ptr[c]
        row1 = client_ptr[c + 1]
        _u_steps(indptr, indices, values, row0, row1, U, W[c], n_inner, reg, ones_col, per_row,
                 token)
        _w_steps(g_client[c], g_client[c + 1], g_item, g_ptr, g_row, g_vals, row0, row1, U,
                 W[c], Y[c], V, n_inner, beta, p, per_row, token)
        Yc = Y[c].reshape(n * r)  # (13), over the flat n x r arrays
        Wc = W[c].reshape(n * r)
        Vf = V.reshape(n * r)
        for q in range(n * r):
            Yc[q] += beta * (Wc[q] - Vf[q])


@numba.njit(cache=True, fastmath=True, error_model="numpy")
def _initial_duals(client_ptr, indptr, indices, values, U, W, Y, scale, token):
    """``Y_i^0 = -scale * grad_V f_i(U_i^0, W_i^0)`` for every client (input of Algorithm 1).

    ``grad_V f_i`` is accumulated from the residuals, ``sum_t (u_t . w_j - m_tj) u_t``: one
    pass at ``O(r)`` per rating.
    """
    p = W.shape[0]
    r = len(token)
    for c in range(p):  # once per run; a serial loop compiles much faster than a prange
        Wc = W[c]
        Yc = Y[c]
        for t in range(client_ptr[c], client_ptr[c + 1]):
            u = U[t]
            for q in range(indptr[t], indptr[t + 1]):
                j = indices[q]
                res = dot(u, Wc[j], token) - values[q]
                for e in range(r):
                    Yc[j, e] -= scale * res * u[e]


class FedMCADMMClients:
    """The client side: every client's private ratings and ``U_i, W_i, Y_i``.

    In a real federation each client holds its own block; in simulation the blocks are stacked
    so one kernel call updates all sampled clients. Only :meth:`local_update`'s return value
    (the upload) ever reaches the server.
    """

    def __init__(self, data: FederatedData, U: np.ndarray, V0: np.ndarray, cfg: FedMCADMMConfig):
        self.data = data
        self.U = U
        self.W = np.repeat(V0[None, :, :], data.n_clients, axis=0)  # W_i^0 = V^0
        self.Y = np.zeros_like(self.W)
        self.cfg = cfg
        self.reg_u = cfg.regularizers()[0]
        self.layout = FactorLayout(cfg.rank, cfg.biases)
        if cfg.dual_init == "paper":
            tr = data.train
            _initial_duals(
                data.client_ptr, tr.indptr, tr.indices, tr.values, U, self.W, self.Y,
                1.0 / data.n_items, rank_token(U.shape[1]),
            )

    def initial_upload(self) -> np.ndarray:
        """``Y_i^0`` of every client (the server already knows ``W_i^0 = V^0``)."""
        return self.Y.copy()

    def local_update(self, clients: np.ndarray, V: np.ndarray) -> Upload:
        """Run steps 4(a)-(c) on ``clients`` given ``V^k``; return their ``(W_i, Y_i)``."""
        tr = self.data.train
        cfg = self.cfg
        im = self.data.item_major
        _local_updates(
            clients, self.data.client_ptr, tr.indptr, tr.indices, tr.values,
            (im.client_ptr, im.item, im.ptr, im.row, im.values), self.U, self.W, self.Y, V,
            cfg.inner, cfg.beta, self.reg_u.params, self.layout.ones_col_u,
            cfg.steps == "per-row", rank_token(self.U.shape[1]),
        )
        return Upload(clients, self.W, self.Y)


@dataclass(frozen=True)
class Upload:
    """``(W_i, Y_i)`` of each client ``i`` in ``clients``: the rows ``W[i]``, ``Y[i]``.

    In simulation ``W`` and ``Y`` are the client side's stacked arrays, handed over without a
    copy; the server reads the rows of ``clients`` and nothing else. Over a network each client
    sends its own two ``n x r`` arrays.
    """

    clients: np.ndarray
    W: np.ndarray
    Y: np.ndarray


@numba.njit(cache=True, fastmath=True, error_model="numpy")
def _fold_uploads(clients, W, Y, beta, contrib, total):
    """Replace each uploading client's ``beta W_i + Y_i`` in the running sum ``total``."""
    size = total.size
    flat_total = total.reshape(size)
    for c in clients:
        Wc = W[c].reshape(size)
        Yc = Y[c].reshape(size)
        old = contrib[c].reshape(size)
        for q in range(size):
            new = beta * Wc[q] + Yc[q]
            flat_total[q] += new - old[q]
            old[q] = new


@numba.njit(cache=True, fastmath=True, error_model="numpy")
def _server_prox(total, scale, step, params, ones_col):
    """(16): ``V = prox_{step R}(total * scale)``, with column ``ones_col`` fixed to 1."""
    n, r = total.shape
    V = np.empty((n, r))
    for j in range(n):
        for k in range(r):
            V[j, k] = 1.0 if k == ones_col else prox_scalar(total[j, k] * scale, step, params)
    return V


class FedMCADMMServer:
    """The server side: ``V`` and the last ``beta W_i + Y_i`` uploaded by each client."""

    def __init__(self, V0: np.ndarray, W0: np.ndarray, Y0: np.ndarray, cfg: FedMCADMMConfig):
        self.beta = cfg.beta
        self.reg_v = cfg.regularizers()[1]
        self.layout = FactorLayout(cfg.rank, cfg.biases)
        self.V = V0
        self.contrib = cfg.beta * W0 + Y0
        self.total = self.contrib.sum(axis=0)

    def aggregate(self, upload: Upload) -> np.ndarray:
        """Solve (16) with the new uploads and the last ones of the other clients.

        ``V = prox_{R/(p beta)}(sum_i (beta W_i + Y_i) / (p beta))``; the sum is kept up to
        date with the uploading clients' changes only (``O(|S_k| n r)``).
        """
        _fold_uploads(upload.clients, upload.W, upload.Y, self.beta, self.contrib, self.total)
        pb = self.contrib.shape[0] * self.beta
        self.V = _server_prox(self.total, 1.0 / pb, 1.0 / pb, self.reg_v.params,
                              self.layout.ones_col_v)
        return self.V


# ------------------------------------------------------------------------------ algorithm


def available_memory() -> int | None:
    """Bytes the kernel reports as available (``MemAvailable``), or None if unknown."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _check_memory(data: FederatedData, cfg: FedMCADMMConfig) -> None:
    """Refuse a run whose per-client item copies cannot fit in the machine's memory.

    Every client keeps a dense ``W_i`` and ``Y_i`` and the server the last ``beta W_i + Y_i``:
    three ``p x n x r`` arrays.
    """
    width = FactorLayout(cfg.rank, cfg.biases).width
    need = 3 * data.n_clients * data.n_items * width * BYTES
    avail = available_memory()
    if avail is not None and need > 0.8 * avail:
        raise ConfigError(
            f"FedMC-ADMM keeps a dense {data.n_items} x {width} item copy and dual per client: "
            f"{data.n_clients} clients need {need / 2**30:.1f} GiB, but only "
            f"{avail / 2**30:.1f} GiB is free; use fewer clients (--clients) or a lower rank"
        )


class FedMCADMM(FactorModel):
    """FedMC-ADMM (Algorithm 1) on the batched simulation engine.

    Examples
    --------
    >>> from fedmc import load_federated
    >>> data = load_federated("synthetic", clients=20)
    >>> model = FedMCADMM(rank=5).fit(data, rounds=20, active=5)
    >>> model.history_.last("test_rmse") < 1.2
    True
    """

    name = "fedmc-admm"
    Config = FedMCADMMConfig
    config: FedMCADMMConfig

    def setup(self, data: FederatedData, rng: np.random.Generator) -> Communication:
        """Initialise ``U^0, V^0``, ``W_i^0 = V^0`` and ``Y_i^0``; the server learns ``Y_i^0``."""
        _check_memory(data, self.config)
        self.init_factors(data, rng)
        self.reg_u_, self.reg_v_ = self.config.regularizers()
        self.clients_ = FedMCADMMClients(data, self.U_, self.V_, self.config)
        self.server_ = FedMCADMMServer(
            self.V_, self.clients_.W, self.clients_.initial_upload(), self.config
        )
        size = data.n_items * self.layout_.width * BYTES
        return Communication(bytes_up=data.n_clients * size, bytes_down=data.n_clients * size)

    def round(self, clients: np.ndarray, rng: np.random.Generator) -> Communication:
        """Send ``V^k`` to ``S_k``, run their local updates, aggregate (16)."""
        self.V_ = self.server_.aggregate(self.clients_.local_update(clients, self.V_))
        size = self.V_.size * BYTES
        return Communication(bytes_up=2 * len(clients) * size, bytes_down=len(clients) * size)

    def evaluate(self, data: FederatedData) -> dict[str, float]:
        """Objective (17), errors and sparsity of the current ``(U, V)``."""
        return self.factor_metrics(data, self.reg_u_, self.reg_v_)

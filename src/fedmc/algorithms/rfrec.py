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

Storage (exact, never a dense ``d x m`` matrix per client). A column ``j`` that client ``i``
never rated gets no gradient from ``f_i``, so its local copy only follows
``v <- v - c (v - V̄_j)`` with the same ``c`` and ``V̄`` for every client. All clients start from
``V_(i)^0 = V̄^0``, hence those columns are equal across clients at every iteration: one shared
``(m, d)`` array ``Z`` holds them. The columns a client rated are stored per client, one row
per (client, rated item) "slot". Memory is ``d`` floats per rated (client, item) pair plus one
``m x d`` array, instead of ``n m d``; :meth:`RFRecClients.dense` rebuilds ``V_(i)`` and the
tests compare the two forms to a plain dense transcription of Algorithms 1 and 2.

Storage is item-major: ``V̄``, ``Z`` and the slots are ``(., d)`` arrays, the transposes of the
paper's ``d x m`` matrices. Predictions use the outputs of the algorithms: ``u_t^T V̄``.
"""

from __future__ import annotations

from typing import Literal, Self

import numba
import numpy as np
from pydantic import Field, model_validator

from fedmc.algorithms.base import Communication
from fedmc.algorithms.factor_model import FactorConfig, FactorLayout, FactorModel
from fedmc.core.kernels import dot, rank_token, residual_sums
from fedmc.core.prox import Regularizer
from fedmc.data.federated import FederatedData
from fedmc.privacy.laplace import LaplaceMechanism

BYTES = 8  # float64 payload
ADAM_BETAS = (0.9, 0.999)  # torch defaults, as in the authors' notebooks
ADAM_EPS = 1e-8


class RFRecConfig(FactorConfig):
    """Hyper-parameters of RFRec (names as in the paper, section 3 and 4.1.3)."""

    rank: int = Field(20, description="d: latent dimension")
    alpha: float = Field(0.005, gt=0, description="alpha: learning rate of Eq. (6)")
    lam: float = Field(100.0, ge=0, description="lambda: weight of psi in (5)")
    lam_u: float = Field(30.0, ge=0, description="lambda_u: weight of ||u_i||^2 in f_i")
    init_scale: float = Field(0.01, ge=0, description="std of the Gaussian initialization")
    delta: float | None = Field(None, gt=0, description="LDP clipping bound delta of Eq. (9)")
    s: float | None = Field(None, gt=0, description="LDP Laplace scale s of Eq. (9)")
    optimizer: Literal["gd", "adam"] = Field(
        "adam", description="gd: the paper's gradient step; adam: the notebooks' optimizer"
    )

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.biases:
            raise ValueError("RFRec's model is u^T v without biases; use --no-biases")
        if self.s is not None and self.delta is None:
            raise ValueError("LDP noise s needs a clipping bound delta (Eq. 9)")
        return self

    def mechanism(self) -> LaplaceMechanism | None:
        """The LDP mechanism of Eq. (9), or ``None`` when no noise is added."""
        return LaplaceMechanism(self.delta, self.s) if self.s is not None else None


class RFRecFConfig(RFRecConfig):
    """Hyper-parameters of RFRecF: RFRec's plus the switching probability ``p``."""

    alpha: float = Field(0.01, gt=0, description="alpha: learning rate of Eq. (8)")
    lam_u: float = Field(10.0, ge=0, description="lambda_u: weight of ||u_i||^2 in f_i")
    p: float = Field(0.5, gt=0, lt=1, description="p: probability of an aggregation step")
    average_step: Literal["plain", "optimizer"] = Field(
        "optimizer",
        description="moving to average (Alg. 2 line 11): plain, the paper's step; optimizer: "
        "its gradient lambda (V_(i) - V̄) fed to the configured optimizer (Adam), like the "
        "main update",
    )


# ----------------------------------------------------------------------------- client side


@numba.njit(cache=True, inline="always")
def _descend(X, M, S, k, a, g, alpha, adam, hyper):
    """``X[k, a] -= alpha g`` (gradient descent) or one Adam step on it (moments ``M``, ``S``).

    ``hyper = (beta1, beta2, eps, 1 - beta1^t, 1 - beta2^t)``.
    """
    if adam:
        M[k, a] = hyper[0] * M[k, a] + (1.0 - hyper[0]) * g
        S[k, a] = hyper[1] * S[k, a] + (1.0 - hyper[1]) * g * g
        X[k, a] -= alpha * (M[k, a] / hyper[3]) / (np.sqrt(S[k, a] / hyper[4]) + hyper[2])
    else:
        X[k, a] -= alpha * g


@numba.njit(cache=True, parallel=True)
def _gradient_step(
    client_ptr, indptr, rating_slot, values, slot_ptr, slot_item, U, V_loc, V_bar, alpha,
    lam_u, lam, adam, hyper_u, hyper_v, M_u, S_u, M_v, S_v, token,
):
    """``x_i <- x_i - alpha (grad f_i(x_i) + lam (V_(i) - V̄))`` on rated columns, all clients.

    Both gradients are taken at the old point (Eq. 6): with ``e_tj = r_tj - u_t^T v_(i)j``,
    ``grad_{u_t} f_i = -2 sum_j e_tj v_(i)j + 2 lambda_u u_t`` (Eq. 3) and
    ``grad_{v_(i)j} f_i = -2 sum_t e_tj u_t``. ``lam = 0`` gives RFRecF's main update. With
    ``adam`` the gradient feeds an Adam step instead (the notebooks' optimizer, an option).
    """
    n_clients = client_ptr.shape[0] - 1
    d = len(token)
    for c in numba.prange(n_clients):
        row0 = client_ptr[c]
        s0 = slot_ptr[c]
        g_u = np.zeros((client_ptr[c + 1] - row0, d))
        g_v = np.zeros((slot_ptr[c + 1] - s0, d))
        for t in range(row0, client_ptr[c + 1]):
            u = U[t]
            for q in range(indptr[t], indptr[t + 1]):
                s = rating_slot[q]
                v = V_loc[s]
                e = values[q] - dot(u, v, token)
                for a in range(d):
                    g_u[t - row0, a] -= 2.0 * e * v[a]
                    g_v[s - s0, a] -= 2.0 * e * u[a]
        for t in range(row0, client_ptr[c + 1]):
            for a in range(d):
                g = g_u[t - row0, a] + 2.0 * lam_u * U[t, a]
                _descend(U, M_u, S_u, t, a, g, alpha, adam, hyper_u)
        for s in range(s0, slot_ptr[c + 1]):
            j = slot_item[s]
            for a in range(d):
                g = g_v[s - s0, a] + lam * (V_loc[s, a] - V_bar[j, a])
                _descend(V_loc, M_v, S_v, s, a, g, alpha, adam, hyper_v)


@numba.njit(cache=True, parallel=True)
def _pull_slots(slot_item, V_loc, V_bar, step, lam, adam, hyper, M, S):
    """A step of size ``step`` on ``lam (v - V̄_j)`` for every slot (the psi part of a step on
    rated columns): ``v <- v - step lam (v - V̄_j)``, or an Adam step on that gradient."""
    d = V_loc.shape[1]
    for s in numba.prange(V_loc.shape[0]):
        j = slot_item[s]
        for a in range(d):
            g = lam * (V_loc[s, a] - V_bar[j, a])
            _descend(V_loc, M, S, s, a, g, step, adam, hyper)


@numba.njit(cache=True)
def _clipped_sum(clients, slot_ptr, slot_item, V_loc, Z, delta):
    """``sum_{i in clients} Clip(V_(i), delta)`` from slots and ``Z`` (``delta = inf``: no clip).

    Each ``V_(i)`` is ``Z`` outside the client's slots, so the sum is
    ``|S| Clip(Z) + sum_i sum_{slots of i} (Clip(v_s) - Clip(Z_j))``.
    """
    m, d = Z.shape
    Zc = np.minimum(np.maximum(Z, -delta), delta)
    total = clients.shape[0] * Zc
    for c in clients:
        for s in range(slot_ptr[c], slot_ptr[c + 1]):
            j = slot_item[s]
            for a in range(d):
                total[j, a] += min(max(V_loc[s, a], -delta), delta) - Zc[j, a]
    return total


@numba.njit(cache=True, parallel=True)
def _slot_deviation_sums(slot_item, V_loc, Z, V_bar):
    """``sum_s (||v_s - V̄_j||^2 - ||Z_j - V̄_j||^2)`` over all slots (the slot part of psi)."""
    d = V_loc.shape[1]
    total = 0.0
    for s in numba.prange(V_loc.shape[0]):
        j = slot_item[s]
        acc = 0.0
        for a in range(d):
            x = V_loc[s, a] - V_bar[j, a]
            z = Z[j, a] - V_bar[j, a]
            acc += x * x - z * z
        total += acc
    return total


class RFRecClients:
    """The client side: private ratings, user factors ``U_i`` and local item matrices ``V_(i)``.

    ``V_(i)`` is stored exactly but sparsely (module docstring): ``V_loc[s]`` for the slots
    ``slot_ptr[i]:slot_ptr[i+1]`` (items ``slot_item[s]`` rated by client ``i``) and the shared
    ``Z`` for every other column. ``rating_slot[q]`` is the slot of training rating ``q``.
    In simulation all clients are stacked; only :meth:`upload` output reaches the server.
    """

    def __init__(
        self, data: FederatedData, U: np.ndarray, V_bar0: np.ndarray,
        mechanism: LaplaceMechanism | None, delta: float | None, adam: bool = False,
    ) -> None:
        self.data = data
        self.U = U
        tr = data.train
        m = data.n_items
        client = data.client_of_row().astype(np.int64)[tr.rows()]
        keys, self.rating_slot = np.unique(client * m + tr.indices, return_inverse=True)
        self.slot_item = keys % m
        self.slot_ptr = np.searchsorted(keys // m, np.arange(data.n_clients + 1)).astype(np.int64)
        self.V_loc = V_bar0[self.slot_item]  # V_(i)^0 = V̄^0
        self.Z = V_bar0.copy()
        self.mechanism = mechanism
        self.delta = np.inf if delta is None else delta
        self.adam = adam
        self.t_u = self.t_v = 0  # Adam's step counters (U only moves on main updates)
        size = (lambda X: X.shape) if adam else (lambda X: (0, X.shape[1]))
        self.moments = [np.zeros(size(X)) for X in (U, U, self.V_loc, self.V_loc)]
        self.Z_moments = [np.zeros(size(self.Z)) for _ in range(2)]

    @staticmethod
    def _hyper(t: int) -> np.ndarray:
        """Adam's ``(beta1, beta2, eps, 1 - beta1^t, 1 - beta2^t)`` at step ``t``."""
        b1, b2 = ADAM_BETAS
        return np.array([b1, b2, ADAM_EPS, 1.0 - b1**t, 1.0 - b2**t])

    def _step_Z(self, g: np.ndarray, step: float, hyper: np.ndarray) -> None:
        """The shared columns' step on gradient ``g`` (moments shared: every client sees ``g``)."""
        if self.adam:
            b1, b2 = ADAM_BETAS
            M, S = self.Z_moments
            M *= b1
            M += (1.0 - b1) * g
            S *= b2
            S += (1.0 - b2) * g * g
            g = (M / hyper[3]) / (np.sqrt(S / hyper[4]) + ADAM_EPS)
        self.Z -= step * g

    def gradient_step(self, V_bar: np.ndarray, alpha: float, lam_u: float, lam: float) -> None:
        """``x_i <- x_i - alpha (grad f_i + lam grad psi_i)`` for every client (Eq. 6).

        The shared columns ``Z`` get the same step with gradient ``lam (Z - V̄)``; under Adam
        their moments are shared too (every client sees the same gradient there).
        """
        tr = self.data.train
        self.t_u += 1
        self.t_v += 1
        hyper_v = self._hyper(self.t_v)
        _gradient_step(
            self.data.client_ptr, tr.indptr, self.rating_slot, tr.values, self.slot_ptr,
            self.slot_item, self.U, self.V_loc, V_bar, alpha, lam_u, lam, self.adam,
            self._hyper(self.t_u), hyper_v, *self.moments, rank_token(self.U.shape[1]),
        )
        self._step_Z(lam * (self.Z - V_bar), alpha, hyper_v)

    def move_to_average(self, V_bar: np.ndarray, step: float, lam: float,
                        adam: bool = False) -> None:
        """A step of size ``step`` on ``lam grad psi_i = lam (V_(i) - V̄)``, all clients.

        Plain (``adam=False``, Alg. 2 line 11 with ``step = alpha / p``):
        ``V_(i) <- V_(i) - step lam (V_(i) - V̄)``. With ``adam`` (needs the Adam moments) the
        same gradient feeds the clients' Adam state of ``V_(i)``, shared with the main update.
        """
        adam = adam and self.adam
        hyper = np.zeros(5)
        if adam:
            self.t_v += 1
            hyper = self._hyper(self.t_v)
        _pull_slots(self.slot_item, self.V_loc, V_bar, step, lam, adam, hyper, *self.moments[2:])
        if adam:
            self._step_Z(lam * (self.Z - V_bar), step, hyper)
        else:
            self.Z -= step * (lam * (self.Z - V_bar))

    def upload(self, clients: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Sum of the uploads ``Ṽ_(i)`` (Eq. 9) of ``clients``.

        The server only averages, so the batch hands over the sum (as a secure-aggregation
        channel would); with LDP the sum of the clients' independent noise is drawn exactly in
        distribution (:meth:`fedmc.privacy.laplace.LaplaceMechanism.perturb_sum`).
        """
        total = _clipped_sum(clients, self.slot_ptr, self.slot_item, self.V_loc, self.Z,
                             self.delta)
        if self.mechanism is not None:
            total = self.mechanism.perturb_sum(total, len(clients), rng)
        return total

    def dense(self, client: int) -> np.ndarray:
        """Client ``client``'s ``V_(i)`` as a dense ``(m, d)`` array (tests and inspection)."""
        V = self.Z.copy()
        sl = slice(self.slot_ptr[client], self.slot_ptr[client + 1])
        V[self.slot_item[sl]] = self.V_loc[sl]
        return V

    def objective(self, V_bar: np.ndarray, lam_u: float, lam: float) -> float:
        """``F(x) = f(x) + lambda psi(x)`` of problem (5) on the local models."""
        tr = self.data.train
        sse = residual_sums(tr.indptr, self.rating_slot, tr.values, self.U, self.V_loc,
                            0.0, 1.0, -np.inf, np.inf, rank_token(self.U.shape[1]))[0]
        dev = _slot_deviation_sums(self.slot_item, self.V_loc, self.Z, V_bar)
        psi = 0.5 * (dev + self.data.n_clients * float(np.sum((self.Z - V_bar) ** 2)))
        return sse + lam_u * float(np.sum(self.U**2)) + lam * psi


class RFRecServer:
    """The server side: only ``V̄`` and the sums of the uploads it receives."""

    def __init__(self, V_bar0: np.ndarray) -> None:
        self.V_bar = V_bar0

    def aggregate(self, upload_sum: np.ndarray, n_uploads: int) -> np.ndarray:
        """``V̄ <- (1/n_t) sum_i Ṽ_(i)`` over the ``n_t`` uploads received (unchanged if none)."""
        if n_uploads > 0:
            self.V_bar = upload_sum / n_uploads
        return self.V_bar


# ------------------------------------------------------------------------------ algorithms


class RFRec(FactorModel):
    """RFRec (Algorithm 1): local gradient steps on ``f_i + lambda psi_i``, server averaging.

    One engine round is one iteration ``k``. History extras: ``comm_rounds`` (cumulative
    communication rounds, Definition 3.8) and ``epsilon`` (``2 delta / s``) when LDP is on.

    Examples
    --------
    >>> from fedmc.api import load_federated
    >>> data = load_federated("synthetic", clients=20)
    >>> model = RFRec(rank=5).fit(data, rounds=20)
    >>> model.history_.last("comm_rounds")
    40.0
    """

    name = "rfrec"
    Config = RFRecConfig
    config: RFRecConfig

    def setup(self, data: FederatedData, rng: np.random.Generator) -> Communication:
        """``u_t, V̄ ~ N(0, init_scale^2)``, ``V_(i)^0 = V̄^0``; ``V̄^0`` is sent to every client."""
        cfg = self.config
        cfg.check_rank(data)
        self.layout_ = FactorLayout(cfg.rank, False)
        self.data_ = data
        self.U_ = cfg.init_scale * rng.standard_normal((data.n_users, cfg.rank))
        self.V_ = cfg.init_scale * rng.standard_normal((data.n_items, cfg.rank))
        self.clients_ = RFRecClients(
            data, self.U_, self.V_, cfg.mechanism(), cfg.delta, cfg.optimizer == "adam"
        )
        self.server_ = RFRecServer(self.V_)
        self.comm_rounds_ = 0
        return Communication(bytes_down=data.n_clients * self.V_.size * BYTES)

    def _aggregate(self, clients: np.ndarray, rng: np.random.Generator) -> int:
        """Uploads of ``clients``, server average; returns the bytes uploaded."""
        self.V_ = self.server_.aggregate(self.clients_.upload(clients, rng), len(clients))
        return len(clients) * self.V_.size * BYTES

    def round(self, clients: np.ndarray, rng: np.random.Generator) -> Communication:
        """Lines 6-11 of Algorithm 1: local step (Eq. 6), upload, average, distribute."""
        cfg = self.config
        self.clients_.gradient_step(self.V_, cfg.alpha, cfg.lam_u, cfg.lam)
        up = self._aggregate(clients, rng)
        self.comm_rounds_ += 2
        return Communication(bytes_up=up, bytes_down=self.data_.n_clients * self.V_.size * BYTES)

    def evaluate(self, data: FederatedData) -> dict[str, float]:
        """Errors of ``u_t^T V̄``, the objective ``F`` of (5), ``comm_rounds`` and ``epsilon``."""
        none = Regularizer("none")
        out = self.factor_metrics(data, none, none)
        cfg = self.config
        out["objective"] = self.clients_.objective(self.V_, cfg.lam_u, cfg.lam)
        out["comm_rounds"] = self.comm_rounds_
        mech = cfg.mechanism()
        if mech is not None:
            out["epsilon"] = mech.epsilon
        return out


class RFRecF(RFRec):
    """RFRecF (Algorithm 2): Bernoulli(p) switching between local steps and aggregation.

    The coin ``zeta_k`` is drawn from the round's generator; ``zeta_{-1} = 0``, so the first
    iteration communicates with probability ``p`` and every later one with ``2 p (1-p)``.
    """

    name = "rfrecf"
    Config = RFRecFConfig
    config: RFRecFConfig

    def setup(self, data: FederatedData, rng: np.random.Generator) -> Communication:
        """As RFRec, with ``zeta_{-1} = 0``."""
        self.zeta_ = False
        return super().setup(data, rng)

    def round(self, clients: np.ndarray, rng: np.random.Generator) -> Communication:
        """Lines 5-25 of Algorithm 2 for one iteration ``k``."""
        cfg = self.config
        zeta = bool(rng.random() < cfg.p)
        up = down = 0
        if not zeta and not self.zeta_:  # main update (also k = 0)
            self.clients_.gradient_step(self.V_, cfg.alpha / (1.0 - cfg.p), cfg.lam_u, 0.0)
        elif not zeta:  # 1 -> 0: V̄ was sent down; moving to average
            self.clients_.move_to_average(
                self.V_, cfg.alpha / cfg.p, cfg.lam, cfg.average_step == "optimizer"
            )
            down = self.data_.n_clients * self.V_.size * BYTES
            self.comm_rounds_ += 1
        elif not self.zeta_:  # 0 -> 1: clients upload, the server aggregates
            up = self._aggregate(clients, rng)
            self.comm_rounds_ += 1
        self.zeta_ = zeta
        return Communication(bytes_up=up, bytes_down=down)

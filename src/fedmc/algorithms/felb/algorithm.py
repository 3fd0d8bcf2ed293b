"""Felb and Felb-MU: federated Boolean matrix factorization (Alg. 1 of the Felb paper).

Client ``i`` holds its rows ``A_i`` and its factor ``U_i`` privately and fits
``A_i ~ U_i V_i`` under the Elb regularizer R (Eq. 3) and the proximity penalty
``P(V_i) = gamma ||V_i - V_hat||^2``, by inertial proximal alternating linearized steps
(iPALM, Eq. 8): a gradient step on ``f = 1/2 ||A_i - U V||_F^2`` followed by the Boolean prox
(Eq. 6) for U and V and the proximity prox (Eq. 7) for V. Every ``b`` local steps it uploads
``V_i`` (optionally clipped and noised, Sec. 3.3); the server averages the uploads and applies
the Boolean prox (proximal aggregation, Alg. 1 line 16); clients restart from ``V_hat``.

Felb uses one Lipschitz step per block and client; Felb-MU uses the per-entry step matrices
of Lee and Seung's multiplicative update, ``eta_U = U / (U V V^T)`` and
``eta_V = V / (U^T U V)``, for which the gradient step is exactly the MU update.

Beyond the paper, the clients fit the sharpened target ``T_i = (1+2c) A_i - c`` instead of
``A_i`` once ``sharpen_after`` syncs have passed (``c = sharpen``, default 1 after 10 syncs;
``sharpen=0`` is the paper). On binary factors ``||T_i - U_i o V||^2 = c^2 n_i m + (1+2c)
Hamming(A_i, U_i o V)``, so the Boolean objective is the same; the relaxation no longer favours
a dense fractional background, which made the factors collapse to zero at 40% XOR noise
(docs/felb.md, "High noise").

One engine round is one synchronization. All sampled clients are processed together: their
factors are stacked as ``(s, n_max, k)`` and ``(s, k, m)`` arrays
(:class:`fedmc.algorithms.felb.blocks.ClientBlocks`). The readings of the paper's gaps are options
with the defaults of ``docs/felb.md`` (spec sections 2 and 6).
"""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np
from pydantic import Field

from fedmc.algorithms.base import AlgorithmConfig, Communication, FederatedAlgorithm
from fedmc.algorithms.felb.blocks import ClientBlocks
from fedmc.algorithms.felb.metrics import boolean_metrics, squared_loss
from fedmc.algorithms.felb.prox import Clamp, binarize, elb_regularizer, prox_elb, prox_proximity
from fedmc.data.boolean.data import BooleanFederatedData
from fedmc.errors import ConfigError, DataError
from fedmc.privacy.local import AccountantKind, ClipKind, MechanismKind, UploadPrivacy

BYTES_PER_FLOAT = 8


class FelbConfig(AlgorithmConfig):
    """Hyper-parameters of Felb and Felb-MU (defaults: App. D of the paper, spec section 4)."""

    rank: int = Field(10, ge=1, description="number of components k")
    kappa: float = Field(0.001, ge=0, description="l1 weight of the Elb regularizer (Eq. 3)")
    lam: float = Field(0.1, ge=0, description="l2 weight lambda of the Elb regularizer")
    rate: float = Field(1.05, ge=1, description="regularization rate: lambda_t = lam rate^t")
    rate_counter: Literal["local_step", "round"] = Field(
        "round", description="what t counts in lambda_t (spec A4; see docs/felb.md)"
    )
    lam_max: float = Field(1e20, gt=0, description="cap on lambda_t (float64 range)")
    beta: float = Field(0.001, ge=0, lt=1, description="iPALM inertia")
    gamma: float = Field(1.0, ge=0, description="weight of the proximity penalty P (spec A2)")
    sharpen: float = Field(
        1.0,
        ge=0,
        description="c: fit the target (1+2c) A - c (zeros at -c, ones at 1+c); on binary "
        "factors the loss is then c^2 nm + (1+2c) Hamming for every c; 0: the paper's "
        "least squares (docs/felb.md)",
    )
    sharpen_after: int = Field(
        10, ge=0, description="syncs of plain least squares (c = 0) before sharpen applies"
    )
    local_steps: int = Field(10, ge=1, description="b: local steps between synchronizations")
    server_step: Literal["one", "inverse_clients"] = Field(
        "one", description="eta of the server prox: 1 (Alg. 1) or 1/C (exact Eq. 10) (spec A3)"
    )
    clamp: Clamp = Field("box", description="after Eq. 6: clip to [0,1], max(.,0), or none")
    init: Literal["shared", "independent"] = Field(
        "shared", description="V_i from one server draw V_hat^0, or independent (spec A7)"
    )
    dp: MechanismKind = Field("none", description="noise on every upload (Sec. 3.3)")
    dp_epsilon: float = Field(1.0, gt=0, description="epsilon of one upload")
    dp_delta: float = Field(0.05, gt=0, lt=1, description="delta of one upload (Gaussian)")
    dp_clip: ClipKind = Field("frobenius", description="clipping before the noise (spec A8)")
    dp_theta: float | None = Field(
        None, gt=0, description="clip threshold theta; None: sqrt(k m), the norm of all ones"
    )
    dp_accountant: AccountantKind = Field("rdp", description="composition over the syncs")


class Felb(FederatedAlgorithm):
    """Felb: federated Elbmf with Lipschitz (iPALM) steps (Alg. 1, Eq. 8).

    Learned attributes (after :meth:`setup`): ``U_`` ``(C, n_max, k)`` client factors (rows
    past ``n_i`` are zero padding), ``V_`` ``(C, k, m)`` local coefficients, ``V_hat_``
    ``(k, m)`` the server's model, ``t_`` local steps so far, ``syncs_`` synchronizations.
    """

    name: ClassVar[str] = "felb"
    Config: ClassVar[type[AlgorithmConfig]] = FelbConfig
    data_kind: ClassVar[str] = "boolean"
    config: FelbConfig

    step: Literal["ipalm", "inverse_lipschitz"] = "ipalm"

    # ------------------------------------------------------------------ setup
    def setup(self, data: BooleanFederatedData, rng: np.random.Generator) -> Communication:
        """Draw ``U_i, V_i ~ U[0, 1]`` (Alg. 1 line 1) and the server's ``V_hat^0``."""
        if not isinstance(data, BooleanFederatedData):
            raise DataError(
                f"{self.name} needs Boolean data (synthetic-boolean, a binary file, or ratings "
                "binarized at a threshold)"
            )
        cfg = self.config
        C, k, m = data.n_clients, cfg.rank, data.shape[1]
        self._data = data
        self._subset_blocks: ClientBlocks | None = None
        self.blocks_ = ClientBlocks(data, np.arange(C))
        n_max = self.blocks_.n_max
        self.U_ = rng.random((C, n_max, k)) * self.blocks_.mask
        self.U_prev_ = self.U_.copy()
        self.V_hat_ = rng.random((k, m))
        if cfg.init == "shared":
            self.V_ = np.broadcast_to(self.V_hat_, (C, k, m)).copy()
        else:
            self.V_ = rng.random((C, k, m))
        self.V_prev_ = self.V_.copy()
        self.has_model_ = np.full(C, cfg.init == "shared")
        self.t_ = 0
        self.syncs_ = 0
        self.privacy_ = self._privacy(k, m)
        return Communication()

    def _privacy(self, k: int, m: int) -> UploadPrivacy | None:
        cfg = self.config
        if cfg.dp == "none":
            return None
        theta = cfg.dp_theta if cfg.dp_theta is not None else float(np.sqrt(k * m))
        return UploadPrivacy(cfg.dp, cfg.dp_epsilon, cfg.dp_delta, cfg.dp_clip, theta, (k, m))

    # ------------------------------------------------------------------ one round
    def round(self, clients: np.ndarray, rng: np.random.Generator) -> Communication:
        """One synchronization: ``b`` local steps on every sampled client, upload, aggregate."""
        clients = np.asarray(clients, dtype=np.int64)
        if len(clients) == 0:
            raise ConfigError("a round needs at least one client")
        uploads = self.client_round(clients, rng)
        self.V_hat_ = self._server_aggregate(uploads)
        self.syncs_ += 1
        size = len(clients) * self.V_hat_.size * BYTES_PER_FLOAT
        return Communication(bytes_up=size, bytes_down=size)

    def _blocks(self, clients: np.ndarray) -> ClientBlocks:
        """The stacked blocks of ``clients`` (all clients: built once in :meth:`setup`)."""
        if len(clients) == len(self.blocks_.clients):
            return self.blocks_
        cached = self._subset_blocks
        if cached is None or not np.array_equal(cached.clients, clients):
            self._subset_blocks = ClientBlocks(
                self._data, clients, n_max=self.blocks_.n_max, dense=self.blocks_.dense
            )
        return self._subset_blocks

    def lam_t(self) -> float:
        """Current l2 weight ``lambda_t = lambda rate^t`` (spec 2.2), capped at ``lam_max``."""
        cfg = self.config
        if cfg.lam == 0.0:
            return 0.0
        t = self.t_ if cfg.rate_counter == "local_step" else self.syncs_
        return float(cfg.lam * np.exp(min(t * np.log(cfg.rate), np.log(cfg.lam_max / cfg.lam))))

    # ------------------------------------------------------------------ client side
    def client_round(self, clients: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Alg. 1 lines 2-9 for the sampled clients: receive ``V_hat``, ``b`` steps, upload.

        Returns the uploads ``(s, k, m)``, privatized when DP is on.
        """
        cfg = self.config
        blocks = self._blocks(clients)
        fresh = ~self.has_model_[clients]  # independent init: no V_hat yet, gamma = 0
        U, U_prev = self.U_[clients], self.U_prev_[clients]
        V, V_prev = self.V_[clients], self.V_prev_[clients]
        V[~fresh] = self.V_hat_  # line 11 of the last sync: V_i <- V_hat
        V_prev[~fresh] = self.V_hat_
        gamma = np.where(fresh, 0.0, cfg.gamma)[:, None, None]
        for _ in range(cfg.local_steps):
            U, U_prev, V, V_prev = self._local_step(blocks, U, U_prev, V, V_prev, gamma)
            self.t_ += 1
        self.U_[clients], self.U_prev_[clients] = U, U_prev
        self.V_[clients], self.V_prev_[clients] = V, V_prev
        self.has_model_[clients] = True
        if self.privacy_ is None:
            return V
        return self.privacy_.privatize(V, rng)

    def _local_step(
        self,
        blocks: ClientBlocks,
        U: np.ndarray,
        U_prev: np.ndarray,
        V: np.ndarray,
        V_prev: np.ndarray,
        gamma: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """One iPALM step of every stacked client (Eq. 8, Gauss-Seidel as Alg. 1 lines 3-5).

        U block: ``U <- prox^r_{eta kappa, eta lambda_t}(U~ - eta grad_U f)``; V block the same
        with the new U, then ``V <- prox^p_{eta gamma}(V)``.
        """
        cfg = self.config
        lam_t = self.lam_t()
        # --- U block: grad_U f = U~ (V V^T) - A V^T
        U_tilde = self._extrapolate(U, U_prev)
        VVt = V @ V.transpose(0, 2, 1)
        B, B_neg = self._AVt(blocks, V)
        U_step, eta = self._gradient_step(U_tilde, U_tilde @ VVt + B_neg, B, VVt)
        U_new = prox_elb(U_step, eta * cfg.kappa, eta * lam_t, cfg.clamp) * blocks.mask
        # --- V block with the new U: grad_V f = (U^T U) V~ - U^T A
        V_tilde = self._extrapolate(V, V_prev)
        UtU = U_new.transpose(0, 2, 1) @ U_new
        B, B_neg = self._UtA(blocks, U_new)
        V_step, eta = self._gradient_step(V_tilde, UtU @ V_tilde + B_neg, B, UtU)
        V_new = prox_elb(V_step, eta * cfg.kappa, eta * lam_t, cfg.clamp)
        V_new = prox_proximity(V_new, self.V_hat_, eta * gamma)
        return U_new, U, V_new, V

    def sharpen_t(self) -> float:
        """Current ``c``: ``sharpen`` from sync ``sharpen_after`` on, 0 before."""
        cfg = self.config
        return cfg.sharpen if self.syncs_ >= cfg.sharpen_after else 0.0

    def _AVt(self, blocks: ClientBlocks, V: np.ndarray) -> tuple[np.ndarray, np.ndarray | float]:
        """``T_i V^T = P - N`` for the target ``T_i = (1+2c) A_i - c 1 1^T`` (``c = sharpen``).

        Returns the nonnegative parts ``P = (1+2c) A_i V^T`` and ``N = c 1 1^T V^T`` (``c``
        times the row sums of ``V`` on real rows; 0 when ``c = 0``), so the data stay sparse
        and Felb-MU can put ``N`` in its denominator.
        """
        c = self.sharpen_t()
        if c == 0.0:
            return blocks.AVt(V), 0.0
        return (1.0 + 2.0 * c) * blocks.AVt(V), c * V.sum(axis=2)[:, None, :] * blocks.mask

    def _UtA(self, blocks: ClientBlocks, U: np.ndarray) -> tuple[np.ndarray, np.ndarray | float]:
        """``U^T T_i = P - N`` as :meth:`_AVt`: ``P = (1+2c) U^T A_i``, ``N = c U^T 1 1^T``."""
        c = self.sharpen_t()
        if c == 0.0:
            return blocks.UtA(U), 0.0
        return (1.0 + 2.0 * c) * blocks.UtA(U), c * U.sum(axis=1)[:, :, None]

    def _extrapolate(self, X: np.ndarray, X_prev: np.ndarray) -> np.ndarray:
        """iPALM inertia ``X + beta (X - X_prev)`` (``X_prev``: the previous iterate)."""
        return X + self.config.beta * (X - X_prev)

    def _gradient_step(
        self, X: np.ndarray, XG: np.ndarray, B: np.ndarray, G: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Gradient step ``X - eta (XG - B)`` with the Lipschitz step of each client.

        ``G`` is the block's Gram matrix (``V V^T`` or ``U^T U``), so ``L = ||G||`` (the
        Frobenius norm, floored at 1e-4, as the reference Elbmf code). iPALM:
        ``eta = 2 (1 - beta) / ((1 + 2 beta) L)``; ``"inverse_lipschitz"``: ``eta = 1 / L``.
        """
        L = np.maximum(np.linalg.norm(G, axis=(1, 2)), 1e-4)[:, None, None]
        beta = self.config.beta
        eta = 2.0 * (1.0 - beta) / ((1.0 + 2.0 * beta) * L) if self.step == "ipalm" else 1.0 / L
        return X - eta * (XG - B), eta

    # ------------------------------------------------------------------ server side
    def _server_aggregate(self, uploads: np.ndarray) -> np.ndarray:
        """Proximal aggregation (Alg. 1 line 16): ``prox^r_{eta kappa, eta lambda_t}(mean V_i)``.

        The mean is over the uploading clients (all of them in the paper, spec A16).
        """
        cfg = self.config
        eta = 1.0 if cfg.server_step == "one" else 1.0 / len(uploads)
        return prox_elb(uploads.mean(axis=0), eta * cfg.kappa, eta * self.lam_t(), cfg.clamp)

    # ------------------------------------------------------------------ evaluation
    def factors(self) -> tuple[np.ndarray, np.ndarray]:
        """Relaxed factors: ``U`` ``(n, k)`` in federated row order and ``V_hat`` ``(k, m)``."""
        return self.U_[self.blocks_.mask[..., 0] > 0], self.V_hat_

    def binary_factors(self) -> tuple[np.ndarray, np.ndarray]:
        """The final binarization of ``U`` and ``V_hat`` (spec 2.6), as ``uint8``."""
        U, V_hat = self.factors()
        return binarize(U), binarize(V_hat)

    def evaluate(self, data: BooleanFederatedData) -> dict[str, float]:
        """History columns of the current model ``A_i ~ U_i o V_hat``.

        ``loss``: ``sum_i ||A_i - U_i V_hat||_F^2`` of the relaxed factors; ``rmsd``: mean over
        clients of ``sqrt(Hamming(A_i, B_i) / (n_i m))`` with ``B_i = bin(U_i) o bin(V_hat)``;
        ``rmsd_sum``: the sum over clients (the paper's Table 3 scale); ``f1`` against the data
        and ``f1_signal`` against the noise-free signal (NaN when unknown);
        ``integrality_gap``: ``R(U) + R(V_hat)`` (Eq. 3 at the base ``kappa, lambda``), zero
        exactly for binary factors; ``dp_epsilon``: composed epsilon so far (with DP only).
        """
        cfg = self.config
        U, V_hat = self.factors()
        out = {
            "loss": squared_loss(data.A, U, V_hat),
            **boolean_metrics(data.A, *self.binary_factors(), data.client_ptr, data.signal),
            "integrality_gap": elb_regularizer(U, cfg.kappa, cfg.lam)
            + elb_regularizer(V_hat, cfg.kappa, cfg.lam),
            "lambda_t": self.lam_t(),
        }
        if self.privacy_ is not None:
            out["dp_epsilon"] = self.privacy_.composed_epsilon(self.syncs_, cfg.dp_accountant)
        return out


class FelbMU(Felb):
    """Felb-MU: Felb with the multiplicative-update step matrices of Lee and Seung (Sec. 3.2).

    Per-entry steps ``eta_U = U~ / (U~ V V^T + eps)`` and ``eta_V = V~ / (U^T U V~ + eps)``;
    the prox parameters become per-entry too (``kappa eta``, ``lambda_t eta``, ``gamma eta``).
    The extrapolated point is clamped at 0 first, so that every step is nonnegative. As in
    MU, an entry that reaches exactly 0 stays 0 (zero-locking).
    """

    name: ClassVar[str] = "felb-mu"
    eps_div: ClassVar[float] = 1e-12

    def _extrapolate(self, X: np.ndarray, X_prev: np.ndarray) -> np.ndarray:
        """iPALM inertia, clamped at 0 so that the MU step matrices stay nonnegative."""
        return np.maximum(super()._extrapolate(X, X_prev), 0.0)

    def _gradient_step(
        self, X: np.ndarray, XG: np.ndarray, B: np.ndarray, G: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """``X - H (XG - B)`` with ``H = X / (XG + eps)``: the Lee-Seung update ``X B / XG``."""
        eta = X / (XG + self.eps_div)
        return X - eta * (XG - B), eta

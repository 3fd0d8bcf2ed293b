"""The client side of Felb and Felb-MU: private rows ``A_i``, factors ``U_i`` and coefficients
``V_i``; the ``b`` local iPALM steps of Alg. 1 (lines 2-9, Eq. 8) and the upload of ``V_i``.

A client fits ``A_i ~ U_i V_i`` under the Elb regularizer R (Eq. 3) and the proximity penalty
``P(V_i) = gamma ||V_i - V_hat||^2``: a gradient step on ``f = 1/2 ||T_i - U V||_F^2`` followed
by the Boolean prox (Eq. 6) for U and V and the proximity prox (Eq. 7) for V, where
``T_i = (1+2c) A_i - c`` is the sharpened target (``c = 0``: the paper's ``A_i``). Felb takes
one Lipschitz step per block and client; Felb-MU the per-entry step matrices of Lee and Seung's
multiplicative update, ``eta_U = U / (U V V^T)`` and ``eta_V = V / (U^T U V)``.

All clients of a batch are processed together: their factors are stacked as ``(s, n_max, k)``
and ``(s, k, m)`` arrays (:class:`~fedmc.algorithms.felb.blocks.ClientBlocks`; blocks padded
with zero rows, which stay zero under every step).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from fedmc.algorithms.felb.blocks import ClientBlocks
from fedmc.algorithms.felb.config import FelbConfig
from fedmc.algorithms.felb.metrics import boolean_counts, squared_loss
from fedmc.algorithms.felb.prox import binarize, elb_regularizer, prox_elb, prox_proximity
from fedmc.core.protocol import FederationInfo, InitialDraws, Message
from fedmc.core.shard import BooleanShard
from fedmc.core.uploads import Stacked, Uploads
from fedmc.privacy.local import bound_uploads

UPLOAD = "V"
EPS_DIV = 1e-12  # Felb-MU's guard against 0/0


@dataclass
class ClientState:
    """The factors of a batch of clients, stacked: ``U``, ``U_prev`` ``(C, n_max, k)`` (zero
    padding past each client's rows), ``V``, ``V_prev`` ``(C, k, m)``, and whether each client
    has received ``V_hat`` yet (``init="independent"``); ``blocks`` caches the stacked data of
    the last batch of clients."""

    U: np.ndarray
    U_prev: np.ndarray
    V: np.ndarray
    V_prev: np.ndarray
    has_model: np.ndarray
    all_blocks: ClientBlocks
    blocks: dict[bytes, ClientBlocks] = field(default_factory=dict)


def init_clients(cfg: FelbConfig, shard: BooleanShard, draws: InitialDraws,
                 info: FederationInfo) -> ClientState:
    """``U_i, V_i ~ U[0, 1]`` (Alg. 1 line 1) from the clients' draws; with
    ``init="shared"`` the clients start from the server's ``V_hat^0``, sent with their first
    round, else from their own ``V_i``."""
    blocks = ClientBlocks(shard, np.arange(shard.n_clients))
    U = draws.clients["U"][:, : blocks.n_max] * blocks.mask
    C, k, m = shard.n_clients, cfg.rank, info.n_items
    V = np.array(draws.clients["V"]) if "V" in draws.clients else np.zeros((C, k, m))
    return ClientState(U, U.copy(), V, V.copy(), np.full(C, cfg.init == "shared"), blocks)


def _blocks(shard: BooleanShard, state: ClientState,
            clients: np.ndarray) -> ClientBlocks:
    """The stacked blocks of ``clients`` (all: built at init; a subset: cached by its ids)."""
    if len(clients) == len(state.all_blocks.clients):
        return state.all_blocks
    key = clients.tobytes()
    if key not in state.blocks:
        state.blocks = {key: ClientBlocks(shard, clients, n_max=state.all_blocks.n_max,
                                          dense=state.all_blocks.dense)}
    return state.blocks[key]


def client_step(cfg: FelbConfig, shard: BooleanShard, state: ClientState, msg: Message,
                compute: np.ndarray, upload: np.ndarray) -> tuple[ClientState, Uploads]:
    """Alg. 1 lines 2-9 for ``compute``: receive ``V_hat``, ``b`` local steps, upload ``V_i``
    (clipped when DP is on; the noise is added to the sum, see
    :meth:`fedmc.privacy.local.UploadPrivacy.perturb_sum`)."""
    V_hat = msg.arrays["V_hat"]
    blocks = _blocks(shard, state, compute)
    fresh = ~state.has_model[compute]  # independent init: no V_hat yet, gamma = 0
    U, U_prev = state.U[compute], state.U_prev[compute]
    V, V_prev = state.V[compute], state.V_prev[compute]
    V[~fresh] = V_hat  # line 11 of the last sync: V_i <- V_hat
    V_prev[~fresh] = V_hat
    gamma = np.where(fresh, 0.0, cfg.gamma)[:, None, None]
    t0, c = int(msg.flags["t"]), msg.flags["sharpen"]
    for step in range(cfg.local_steps):
        lam_t = cfg.lam_t(t0 + step, int(msg.flags["syncs"]))
        U, U_prev, V, V_prev = _local_step(cfg, blocks, U, U_prev, V, V_prev, V_hat, gamma,
                                           lam_t, c)
    state.U[compute], state.U_prev[compute] = U, U_prev
    state.V[compute], state.V_prev[compute] = V, V_prev
    state.has_model[compute] = True
    sent = V[np.searchsorted(compute, upload)]
    privacy = cfg.privacy(cfg.rank, V_hat.shape[1])
    if privacy is not None:
        sent = bound_uploads(sent, privacy.clip, privacy.theta)
    return state, {UPLOAD: Stacked(V_hat.shape, dense=sent)}


def _local_step(cfg: FelbConfig, blocks: ClientBlocks, U: np.ndarray, U_prev: np.ndarray,
                V: np.ndarray, V_prev: np.ndarray, V_hat: np.ndarray, gamma: np.ndarray,
                lam_t: float, c: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One iPALM step of every stacked client (Eq. 8, Gauss-Seidel as Alg. 1 lines 3-5).

    U block: ``U <- prox^r_{eta kappa, eta lambda_t}(U~ - eta grad_U f)``; V block the same
    with the new U, then ``V <- prox^p_{eta gamma}(V)``.
    """
    # --- U block: grad_U f = U~ (V V^T) - T V^T
    U_tilde = _extrapolate(cfg, U, U_prev)
    VVt = V @ V.transpose(0, 2, 1)
    B, B_neg = _target_Vt(blocks, V, c)
    U_step, eta = _gradient_step(cfg, U_tilde, U_tilde @ VVt + B_neg, B, VVt)
    U_new = prox_elb(U_step, eta * cfg.kappa, eta * lam_t, cfg.clamp) * blocks.mask
    # --- V block with the new U: grad_V f = (U^T U) V~ - U^T T
    V_tilde = _extrapolate(cfg, V, V_prev)
    UtU = U_new.transpose(0, 2, 1) @ U_new
    B, B_neg = _Ut_target(blocks, U_new, c)
    V_step, eta = _gradient_step(cfg, V_tilde, UtU @ V_tilde + B_neg, B, UtU)
    V_new = prox_elb(V_step, eta * cfg.kappa, eta * lam_t, cfg.clamp)
    V_new = prox_proximity(V_new, V_hat, eta * gamma)
    return U_new, U, V_new, V


def _target_Vt(blocks: ClientBlocks, V: np.ndarray, c: float,
               ) -> tuple[np.ndarray, np.ndarray | float]:
    """``T_i V^T = P - N`` for the target ``T_i = (1+2c) A_i - c 1 1^T``: the nonnegative parts
    ``P = (1+2c) A_i V^T`` and ``N = c 1 1^T V^T`` (``c`` times the row sums of ``V`` on real
    rows; 0 when ``c = 0``), so the data stay sparse and Felb-MU can put ``N`` in its
    denominator."""
    if c == 0.0:
        return blocks.AVt(V), 0.0
    return (1.0 + 2.0 * c) * blocks.AVt(V), c * V.sum(axis=2)[:, None, :] * blocks.mask


def _Ut_target(blocks: ClientBlocks, U: np.ndarray, c: float,
               ) -> tuple[np.ndarray, np.ndarray | float]:
    """``U^T T_i = P - N`` as :func:`_target_Vt`: ``P = (1+2c) U^T A_i``, ``N = c U^T 1 1^T``."""
    if c == 0.0:
        return blocks.UtA(U), 0.0
    return (1.0 + 2.0 * c) * blocks.UtA(U), c * U.sum(axis=1)[:, :, None]


def _extrapolate(cfg: FelbConfig, X: np.ndarray, X_prev: np.ndarray) -> np.ndarray:
    """iPALM inertia ``X + beta (X - X_prev)``; Felb-MU clamps it at 0 so that its step
    matrices stay nonnegative."""
    X_tilde = X + cfg.beta * (X - X_prev)
    return np.maximum(X_tilde, 0.0) if cfg.multiplicative else X_tilde


def _gradient_step(cfg: FelbConfig, X: np.ndarray, XG: np.ndarray, B: np.ndarray,
                   G: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Gradient step ``X - eta (XG - B)``.

    Felb: the Lipschitz step of each client, ``L = ||G||_F`` of the block's Gram matrix
    (``V V^T`` or ``U^T U``, floored at 1e-4 as the reference Elbmf code),
    ``eta = 2 (1 - beta) / ((1 + 2 beta) L)`` (iPALM). Felb-MU: ``eta = X / (XG + eps)``, for
    which the step is the Lee-Seung update ``X B / XG``; an entry that reaches exactly 0 stays 0.
    """
    if cfg.multiplicative:
        eta = X / (XG + EPS_DIV)
    else:
        L = np.maximum(np.linalg.norm(G, axis=(1, 2)), 1e-4)[:, None, None]
        eta = 2.0 * (1.0 - cfg.beta) / ((1.0 + 2.0 * cfg.beta) * L)
    return X - eta * (XG - B), eta


def factors(state: ClientState) -> np.ndarray:
    """The relaxed ``U`` of the batch's real rows, in row order (no padding)."""
    return state.U[state.all_blocks.mask[..., 0] > 0]


def evaluate(cfg: FelbConfig, shard: BooleanShard, state: ClientState,
             model: Mapping[str, np.ndarray]) -> dict[str, float]:
    """The batch's sums for ``A_i ~ U_i o V_hat``: the relaxed loss, the counts of its binary
    reconstruction against the data (and the noise-free signal when known), the sum of the
    per-client RMSDs and the Elb regularizer of ``U``."""
    V_hat = model["V_hat"]
    U = factors(state)
    U_bin, V_bin = binarize(U), binarize(V_hat)
    counts = boolean_counts(shard.A, U_bin, V_bin, shard.client_ptr)
    out = {
        "loss": squared_loss(shard.A, U, V_hat),
        "rmsd_sum": float(counts.rmsd_per_client().sum()),
        "reg_u": elb_regularizer(U, cfg.kappa, cfg.lam),
        **_count_sums(counts, ""),
    }
    if shard.signal is not None:
        out.update(_count_sums(boolean_counts(shard.signal, U_bin, V_bin, shard.client_ptr),
                               "signal_"))
    return out


def _count_sums(counts, prefix: str) -> dict[str, float]:
    """The totals F1 needs: ``|A|``, ``|B|`` and ``|A and B|``."""
    return {prefix + "ones_data": float(counts.ones_data.sum()),
            prefix + "ones_model": float(counts.ones_model.sum()),
            prefix + "overlap": float(counts.overlap.sum())}


def user_factors(cfg: FelbConfig, shard: BooleanShard, state: ClientState) -> np.ndarray:
    """The batch's relaxed ``U`` rows (simulation only: they never leave a client)."""
    return factors(state)

"""The server side of Felb and Felb-MU: ``V_hat``, the counters of the regularization schedule,
and the proximal aggregation of the uploads (Alg. 1 line 16).

``V_hat <- prox^r_{eta kappa, eta lambda_t}(mean of the uploaded V_i)`` with ``eta = 1`` (Alg. 1
literally) or ``1/C`` (exact Eq. 10); the mean is over the uploading clients (all of them in
the paper, spec A16).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from fedmc.algorithms.felb.client import UPLOAD
from fedmc.algorithms.felb.config import FelbConfig
from fedmc.algorithms.felb.prox import elb_regularizer, prox_elb
from fedmc.core.protocol import FederationInfo, InitialDraws, Message, NoiseOnSum
from fedmc.core.uploads import Summed
from fedmc.errors import ConfigError, DataError


@dataclass
class ServerState:
    """``V_hat`` ``(k, m)``, the local steps ``t`` and synchronizations so far."""

    V_hat: np.ndarray
    t: int = 0
    syncs: int = 0


def draws(cfg: FelbConfig, info: FederationInfo, rng: np.random.Generator) -> InitialDraws:
    """``U_i ~ U[0, 1]`` (padded to the largest client), the server's ``V_hat^0 ~ U[0, 1]``
    and, with ``init="independent"``, every client's own ``V_i ~ U[0, 1]``, in this order."""
    if info.kind != "boolean":
        raise DataError(
            "Felb needs Boolean data (synthetic-boolean, a binary file, or ratings binarized "
            f"at a threshold), got {info.kind} data"
        )
    C, k, m = info.n_clients, cfg.rank, info.n_items
    clients = {"U": rng.random((C, int(info.client_sizes.max()), k))}
    V_hat = rng.random((k, m))
    if cfg.init == "independent":
        clients["V"] = rng.random((C, k, m))
    return InitialDraws(server={"V_hat": V_hat}, clients=clients)


def init_server(cfg: FelbConfig, info: FederationInfo,
                draws: Mapping[str, np.ndarray]) -> ServerState:
    """``V_hat^0`` from the server's draws."""
    return ServerState(np.array(draws["V_hat"]))


def message(cfg: FelbConfig, server: ServerState, k: int, sampled: np.ndarray,
            rng: np.random.Generator) -> Message:
    """``V_hat`` and the schedule's counters (``t``, syncs, the sharpening ``c``) to the
    sampled clients, who all compute and upload."""
    if len(sampled) == 0:
        raise ConfigError("a Felb round needs at least one client")
    flags = {"t": server.t, "syncs": server.syncs, "sharpen": cfg.sharpen_t(server.syncs)}
    return Message(k, "round", sampled, sampled, {"V_hat": server.V_hat}, flags)


def server_step(cfg: FelbConfig, server: ServerState, summed: Summed,
                msg: Message) -> ServerState:
    """Proximal aggregation (Alg. 1 line 16) at the current ``lambda_t``, then the counters
    move on (``b`` local steps, one synchronization)."""
    server.t += cfg.local_steps
    eta = 1.0 if cfg.server_step == "one" else 1.0 / summed.count
    server.V_hat = prox_elb(summed[UPLOAD] / summed.count, eta * cfg.kappa,
                            eta * cfg.lam_t(server.t, server.syncs), cfg.clamp)
    server.syncs += 1
    return server


def local_noise(cfg: FelbConfig, info: FederationInfo) -> dict[str, NoiseOnSum]:
    """The Gaussian or Laplace noise each client adds to its clipped upload (Sec. 3.3)."""
    privacy = cfg.privacy(cfg.rank, info.n_items)
    return {} if privacy is None else {UPLOAD: privacy}


def upload_shapes(cfg: FelbConfig, info: FederationInfo) -> dict[str, tuple[int, ...]]:
    """One ``(k, m)`` array: the client's ``V_i``."""
    return {UPLOAD: (cfg.rank, info.n_items)}


def model(cfg: FelbConfig, server: ServerState) -> dict[str, np.ndarray]:
    """The published coefficients ``V_hat``."""
    return {"V_hat": server.V_hat}


def metrics(cfg: FelbConfig, server: ServerState, sums: Mapping[str, float],
            info: FederationInfo) -> dict[str, float]:
    """History columns of ``A_i ~ U_i o V_hat`` from the clients' sums.

    ``loss``: ``sum_i ||A_i - U_i V_hat||_F^2`` of the relaxed factors; ``rmsd``: mean over
    clients of ``sqrt(Hamming(A_i, B_i) / (n_i m))`` with ``B_i = bin(U_i) o bin(V_hat)``;
    ``rmsd_sum``: the sum over clients (the paper's Table 3 scale); ``f1`` against the data and
    ``f1_signal`` against the noise-free signal (NaN when unknown); ``integrality_gap``:
    ``R(U) + R(V_hat)`` (Eq. 3 at the base ``kappa, lambda``), zero exactly for binary factors;
    ``lambda_t``; ``dp_epsilon``: composed epsilon so far (with DP only).
    """
    out = {
        "loss": sums["loss"],
        "rmsd": sums["rmsd_sum"] / info.n_clients,
        "rmsd_sum": sums["rmsd_sum"],
        "f1": _f1(sums, ""),
        "f1_signal": _f1(sums, "signal_") if "signal_overlap" in sums else float("nan"),
        "integrality_gap": sums["reg_u"] + elb_regularizer(server.V_hat, cfg.kappa, cfg.lam),
        "lambda_t": cfg.lam_t(server.t, server.syncs),
    }
    privacy = cfg.privacy(cfg.rank, info.n_items)
    if privacy is not None:
        out["dp_epsilon"] = privacy.composed_epsilon(server.syncs, cfg.dp_accountant)
    return out


def _f1(sums: Mapping[str, float], prefix: str) -> float:
    """F1 of the whole matrix: ``2 |A and B| / (|A| + |B|)`` (1 when both are empty)."""
    denom = sums[prefix + "ones_data"] + sums[prefix + "ones_model"]
    return float(2 * sums[prefix + "overlap"] / denom) if denom else 1.0

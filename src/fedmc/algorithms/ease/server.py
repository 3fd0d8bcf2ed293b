"""The server side of federated EASE: the closed form of Steck (2019) from the summed Gram.

The server is handed ``G = sum_i G_i`` (the sum of the clients' uploads,
:mod:`fedmc.algorithms.ease.client`; with user-level DP a noised sum, which it symmetrizes:
post-processing) and publishes the solution of EASE's training objective (Steck 2019, Eq. (1):
``min_B ||X - X B||_F^2 + lambda ||B||_F^2`` subject to ``diag(B) = 0``), in closed form
(Eqs. (2)-(3) there):

    P = (G + lambda I)^-1,        B = I - P diagMat(1 / diag(P))                         (2)

(``B_ij = -P_ij / P_jj`` off the diagonal, ``B_jj = 0``): one ``n x n`` solve. A user's scores
are ``x B``; the published model is the item-item layout ``V = B^T`` (a user's row of ``U`` is
its history ``x``: :mod:`fedmc.algorithms.ease.fold_in`), so ``U V^T = X B``. One set-up
exchange answered by every client gives the model (``--rounds 0``); a round names no client and
changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from fedmc.algorithms.ease.client import GRAM
from fedmc.algorithms.ease.config import MAX_CATALOGUE, EaseConfig
from fedmc.core.protocol import FederationInfo, InitialDraws, Message
from fedmc.core.uploads import Summed
from fedmc.errors import ConfigError


@dataclass
class ServerState:
    """The published ``B`` (2) (zero before the set-up exchange)."""

    B: np.ndarray


def draws(cfg: EaseConfig, info: FederationInfo, rng: np.random.Generator) -> InitialDraws:
    """Nothing random but, with ``max_items``, a key per user row: the draw of the items it
    contributes (:func:`fedmc.algorithms.fedals.client.contributed`)."""
    if cfg.max_items is None:
        return InitialDraws()
    return InitialDraws(rows={"key": rng.integers(0, 2**63 - 1, size=info.n_users)})


def init_server(cfg: EaseConfig, info: FederationInfo,
                draws: Mapping[str, np.ndarray]) -> ServerState:
    """``B = 0``; catalogues above :data:`~fedmc.algorithms.ease.config.MAX_CATALOGUE` items
    are refused (the dense ``B`` would not fit).

    Raises
    ------
    ConfigError
        For a catalogue larger than the dense model is offered for.
    """
    n = info.n_items
    if n > MAX_CATALOGUE:
        raise ConfigError(f"ease publishes a dense item x item matrix: {n:,} items exceed the "
                          f"{MAX_CATALOGUE:,} it is offered for: choose another --algorithm")
    return ServerState(np.zeros((n, n)))


def setup(cfg: EaseConfig, server: ServerState, info: FederationInfo) -> Message:
    """Every client uploads its Gram matrix; nothing is sent down."""
    everyone = np.arange(info.n_clients, dtype=np.int64)
    return Message(0, "setup", everyone, everyone)


def message(cfg: EaseConfig, server: ServerState, k: int, sampled: np.ndarray,
            rng: np.random.Generator) -> Message:
    """Round ``k`` names no client: the model is the set-up exchange's."""
    nobody = sampled[:0]
    return Message(k, "round", nobody, nobody)


def ease_weights(G: np.ndarray, lam: float) -> np.ndarray:
    """(2): ``B`` of the Gram matrix ``G`` (symmetrized first) and the ridge weight ``lam``."""
    A = 0.5 * (G + G.T)
    A[np.diag_indices_from(A)] += lam
    P = np.linalg.inv(A)
    B = -P / np.diag(P)[None, :]
    B[np.diag_indices_from(B)] = 0.0
    return B


def server_step(cfg: EaseConfig, server: ServerState, summed: Summed,
                msg: Message) -> ServerState:
    """At set-up, ``B`` (2) from the summed Gram matrix; a round changes nothing."""
    if msg.phase == "setup":
        server.B = ease_weights(summed[GRAM], cfg.lam)
    return server


def upload_shapes(cfg: EaseConfig, info: FederationInfo) -> dict[str, tuple[int, ...]]:
    """The Gram matrix, ``n x n``."""
    return {GRAM: (info.n_items, info.n_items)}


def model(cfg: EaseConfig, server: ServerState) -> dict[str, np.ndarray]:
    """``V = B^T``: the item-item layout (``U V^T = X B``)."""
    return {"V": np.ascontiguousarray(server.B.T)}


def metrics(cfg: EaseConfig, server: ServerState, sums: Mapping[str, float],
            info: FederationInfo) -> dict[str, float]:
    """None of its own: its lists are judged by ranking metrics."""
    return {}

"""Differential privacy of the uploaded coefficients V_i (Sec. 3.3, spec section 3).

Each client clips its upload and adds Gaussian or Laplace noise before sending it (local DP,
Alg. 1 line 8). The paper states only the guarantee of one transmission; the composed
``(epsilon, delta)`` over all synchronizations is added here with Google's ``dp_accounting``.

Neighbouring data sets are replace-one: the sensitivity is the diameter of the set an upload
can lie in after clipping (spec A8). Without norm clipping an upload is clamped to the box
``[0, 1]^{k x m}`` that Felb's iterates live in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from fedmc._lazy import lazy_import
from fedmc.errors import ConfigError

dp_accounting = lazy_import("dp_accounting")  # 1.5 s to import: only an accounted run pays it

MechanismKind = Literal["none", "gaussian", "laplace"]
ClipKind = Literal["frobenius", "elementwise", "none"]
AccountantKind = Literal["rdp", "pld"]


def gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """Standard deviation of the Gaussian mechanism (Sec. 3.3).

    ``sigma = Delta epsilon^-1 sqrt(2 log(5 / (4 delta)))``, the classical calibration
    (proved for ``epsilon < 1``; the paper sweeps up to 2).
    """
    _check_budget(epsilon, delta)
    return sensitivity / epsilon * math.sqrt(2.0 * math.log(5.0 / (4.0 * delta)))


def laplace_scale(epsilon: float, sensitivity: float) -> float:
    """Scale ``b = Delta_1 / epsilon`` of the Laplace mechanism, ``(epsilon, 0)``-DP (Sec. 3.3)."""
    _check_budget(epsilon, 0.5)
    return sensitivity / epsilon


def bound_uploads(V: np.ndarray, kind: ClipKind, theta: float) -> np.ndarray:
    """Bound every client's upload ``V[c]`` (shape ``(s, k, m)``), as Felb's clients do before
    they add their noise (Alg. 1 line 8: part of Felb's client step, not user-level DP's
    clipping, which is :func:`fedmc.privacy.gaussian.clip_uploads`).

    ``"frobenius"``: ``V_c min(1, theta / ||V_c||_F)``; ``"elementwise"``: ``clip(V, -theta,
    theta)``; ``"none"``: ``clip(V, 0, 1)``, the box of the relaxed factors.
    """
    if kind == "frobenius":
        norms = np.sqrt(np.einsum("ckm,ckm->c", V, V))
        scale = np.minimum(1.0, theta / np.maximum(norms, np.finfo(float).tiny))
        return V * scale[:, None, None]
    if kind == "elementwise":
        return np.clip(V, -theta, theta)
    return np.clip(V, 0.0, 1.0)


def sensitivity(norm: Literal[1, 2], kind: ClipKind, theta: float, size: int) -> float:
    """L1 or L2 diameter of the set a clipped upload of ``size = k m`` entries lies in."""
    if kind == "frobenius":
        radius = 2.0 * theta
        return radius if norm == 2 else radius * math.sqrt(size)
    side = 2.0 * theta if kind == "elementwise" else 1.0
    return side * (math.sqrt(size) if norm == 2 else size)


@dataclass(frozen=True)
class UploadPrivacy:
    """Clipping plus noise applied by every client to its upload of shape ``(k, m)``.

    Parameters
    ----------
    mechanism
        ``"gaussian"`` (``(epsilon, delta)``, L2 sensitivity) or ``"laplace"`` (``(epsilon, 0)``,
        L1 sensitivity) per transmission.
    epsilon, delta
        Budget of one transmission.
    clip, theta
        See :func:`bound_uploads`.
    shape
        ``(k, m)``.
    """

    mechanism: Literal["gaussian", "laplace"]
    epsilon: float
    delta: float
    clip: ClipKind
    theta: float
    shape: tuple[int, int]

    @property
    def sensitivity(self) -> float:
        """Replace-one sensitivity of one upload (L2 for Gaussian, L1 for Laplace)."""
        norm: Literal[1, 2] = 2 if self.mechanism == "gaussian" else 1
        return sensitivity(norm, self.clip, self.theta, self.shape[0] * self.shape[1])

    @property
    def scale(self) -> float:
        """Gaussian standard deviation ``sigma`` or Laplace scale ``b``."""
        if self.mechanism == "gaussian":
            return gaussian_sigma(self.epsilon, self.delta, self.sensitivity)
        return laplace_scale(self.epsilon, self.sensitivity)

    def privatize(self, V: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Clipped and noised uploads ``clip(V_c) + N_c`` for the stacked ``V`` ``(s, k, m)``:
        what each client sends."""
        return bound_uploads(V, self.clip, self.theta) + self._noise((len(V), *self.shape), rng)

    def perturb_sum(self, total: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        """``total`` (the sum of ``n`` clipped uploads) plus the ``n`` clients' noise, drawn as
        :meth:`privatize` draws it: the simulation of the clients' noise on the server's sum
        (:class:`fedmc.core.protocol.NoiseOnSum`)."""
        return total + self._noise((n, *self.shape), rng).sum(axis=0)

    def _noise(self, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        if self.mechanism == "gaussian":
            return rng.normal(0.0, self.scale, size=shape)
        return rng.laplace(0.0, self.scale, size=shape)

    def composed_epsilon(self, n_syncs: int, accountant: AccountantKind = "rdp") -> float:
        """Epsilon at ``delta`` of one client after ``n_syncs`` noisy uploads (not in the paper)."""
        if n_syncs <= 0:
            return 0.0
        multiplier = self.scale / self.sensitivity
        if self.mechanism == "gaussian":
            event = dp_accounting.GaussianDpEvent(multiplier)
        else:
            event = dp_accounting.LaplaceDpEvent(multiplier)
        acc = (dp_accounting.rdp.RdpAccountant() if accountant == "rdp"
               else dp_accounting.pld.PLDAccountant())
        acc.compose(event, n_syncs)
        return float(acc.get_epsilon(self.delta))


def _check_budget(epsilon: float, delta: float) -> None:
    if not epsilon > 0:
        raise ConfigError(f"epsilon must be positive, got {epsilon}")
    if not 0 < delta < 1:
        raise ConfigError(f"delta must lie in (0, 1), got {delta}")

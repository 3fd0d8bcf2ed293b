"""Regularizers and constraint sets, each given by its value and its proximal operator.

FedMC-ADMM touches ``R_i`` (on ``U_i``) and ``R`` (on ``V``) only through

    prox_{t R}(x) = argmin_z  R(z) + ||z - x||^2 / (2 t),

so one regularizer type serves the client step (14) and the server step (16). The closed forms
of the paper are special cases: the l2-squared prox gives (66) and (68), the l1 prox is the
soft-thresholding (71)-(73). The prox itself is one Numba function, used by the batched client
kernels and by the server alike, so there is one implementation of each formula.

Kinds (``R(x)`` for a vector ``x``):

==========  ================================================================
``none``    0
``l2``      ``lam/2 * ||x||^2``                         (l2 squared)
``l1``      ``lam * ||x||_1``
``elastic`` ``lam * (ratio * ||x||_1 + (1 - ratio)/2 * ||x||^2)``
``nonneg``  indicator of ``x >= 0`` (``lam`` unused)
``box``     indicator of ``lo <= x <= hi`` (``lam`` unused)
==========  ================================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numba
import numpy as np

from fedmc.errors import ConfigError

RegKind = Literal["none", "l2", "l1", "elastic", "nonneg", "box"]
REG_KINDS: tuple[str, ...] = ("none", "l2", "l1", "elastic", "nonneg", "box")


@dataclass(frozen=True)
class Regularizer:
    """A separable regularizer or constraint set ``R``.

    Parameters
    ----------
    kind
        One of ``none, l2, l1, elastic, nonneg, box``.
    lam
        Weight (``lambda`` for ``R_i``, ``gamma`` for ``R`` in the paper).
    ratio
        l1 share of the elastic net, in ``[0, 1]``.
    lo, hi
        Bounds of the box.
    """

    kind: RegKind = "l2"
    lam: float = 0.0
    ratio: float = 0.5
    lo: float = 0.0
    hi: float = 1.0

    def __post_init__(self) -> None:
        if self.kind not in REG_KINDS:
            raise ConfigError(f"unknown regularizer {self.kind!r}: use {'|'.join(REG_KINDS)}")
        if self.lam < 0:
            raise ConfigError(f"regularization weight must be >= 0, got {self.lam}")
        if not 0.0 <= self.ratio <= 1.0:
            raise ConfigError(f"elastic-net ratio must lie in [0, 1], got {self.ratio}")
        if self.kind == "box" and not self.lo <= self.hi:
            raise ConfigError(f"box needs lo <= hi, got [{self.lo}, {self.hi}]")

    @property
    def params(self) -> np.ndarray:
        """The packed form the Numba kernels take: ``[code, lam, ratio, lo, hi]``."""
        return np.array(
            [REG_KINDS.index(self.kind), self.lam, self.ratio, self.lo, self.hi], dtype=np.float64
        )

    def value(self, x: np.ndarray) -> float:
        """``R(x)``; ``inf`` if ``x`` violates a constraint set.

        Sums are plain NumPy reductions, not BLAS calls: waking BLAS worker threads between
        Numba parallel kernels costs more than the whole evaluation on a small machine.
        """
        x = np.asarray(x)
        if self.kind == "none":
            return 0.0
        if self.kind == "l2":
            return 0.5 * self.lam * float(np.sum(x * x))
        if self.kind == "l1":
            return self.lam * float(np.abs(x).sum())
        if self.kind == "elastic":
            return self.lam * (
                self.ratio * float(np.abs(x).sum()) + 0.5 * (1 - self.ratio) * float(np.sum(x * x))
            )
        if self.kind == "nonneg":
            return 0.0 if np.all(x >= 0) else float("inf")
        return 0.0 if np.all((x >= self.lo) & (x <= self.hi)) else float("inf")

    def prox(self, x: np.ndarray, step: float) -> np.ndarray:
        """``prox_{step * R}(x)`` as a new array."""
        out = np.array(x, dtype=np.float64, copy=True)
        prox_inplace(out.reshape(-1), step, self.params)
        return out


@numba.njit(nogil=True)
def prox_scalar(x: float, step: float, params: np.ndarray) -> float:
    """``prox_{step * R}`` of one coordinate; ``params`` from :attr:`Regularizer.params`."""
    code = int(params[0])
    t = step * params[1]
    if code == 1:  # l2 squared: x / (1 + t)
        return x / (1.0 + t)
    if code == 2:  # l1: soft threshold (72)
        if x > t:
            return x - t
        if x < -t:
            return x + t
        return 0.0
    if code == 3:  # elastic net: soft threshold, then shrink
        a = t * params[2]
        s = x - a if x > a else (x + a if x < -a else 0.0)
        return s / (1.0 + t * (1.0 - params[2]))
    if code == 4:  # non-negativity
        return x if x > 0.0 else 0.0
    if code == 5:  # box
        return min(max(x, params[3]), params[4])
    return x


@numba.njit(nogil=True, cache=True)
def prox_inplace(x: np.ndarray, step: float, params: np.ndarray) -> None:
    """Apply ``prox_{step * R}`` to every entry of the 1-D array ``x`` in place."""
    for k in range(x.shape[0]):
        x[k] = prox_scalar(x[k], step, params)

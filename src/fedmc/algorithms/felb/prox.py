"""The Elb regularizer and the proximal operators of Felb (Sec. 3.1, Eqs. 3, 6 and 7).

All operators act element-wise, so their parameters may be scalars or arrays broadcastable to
the input: Felb passes scalars (one Lipschitz step per block), Felb-MU passes the per-entry
step matrices of the multiplicative update.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

Clamp = Literal["nonneg", "box", "none"]


def elb_regularizer(X: np.ndarray, kappa: float, lam: float) -> float:
    """Value of the Elb regularizer R_{kappa,lambda}(X) (Eq. 3), in the lambda/2 form.

    ``sum_x min(kappa|x| + lam/2 x^2, kappa|x-1| + lam/2 (x-1)^2)``: the form whose exact prox
    Eq. 6 is (spec section 1.3). It is zero exactly on binary matrices; with the paper's
    ``lambda`` the same expression serves as the integrality gap of Fig. 8.
    """
    X = np.asarray(X, dtype=np.float64)
    near0 = kappa * np.abs(X) + 0.5 * lam * X**2
    near1 = kappa * np.abs(X - 1.0) + 0.5 * lam * (X - 1.0) ** 2
    return float(np.minimum(near0, near1).sum())


def prox_elb(
    X: np.ndarray, kappa: float | np.ndarray, lam: float | np.ndarray, clamp: Clamp = "nonneg"
) -> np.ndarray:
    """Boolean proximal operator of the Elb regularizer (Eq. 6), element-wise.

    ``(1+lam)^-1 (x - kappa sign(x))`` where ``x <= 1/2`` and
    ``(1+lam)^-1 (x - kappa sign(x-1) + lam)`` elsewhere. Called with a step ``eta`` as
    ``prox_elb(X, eta*kappa, eta*lam_t)``.

    Parameters
    ----------
    X
        Point after the gradient step.
    kappa, lam
        l1 and l2 weights, already multiplied by the step size (scalars or arrays).
    clamp
        ``"nonneg"`` (default, as the reference Elbmf code): ``max(., 0)`` afterwards;
        ``"box"``: ``clip(., 0, 1)``, which also removes the overshoot of Eq. 6 within
        ``kappa`` of 1; ``"none"``: Eq. 6 literally.
    """
    low = X <= 0.5
    shift = np.where(low, np.sign(X), np.sign(X - 1.0))
    Y = (X - kappa * shift + np.where(low, 0.0, lam)) / (1.0 + lam)
    if clamp == "nonneg":
        np.maximum(Y, 0.0, out=Y)
    elif clamp == "box":
        np.clip(Y, 0.0, 1.0, out=Y)
    return Y


def prox_proximity(X: np.ndarray, V_hat: np.ndarray, gamma: float | np.ndarray) -> np.ndarray:
    """Proximity prox toward the shared model (Eq. 7): ``(1+gamma)^-1 (X + gamma V_hat)``.

    Called with a step ``eta`` as ``prox_proximity(V_i, V_hat, eta*gamma)``.
    """
    return (X + gamma * V_hat) / (1.0 + gamma)


def binarize(X: np.ndarray) -> np.ndarray:
    """Final rounding of a relaxed factor (spec section 2.6): ``X > 1/2`` as ``uint8``.

    Equals ``round(clip(prox_elb(X, 0.5, 1e20), 0, 1))``, the reference's rounding step: Eq. 6
    with an infinite l2 weight sends every entry ``<= 1/2`` to 0 and every other to 1.
    """
    return (X > 0.5).astype(np.uint8)

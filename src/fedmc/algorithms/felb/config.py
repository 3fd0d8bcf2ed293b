"""Hyper-parameters of Felb and Felb-MU (defaults: App. D of the Felb paper, spec section 4;
the readings of the paper's gaps are documented in ``docs/felb.md``)."""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np
from pydantic import Field

from fedmc.algorithms.felb.prox import Clamp
from fedmc.core.factors import AlgorithmConfig
from fedmc.privacy.local import AccountantKind, ClipKind, MechanismKind, UploadPrivacy


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
    dp_mechanism: MechanismKind = Field("none", description="noise on every upload (Sec. 3.3)")
    dp_epsilon: float = Field(1.0, gt=0, description="epsilon of one upload")
    dp_delta: float = Field(0.05, gt=0, lt=1, description="delta of one upload (Gaussian)")
    dp_clip: ClipKind = Field("frobenius", description="clipping before the noise (spec A8)")
    dp_theta: float | None = Field(
        None, gt=0, description="clip threshold theta; None: sqrt(k m), the norm of all ones"
    )
    dp_accountant: AccountantKind = Field("rdp", description="composition over the syncs")

    multiplicative: ClassVar[bool] = False  # Felb-MU's per-entry steps (FelbMUConfig)

    def lam_t(self, t: int, syncs: int) -> float:
        """``lambda_t = lambda rate^t`` (spec 2.2), capped at ``lam_max``; ``t`` counts local
        steps or synchronizations (``rate_counter``)."""
        if self.lam == 0.0:
            return 0.0
        step = t if self.rate_counter == "local_step" else syncs
        return float(self.lam * np.exp(min(step * np.log(self.rate),
                                           np.log(self.lam_max / self.lam))))

    def sharpen_t(self, syncs: int) -> float:
        """The sharpening ``c``: ``sharpen`` from sync ``sharpen_after`` on, 0 before."""
        return self.sharpen if syncs >= self.sharpen_after else 0.0

    def privacy(self, k: int, m: int) -> UploadPrivacy | None:
        """Clipping and noise of every upload of shape ``(k, m)`` (Sec. 3.3), or None."""
        if self.dp_mechanism == "none":
            return None
        theta = self.dp_theta if self.dp_theta is not None else float(np.sqrt(k * m))
        return UploadPrivacy(self.dp_mechanism, self.dp_epsilon, self.dp_delta, self.dp_clip,
                             theta, (k, m))


class FelbMUConfig(FelbConfig):
    """Felb-MU: Felb's settings, with the multiplicative-update step matrices (Sec. 3.2)."""

    multiplicative: ClassVar[bool] = True

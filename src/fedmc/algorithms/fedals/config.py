"""Hyper-parameters of federated ALS, for ratings (explicit) and for interactions (implicit).

Rank, ``lam`` and the biases have one default per mode (:data:`MODE_DEFAULTS`): a setting left
out (None) takes its mode's, a setting given is kept, and a given setting that contradicts the
mode (biases with implicit feedback) is refused.
"""

from __future__ import annotations

from typing import Any, Literal, Self, cast

import numpy as np
from pydantic import Field, model_validator

from fedmc.core.factors import FactorConfig

#: The defaults of each mode. Explicit: centralized ALS's (``fedmc.algorithms.als``), so that
#: with every client in every round the two compute the same. Implicit: chosen on a
#: validation cut of ML-1M's training interactions (``benchmarks/README.md``, "Federated ALS"),
#: solved by warm-started conjugate gradient (as fast at rank 32, 3x faster at rank 128, NDCG@10
#: within 0.12% of the exact solves' on ML-1M: ``benchmarks/README.md``, "Federated ALS:
#: speed and traffic"); with fresh sums (user-level DP, whose table was measured exact) the
#: exact solves instead.
MODE_DEFAULTS: dict[bool, dict[str, Any]] = {
    False: {"rank": 10, "lam": 10.0, "biases": True, "solver": "exact"},
    True: {"rank": 32, "lam": 50.0, "biases": False, "solver": "cg"},
}


class FedALSConfig(FactorConfig):
    """Hyper-parameters of federated ALS (``docs/fedals.md``).

    ``implicit=False``: ratings on the normalized scale, ``u_t . v_j + b_t + b_j`` fitted by
    least squares with ridge ``lam``. ``implicit=True``: every value is an interaction of
    strength ``r >= 0``, preference ``p = [r > 0]`` with confidence ``c = 1 + alpha r`` and
    every item a user did not interact with a zero of confidence 1 (Hu, Koren and Volinsky
    2008, Eq. (1)-(3)).

    ``sums`` and ``max_items`` shape the uploads for user-level DP (``docs/fedals.md``, "User-
    level DP"): ``sums="fresh"`` carries no round's noise whole into the next (``memory``
    averages the rounds' sums instead), ``max_items`` bounds how many items one user's upload
    spreads its clip norm over.

    ``solver`` is how each ridge problem of a round is solved: exactly (Cholesky), or by
    ``cg_steps`` conjugate-gradient steps warm-started from the row's last solution (Takacs,
    Pilaszy and Tikk 2011, as the ``implicit`` library does), which lowers the objective
    without reaching its minimum in one round.
    """

    implicit: bool = Field(False, description="implicit feedback (interactions) instead of "
                           "ratings")
    # None (the estimator's default too) takes the mode's value (_mode_defaults, before the
    # fields): a validated config always holds one, so the fields are typed as their values
    rank: int = cast(int, Field(None, description="r (default: 10 explicit, 32 implicit)"))
    biases: bool = cast(bool, Field(None, description="user and item biases (default: on "
                                    "for ratings; implicit feedback has none)"))
    lam: float = cast(float, Field(None, gt=0, description="ridge weight lambda of every user "
                                   "and item row (default: 10 explicit, 50 implicit)"))
    lam_item: float | None = Field(None, gt=0, description="ridge weight of the item step "
                                   "(default: lam); user-level DP's clipped, noised sums "
                                   "want their own")
    lam_bias: float | None = Field(None, gt=0, description="ridge weight of the item biases "
                                   "in the item step (default: lam_item)")
    alpha: float = Field(2.0, ge=0, description="confidence c = 1 + alpha r of an interaction "
                         "of strength r (implicit only)")
    init_scale: float = Field(0.1, ge=0, description="V^0 uniform on [0, init_scale]")
    sums: Literal["running", "fresh"] = Field(
        "running", description="running: a client uploads the change of its statistics and "
        "the server keeps the sums of every client's latest ones (exact ALS); fresh: the "
        "sampled clients upload their whole statistics and the server solves from that "
        "round's sum alone (user-level DP: no round's noise carried into the next)")
    memory: float = Field(
        0.0, ge=0, lt=1, description="fresh sums: the server solves from the mean of every "
        "round's sums so far, each earlier round weighted memory times the next (0: the "
        "round's alone)")
    gram_scale: float = Field(
        1.0, gt=0, description="the packed Gram parts svec(S_j) are uploaded times this (the "
        "server divides it out): under user-level DP it moves noise between them and the "
        "right-hand sides b_j, as item-bias's count_scale does")
    upload: Literal["rows", "factors"] = Field(
        "rows", description="rows: a client sends the rows [svec(S_j) | b_j] of its rated "
        "items (d(d+1)/2 + d numbers each); factors: the same statistics as their factors, "
        "its user vectors and per rated item a weight pair, which the server expands into the "
        "same rows (65 times fewer bytes on ML-1M at rank 32; one user per client only, "
        "whose rows determine them; under secure aggregation the client expands them itself)")
    solver: Literal["exact", "cg"] | None = Field(
        None, description="exact: every user and item row solved by Cholesky; cg: cg_steps "
        "conjugate-gradient steps from the row's last solution (a client's own previous row, "
        "the item's V^k row). Default: cg for implicit feedback with running sums, else exact")
    cg_steps: int = Field(3, ge=1, description="conjugate-gradient steps per row and round "
                          "(solver=cg)")
    item_step: Literal["sums", "exchanges"] = Field(
        "sums", description="sums: the server solves every item from the running (or fresh) "
        "sums of the clients' statistics, d(d+1)/2 + d numbers per rated item; exchanges: every "
        "client in every round, the item step's cg_steps conjugate-gradient steps each one "
        "exchange whose uploads are d numbers per rated item (a round: the user step, then "
        "one exchange per step; the history counts exchanges)")
    max_items: int | None = Field(
        None, ge=1, description="each user contributes at most this many of its items to "
        "the item step: a subset drawn once from its own items, uniformly (its user step "
        "and evaluation use them all)")

    @model_validator(mode="before")
    @classmethod
    def _mode_defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        defaults = dict(MODE_DEFAULTS[bool(data.get("implicit", False))])
        if data.get("sums") == "fresh":
            defaults["solver"] = "exact"
        if data.get("item_step") == "exchanges":
            defaults["solver"] = "cg"
        return {**data, **{k: v for k, v in defaults.items() if data.get(k) is None}}

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.lam_bias is not None and not self.biases:
            raise ValueError("lam_bias is the item biases' ridge weight: it needs biases")
        if self.implicit and self.biases:
            raise ValueError("implicit feedback has no biases (Hu et al.'s model is u . v); "
                             "leave biases out or set it to false")
        if self.memory and self.sums != "fresh":
            raise ValueError("memory averages the rounds' fresh sums: it needs sums=fresh")
        if self.item_step == "exchanges":
            if self.solver != "cg":
                raise ValueError("item_step=exchanges takes cg_steps conjugate-gradient steps "
                                 "a round: solver=exact needs item_step=sums")
            for name, value, plain in (("sums", self.sums, "running"),
                                       ("max_items", self.max_items, None),
                                       ("gram_scale", self.gram_scale, 1.0)):
                if value != plain:
                    raise ValueError(f"{name}={value} shapes the item step's sums, which "
                                     f"item_step=exchanges does not send: leave {name} out "
                                     "(a private run's settings set it: there, use "
                                     "item_step=sums)")
        return self

    @property
    def item_ridge(self) -> np.ndarray:
        """The item step's ridge weight of each column it solves (:attr:`free_v`):
        ``lam_item`` (else ``lam``), and ``lam_bias`` (else the same) on the item bias."""
        lam = self.lam if self.lam_item is None else self.lam_item
        ridge = np.full(len(self.free_v), lam)
        if self.layout.biases and self.lam_bias is not None:
            ridge[-1] = self.lam_bias  # V = [V_factors | 1 | b_item]: the last one solved
        return ridge

    @property
    def solve_steps(self) -> int:
        """Conjugate-gradient steps of a row's solve: ``cg_steps`` with ``solver="cg"``, else 0
        (exact)."""
        return self.cg_steps if self.solver == "cg" else 0

    @property
    def free_v(self) -> np.ndarray:
        """Columns of ``V`` the item step solves (all but its all-ones column)."""
        return np.flatnonzero(self.layout.free_mask_v())

    @property
    def free_u(self) -> np.ndarray:
        """Columns of ``U`` the user step solves (all but its all-ones column)."""
        return np.flatnonzero(self.layout.free_mask_u())

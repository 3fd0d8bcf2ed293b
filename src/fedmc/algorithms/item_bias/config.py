"""Hyper-parameters of the item-bias baseline (``fedmc.algorithms.item_bias``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fedmc.core.factors import AlgorithmConfig, FactorLayout, clip_range


class ItemBiasConfig(AlgorithmConfig):
    """Settings of the biases-only model ``z_tj ~ c_t + b_j`` (normalized scale).

    ``lam_item`` and ``lam_user`` are the ridge weights of the item biases (in units of the
    weighted rater counts ``n_j``) and of a user's own bias (in ratings); ``weights`` the
    client weights ``a_i``; ``count_scale`` the factor ``kappa`` on the uploaded counts, which
    moves the noise of a DP release between the residual sums and the counts;
    ``signal="counts"`` makes the model the popularity list of implicit data (counts only).
    """

    lam_item: float = Field(3.0, ge=0, description="ridge weight of the item biases")
    lam_user: float = Field(5.0, ge=0, description="ridge weight of a user's own bias")
    weights: Literal["equal", "sqrt-items"] = Field(
        "sqrt-items",
        description="equal: every client weighs 1; sqrt-items: client i weighs "
        "1/sqrt(|J_i|) over its |J_i| rated items, so its counts have norm kappa",
    )
    count_scale: float = Field(0.5, gt=0, description="kappa: the counts are uploaded times "
                               "kappa (the server divides it out)")
    signal: Literal["ratings", "counts"] = Field(
        "ratings",
        description="ratings: residual sums and counts; counts: counts only, the item score "
        "is its (weighted) number of raters: the popularity list of implicit data",
    )
    clip: bool = True

    @property
    def layout(self) -> FactorLayout:
        """Rank 0 with biases: ``U = [c | 1]``, ``V = [1 | b]`` (:mod:`fedmc.core.factors`)."""
        return FactorLayout(0, True)

    def clip_range(self, value_range: tuple[float, float]) -> tuple[float, float]:
        """Where predictions are clipped on the original scale (the rating range with
        ``clip``, nowhere without)."""
        return clip_range(self.clip, value_range)

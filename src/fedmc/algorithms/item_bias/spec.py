"""The facts of the item-bias baseline (:class:`fedmc.algorithms.spec.AlgorithmSpec`)."""

from __future__ import annotations

from fedmc.algorithms.spec import IMPLICIT, ONE_USER_PER_CLIENT, AlgorithmSpec, always

_PKG = "fedmc.algorithms.item_bias"
_DP = {"count_scale": 0.3, "lam_user": 3.0, "dp_clip": 0.5}

ITEM_BIAS = AlgorithmSpec(
    # The DP baseline: one user per client, one set-up exchange answered by everyone.
    "item-bias", f"{_PKG}.config:ItemBiasConfig", f"{_PKG}:ALGORITHM",
    fold_in=f"{_PKG}.fold_in:fold_in", fold_in_rows=f"{_PKG}.fold_in:fold_in_rows",
    paper_settings={**ONE_USER_PER_CLIENT, "rounds": 0},
    # Of interactions, the counts alone: the (DP) popularity list.
    interactions={"signal": "counts"},
    dp_variants={"user": {1.0: {**_DP, "lam_item": 8.0, "dp_clip": 0.3},
                          2.0: {**_DP, "lam_item": 4.0},
                          4.0: {**_DP, "lam_item": 2.0},
                          8.0: {**_DP, "lam_item": 1.0}},
                 # the popularity list: every client's weighted counts have norm count_scale,
                 # the clip (nothing clipped, nothing of it unused)
                 "user" + IMPLICIT: {1.0: {"count_scale": 0.3, "dp_clip": 0.3}}},
    dp_baseline_for=("ratings", "interactions"), rank_token=always, estimator="ItemBias",
    nonnegative_uploads=("count",))  # kappa times the rater counts
SPECS = (ITEM_BIAS,)

"""The facts of FedMAvg and the original FedMAvg (the poster's)
(:class:`fedmc.algorithms.spec.AlgorithmSpec`)."""

from __future__ import annotations

from fedmc.algorithms.spec import AlgorithmSpec, always

_PKG = "fedmc.algorithms.fedmavg"

FEDMAVG = AlgorithmSpec(
    "fedmavg", f"{_PKG}.config:FedMAvgConfig", f"{_PKG}:ALGORITHM",
    fold_in=f"{_PKG}.fold_in:fold_in", audited=True, rank_token=always, estimator="FedMAvg")
POSTER = AlgorithmSpec(
    "fedmavg-poster", f"{_PKG}.config:FedMAvgPosterConfig", f"{_PKG}:POSTER",
    fold_in=f"{_PKG}.fold_in:fold_in", rank_token=always, estimator="FedMAvgPoster")
SPECS = (FEDMAVG, POSTER)

"""The facts of centralized ALS (:class:`fedmc.algorithms.spec.AlgorithmSpec`): no protocol
functions, it runs outside the federation."""

from __future__ import annotations

from fedmc.algorithms.spec import ONE_USER_PER_CLIENT, AlgorithmSpec

_PKG = "fedmc.algorithms.als"

ALS = AlgorithmSpec(
    "als", f"{_PKG}.config:ALSConfig", fold_in=f"{_PKG}.fold_in:fold_in",
    # No clients to speak of; the progress counts its sweeps (default 15).
    paper_settings={**ONE_USER_PER_CLIENT, "rounds": 15}, estimator="ALS")
SPECS = (ALS,)

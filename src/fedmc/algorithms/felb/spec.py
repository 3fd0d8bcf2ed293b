"""The facts of Felb and Felb-MU (:class:`fedmc.algorithms.spec.AlgorithmSpec`)."""

from __future__ import annotations

from fedmc.algorithms.spec import AlgorithmSpec

_PKG = "fedmc.algorithms.felb"

FELB = AlgorithmSpec("felb", f"{_PKG}.config:FelbConfig", f"{_PKG}:ALGORITHM",
                     data_kind="boolean", default_for=("boolean",), estimator="Felb")
FELB_MU = AlgorithmSpec("felb-mu", f"{_PKG}.config:FelbMUConfig", f"{_PKG}:ALGORITHM_MU",
                        data_kind="boolean", estimator="FelbMU")
SPECS = (FELB, FELB_MU)

"""The facts of Felb and Felb-MU (:class:`fedmc.algorithms.spec.AlgorithmSpec`)."""

from __future__ import annotations

from fedmc.algorithms.spec import AlgorithmSpec

_PKG = "fedmc.algorithms.felb"
_COUNTS = ("ones_data", "ones_model", "overlap")
_SUMS = {"loss": "nonnegative", "rmsd_sum": "nonnegative",
         **{prefix + name: "cells" for name in _COUNTS for prefix in ("", "signal_")}}
"""The evaluation sums of a client's rows (``felb.client.evaluate``): the relaxed loss, the
RMSDs and the counts of ones of the data, the model and both (and of the signal)."""

FELB = AlgorithmSpec("felb", f"{_PKG}.config:FelbConfig", f"{_PKG}:ALGORITHM",
                     data_kind="boolean", default_for=("boolean",), estimator="Felb",
                     sums=_SUMS)
FELB_MU = AlgorithmSpec("felb-mu", f"{_PKG}.config:FelbMUConfig", f"{_PKG}:ALGORITHM_MU",
                        data_kind="boolean", estimator="FelbMU", sums=_SUMS)
SPECS = (FELB, FELB_MU)

"""The facts of RFRec and RFRecF (:class:`fedmc.algorithms.spec.AlgorithmSpec`)."""

from __future__ import annotations

from fedmc.algorithms.spec import FACTOR_SUMS, ONE_USER_PER_CLIENT, AlgorithmSpec, always

_PKG = "fedmc.algorithms.rfrec"
_PAPER = {**ONE_USER_PER_CLIENT, "rounds": 400}
"""One user per client, all clients in every iteration, 400 iterations."""
_SUMS = {**FACTOR_SUMS, "sse_local": "nonnegative", "u_squares": "nonnegative",
         "psi": "nonnegative"}
"""The error sums of ``u^T V`` and the client terms of problem (5) (``rfrec.client.evaluate``)."""

RFREC = AlgorithmSpec(
    "rfrec", f"{_PKG}.config:RFRecConfig", f"{_PKG}:ALGORITHM",
    fold_in=f"{_PKG}.fold_in:fold_in", paper_settings=_PAPER, audited=True,
    rank_token=always, estimator="RFRec", sums=_SUMS)
RFRECF = AlgorithmSpec(
    "rfrecf", f"{_PKG}.config:RFRecFConfig", f"{_PKG}:ALGORITHM_F",
    fold_in=f"{_PKG}.fold_in:fold_in", paper_settings=_PAPER, rank_token=always,
    estimator="RFRecF", sums=_SUMS)
SPECS = (RFREC, RFRECF)

"""The facts of federated EASE (:class:`fedmc.algorithms.spec.AlgorithmSpec`)."""

from __future__ import annotations

from fedmc.algorithms.spec import ONE_USER_PER_CLIENT, AlgorithmSpec, Range, always

_PKG = "fedmc.algorithms.ease"

EASE = AlgorithmSpec(
    # One user per client (a device), one set-up exchange answered by everyone.
    "ease", f"{_PKG}.config:EaseConfig", f"{_PKG}:ALGORITHM",
    fold_in=f"{_PKG}.fold_in:fold_in", fold_in_rows=f"{_PKG}.fold_in:fold_in_rows",
    paper_settings={**ONE_USER_PER_CLIENT, "rounds": 0},
    # interactions only: ratings without --implicit are refused
    interactions={"implicit": True}, needs_interactions=always, estimator="Ease",
    search_space={"lam": Range(10.0, 5000.0, log=True)},
    sums={}, nonnegative_uploads=("gram",))  # products of strengths >= 0
SPECS = (EASE,)

"""The facts of federated EASE (:class:`fedmc.algorithms.spec.AlgorithmSpec`)."""

from __future__ import annotations

from fedmc.algorithms.spec import IMPLICIT, ONE_USER_PER_CLIENT, AlgorithmSpec, Range, always

_PKG = "fedmc.algorithms.ease"
_CLIP = 32.0  # every item of a user, its client's Gram clipped: users of over 32 items weigh less

EASE = AlgorithmSpec(
    # One user per client (a device), one set-up exchange answered by everyone.
    "ease", f"{_PKG}.config:EaseConfig", f"{_PKG}:ALGORITHM",
    fold_in=f"{_PKG}.fold_in:fold_in", fold_in_rows=f"{_PKG}.fold_in:fold_in_rows",
    paper_settings={**ONE_USER_PER_CLIENT, "rounds": 0},
    # interactions only: ratings without --implicit are refused
    interactions={"implicit": True}, needs_interactions=always, estimator="Ease",
    # Under user-level DP, one release of G: the clip and lambda chosen at epsilon 8 on the
    # validation cut of ML-1M's training interactions (benchmarks/README.md, "Federated
    # EASE"); lambda must stay above the noise's spectrum (about sqrt(2 n) z clip: below it
    # the noised G + lambda I is indefinite and the lists collapse), so at smaller budgets it
    # grows with the noise multiplier z (0.70, 1.27, 2.38, 4.53 at 8, 4, 2, 1; not measured).
    dp_variants={"user" + IMPLICIT: {8.0: {"dp_clip": _CLIP, "lam": 5000.0},
                                     4.0: {"dp_clip": _CLIP, "lam": 9000.0},
                                     2.0: {"dp_clip": _CLIP, "lam": 17000.0},
                                     1.0: {"dp_clip": _CLIP, "lam": 33000.0}}},
    search_space={"lam": Range(10.0, 5000.0, log=True)},
    sums={}, nonnegative_uploads=("gram",))  # products of strengths >= 0
SPECS = (EASE,)

"""Federated ALS's facts (:class:`fedmc.algorithms.spec.AlgorithmSpec`)."""

from __future__ import annotations

import math
from typing import Any

from fedmc.algorithms.spec import IMPLICIT, ONE_USER_PER_CLIENT, AlgorithmSpec, Range

_PKG = "fedmc.algorithms.fedals"
_DP = {"sums": "fresh", "active": "all", "sampling": "uniform", "participation": None,
       "gram_scale": 0.3}
_RATINGS_DP = {**_DP, "memory": 0.9, "clip": True, "dp_clip": 1.5}
_CLICKS_DP = {**_DP, "rounds": 8, "memory": 0.85, "lam_item": 10.0, "dp_clip": 1.0}


def _implicit(cfg: Any) -> bool:
    """Whether ``cfg`` fits implicit feedback (interactions only)."""
    return bool(cfg.implicit)


def _explicit(cfg: Any) -> bool:
    """Whether ``cfg`` fits ratings: only then do its kernels take the rank token."""
    return not cfg.implicit


FEDALS = AlgorithmSpec(
    # Federated ALS: one user per client (a device), 100 rounds; each client in a round with
    # probability 0.1 (the variant), every client with --active all.
    "fedals", f"{_PKG}.config:FedALSConfig", f"{_PKG}:ALGORITHM",
    fold_in=f"{_PKG}.fold_in:fold_in", fold_in_rows=f"{_PKG}.fold_in:fold_in_rows",
    paper_settings={**ONE_USER_PER_CLIENT, "rounds": 100},
    # One user per client sends its statistics as their factors (the same sums, 65 times
    # fewer bytes at rank 32; docs/fedals.md, "Traffic"): its rows determine them.
    variants={"user": {"sampling": "bernoulli", "participation": 0.1, "upload": "factors"},
              # on interactions, the item step as exchanges with every client: the implicit
              # library's ALS at 1.2x to 1.4x its time and the same NDCG@10, where the running
              # sums of 10% rounds take 2.7x to 6.5x (benchmarks/README.md, "The item step as
              # exchanges"); 60 exchanges (15 rounds of 3 CG steps) chosen on the validation cut
              "user" + IMPLICIT: {"item_step": "exchanges", "sampling": "uniform",
                                  "participation": None, "rounds": 60}},
    # Tuned for user-level DP on validation cuts of ML-1M's training ratings (below epsilon 8
    # the factors add less than their noise: rank 2, shrunk hard, and the item biases' ridge
    # grows with the noise) and interactions (epsilon 8's settings were also the best tried
    # at 2 and 4); benchmarks/README.md, "Federated ALS under user-level DP".
    dp_variants={"user": {1.0: {**_RATINGS_DP, "rounds": 2, "rank": 2, "lam_item": 300.0,
                                "lam_bias": 60.0},
                          2.0: {**_RATINGS_DP, "rounds": 3, "rank": 2, "lam_item": 300.0,
                                "lam_bias": 25.0},
                          4.0: {**_RATINGS_DP, "rounds": 3, "rank": 2, "lam_item": 100.0,
                                "lam_bias": 10.0},
                          8.0: {**_RATINGS_DP, "rounds": 8, "lam_item": 30.0,
                                "lam_bias": 8.0}},
                 "user" + IMPLICIT: {1.0: {**_CLICKS_DP, "rounds": 3, "lam_item": 60.0},
                                     2.0: _CLICKS_DP, 8.0: _CLICKS_DP}},
    # The fewest users with whom the interactions' beat the DP popularity list, by budget, as
    # FedMC-ADMM's (docs/privacy.md, "DP defaults that know the population"); at epsilon 1
    # none measured, ML-1M's 6,040 included.
    dp_least_users={"user" + IMPLICIT: {1.0: math.inf, 2.0: 5440, 4.0: 2400, 8.0: 1200}},
    audited=True, interactions={"implicit": True}, needs_interactions=_implicit,
    default_for=("interactions",), rank_token=_explicit, estimator="FedALS",
    round_warm_up=f"{_PKG}.warm_up:round_step",
    # what fedmc tune searches: `implicit`'s ALS reaches its best on ML-1M at 128 factors
    # (benchmarks/README.md, "How the implicit defaults were chosen")
    search_space={"rank": Range(8, 128, log=True, integer=True),
                  "lam": Range(1.0, 300.0, log=True),
                  "alpha": Range(0.5, 30.0, log=True, only="interactions")},
    # curves that start slower end higher: replayed on an unpruned search of ML-1M, the
    # median pruner from round 25 or 50 of 100 stops the trial that is best on the cut (rank
    # 86), from round 75 it does not (benchmarks/README.md, "fedals on ML-1M interactions";
    # replayed on the running sums' rounds, not yet on the exchanges, now the default there)
    search_warmup=0.75)
SPECS = (FEDALS,)

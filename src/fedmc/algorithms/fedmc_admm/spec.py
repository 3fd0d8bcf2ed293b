"""FedMC-ADMM's facts (:class:`fedmc.algorithms.spec.AlgorithmSpec`)."""

from __future__ import annotations

from fedmc.algorithms.spec import (
    CROSS_SILO,
    OUTSIDERS,
    AlgorithmSpec,
    Choice,
    FewUsers,
    Range,
    always,
)

_PKG = "fedmc.algorithms.fedmc_admm"
_DP_STEP = {"consensus": "rated", "weights": "sqrt-items", "dual_init": "zeros",
            "offset": "item-bias", "count_scale": 0.3, "beta": 0.3, "lam": 2.0, "gamma": 10.0,
            "inner": 100, "dp_setup_clip": 0.3, "dp_setup_scale": 0.5}
# against outsiders: 10% of the clients a round (the secret sampling amplifies)
_DP = {**_DP_STEP, "sampling": "bernoulli", "participation": 0.1}
# against the server, which knows the cohorts: every client in every round, fewer rounds
_DP_SERVER = {**_DP_STEP, "active": "all", "sampling": "uniform", "participation": None,
              "dp_setup_clip": 0.5, "dp_setup_scale": 0.3, "dp_clip": 0.04,
              "rank_popularity": 1.0}  # top-N lists blend the noised rater counts in

FEDMC_ADMM = AlgorithmSpec(
    "fedmc-admm", f"{_PKG}.config:FedMCADMMConfig", f"{_PKG}:BY_CONSENSUS",
    selected_by="consensus", fold_in=f"{_PKG}.fold_in:fold_in",
    fold_in_rows=f"{_PKG}.fold_in:fold_in_rows",
    # 100 clients, 10 drawn per round (--active's default), 100 rounds.
    paper_settings=CROSS_SILO,
    # Cross-device FedMC-ADMM: consensus on rated items (docs/algorithms.md), each client in a
    # round with probability 0.1; settings chosen on a validation cut of ML-1M's training
    # ratings (benchmarks/README.md, "One user per client").
    variants={"user": {"consensus": "rated", "beta": 0.6, "gamma": 12.0, "lam": 3.0,
                       "inner": 100, "dual_init": "zeros", "sampling": "bernoulli",
                       "participation": 0.1}},
    # Tuned for user-level DP per budget on a validation cut of ML-1M's training ratings:
    # against the server (the default; benchmarks/README.md, "DP against the server") and
    # against outsiders only (--dp-against outsiders; "DP defaults and the utility table").
    dp_variants={"user": {
        1.0: {**_DP_SERVER, "offset_lam": 16.0, "gamma": 30.0, "rounds": 3},
        2.0: {**_DP_SERVER, "offset_lam": 8.0, "rounds": 4},
        4.0: {**_DP_SERVER, "offset_lam": 4.0, "rounds": 6},
        8.0: {**_DP_SERVER, "offset_lam": 2.0, "rounds": 12, "rank_popularity": 0.3},
    }, "user" + OUTSIDERS: {
        1.0: {**_DP, "offset_lam": 8.0, "gamma": 30.0, "rounds": 60, "dp_clip": 0.01,
              "dp_setup_scale": 0.4},
        2.0: {**_DP, "offset_lam": 4.0, "rounds": 60, "dp_clip": 0.01},
        4.0: {**_DP, "offset_lam": 2.0, "rounds": 90, "dp_clip": 0.02},
        8.0: {**_DP, "offset_lam": 1.0, "rounds": 90, "dp_clip": 0.03, "dp_setup_clip": 0.5},
    }},
    # Fewer users than those settings beat the DP item-bias baseline with take these:
    # against the server, below 2,400 users at epsilon 8, half the rounds; against outsiders
    # (3,600 at epsilon 1, 2,400 at 8) a heavier bias penalty, fewer rounds; chosen on
    # validation draws of 300 to 2,400 users of ML-1M's training ratings (docs/privacy.md,
    # "DP defaults that know the population"; benchmarks/README.md, "DP against the server").
    dp_few_users={"user": {8.0: FewUsers(2400, {"rounds": 6})}, "user" + OUTSIDERS: {
        1.0: FewUsers(3600, {"offset_lam": 12.0, "rounds": 30}),
        8.0: FewUsers(2400, {"offset_lam": 2.0, "rounds": 30, "dp_clip": 0.01}),
    }},
    # The fewest users with whom they beat the DP item-bias baseline's, by budget: the
    # smallest population drawn from ML-1M's training ratings (300 to 5,440 users) at which
    # every validation draw did (docs/privacy.md, "DP defaults that know the population").
    dp_least_users={"user": {1.0: 600, 2.0: 300},
                    "user" + OUTSIDERS: {1.0: 300, 2.0: 300, 8.0: 300}},
    audited=True, default_for=("ratings",), rank_token=always, estimator="FedMCADMM",
    round_warm_up=f"{_PKG}.warm_up:round_step",
    # consensus=rated (with zero duals) is the cross-device mode, and the better one on
    # cross-silo ML-100K too (benchmarks/README.md, "Settings chosen on the clients'
    # validation cut").
    search_space={"consensus": Choice(("all", "rated")),
                  "dual_init": Choice(("paper", "zeros")),
                  "rank": Range(2, 32, log=True, integer=True),
                  "inner": Range(5, 100, log=True, integer=True),
                  "lam": Range(0.1, 30.0, log=True), "gamma": Range(0.001, 30.0, log=True),
                  "beta": Range(0.01, 3.0, log=True)},
    # lambda of a device's fold-in, 1/8 to 2 times the DP defaults' lam of 2
    fold_in_space={"fold_lam": Choice((0.25, 0.5, 1.0, 2.0, 4.0))})
SPECS = (FEDMC_ADMM,)

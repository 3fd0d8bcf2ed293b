"""Each algorithm's run protocol: the one its paper evaluates it under.

``fedmc run --algorithm X`` takes X's protocol for every protocol option the user does not
give (``--clients``, ``--partition``, ``--active``, ``--sampling``, ``--participation``,
``--rounds``); ``config.json`` lists the options so defaulted (``run.defaulted``).
:data:`VARIANTS` adds settings for one algorithm under one partition (algorithm parameters and
protocol options alike), applied where the user set neither. :data:`DP_VARIANTS` adds, to a
run with a DP budget (``--dp-epsilon E``), the settings tuned for that budget (clip norms, the
set-up's share of the noise, rounds, algorithm parameters), over the non-private variant's and
again only where the user set nothing.
"""

from __future__ import annotations

from typing import Any

#: The protocol options an algorithm's protocol may set (``fedmc run``'s option names).
PROTOCOL_OPTIONS = ("clients", "partition", "active", "sampling", "participation", "rounds")

_CROSS_SILO = {"clients": 100, "partition": "random", "rounds": 100}
_ONE_USER_PER_CLIENT = {"clients": 1, "partition": "user", "active": "all"}

#: The protocol of each algorithm (``PROTOCOLS["default"]`` for one not listed).
PROTOCOLS: dict[str, dict[str, Any]] = {
    "default": _CROSS_SILO,
    # FedMC-ADMM: 100 clients, 10 drawn per round (--active's default), 100 rounds.
    "fedmc-admm": _CROSS_SILO,
    # RFRec/RFRecF: one user per client, all clients in every iteration, 400 iterations.
    "rfrec": {**_ONE_USER_PER_CLIENT, "rounds": 400},
    "rfrecf": {**_ONE_USER_PER_CLIENT, "rounds": 400},
    # Centralized ALS: no clients to speak of; the progress counts its sweeps (default 15).
    "als": {**_ONE_USER_PER_CLIENT, "rounds": 15},
    # The item-bias baseline: one user per client, one set-up exchange answered by everyone.
    "item-bias": {**_ONE_USER_PER_CLIENT, "rounds": 0},
}

#: Settings of (algorithm, partition) applied where the user chose that partition and did not
#: set them: algorithm parameters (its Config's fields) and protocol options.
VARIANTS: dict[tuple[str, str], dict[str, Any]] = {
    # Cross-device FedMC-ADMM: consensus on rated items (docs/algorithms.md), each client in a
    # round with probability 0.1; settings chosen on a validation cut of ML-1M's training
    # ratings (benchmarks/README.md, "One user per client").
    ("fedmc-admm", "user"): {"consensus": "rated", "beta": 0.6, "gamma": 12.0, "lam": 3.0,
                             "inner": 100, "dual_init": "zeros", "sampling": "bernoulli",
                             "participation": 0.1},
}


#: The user-level DP options a DP variant may set (``fedmc run``'s option names).
DP_OPTIONS = ("dp_clip", "dp_setup_clip", "dp_setup_scale")

_ADMM_DP = {"consensus": "rated", "weights": "sqrt-items", "dual_init": "zeros",
            "offset": "item-bias", "count_scale": 0.3, "beta": 0.3, "lam": 2.0, "gamma": 10.0,
            "inner": 100, "sampling": "bernoulli", "participation": 0.1,
            "dp_setup_clip": 0.3, "dp_setup_scale": 0.5}
_BIAS_DP = {"count_scale": 0.3, "lam_user": 3.0, "dp_clip": 0.5}

#: Settings of (algorithm, partition) under user-level DP, by the budget they were tuned for
#: on the validation cut of ML-1M's training ratings (benchmarks/README.md, "DP defaults"): a
#: run with ``--dp-epsilon E`` takes those of the largest tuned budget at most ``E`` (the
#: smallest budget's below it), where the user set none of them.
DP_VARIANTS: dict[tuple[str, str], dict[float, dict[str, Any]]] = {
    ("fedmc-admm", "user"): {
        1.0: {**_ADMM_DP, "offset_lam": 8.0, "gamma": 30.0, "rounds": 60, "dp_clip": 0.01,
              "dp_setup_scale": 0.4},
        2.0: {**_ADMM_DP, "offset_lam": 4.0, "rounds": 60, "dp_clip": 0.01},
        4.0: {**_ADMM_DP, "offset_lam": 2.0, "rounds": 90, "dp_clip": 0.02},
        8.0: {**_ADMM_DP, "offset_lam": 1.0, "rounds": 90, "dp_clip": 0.03,
              "dp_setup_clip": 0.5},
    },
    ("item-bias", "user"): {
        1.0: {**_BIAS_DP, "lam_item": 8.0, "dp_clip": 0.3},
        2.0: {**_BIAS_DP, "lam_item": 4.0},
        4.0: {**_BIAS_DP, "lam_item": 2.0},
        8.0: {**_BIAS_DP, "lam_item": 1.0},
    },
}


def dp_variant(algorithm: str, partition: str, epsilon: float) -> dict[str, Any]:
    """The settings :data:`DP_VARIANTS` holds for a run of ``algorithm`` under ``partition``
    at budget ``epsilon`` (empty when none were tuned)."""
    tuned = DP_VARIANTS.get((algorithm, partition), {})
    if not tuned:
        return {}
    budgets = sorted(tuned)
    below = [b for b in budgets if b <= epsilon]
    return tuned[below[-1] if below else budgets[0]]


def apply_protocol(algorithm: str, options: dict[str, Any], params: dict[str, Any],
                   ) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """Fill the protocol options the user left unset (None) from ``algorithm``'s protocol.

    Parameters
    ----------
    algorithm
        The ``--algorithm`` name.
    options
        ``fedmc run``'s options by name; None marks one the user did not give.
    params
        The algorithm parameters the user gave.

    Returns
    -------
    options, params, defaulted
        Copies with the protocol (and a variant's settings) filled in, and the names filled.
    """
    options, params = dict(options), dict(params)
    defaulted = []
    for name, value in PROTOCOLS.get(algorithm, PROTOCOLS["default"]).items():
        if options.get(name) is None:
            options[name] = value
            defaulted.append(name)
    given_active = options.get("active") is not None and "active" not in defaulted
    variants = [VARIANTS.get((algorithm, options["partition"]), {})]
    if options.get("dp_epsilon") is not None:
        variants.append(dp_variant(algorithm, options["partition"], options["dp_epsilon"]))
    for variant in variants:
        for name, value in variant.items():
            if name == "participation" and given_active:
                continue  # --active N sets the rate (N / clients) of Bernoulli sampling
            if name in PROTOCOL_OPTIONS or name in DP_OPTIONS:
                if name in defaulted or options.get(name) is None:
                    options[name] = value
                    defaulted.append(name)
            elif name not in params or name in defaulted:
                params[name] = value
                defaulted.append(name)
    return options, params, sorted(set(defaulted))

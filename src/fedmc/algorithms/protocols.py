"""Each algorithm's run protocol: the one its paper evaluates it under.

``fedmc run --algorithm X`` takes X's protocol for every protocol option the user does not
give (``--clients``, ``--partition``, ``--active``, ``--sampling``, ``--participation``,
``--rounds``); ``config.json`` lists the options so defaulted (``run.defaulted``).
:data:`VARIANTS` adds settings for one algorithm under one partition (algorithm parameters and
protocol options alike), applied where the user set neither.
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
    # Federated ALS: one user per client (a device), 100 rounds; each client in a round with
    # probability 0.1 (VARIANTS), every client with --active all.
    "fedals": {**_ONE_USER_PER_CLIENT, "rounds": 100},
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
    ("fedals", "user"): {"sampling": "bernoulli", "participation": 0.1},
}


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
    for name, value in VARIANTS.get((algorithm, options["partition"]), {}).items():
        if name == "participation" and given_active:
            continue  # --active N sets the rate (N / clients) of Bernoulli sampling
        if name in PROTOCOL_OPTIONS:
            if name in defaulted or options.get(name) is None:
                options[name] = value
                defaulted.append(name)
        elif name not in params:
            params[name] = value
            defaulted.append(name)
    return options, params, sorted(set(defaulted))

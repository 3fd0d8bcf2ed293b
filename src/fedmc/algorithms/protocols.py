"""Each algorithm's run protocol: how its paper forms clients and how many take part.

``fedmc run --algorithm X`` uses X's protocol for every protocol option the user does not
give (``--partition``, ``--clients``, ``--active``, ``--rounds``), and ``config.json`` lists
the options so defaulted. A *variant* adds settings for one partition: with ``--partition
user`` FedMC-ADMM runs its cross-device mode (consensus on rated items, ``docs/algorithms.md``)
with the settings chosen on a validation cut of ML-1M (``benchmarks/README.md``); each of them
also yields to the user's own value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Protocol:
    """A run protocol. ``active``: clients per round, a count, a share of the clients in
    ``(0, 1)``, or None for all of them."""

    partition: str = "random"
    clients: int = 100
    active: int | float | None = 10
    rounds: int = 100


@dataclass(frozen=True)
class Variant:
    """Settings for one (algorithm, partition): protocol options and algorithm parameters."""

    protocol: Mapping[str, Any] = field(default_factory=dict)
    params: Mapping[str, Any] = field(default_factory=dict)


PAPER = Protocol()
"""FedMC-ADMM's protocol (section 5): 100 clients, 10 per round, 100 rounds; FedMAvg's
experiments share it."""

PROTOCOLS: dict[str, Protocol] = {
    "fedmc-admm": PAPER,
    "fedmavg": PAPER,
    "fedmavg-poster": PAPER,
    # RFRec: one user per client, every client in every iteration, 400 iterations (docs/rfrec.md)
    "rfrec": Protocol(partition="user", active=None, rounds=400),
    "rfrecf": Protocol(partition="user", active=None, rounds=400),
    # Felb: 10 clients, all of them every round, 50 synchronizations (docs/felb.md)
    "felb": Protocol(clients=10, active=None, rounds=50),
    "felb-mu": Protocol(clients=10, active=None, rounds=50),
}
"""Protocols by algorithm; an algorithm not listed (ALS, centralized) has none."""

VARIANTS: dict[tuple[str, str], Variant] = {
    ("fedmc-admm", "user"): Variant(
        protocol={"active": 0.1},
        params={"consensus": "rated", "beta": 0.6, "gamma": 12.0, "lam": 3.0, "inner": 100,
                "dual_init": "zeros"},
    ),
}
"""Settings by (algorithm, partition) that differ from the algorithm's defaults."""


def apply_protocol(algorithm: str, given: Mapping[str, Any], params: Mapping[str, Any],
                   ) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """The protocol options and algorithm parameters of a run.

    Parameters
    ----------
    algorithm
        The algorithm's name.
    given
        The protocol options the user gave (``partition``, ``clients``, ``active``,
        ``rounds``; None where not given).
    params
        The algorithm parameters the user gave.

    Returns
    -------
    options, params, defaulted
        Every protocol option, the parameters with the variant's added, and the names of the
        options and parameters taken from the protocol or the variant.
    """
    protocol = PROTOCOLS.get(algorithm, PAPER)
    options = {key: given.get(key) for key in ("partition", "clients", "active", "rounds")}
    defaulted = [key for key, value in options.items() if value is None]
    if options["partition"] is None:
        options["partition"] = protocol.partition
    variant = VARIANTS.get((algorithm, options["partition"]), Variant())
    for key in defaulted:
        if key in variant.protocol:
            options[key] = variant.protocol[key]
        elif key != "partition":
            options[key] = getattr(protocol, key)
    if "active" in defaulted and "active" not in variant.protocol:
        if options["partition"] == "user" and protocol.partition != "user":
            options["active"] = None  # one user per client: all of them unless told otherwise
        elif isinstance(options["active"], int):
            options["active"] = min(options["active"], options["clients"])  # 10 of 4: all 4
    extra = {k: v for k, v in variant.params.items() if k not in params}
    return options, {**params, **extra}, defaulted + sorted(extra)


__all__ = ["PAPER", "PROTOCOLS", "VARIANTS", "Protocol", "Variant", "apply_protocol"]

"""The algorithms, one package each on the shared protocol (ALS: one centralized module),
looked up by name."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

from fedmc.errors import ConfigError

if TYPE_CHECKING:
    from fedmc.estimator import Estimator

_REGISTRY: dict[str, str] = {
    "fedmc-admm": "fedmc.algorithms.fedmc_admm:FedMCADMM",
    "fedmavg": "fedmc.algorithms.fedmavg:FedMAvg",
    "fedmavg-poster": "fedmc.algorithms.fedmavg:FedMAvgPoster",
    "als": "fedmc.algorithms.als:ALS",
    "felb": "fedmc.algorithms.felb:Felb",
    "felb-mu": "fedmc.algorithms.felb:FelbMU",
    "rfrec": "fedmc.algorithms.rfrec:RFRec",
    "rfrecf": "fedmc.algorithms.rfrec:RFRecF",
    "fedals": "fedmc.algorithms.fedals:FedALS",
}


def algorithm_names() -> list[str]:
    """Names accepted by ``fedmc run --algorithm``."""
    return list(_REGISTRY)


def get_algorithm(name: str) -> type[Estimator]:
    """The estimator class registered under ``name`` (its ``algorithm`` attribute holds the
    protocol functions of a federated algorithm; ALS has none)."""
    try:
        module, cls = _REGISTRY[name].split(":")
    except KeyError:
        raise ConfigError(
            f"unknown algorithm {name!r}: choose one of {', '.join(algorithm_names())}"
        ) from None
    return getattr(import_module(module), cls)

"""fedmc: federated matrix completion and factorization.

The estimators and :func:`load_federated` are imported lazily, so ``import fedmc`` is cheap.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.1.0"  # the single source of the version (pyproject reads it)

_LAZY = {
    **dict.fromkeys(("FedMCADMM", "FedMAvg", "FedMAvgPoster", "RFRec", "RFRecF", "Felb",
                     "FelbMU", "ALS", "ItemBias", "FedALS"), "fedmc.estimators"),
    "load_federated": "fedmc.api",
    "load_model": "fedmc.model",
    "FactorModel": "fedmc.model",
    "Ratings": "fedmc.data",
    "FederatedData": "fedmc.data",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'fedmc' has no attribute {name!r}")

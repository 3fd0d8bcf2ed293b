"""fedmc: federated matrix completion and factorization.

The estimators (one per registered algorithm, named by its spec) and :func:`load_federated`
are imported lazily, so ``import fedmc`` is cheap.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.1.0"  # the single source of the version (pyproject reads it)

_LAZY = {
    "load_federated": "fedmc.api",
    "load_model": "fedmc.model",
    "FactorModel": "fedmc.model",
    "Ratings": "fedmc.data",
    "FederatedData": "fedmc.data",
    "EarlyStopping": "fedmc.federation.settings",
}


def _estimators() -> list[str]:
    """The estimator classes (:mod:`fedmc.estimators`), one per registered algorithm."""
    from fedmc.algorithms.registry import specs

    return [s.estimator for s in specs().values()]


def __getattr__(name: str) -> Any:
    if name == "__all__":
        return ["__version__", *_estimators(), *_LAZY]
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    if not name.startswith("_") and name in _estimators():
        return getattr(import_module("fedmc.estimators"), name)
    raise AttributeError(f"module 'fedmc' has no attribute {name!r}")

"""fedmc: federated matrix completion and factorization.

The algorithms and :func:`load_federated` are imported lazily, so ``import fedmc`` is cheap.
"""

from __future__ import annotations

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from typing import Any

try:
    __version__ = version("fedmc")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

_LAZY = {
    "FedMCADMM": "fedmc.algorithms.fedmc_admm",
    "load_federated": "fedmc.api",
    "Ratings": "fedmc.data",
    "FederatedData": "fedmc.data",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'fedmc' has no attribute {name!r}")

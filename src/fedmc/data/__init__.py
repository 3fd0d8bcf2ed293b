"""Data: the Ratings container, loaders, synthetic generators, splits and partitions.

The names below are imported on first use, so that the light modules of the package (the
data sets' facts, :mod:`fedmc.data.catalog`) load without NumPy.
"""

from __future__ import annotations

from fedmc._lazy import lazy_exports

_EXPORTS = {
    "FederatedData": ".federated",
    "Normalizer": "fedmc.core.scale",
    "Ratings": ".ratings",
    "partition_users": ".partition",
    "random_split": ".split",
    "user_holdout_split": ".split",
}
"""What the package exports, by module."""
__all__ = list(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)

"""Data: the Ratings container, loaders, synthetic generators, splits and partitions.

The names below are imported on first use, so that the light modules of the package (the
data sets' facts, :mod:`fedmc.data.catalog`) load without NumPy.
"""

from __future__ import annotations

from fedmc._lazy import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, FederatedData=".federated",
                                    Normalizer="fedmc.core.scale", Ratings=".ratings",
                                    partition_users=".partition", random_split=".split",
                                    user_holdout_split=".split")

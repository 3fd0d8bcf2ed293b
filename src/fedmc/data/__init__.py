"""Data: the Ratings container, loaders, synthetic generators, splits and partitions."""

from fedmc.core.scale import Normalizer
from fedmc.data.federated import FederatedData
from fedmc.data.partition import partition_users
from fedmc.data.ratings import Ratings
from fedmc.data.split import random_split, user_holdout_split

__all__ = [
    "FederatedData",
    "Normalizer",
    "Ratings",
    "partition_users",
    "random_split",
    "user_holdout_split",
]

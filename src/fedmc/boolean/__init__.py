"""Boolean (binary) data and the building blocks of federated Boolean MF (Felb)."""

from fedmc.boolean.data import BooleanFederatedData

__all__ = ["BooleanFederatedData"]

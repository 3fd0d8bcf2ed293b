"""Federated ALS's protocol functions as one :class:`~fedmc.core.protocol.Algorithm`
(:data:`ALGORITHM`), which the package exports."""

from __future__ import annotations

from fedmc.algorithms.fedals import client, server
from fedmc.algorithms.fedals.config import FedALSConfig
from fedmc.algorithms.fedals.spec import FEDALS
from fedmc.core.protocol import Algorithm

ALGORITHM = Algorithm.of(FEDALS.name, FedALSConfig, client, server, data_kind=FEDALS.data_kind,
                         split_batches=True)

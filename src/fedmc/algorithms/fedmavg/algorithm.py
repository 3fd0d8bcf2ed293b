"""FedMAvg's protocol functions as :class:`~fedmc.core.protocol.Algorithm` objects
(:data:`ALGORITHM`, :data:`POSTER`), which the package exports."""

from __future__ import annotations

from fedmc.algorithms.fedmavg import client, server, spec
from fedmc.algorithms.fedmavg.config import FedMAvgConfig, FedMAvgPosterConfig
from fedmc.core.protocol import Algorithm

ALGORITHM = Algorithm.of(spec.FEDMAVG.name, FedMAvgConfig, client, server,
                         data_kind=spec.FEDMAVG.data_kind, split_batches=True)
POSTER = Algorithm.of(spec.POSTER.name, FedMAvgPosterConfig, client, server,
                      data_kind=spec.POSTER.data_kind, split_batches=True)

"""Federated EASE's protocol functions as one :class:`~fedmc.core.protocol.Algorithm`
(:data:`ALGORITHM`), which the package exports."""

from __future__ import annotations

from fedmc.algorithms.ease import client, server
from fedmc.algorithms.ease.config import EaseConfig
from fedmc.algorithms.ease.spec import EASE
from fedmc.core.protocol import Algorithm

ALGORITHM = Algorithm.of(EASE.name, EaseConfig, client, server, data_kind=EASE.data_kind,
                         split_batches=True)

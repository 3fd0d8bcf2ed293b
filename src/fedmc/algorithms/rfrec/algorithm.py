"""RFRec and RFRecF's protocol functions as :class:`~fedmc.core.protocol.Algorithm` objects
(:data:`ALGORITHM`, :data:`ALGORITHM_F`), which the package exports."""

from __future__ import annotations

from fedmc.algorithms.rfrec import client, server
from fedmc.algorithms.rfrec.config import RFRecConfig, RFRecFConfig
from fedmc.algorithms.rfrec.spec import RFREC, RFRECF
from fedmc.core.protocol import Algorithm

ALGORITHM = Algorithm.of(RFREC.name, RFRecConfig, client, server, data_kind=RFREC.data_kind)
ALGORITHM_F = Algorithm.of(RFRECF.name, RFRecFConfig, client, server, data_kind=RFRECF.data_kind)

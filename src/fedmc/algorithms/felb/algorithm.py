"""Felb and Felb-MU's protocol functions as :class:`~fedmc.core.protocol.Algorithm` objects
(:data:`ALGORITHM`, :data:`ALGORITHM_MU`), which the package exports."""

from __future__ import annotations

from fedmc.algorithms.felb import client, server
from fedmc.algorithms.felb.config import FelbConfig, FelbMUConfig
from fedmc.algorithms.felb.spec import FELB, FELB_MU
from fedmc.core.protocol import Algorithm

ALGORITHM = Algorithm.of(FELB.name, FelbConfig, client, server, data_kind=FELB.data_kind)
ALGORITHM_MU = Algorithm.of(FELB_MU.name, FelbMUConfig, client, server,
                            data_kind=FELB_MU.data_kind)

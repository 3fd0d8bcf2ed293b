"""The item-bias baseline's protocol functions as one :class:`~fedmc.core.protocol.Algorithm`
(:data:`ALGORITHM`), which the package exports."""

from __future__ import annotations

from fedmc.algorithms.item_bias import client, server
from fedmc.algorithms.item_bias.config import ItemBiasConfig
from fedmc.algorithms.item_bias.spec import ITEM_BIAS
from fedmc.core.protocol import Algorithm

ALGORITHM = Algorithm.of(ITEM_BIAS.name, ItemBiasConfig, client, server,
                         data_kind=ITEM_BIAS.data_kind, split_batches=True)

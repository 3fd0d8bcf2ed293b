"""FedMC-ADMM's protocol functions as :class:`~fedmc.core.protocol.Algorithm` objects
(:data:`BY_CONSENSUS`, :data:`PAPER`, :data:`RATED`), which the package exports."""

from __future__ import annotations

from fedmc.algorithms.fedmc_admm import client, server
from fedmc.algorithms.fedmc_admm.config import FedMCADMMConfig
from fedmc.algorithms.fedmc_admm.rated import client as rated_client
from fedmc.algorithms.fedmc_admm.rated import server as rated_server
from fedmc.algorithms.fedmc_admm.spec import FEDMC_ADMM
from fedmc.core.factors import uniform_draws
from fedmc.core.protocol import Algorithm

PAPER = Algorithm.of(FEDMC_ADMM.name, FedMCADMMConfig, client, server,
                     data_kind=FEDMC_ADMM.data_kind, draws=uniform_draws, split_batches=True)
RATED = Algorithm.of(f"{FEDMC_ADMM.name}-rated", FedMCADMMConfig, rated_client, rated_server,
                     data_kind=FEDMC_ADMM.data_kind, draws=uniform_draws, evaluate=client.evaluate,
                     user_factors=client.user_factors, split_batches=True)
BY_CONSENSUS = {"all": PAPER, "rated": RATED}

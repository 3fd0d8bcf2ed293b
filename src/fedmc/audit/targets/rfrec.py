"""RFRec's audit target."""

from __future__ import annotations

import numpy as np

from fedmc.algorithms.rfrec.client import shared_uploads
from fedmc.algorithms.rfrec.config import RFRecConfig, RFRecFConfig
from fedmc.audit.attacks import Observation, decode_rank_one, first_gradients, reference_factor
from fedmc.audit.boundary import BoundaryRecord
from fedmc.audit.targets import Target
from fedmc.data.federated import FederatedData
from fedmc.errors import ConfigError


class RFRecTarget(Target):
    """RFRec (Algorithm 1): ``Clip(V_(i))``; reference the shared columns every client uploads
    on the items it did not rate (:func:`fedmc.algorithms.rfrec.client.shared_uploads`), which
    the server computes from the ``V̄`` it sent; decoder: the first round's step
    (:func:`fedmc.audit.attacks.first_gradients`, then
    :func:`fedmc.audit.attacks.decode_rank_one`)."""

    upload = "V"

    def __init__(self, cfg: RFRecConfig, data: FederatedData, records: list[BoundaryRecord],
                 grid: np.ndarray) -> None:
        if isinstance(cfg, RFRecFConfig):
            raise ConfigError("the audit reads RFRec (Algorithm 1), not RFRecF")
        super().__init__(cfg, data, records, grid)
        rounds = sorted(k for k in self.sent if k > 0)
        self.shared = dict(zip(rounds, shared_uploads(cfg, [self.sent[k] for k in rounds]),
                               strict=True))

    def reference(self, o: Observation) -> np.ndarray | None:
        """``Clip(Z)`` of the round."""
        return self.shared[o.round]

    def rank_one(self, o: Observation, array: np.ndarray, rows: np.ndarray, members: int,
                 ) -> np.ndarray | None:
        """The first round's step from ``V_(i) = V̄^0``: its gradients
        (:func:`fedmc.audit.attacks.first_gradients`), off the shared columns. Of a sum under
        Adam, a row with an entry of at least ``alpha`` (no single first step reaches it) is
        several members' and is zeroed (their gradients do not follow from it)."""
        if o.round != 1:
            return None
        ref = self.shared[1]
        y = array[rows] - reference_factor(array, ref) * ref[rows]
        adam = self.cfg.optimizer == "adam"
        G = first_gradients(y, self.cfg.alpha, adam)
        if adam and members > 1:
            G[(np.abs(y) >= self.cfg.alpha).any(axis=1)] = 0.0
        return G

    def decode_rows(self, o: Observation, rows: np.ndarray, y: np.ndarray) -> np.ndarray:
        """:func:`fedmc.audit.attacks.decode_rank_one` of the first gradients."""
        return decode_rank_one(y, self.sent[1][rows], 2.0, self.grid)


TARGET = RFRecTarget

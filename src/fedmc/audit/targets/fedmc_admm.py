"""FedMC-ADMM's audit target."""

from __future__ import annotations

import numpy as np

from fedmc.algorithms.fedmc_admm.config import FedMCADMMConfig
from fedmc.algorithms.fedmc_admm.rated.client import COUNT
from fedmc.audit.attacks import Observation, decode_rank_one
from fedmc.audit.boundary import BoundaryRecord
from fedmc.audit.targets import Target, previous_visits
from fedmc.data.federated import FederatedData


class ADMMTarget(Target):
    """FedMC-ADMM: the change of ``beta W_i + Y_i`` (``delta``).

    Consensus on rated items: rows on rated items only (reference zero); one user's set-up
    upload ``beta V^0_j + Y_j^0`` with the paper's duals, or its first visit's
    ``2 (m_j - u . v_j) u / (1 + |u|^2 / beta) + beta (V^k_j - V^0_j)`` with zero duals
    (:meth:`decode`). The paper's consensus (``all``): the set-up upload is ``Y_i^0`` (zero off
    the rated items); a visit in round ``k`` changes an unrated row (per-row steps: ``W_j``
    becomes ``V^k_j``, ``Y_j`` stays zero) by ``beta (V^k_j - V^l_j)``, ``l`` the client's
    previous visit (the set-up: ``l = 0``), which the server knows: it sampled the cohorts.
    """

    upload = "delta"

    def __init__(self, cfg: FedMCADMMConfig, data: FederatedData,
                 records: list[BoundaryRecord], grid: np.ndarray) -> None:
        super().__init__(cfg, data, records, grid)
        self.rated = cfg.consensus == "rated"
        if self.rated:  # the set-up's counts are rows on the rated items too (with zero
            self.sets = (self.upload, COUNT)  # duals, the set-up uploads nothing else)
        self.counts = {r.message.round: r.summed[COUNT] for r in records
                       if r.message.phase == "setup" and self.rated and r.summed is not None}
        self.previous = previous_visits(records)

    def reference(self, o: Observation) -> np.ndarray | None:
        """Zero, but for the rounds of the paper's consensus (class docstring)."""
        if self.rated or o.round == 0:
            return None
        V = self.sent[o.round]
        total = np.zeros_like(V)
        for c in o.clients.tolist():
            total += self.cfg.beta * (V - self.sent[self.previous[o.round, c]])
        return total

    def rank_one(self, o: Observation, array: np.ndarray, rows: np.ndarray, members: int,
                 ) -> np.ndarray | None:
        """The set-up dual (paper duals) less ``beta V^0_j`` per rater (consensus on rated
        items), or a first visit (zero duals, consensus on rated items) less
        ``beta (V^k_j - V^0_j)`` (of a cohort's sum: the rows of its first-visit members)."""
        cfg, V0 = self.cfg, self.sent[0]
        if o.round == 0 and cfg.dual_init == "paper":
            if not self.rated:
                return array[rows]
            # the set-up upload adds beta V^0_j once per rater (of a cohort's mean: per rater
            # over the cohort's size)
            count = (1.0 if len(o.clients) == 1 else
                     self.counts[0][rows] * members / len(o.clients))
            return array[rows] - cfg.beta * count * V0[rows]
        first = [self.previous[o.round, c] == 0 for c in o.clients.tolist()]
        # one user's upload, or a cohort's mean, needs every member on its first visit; a
        # split sum, one (its exclusive rows are its own, the others' rows join no group)
        if (self.rated and cfg.dual_init == "zeros" and o.round > 0
                and (all(first) if members == 1 else any(first))):
            return array[rows] - cfg.beta * (self.sent[o.round][rows] - V0[rows])
        return None

    def decode_rows(self, o: Observation, rows: np.ndarray, y: np.ndarray) -> np.ndarray:
        """:func:`fedmc.audit.attacks.decode_rank_one` of the set-up dual, or of the first
        visit's exact W-step (the user's bias, in the column of ``V`` the round uploads leave
        out, found too)."""
        cfg = self.cfg
        if o.round == 0:
            return decode_rank_one(y, self.sent[0][rows], 1.0 / self.data.n_items, self.grid)
        hidden = cfg.layout.ones_col_v
        return decode_rank_one(y, self.sent[o.round][rows], 2.0, self.grid, 1.0 / cfg.beta,
                               hidden=hidden if hidden >= 0 else None)


TARGET = ADMMTarget

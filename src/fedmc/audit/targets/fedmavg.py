"""FedMAvg's audit target."""

from __future__ import annotations

import numpy as np

from fedmc.audit.attacks import Observation, decode_fedmavg, reference_factor
from fedmc.audit.targets import Target


class FedMAvgTarget(Target):
    """FedMAvg: ``W_i``, ``Q2`` gradient steps from the broadcast ``V^k`` (reference ``V^k``,
    decoder :func:`fedmc.audit.attacks.decode_fedmavg`, every round)."""

    upload = "W"

    def reference(self, o: Observation) -> np.ndarray | None:
        """The round's broadcast ``V^k`` (an unrated row is ``(1 - g_i)^Q2 V^k_j``)."""
        return self.sent[o.round]

    def rank_one(self, o: Observation, array: np.ndarray, rows: np.ndarray, members: int,
                 ) -> np.ndarray | None:
        """The rows less the multiple of ``V^k`` that the unrated rows share (of a cohort's
        sum: the members' total factor, which leaves a member's exclusive rows its own)."""
        V = self.sent[o.round]
        return array[rows] - reference_factor(array, V) * V[rows]

    def decode_rows(self, o: Observation, rows: np.ndarray, y: np.ndarray) -> np.ndarray:
        """:func:`fedmc.audit.attacks.decode_fedmavg` of a member's rows split from a sum
        (its own factor unknown, searched)."""
        out = decode_fedmavg(y, self.sent[o.round][rows], None, self._steps(o), self.cfg,
                             self.data.n_clients, self.grid)
        assert out is not None  # only a known factor can rule a decoding out
        return out[0]

    def _steps(self, o: Observation) -> int:
        """``Q2`` of ``o``'s round."""
        return int(next(r for r in self.records if r.message.round == o.round)
                   .message.flags["q2"])

    def decode(self, o: Observation, noise_std: float,
               ) -> tuple[np.ndarray, np.ndarray] | None:
        """:func:`fedmc.audit.attacks.decode_fedmavg` on the mean upload (its factor known:
        the multiple of ``V^k`` its unrated rows share)."""
        array, rows = self._one(o, noise_std)
        if not len(rows):
            return None
        V = self.sent[o.round]
        factor = reference_factor(array, V)
        out = decode_fedmavg(array[rows] - factor * V[rows], V[rows], factor, self._steps(o),
                             self.cfg, self.data.n_clients, self.grid)
        return None if out is None else (rows, out[0])


TARGET = FedMAvgTarget

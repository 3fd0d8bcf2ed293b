"""Federated ALS's audit target."""

from __future__ import annotations

import numpy as np

from fedmc.algorithms.fedals.client import STATS
from fedmc.algorithms.fedals.config import FedALSConfig
from fedmc.audit.attacks import (
    Group,
    Observation,
    decode_statistics,
    equal_groups,
    guessed_rated,
    outer_factor,
)
from fedmc.audit.boundary import BoundaryRecord
from fedmc.audit.targets import Target, previous_visits
from fedmc.data.federated import FederatedData
from fedmc.errors import ConfigError

RANK_ONE = 1e-8  # a packed part whose second eigenvalue is below this share of the first


class FedALSTarget(Target):
    """Federated ALS (``docs/fedals.md``): on each rated item ``j`` a row
    ``[svec(S_j) | b_j]`` of the item step's statistics, nothing elsewhere (reference zero).
    One user's rows are built from its ``x = U[t, free]`` alone: ``svec(x x^T)`` (the same
    on every item) and ``(m_j - h) x``; decoder :func:`fedmc.audit.attacks.decode_statistics`.

    Running sums (the default) upload changes: the set-up's rows (with biases) are those of
    ``x_0 = e``, ``[svec(e e^T) | m_j e]``, the ratings themselves; a first visit's are its
    rows less those, decoded exactly; later visits less the previous visit's rows (the
    server could chain them; not decoded here). Fresh sums upload the rows themselves every
    visit: ``m_j - h`` exactly, and ``h`` from the user step's closed form (every rated item
    in the upload), or the grid (a split sum's exclusive items, ``max_items``'s subset). On
    a cohort's sum the rows of a member's exclusive items share their packed part: grouped by
    it, each group decodes as one user's (:meth:`split`).
    """

    upload = STATS

    def __init__(self, cfg: FedALSConfig, data: FederatedData, records: list[BoundaryRecord],
                 grid: np.ndarray) -> None:
        if cfg.implicit:
            raise ConfigError("the audit reads federated ALS on ratings (with implicit "
                              "feedback, too, its rows are exactly the items interacted with)")
        super().__init__(cfg, data, records, grid)
        d = len(cfg.free_v)
        self.packed = d * (d + 1) // 2
        self.carrier = d - 1 if cfg.layout.biases else None
        self.previous = previous_visits(records)

    def rank_one(self, o: Observation, array: np.ndarray, rows: np.ndarray, members: int,
                 ) -> np.ndarray | None:
        """The rows themselves, where they are one user's statistics less what the decoder
        knows: the set-up, a first visit (one user's upload, or a cohort's mean: every member
        on its first visit; a split sum: any), any visit with fresh sums; None otherwise."""
        if o.round == 0 or self.cfg.sums == "fresh":
            return array[rows]
        first = [self.previous[o.round, c] == 0 for c in o.clients.tolist()]
        return array[rows] if (all(first) if members == 1 else any(first)) else None

    def removed(self, o: Observation) -> np.ndarray | None:
        """What ``o``'s packed parts lack of ``x x^T``: the set-up rows' ``e e^T`` in a first
        visit with running sums and biases; None otherwise."""
        if o.round == 0 or self.cfg.sums == "fresh" or self.carrier is None:
            return None
        removed = np.zeros((len(self.cfg.free_v),) * 2)
        removed[self.carrier, self.carrier] = 1.0
        return removed

    def decode_rows(self, o: Observation, rows: np.ndarray, y: np.ndarray) -> np.ndarray:
        """:func:`fedmc.audit.attacks.decode_statistics` of the rows (class docstring)."""
        cfg, carrier = self.cfg, self.carrier
        if o.round == 0:  # the set-up: x_0 = e, h = 0
            return decode_statistics(y, self.grid, carrier, scale=cfg.gram_scale,
                                     shift=lambda x, d: 0.0)
        if cfg.sums == "running":
            return decode_statistics(y, self.grid, carrier, self.removed(o), cfg.gram_scale)
        shift = None
        if carrier is not None and cfg.max_items is None and len(o.clients) == 1:
            V = self.sent[o.round][rows]
            free = cfg.free_v

            def shift(x: np.ndarray, d: np.ndarray) -> float:
                """The user step's equation of the bias ``h``: ``lam h = sum_j (d_j - x .
                V[j, free])``, with ``x``'s carrier meeting the item bias."""
                return float(np.sum(d - V[:, free] @ x) / cfg.lam)

        return decode_statistics(y, self.grid, carrier, scale=cfg.gram_scale, shift=shift)

    def split(self, o: Observation) -> list[Group]:
        """The rows grouped by their packed part (equal on the items that one set of members
        rated, and only on those), each group of 3 rows or more whose packed part is one
        user's ``x x^T`` (rank one, :func:`fedmc.audit.attacks.outer_factor`: a member's
        exclusive items) decoded as that user's."""
        rows = guessed_rated(o.array)
        y = self.rank_one(o, o.array, rows, len(o.clients)) if len(rows) else None
        if y is None:
            return []
        groups = [g for g in equal_groups(y[:, : self.packed]) if self.one_user(o, y[g])]
        return [Group(o.clients, rows[g], self.decode_rows(o, rows[g], y[g])) for g in groups]

    def one_user(self, o: Observation, rows: np.ndarray) -> bool:
        """Whether rows that share their packed part are one user's: it (plus what
        :meth:`removed` says is missing) is rank one and, where the rows are a whole ``x x^T``
        with the carrier (the set-up, fresh sums with biases), its carrier entry is 1, not
        the number of raters (set-up rows are all ``e e^T``: rank one for any count)."""
        removed = self.removed(o)
        x, ratio = outer_factor(rows, removed, self.cfg.gram_scale)
        if ratio >= RANK_ONE:
            return False
        return removed is not None or self.carrier is None or abs(
            x[self.carrier] ** 2 - 1.0) < 1e-6


TARGET = FedALSTarget

"""The audit's targets, one module per audited algorithm: ``fedmc.audit.targets.<name>`` (the
algorithm's name, ``-`` read as ``_``) defines ``TARGET``, a :class:`Target`. The algorithm's
spec says only whether it is audited (:func:`fedmc.algorithms.registry.audited_algorithms`);
:func:`target` finds its module by the name.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import import_module
from typing import Any

import numpy as np

from fedmc.audit.attacks import Group, Observation, guessed_rated, parallel_groups
from fedmc.audit.boundary import BoundaryRecord
from fedmc.data.federated import FederatedData


def target(algorithm: str) -> type[Target]:
    """The audit target of the algorithm named ``algorithm`` (module docstring)."""
    return import_module(f"{__name__}.{algorithm.replace('-', '_')}").TARGET


class Target:
    """What the attacks need to know of one algorithm's uploads: the upload's name, the
    exchanges read, the reference (what an observation holds on items nobody in it rated,
    :func:`fedmc.audit.attacks.guessed_rated`) and the decoder of one user's ratings.

    ``records`` are the run's exchanges, ``grid`` the rating values on the normalized scale.
    ``sets``: the uploads the rated-item-set attack reads, side by side (the decoded upload
    alone unless a target says otherwise).
    """

    upload: str

    def __init__(self, cfg: Any, data: FederatedData, records: list[BoundaryRecord],
                 grid: np.ndarray) -> None:
        self.cfg, self.data, self.grid = cfg, data, grid
        self.sets: tuple[str, ...] = (self.upload,)
        self.records = records
        self.sent = {r.message.round: r.message.arrays["V"] for r in records
                     if "V" in r.message.arrays}

    def reference(self, o: Observation) -> np.ndarray | None:
        """What ``o`` holds on the items nobody in it rated, up to a factor."""
        return None

    def rank_one(self, o: Observation, array: np.ndarray, rows: np.ndarray, members: int,
                 ) -> np.ndarray | None:
        """The rows ``rows`` of ``array`` (the sum of ``members`` uploads of ``o``: one user's,
        a cohort's mean with 1, or the cohort's sum) as the client step's closed form makes
        them for one user: parallel to its ``u`` (:func:`fedmc.audit.attacks.decode_rank_one`);
        None where ``o`` has no such form."""
        return None

    def decode_rows(self, o: Observation, rows: np.ndarray, y: np.ndarray) -> np.ndarray:
        """One user's ratings (normalized) of the items ``rows`` from its rank-one rows
        ``y``."""
        raise NotImplementedError

    def decode(self, o: Observation, noise_std: float,
               ) -> tuple[np.ndarray, np.ndarray] | None:
        """Items and their decoded ratings (normalized) from ``o``'s mean upload as one
        user's, or None."""
        array, rows = self._one(o, noise_std)
        y = self.rank_one(o, array, rows, 1) if len(rows) else None
        return None if y is None else (rows, self.decode_rows(o, rows, y))

    def split(self, o: Observation) -> list[Group]:
        """A cohort's sum split into its members (:func:`fedmc.audit.attacks.
        parallel_groups`): on an item only one member rated, the sum's row is that member's,
        parallel to its ``u``; each group of parallel rows decoded as one user's (empty where
        the target has no rank-one form for ``o``)."""
        rows = guessed_rated(o.array, self.reference(o))
        y = self.rank_one(o, o.array, rows, len(o.clients)) if len(rows) else None
        return [] if y is None else [Group(o.clients, rows[g], self.decode_rows(o, rows[g], y[g]))
                                     for g in parallel_groups(y)]

    def _one(self, o: Observation, noise_std: float) -> tuple[np.ndarray, np.ndarray]:
        """The mean upload of ``o``'s clients (one client's in plain view) and the rows
        guessed rated in it."""
        array = o.array / len(o.clients)
        return array, guessed_rated(array, self.reference(o), noise_std / len(o.clients))


def previous_visits(records: Sequence[BoundaryRecord]) -> dict[tuple[int, int], int]:
    """``(round, client) -> `` the round of the client's previous upload (0: the set-up, or
    none before), for every upload of the run (the server sampled them: it knows)."""
    previous: dict[tuple[int, int], int] = {}
    last: dict[int, int] = {}
    for r in records:
        for c in np.unique(r.message.upload).tolist():
            previous[r.message.round, c] = last.get(c, 0)
            last[c] = r.message.round
    return previous

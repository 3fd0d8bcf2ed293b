"""The curious server's recording: everything that crosses the client/server boundary of a
simulation, as it crosses (the raw material of the attacks in :mod:`fedmc.audit.attacks`, and
of the conformance check that a server step is handed only cohort sums, :mod:`fedmc.testing`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from fedmc.core.protocol import Algorithm, Message
from fedmc.core.uploads import Summed, Uploads
from fedmc.federation.loop import Outcome, RoundCallback, Rounds
from fedmc.sim import Driver, simulate


@dataclasses.dataclass
class BoundaryRecord:
    """What crossed the client/server boundary in one exchange."""

    message: Message
    uploads: list[tuple[Uploads, np.ndarray]]
    summed: Summed | None = None


def record_boundary(algorithm: Algorithm, cfg: Any, data: Any, *, rounds: Rounds,
                    seed: int = 0, driver: Driver = "batched",
                    callback: RoundCallback | None = None,
                    ) -> tuple[list[BoundaryRecord], Outcome]:
    """Run ``algorithm`` with its client and server steps wrapped so that every upload and
    every input of the server step is recorded (copies, taken as they cross; with
    ``rounds.dp``, the uploads before clipping and the sums with their noise). The other
    parameters are :func:`fedmc.sim.simulate`'s."""
    records: list[BoundaryRecord] = []

    def client_step(cfg_, shard, state, msg, compute, upload):
        state, uploads = algorithm.client_step(cfg_, shard, state, msg, compute, upload)
        if not records or records[-1].message is not msg:
            records.append(BoundaryRecord(msg, []))
        if len(upload):
            records[-1].uploads.append((_copy_uploads(uploads), np.ones(len(upload))))
        return state, uploads

    def server_step(cfg_, server, summed, msg):
        if not isinstance(summed, Summed):
            raise AssertionError(f"the server step was handed a {type(summed).__name__}")
        if not records or records[-1].message is not msg:
            records.append(BoundaryRecord(msg, []))
        records[-1].summed = Summed.with_arrays(summed, {k: np.array(v) for k, v in
                                                         summed.arrays.items()})
        return algorithm.server_step(cfg_, server, summed, msg)

    wrapped = dataclasses.replace(algorithm, client_step=client_step, server_step=server_step)
    sim = simulate(wrapped, cfg, data, rounds=rounds, seed=seed, driver=driver,
                   callback=callback)
    return records, sim


def _copy_uploads(uploads: Uploads) -> Uploads:
    """Copies of every array of the uploads (dense parts and every field of their rows)."""
    return {name: dataclasses.replace(
        s, dense=None if s.dense is None else np.array(s.dense),
        rows=None if s.rows is None else _copied(s.rows))
        for name, s in uploads.items()}


def _copied(rows: Any) -> Any:
    """A copy of a dataclass of arrays: each array field copied, the others as they are."""
    fields = {f.name: getattr(rows, f.name) for f in dataclasses.fields(rows)}
    return dataclasses.replace(rows, **{name: np.array(value) for name, value in fields.items()
                                        if isinstance(value, np.ndarray)})

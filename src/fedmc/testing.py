"""The conformance suite: what every algorithm must satisfy under every driver.

An algorithm written against :mod:`fedmc.core.protocol` must give the same history whichever
driver runs it: the batched simulation (all clients stacked), the per-client reference loop
(one client at a time, each with its own shard and state) and, where it is installed, a real
federation. And its server step must be handed cohort sums only. The functions below check
both; ``tests/test_conformance.py`` applies them to every registered algorithm, and a new
algorithm or driver joins by being added there.

>>> from fedmc.testing import assert_drivers_agree
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from fedmc.core.protocol import Algorithm, Message
from fedmc.core.uploads import Summed, Uploads
from fedmc.sim.history import History
from fedmc.sim.loop import Simulation, simulate

IGNORED_COLUMNS = ("seconds",)


class ScheduledSampler:
    """A sampler that replays given client sets, one per round (for tests that compare with a
    transcription of a paper's pseudo-code on a fixed schedule)."""

    def __init__(self, n_clients: int, schedule: Iterable[Iterable[int]]) -> None:
        self.n_clients = n_clients
        self.schedule = [np.sort(np.asarray(s, dtype=np.int64)) for s in schedule]

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        """The next client set."""
        return self.schedule.pop(0)


def assert_same_history(a: History, b: History, rtol: float = 1e-10, atol: float = 1e-10,
                        ignore: Iterable[str] = IGNORED_COLUMNS) -> None:
    """Every column of ``a`` and ``b`` (but ``ignore``) agrees within ``rtol``/``atol``."""
    skip = set(ignore)
    assert a.columns == b.columns, f"columns differ: {a.columns} vs {b.columns}"
    assert len(a) == len(b), f"{len(a)} rows vs {len(b)}"
    for col in a.columns:
        if col in skip:
            continue
        np.testing.assert_allclose(a.column(col), b.column(col), rtol=rtol, atol=atol,
                                   equal_nan=True, err_msg=f"column {col!r}")


def run_driver(algorithm: Algorithm, cfg: Any, data: Any, make_sampler: Callable[[], Any],
               rounds: int, seed: int, driver: str) -> Simulation:
    """One simulation of ``algorithm`` with a fresh sampler, evaluating every round."""
    return simulate(algorithm, cfg, data, make_sampler(), rounds, seed, 1, driver=driver)


def assert_drivers_agree(algorithm: Algorithm, cfg: Any, data: Any,
                         make_sampler: Callable[[], Any], rounds: int = 6, seed: int = 0,
                         drivers: Iterable[str] = ("batched", "per-client"),
                         rtol: float = 1e-10, atol: float = 1e-10) -> list[Simulation]:
    """Run ``algorithm`` under every driver and require the same history (``seconds``
    aside) and the same final published model."""
    sims = [run_driver(algorithm, cfg, data, make_sampler, rounds, seed, d) for d in drivers]
    first = sims[0]
    for other in sims[1:]:
        assert_same_history(first.history, other.history, rtol, atol)
        m0 = algorithm.model(cfg, first.server)
        m1 = algorithm.model(cfg, other.server)
        for name in m0:
            np.testing.assert_allclose(m0[name], m1[name], rtol=rtol, atol=atol,
                                       err_msg=f"published {name!r}")
    return sims


@dataclasses.dataclass
class BoundaryRecord:
    """What crossed the client/server boundary in one exchange."""

    message: Message
    uploads: list[tuple[Uploads, np.ndarray]]
    summed: Summed | None = None


def record_boundary(algorithm: Algorithm, cfg: Any, data: Any, make_sampler: Callable[[], Any],
                    rounds: int = 4, seed: int = 0,
                    driver: str = "batched") -> tuple[list[BoundaryRecord], Simulation]:
    """Run ``algorithm`` with its client and server steps wrapped so that every upload and
    every input of the server step is recorded (copies, taken as they cross)."""
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
    sim = simulate(wrapped, cfg, data, make_sampler(), rounds, seed, 1, driver=driver)
    return records, sim


def _copy_uploads(uploads: Uploads) -> Uploads:
    return {name: dataclasses.replace(
        s, dense=None if s.dense is None else np.array(s.dense),
        rows=None if s.rows is None else dataclasses.replace(
            s.rows, values=np.array(s.rows.values)))
        for name, s in uploads.items()}


def assert_server_sees_only_sums(algorithm: Algorithm, cfg: Any, data: Any,
                                 make_sampler: Callable[[], Any], rounds: int = 4,
                                 seed: int = 0) -> None:
    """Every server step is handed a :class:`Summed` whose count is the number of uploads and,
    unless the algorithm adds local noise (then the sum carries it), whose arrays are the
    (multiplicity-weighted) sums of the exchange's uploads, up to rounding."""
    noise_free = not algorithm.local_noise(cfg, data.federation_info())
    records, _ = record_boundary(algorithm, cfg, data, make_sampler, rounds, seed,
                                 driver="per-client")
    for rec in records:
        assert rec.summed is not None, f"exchange {rec.message.round} reached no server step"
        ids, counts = np.unique(rec.message.upload, return_counts=True)
        multiplicity = dict(zip(ids.tolist(), counts.tolist(), strict=True))
        assert rec.summed.count == sum(multiplicity.values())
        assert len(rec.uploads) == len(multiplicity), "one upload per distinct uploader"
        if not noise_free:
            continue
        expected: dict[str, np.ndarray] = {k: np.zeros_like(v)
                                           for k, v in rec.summed.arrays.items()}
        for (uploads, _), weight in zip(rec.uploads, multiplicity.values(), strict=True):
            for name, stacked in uploads.items():
                expected[name] += stacked.weighted_sum(np.array([float(weight)]))
        for name, total in expected.items():
            np.testing.assert_allclose(rec.summed[name], total, rtol=1e-12, atol=1e-12,
                                       err_msg=f"server input {name!r} is not the cohort sum")


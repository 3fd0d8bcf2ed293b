"""The simulation engine: sample clients, run rounds, evaluate, record the history.

The engine knows nothing about any algorithm beyond :class:`fedmc.algorithms.base
.FederatedAlgorithm`; adding an algorithm means writing its client and server steps only.
Randomness: one seed gives two independent streams (initialization, client sampling), so the
same seed on the same machine reproduces the history bit for bit (``seconds`` aside).
"""

from __future__ import annotations

import csv
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from fedmc.algorithms.base import FederatedAlgorithm
from fedmc.errors import ConfigError


class Sampler(Protocol):
    """Anything that draws the clients of a round (see :mod:`fedmc.sim.sampling`)."""

    n_clients: int

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        """Sorted ``int64`` ids of the clients taking part."""
        ...


@dataclass
class History:
    """One row per evaluated round (round 0 is the initial model)."""

    rows: list[dict[str, float]] = field(default_factory=list)

    def append(self, row: dict[str, float]) -> None:
        """Add a row."""
        self.rows.append(row)

    @property
    def columns(self) -> list[str]:
        """Column names in first-seen order."""
        seen: dict[str, None] = {}
        for row in self.rows:
            seen.update(dict.fromkeys(row))
        return list(seen)

    def column(self, name: str) -> np.ndarray:
        """One column as an array (NaN where a row lacks it)."""
        return np.array([row.get(name, math.nan) for row in self.rows], dtype=float)

    def last(self, name: str) -> float:
        """The latest value of a column."""
        return float(self.rows[-1][name])

    def to_csv(self, path: str | Path) -> None:
        """Write as CSV (the ``history.csv`` of the run contract)."""
        cols = self.columns
        with open(path, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=cols, restval="")
            writer.writeheader()
            for row in self.rows:
                writer.writerow({k: _fmt(v) for k, v in row.items()})

    def __len__(self) -> int:
        return len(self.rows)


def _fmt(v: float) -> str | float:
    return repr(float(v)) if isinstance(v, float | np.floating) else v


RoundCallback = Callable[[int, dict[str, float] | None], None]


def run(
    algorithm: FederatedAlgorithm,
    data,
    sampler: Sampler,
    rounds: int,
    seed: int = 0,
    eval_every: int = 1,
    callback: RoundCallback | None = None,
) -> History:
    """Run ``rounds`` communication rounds of ``algorithm`` on ``data``.

    Parameters
    ----------
    algorithm
        A configured algorithm; :meth:`setup` is called here.
    data
        The federated data (:class:`fedmc.data.FederatedData` or an algorithm's own layout);
        it must have ``n_clients``.
    sampler
        Draws the clients of each round.
    rounds
        Number of rounds ``K``.
    seed
        Seed of initialization and sampling.
    eval_every
        Evaluate after every ``eval_every`` rounds (and always after the last one).
    callback
        Called after each round with ``(round, row or None)``; for progress display.

    Returns
    -------
    History
        Rows with ``round``, the algorithm's metrics, cumulative ``bytes_up``/``bytes_down``,
        ``seconds`` (cumulative training time, evaluation excluded) and ``clients``
        (clients that took part in that round).
    """
    if rounds < 0:
        raise ConfigError(f"rounds must be >= 0, got {rounds}")
    if eval_every < 1:
        raise ConfigError(f"eval-every must be >= 1, got {eval_every}")
    if sampler.n_clients != data.n_clients:
        raise ConfigError(
            f"the sampler draws from {sampler.n_clients} clients, the data has {data.n_clients}"
        )
    init_seq, sample_seq = np.random.SeedSequence(seed).spawn(2)
    init_rng = np.random.default_rng(init_seq)
    sample_rng = np.random.default_rng(sample_seq)
    history = History()

    start = time.perf_counter()
    comm = algorithm.setup(data, init_rng)
    train_seconds = time.perf_counter() - start
    up, down = comm.bytes_up, comm.bytes_down

    def record(k: int, n_clients: int) -> dict[str, float]:
        row: dict[str, float] = {"round": k, **algorithm.evaluate(data)}
        row.update(bytes_up=up, bytes_down=down, seconds=train_seconds, clients=n_clients)
        history.append(row)
        return row

    record(0, 0)
    for k in range(1, rounds + 1):
        t0 = time.perf_counter()
        clients = sampler.sample(sample_rng)
        comm = algorithm.round(clients, sample_rng)
        train_seconds += time.perf_counter() - t0
        up += comm.bytes_up
        down += comm.bytes_down
        row = record(k, len(clients)) if (k % eval_every == 0 or k == rounds) else None
        if callback is not None:
            callback(k, row)
    return history

"""The conformance suite: what every algorithm must satisfy under every driver.

An algorithm written against :mod:`fedmc.core.protocol` must give the same history whichever
driver runs it: the batched simulation (all clients stacked), the per-client reference loop
(one client at a time, each with its own shard and state), the sharded simulation (stacks of
clients that sum their own uploads, :mod:`fedmc.sim.sharded`) and, where it is installed, a real
federation (``fedmc.flower``, whose history adds the columns :data:`FEDERATION_COLUMNS`). A
federation that lost clients must equal a :func:`replay` of the run with the clients each
exchange included. And its server step must be handed cohort sums only. The functions below
check all this; ``tests/test_conformance.py`` and ``tests/test_flower*.py`` apply them, and a
new algorithm or driver joins by being added there. :func:`tiny_federated` and
:func:`tiny_interactions` build the small problems they run on (``tests/conftest.py`` hands
them to tests as fixtures; ``benchmarks/history_snapshot.py`` calls them directly), and
:func:`raw_data` one with raw ids unlike its dense indices. :func:`serve_routes` runs a
throw-away HTTP server for the download tests.

>>> from fedmc.testing import assert_drivers_agree
"""

from __future__ import annotations

import contextlib
import copy
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

from fedmc.audit.boundary import record_boundary
from fedmc.core.protocol import Algorithm, Message
from fedmc.data import FederatedData, Normalizer, Ratings
from fedmc.data.split import random_test_mask
from fedmc.federation.aggregator import Aggregator
from fedmc.federation.history import History
from fedmc.federation.loop import Outcome, Rounds
from fedmc.federation.population import Exchange, carried_out
from fedmc.privacy.accounting import UserDP
from fedmc.sim import Driver, PopulationFactory, simulate
from fedmc.sim.clients import PerClientClients

IGNORED_COLUMNS = ("seconds",)
FEDERATION_COLUMNS = ("participants", "lost", "claims_refused", "upload_norm_median",
                      "upload_norm_max", "uploads_over_bound")
"""Columns a federation's history adds: the clients each round's sum included, the clients
lost in the round, the clients whose id a node claimed without the right to it, and the
norms of the plain uploads the round took (their median and largest) with the number above
the bound."""


def tiny_federated(
    m: int = 12, n: int = 9, p: int = 3, density: float = 0.5, seed: int = 0
) -> tuple[FederatedData, np.ndarray, np.ndarray]:
    """A random ``m x n`` matrix observed on a mask, users split contiguously over ``p`` clients.

    Returns the federated data (train = all observed entries, test = a few of them) and the
    dense matrix ``M`` and mask (rows in federated order, which here is the user order).
    """
    rng = np.random.default_rng(seed)
    M = rng.normal(size=(m, r := 2)) @ rng.normal(size=(r, n)) + 0.1 * rng.normal(size=(m, n))
    mask = rng.random((m, n)) < density
    mask[np.arange(m), rng.integers(0, n, m)] = True  # every user rates something
    users, items = np.nonzero(mask)
    ratings = Ratings(
        users=users.astype(np.int32),
        items=items.astype(np.int32),
        values=M[users, items],
        n_users=m,
        n_items=n,
    )
    test = ratings.subset(np.arange(0, ratings.n_ratings, 5))
    client = np.repeat(np.arange(p), -(-m // p))[:m].astype(np.int32)
    return FederatedData.build(ratings, test, client, Normalizer()), M * mask, mask


def tiny_interactions(m: int = 12, n: int = 9, p: int = 3, density: float = 0.4,
                      seed: int = 0) -> FederatedData:
    """Implicit feedback on a random mask: interaction strengths in ``{1, 2, 3}``, users split
    contiguously over ``p`` clients, every fifth interaction also a test one (as in
    :func:`tiny_federated`)."""
    rng = np.random.default_rng(seed)
    mask = rng.random((m, n)) < density
    mask[np.arange(m), rng.integers(0, n, m)] = True
    users, items = np.nonzero(mask)
    ratings = Ratings(users.astype(np.int32), items.astype(np.int32),
                      rng.integers(1, 4, len(users)).astype(float), m, n)
    test = ratings.subset(np.arange(0, ratings.n_ratings, 5))
    client = np.repeat(np.arange(p), -(-m // p))[:m].astype(np.int32)
    return FederatedData.build(ratings, test, client, Normalizer())


RAW_USERS = np.arange(40) * 7 + 100  # raw ids 100, 107, ...: never the dense indices
RAW_ITEMS = np.arange(30) * 3 + 1000


def raw_data(seed: int = 0) -> FederatedData:
    """40 users x 30 items with raw ids (:data:`RAW_USERS`, :data:`RAW_ITEMS`) unlike their
    dense indices, 4 clients."""
    rng = np.random.default_rng(seed)
    users, items = np.nonzero(rng.random((40, 30)) < 0.4)
    values = rng.integers(1, 6, len(users)).astype(float)
    ratings = Ratings.from_raw(RAW_USERS[users], RAW_ITEMS[items], values, name="toy")
    return FederatedData.from_split(ratings, random_test_mask(ratings, 0.2, 0),
                                    rng.permutation(np.arange(40) % 4), "zscore")


@dataclass(frozen=True)
class Route:
    """What :func:`serve_routes` sends for one path: the body in full, a truncated body under
    the full ``Content-Length`` (the connection closes early), or an error status."""

    body: bytes = b""
    status: int = 200
    truncate: bool = False


@contextlib.contextmanager
def serve_routes(routes: dict[str, Route]) -> Iterator[str]:
    """Run a throw-away HTTP server on 127.0.0.1 that answers each path with its route, and
    yield its base URL (``http://127.0.0.1:<port>``)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - name fixed by http.server
            route = routes.get(self.path, Route(status=404))
            if route.status != 200:
                self.send_error(route.status)
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/zip")
            self.send_header("Content-Length", str(len(route.body)))
            self.end_headers()
            sent = route.body[: len(route.body) // 2] if route.truncate else route.body
            self.wfile.write(sent)
            self.close_connection = True

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            """Keep test output quiet."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


class ScheduledSampler:
    """A sampler that replays given client sets, one per round (for tests that compare with a
    transcription of a paper's pseudo-code on a fixed schedule)."""

    def __init__(self, n_clients: int, schedule: Iterable[Iterable[int]]) -> None:
        self.n_clients = n_clients
        self.schedule = [np.sort(np.asarray(s, dtype=np.int64)) for s in schedule]

    def sample(self, rng: np.random.Generator, round_: int = 1) -> np.ndarray:
        """The next client set."""
        return self.schedule.pop(0)


def assert_same_history(a: History, b: History, rtol: float = 1e-10, atol: float = 1e-10,
                        ignore: Iterable[str] = IGNORED_COLUMNS + FEDERATION_COLUMNS,
                        columns: Iterable[str] | None = None) -> None:
    """Every column of ``a`` and ``b`` (but ``ignore``; only ``columns`` when given) agrees
    within ``rtol``/``atol``."""
    skip = set(ignore)
    cols_a = [c for c in a.columns if c not in skip]
    assert cols_a == [c for c in b.columns if c not in skip], \
        f"columns differ: {a.columns} vs {b.columns}"
    assert len(a) == len(b), f"{len(a)} rows vs {len(b)}"
    for col in cols_a if columns is None else columns:
        np.testing.assert_allclose(a.column(col), b.column(col), rtol=rtol, atol=atol,
                                   equal_nan=True, err_msg=f"column {col!r}")


def run_driver(algorithm: Algorithm, cfg: Any, data: Any, make_sampler: Callable[[], Any],
               rounds: int, seed: int, driver: Driver, dp: UserDP | None = None) -> Outcome:
    """One simulation of ``algorithm`` with a fresh sampler, evaluating every round (with
    user-level DP ``dp``, if any)."""
    return simulate(algorithm, cfg, data, rounds=Rounds(make_sampler(), rounds, dp=dp), seed=seed,
                    driver=driver)


def assert_drivers_agree(algorithm: Algorithm, cfg: Any, data: Any, *, rounds: Rounds,
                         seed: int = 0,
                         drivers: Iterable[Driver | PopulationFactory] = (
                             "batched", "per-client", "sharded"),
                         rtol: float = 1e-10, atol: float = 1e-10) -> list[Outcome]:
    """Run ``algorithm`` under every driver, each with a copy of ``rounds`` (its sampler as
    it is now), and require the same history (``seconds`` aside) and the same final published
    model."""
    sims = [simulate(algorithm, cfg, data, rounds=copy.deepcopy(rounds), seed=seed, driver=d)
            for d in drivers]
    first = sims[0]
    for other in sims[1:]:
        assert_same_history(first.history, other.history, rtol, atol)
        m0 = algorithm.model(cfg, first.server)
        m1 = algorithm.model(cfg, other.server)
        for name in m0:
            np.testing.assert_allclose(m0[name], m1[name], rtol=rtol, atol=atol,
                                       err_msg=f"published {name!r}")
    return sims


class ReplayClients(PerClientClients):
    """The per-client reference loop in which every exchange of round ``k`` includes only the
    clients ``included[k]`` (what a federation's history lists as the round's participants):
    a federation that lost clients must equal this replay."""

    def __init__(self, included: Mapping[int, Iterable[int]], *args: Any) -> None:
        super().__init__(*args)
        self.included = {k: np.array(sorted(v), dtype=np.int64) for k, v in included.items()}

    def exchange(self, msg: Message, aggregator: Aggregator,
                 evaluate: Mapping[str, np.ndarray] | None = None) -> Exchange:
        """Run ``msg`` with its round's included clients only."""
        return super().exchange(carried_out(msg, self.included[msg.round]), aggregator,
                                evaluate)


def client_ids(history: History, column: str = "participants") -> dict[int, list[int]]:
    """The clients a federation's history lists in ``column`` for each round (``participants``:
    those the round's sum included; ``lost``: those asked whose replies were not included)."""
    return {int(row["round"]): [int(float(c)) for c in str(row.get(column, "")).split()]
            for row in history.rows}


def replay(algorithm: Algorithm, cfg: Any, data: Any, *, rounds: Rounds, seed: int,
           included: Mapping[int, Iterable[int]]) -> Outcome:
    """:func:`fedmc.sim.simulate` with :class:`ReplayClients`."""
    return simulate(algorithm, cfg, data, rounds=rounds, seed=seed,
                    driver=lambda *args: ReplayClients(included, *args))


def assert_server_sees_only_sums(algorithm: Algorithm, cfg: Any, data: Any, *,
                                 rounds: Rounds, seed: int = 0) -> None:
    """Every server step is handed a :class:`Summed` whose count is the number of uploads and,
    unless the algorithm adds local noise (then the sum carries it), whose arrays are the
    (multiplicity-weighted) sums of the exchange's uploads, up to rounding."""
    noise_free = not algorithm.local_noise(cfg, data.federation_info())
    records, _ = record_boundary(algorithm, cfg, data, rounds=rounds, seed=seed,
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


def fold_in_errors(model: Any, train: Any, held: Any) -> np.ndarray:
    """The reference of an evaluation by fold-in: each user (row) of ``held`` folded in one at
    a time from its ``train`` row with ``model``'s public API (a
    :class:`~fedmc.model.FactorModel`: ``fold_in`` and ``predict`` on raw item ids), the errors
    of its held-out ratings; ``train`` and ``held`` are CSRs over the model's items with values
    on the original scale, a user without held-out ratings left out."""
    errors = []
    for t in range(len(held.indptr) - 1):
        tr = slice(train.indptr[t], train.indptr[t + 1])
        te = slice(held.indptr[t], held.indptr[t + 1])
        if te.stop == te.start:
            continue
        me = model.fold_in(model.item_ids[train.indices[tr]], train.values[tr])
        predicted = model.predict(me, model.item_ids[held.indices[te]])
        errors.append(predicted - held.values[te])
    return np.concatenate(errors)

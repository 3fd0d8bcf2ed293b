"""The protocol every federated algorithm implements: plain functions over explicit state.

An algorithm is an :class:`Algorithm`, a bundle of functions with these roles::

    draws(cfg, info, rng)                  -> InitialDraws    every party's initial random numbers
    init_server(cfg, info, draws.server)   -> server state
    init_clients(cfg, shard, draws)        -> client state    from the clients' own shard
    setup(cfg, server, info)               -> Message | None  an optional set-up exchange
    message(cfg, server, k, sampled, rng)  -> Message         what round k sends, to whom
    client_step(cfg, shard, state, message, compute, upload) -> (state, Uploads)
    server_step(cfg, server, summed, message)                -> server state
    model(cfg, server)                     -> published arrays (what clients predict with)
    evaluate(cfg, shard, state, model)     -> client-side sums (errors, counts, objective terms)
    metrics(cfg, server, sums, info)       -> history columns

The client and server sides meet only in a :class:`fedmc.core.uploads.Summed`: the driver runs
the client step of the clients a message names, adds their uploads and hands the server step
that sum. Evaluation works the same way: clients report sums of errors, the driver adds them,
the server turns them into metrics. So a real federation (with secure aggregation, which
reveals only sums) runs exactly these functions; see ``docs/architecture.md``.

A client step works on a *batch*: ``shard`` and ``state`` hold one or more clients, and
``compute`` and ``upload`` are positions in that batch (sorted, distinct). The batched
simulation passes every client at once (stacked arrays, one Numba kernel); the reference
driver passes one client at a time; both must give the same history
(:mod:`fedmc.testing`). A client step may update ``state`` in place and return it; a driver
that must be able to roll back (Flower's two-phase commit) passes a copy.

Randomness: initial values come from :attr:`Algorithm.draws`, one stream drawn for the whole
federation and sliced per client (so every driver hands a client the same numbers); per-round
randomness (sampling, coins, simulated noise) comes from the server's stream, drawn in the
same order by every driver. A client step draws no random numbers of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np

from fedmc.core.uploads import Summed, Uploads

if TYPE_CHECKING:  # core sits below data: no import at run time
    from types import ModuleType

    from fedmc.core.scale import Normalizer

Array = np.ndarray


@dataclass(frozen=True, eq=False)
class FederationInfo:
    """Facts every party knows before training: sizes and the public scale of the data.

    Attributes
    ----------
    n_clients
        Number of clients ``p``.
    n_items
        Number of items (columns) ``n``: the shared model's rows.
    normalizer
        The map of ratings to the normalized scale the algorithms train on, and back (None
        for Boolean data).
    value_range
        Smallest and largest training rating, for clipping predictions.
    client_rows
        ``p + 1`` offsets: client ``c`` holds the user rows ``client_rows[c]:client_rows[c+1]``
        of the federation's row order (where each client's initial draws lie).
    kind
        ``"ratings"`` or ``"boolean"``: the data an algorithm of that ``data_kind`` takes.
    """

    n_clients: int
    n_items: int
    normalizer: Normalizer | None = None
    value_range: tuple[float, float] = (-np.inf, np.inf)
    client_rows: np.ndarray | None = None
    kind: Literal["ratings", "boolean"] = "ratings"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FederationInfo):
            return NotImplemented
        a, b = self.client_rows, other.client_rows
        same_rows = a is b or (a is not None and b is not None and np.array_equal(a, b))
        return same_rows and (self.n_clients, self.n_items, self.normalizer, self.value_range,
                              self.kind) == (other.n_clients, other.n_items, other.normalizer,
                                             other.value_range, other.kind)

    __hash__ = None  # type: ignore[assignment]  # unhashable: holds an array

    @property
    def n_users(self) -> int:
        """Number of user rows over all clients."""
        if self.client_rows is None:
            raise ValueError("these facts have no client rows")
        return int(self.client_rows[-1])

    @property
    def client_sizes(self) -> np.ndarray:
        """Each client's number of user rows."""
        if self.client_rows is None:
            raise ValueError("these facts have no client rows")
        return np.diff(self.client_rows)


@dataclass(frozen=True)
class Message:
    """What the server sends in one exchange.

    Attributes
    ----------
    round
        ``k`` (0 for a set-up exchange).
    phase
        Which client step to run (``"setup"``, ``"round"``, or an algorithm's own phases).
    compute
        Sorted ids of the clients that run the client step.
    upload
        Sorted ids of the clients whose uploads the server sums; a client listed twice counts
        twice (sampling with replacement). Every uploader also computes.
    arrays
        Arrays sent to every recipient (``V^k``, say).
    flags
        Scalars sent with them (a coin, a step count).
    """

    round: int
    phase: str
    compute: Array
    upload: Array
    arrays: Mapping[str, Array] = field(default_factory=dict)
    flags: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not np.all(np.isin(self.upload, self.compute)):
            raise ValueError("every uploading client must also compute")

    @property
    def recipients(self) -> Array:
        """Clients the message reaches."""
        return self.compute

    @property
    def nbytes(self) -> int:
        """Payload sent to each recipient (8 bytes per number)."""
        return 8 * sum(int(a.size) for a in self.arrays.values())


@dataclass(frozen=True)
class InitialDraws:
    """The random initial values of every party, drawn once for the whole federation.

    ``server`` holds the server's (``V^0``, say); ``rows`` arrays have one entry per user row
    of the federation (federated order) and ``clients`` arrays one per client. A client's init
    receives :meth:`take` of its own rows and entries only.
    """

    server: Mapping[str, Array] = field(default_factory=dict)
    rows: Mapping[str, Array] = field(default_factory=dict)
    clients: Mapping[str, Array] = field(default_factory=dict)

    def take(self, clients: Array, rows: Array | slice) -> InitialDraws:
        """The draws of ``clients`` (global ids) owning the user ``rows`` (no server part)."""
        return InitialDraws(
            rows={k: v[rows] for k, v in self.rows.items()},
            clients={k: v[clients] for k, v in self.clients.items()},
        )


class NoiseOnSum(Protocol):
    """Noise that every uploading client adds to its upload (local DP), simulated on the sum.

    ``perturb_sum(total, n, rng)`` returns ``total`` plus the sum of ``n`` clients' noise, with
    exactly the distribution of the noise the clients would add one by one.
    """

    def perturb_sum(self, total: Array, n: int, rng: np.random.Generator) -> Array:
        """``total`` plus ``n`` independent noise draws."""
        ...


def _no_setup(cfg: Any, server: Any, info: FederationInfo) -> Message | None:
    return None


def _no_noise(cfg: Any, info: FederationInfo) -> Mapping[str, NoiseOnSum]:
    return {}


@dataclass(frozen=True)
class Algorithm:
    """The functions of one algorithm (module docstring for their signatures).

    Attributes
    ----------
    name
        The ``--algorithm`` value.
    Config
        The pydantic model of its hyper-parameters.
    data_kind
        ``"ratings"`` (a :class:`fedmc.core.shard.RatingsShard`) or ``"boolean"`` (a
        :class:`fedmc.core.shard.BooleanShard`).
    upload_shapes
        ``(cfg, info) -> {name: shape}``: every array a client uploads.
    local_noise
        ``(cfg, info) -> {name: NoiseOnSum}``: noise clients add to an upload before it is
        summed (the algorithm's own local DP, e.g. RFRec's Eq. 9); empty when none.
    user_factors
        ``(cfg, shard, state) -> array``: the shard's user factors in row order, for
        inspection in simulation (they never leave a client in a federation).
    split_batches
        Whether a client step over a batch equals client steps over its parts (no state is
        shared between the clients of a batched state), so the batched simulation may run a
        large message in chunks. False when a simulation specialisation shares state (RFRec's
        common columns).
    """

    name: str
    Config: type
    data_kind: Literal["ratings", "boolean"]
    draws: Callable[..., InitialDraws]
    init_server: Callable[..., Any]
    init_clients: Callable[..., Any]
    message: Callable[..., Message]
    client_step: Callable[..., tuple[Any, Uploads]]
    server_step: Callable[..., Any]
    upload_shapes: Callable[..., Mapping[str, tuple[int, ...]]]
    model: Callable[..., Mapping[str, Array]]
    evaluate: Callable[..., Mapping[str, float]]
    metrics: Callable[..., dict[str, float]]
    user_factors: Callable[..., Array]
    setup: Callable[..., Message | None] = _no_setup
    local_noise: Callable[..., Mapping[str, NoiseOnSum]] = _no_noise
    split_batches: bool = False

    @classmethod
    def of(cls, name: str, Config: type, client: ModuleType, server: ModuleType,
           **given: Any) -> Algorithm:
        """The algorithm whose functions are those of its ``client`` and ``server`` modules,
        by name (:data:`CLIENT_FUNCTIONS`, :data:`SERVER_FUNCTIONS`, where the module has
        them), unless ``given`` (which also holds the other fields: ``data_kind``,
        ``split_batches``)."""
        found = {f: getattr(module, f) for module, functions in
                 ((client, CLIENT_FUNCTIONS), (server, SERVER_FUNCTIONS))
                 for f in functions if hasattr(module, f)}
        return cls(name=name, Config=Config, **(found | given))


CLIENT_FUNCTIONS = ("init_clients", "client_step", "evaluate", "user_factors")
"""The functions of an algorithm that run on a client."""
SERVER_FUNCTIONS = ("draws", "init_server", "setup", "message", "server_step", "upload_shapes",
                    "local_noise", "model", "metrics")
"""The functions of an algorithm that run on the server (``setup`` and ``local_noise``
optional)."""


__all__ = [
    "Algorithm",
    "FederationInfo",
    "InitialDraws",
    "Message",
    "NoiseOnSum",
    "Summed",
    "Uploads",
]

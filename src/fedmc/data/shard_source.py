"""What a shard of a population loads itself: the ratings of its clients' users, generated
where they are trained, split and normalized as the whole set would be.

A synthetic set's users draw their ratings from streams of their own
(:class:`fedmc.data.synthetic.SyntheticPlan`), so a shard generates its users alone. The driver
draws the split's masks over the whole set (they need the ratings' number and users, not their
values: :func:`fedmc.run.data.held_out_mask`) and sends each shard its users' part; each shard
reports the moments of its training values, and the driver fits the normalizer and the rating
range on them all (:meth:`fedmc.core.scale.Normalizer.fitted`). A shard's data then equal what
the driver would have cut from the whole set (:meth:`fedmc.data.FederatedData.clients_shard`,
the normalizer's mean and scale up to the order of the additions), without the whole set
ever being in one process (:mod:`fedmc.run.shard_load`).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from fedmc.core.scale import Moments, Normalizer, RatingScale
from fedmc.core.shard import CSR
from fedmc.data.federated import FederatedData, FederatedRows
from fedmc.data.synthetic import synthetic_plan

CHUNK = 1 << 22
"""Ratings a shard reads at once where it sums over all of them."""


@dataclass(frozen=True)
class ShardSource:
    """What one shard loads.

    Attributes
    ----------
    dataset, seed
        The synthetic set (:func:`fedmc.data.synthetic.synthetic_plan`).
    users
        The shard's users, increasing indices of the whole set.
    clients
        Each of those users' client, counted from the shard's first client.
    is_test, is_validation
        The split's masks over the users' ratings (in the whole set's order), packed bits
        (:func:`numpy.packbits`); no validation cut: None.
    scale
        The declared rating scale (None: none declared): every rating must lie in it.
    """

    dataset: str
    seed: int
    users: np.ndarray
    clients: np.ndarray
    is_test: np.ndarray
    is_validation: np.ndarray | None
    scale: RatingScale | None


@dataclass(frozen=True)
class ValueFacts:
    """A shard's training values as the driver fits the normalizer and the rating range on
    them: their moments, smallest and largest (infinite where there is none)."""

    moments: Moments
    lo: float
    hi: float

    @staticmethod
    def value_range(parts: list[ValueFacts]) -> tuple[float, float]:
        """The smallest and largest training rating of all ``parts`` (the whole line where
        there is none, as the whole set's range)."""
        if all(p.moments.count == 0 for p in parts):
            return (-np.inf, np.inf)
        return (min(p.lo for p in parts), max(p.hi for p in parts))


class LoadingShard:
    """A shard's data between generating them and normalizing them with the driver's
    normalizer: :meth:`facts` goes to the driver, :meth:`build` follows.

    The ratings are generated in blocks of consecutive clients of about ``CHUNK`` ratings,
    each block's split rows written into the shard's CSR matrices at once (the values raw
    until :meth:`build`), so that no more than a block's ratings are held besides them.
    """

    def __init__(self, source: ShardSource) -> None:
        self.source = s = source
        self.plan = plan = synthetic_plan(s.dataset, s.seed)
        self.rows = rows = FederatedRows(s.clients, len(s.users))
        offsets = np.zeros(len(s.users) + 1, dtype=np.int64)
        np.cumsum(plan.offsets[s.users + 1] - plan.offsets[s.users], out=offsets[1:])
        masks = {"test": _unpacked(s.is_test, int(offsets[-1]))}
        if s.is_validation is not None:
            masks["validation"] = _unpacked(s.is_validation, int(offsets[-1]))
        held = masks["test"] if s.is_validation is None else masks["test"] | masks["validation"]
        masks["train"] = ~held
        del held
        self.parts = {name: _Filling(rows, offsets, mask) for name, mask in masks.items()}
        ptr = rows.client_ptr
        whole = balanced_bounds(np.concatenate(([0], np.cumsum(
            (offsets[1:] - offsets[:-1])[rows.user_index])))[ptr],
            max(1, -(-int(offsets[-1]) // CHUNK)))
        for a, b in pairwise(whole):  # a block of clients: their users' ratings, split
            users = np.sort(rows.user_index[ptr[a]:ptr[b]])
            at = positions(offsets, users)
            block = FederatedData.from_split(
                plan.ratings(s.users[users]), masks["test"][at], s.clients[users] - a, "none",
                s.scale, is_validation=masks["validation"][at] if "validation" in masks
                else None)  # raw values: the driver's normalizer comes with build
            for name, part in self.parts.items():
                part.put(int(ptr[a]), getattr(block, name))

    def facts(self) -> ValueFacts:
        """The moments, smallest and largest of the shard's training values (in chunks of
        ``CHUNK``: no copy of them all)."""
        values = self.parts["train"].values
        chunks = [values[k:k + CHUNK] for k in range(0, len(values), CHUNK)]
        if not chunks:
            return ValueFacts(Moments.of(values), np.inf, -np.inf)
        return ValueFacts(Moments.combine(Moments.of(c) for c in chunks),
                          min(float(c.min()) for c in chunks), max(float(c.max()) for c in chunks))

    def build(self, normalizer: Normalizer, value_range: tuple[float, float]) -> FederatedData:
        """The shard's data, normalized as the driver says (:meth:`Normalizer.transform`'s
        arithmetic, in place), the users numbered as in the whole set."""
        csr = {}
        for name, part in self.parts.items():
            np.subtract(part.values, normalizer.mean, out=part.values)
            np.divide(part.values, normalizer.scale, out=part.values)
            csr[name] = CSR(part.indptr, part.indices, part.values)
        user_index = self.source.users[self.rows.user_index]
        return FederatedData(
            train=csr["train"], test=csr["test"], client_ptr=self.rows.client_ptr,
            n_items=self.plan.n_items, user_index=user_index,
            user_ids=self.plan.user_ids[user_index], item_ids=self.plan.item_ids,
            normalizer=normalizer, value_range=value_range, name=self.plan.name,
            validation=csr.get("validation"))


class _Filling:
    """A CSR matrix over the shard's rows whose rows are written block by block."""

    def __init__(self, rows: FederatedRows, offsets: np.ndarray, mask: np.ndarray) -> None:
        # every user has a rating (a synthetic set's): reduceat's ranges are whole
        per_user = np.add.reduceat(mask.view(np.uint8), offsets[:-1], dtype=np.int64) \
            if len(mask) else np.zeros(len(offsets) - 1, dtype=np.int64)
        self.indptr = np.zeros(len(per_user) + 1, dtype=np.int64)
        np.cumsum(per_user[rows.user_index], out=self.indptr[1:])
        self.indices = np.empty(int(self.indptr[-1]), dtype=np.int32)
        self.values = np.empty(int(self.indptr[-1]), dtype=np.float64)

    def put(self, first_row: int, block: CSR) -> None:
        """The rows of ``block``, the shard's rows from ``first_row`` on."""
        start = int(self.indptr[first_row])
        self.indices[start:start + block.nnz] = block.indices
        self.values[start:start + block.nnz] = block.values


def balanced_bounds(held: np.ndarray, shards: int) -> np.ndarray:
    """Where ``shards`` runs of consecutive clients begin (and the last ends), each holding
    about the same number of ratings, none empty (as many as there are clients where there
    are fewer): client ``c`` holds ``held[c + 1] - held[c]`` (the cumulative count at the
    clients' boundaries)."""
    n = len(held) - 1
    count = min(shards, n)
    bounds = np.zeros(count + 1, dtype=np.int64)
    bounds[1:count] = np.searchsorted(held, held[-1] * np.arange(1, count) / count)
    bounds[count] = n
    for k in range(1, count):  # one client at least in each, before and after
        bounds[k] = min(max(bounds[k], bounds[k - 1] + 1), n - (count - k))
    return bounds


def positions(offsets: np.ndarray, users: np.ndarray) -> slice | np.ndarray:
    """Where the ratings of ``users`` (increasing) lie among all ratings, user ``u``'s being
    ``offsets[u]:offsets[u + 1]``: a slice when they are consecutive users, else their
    indices."""
    if len(users) and users[-1] - users[0] == len(users) - 1:
        return slice(int(offsets[users[0]]), int(offsets[users[-1] + 1]))
    starts, stops = offsets[users], offsets[users + 1]
    lengths = stops - starts
    local = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    return np.repeat(starts - local, lengths) + np.arange(int(lengths.sum()))


def _unpacked(bits: np.ndarray, n: int) -> np.ndarray:
    return np.unpackbits(bits, count=n).astype(bool)

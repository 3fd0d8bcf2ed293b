"""The federated layout every algorithm and the engine work on.

All training ratings live in one CSR matrix whose rows (users) are grouped so that the users of
client ``c`` are the contiguous block ``client_ptr[c]:client_ptr[c+1]``. A client's ratings
are then ``indptr[client_ptr[c]]:indptr[client_ptr[c+1]]``: a batch of sampled clients is a
set of row blocks, which is what the batched kernels loop over without any Python loop.

In a real federation each client holds only its own block; the simulation keeps all blocks in
one array for speed, and only the client-side code of an algorithm ever reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import numba
import numpy as np

from fedmc.core.protocol import FederationInfo
from fedmc.core.scale import NormalizeKind, Normalizer, RatingScale, check_scale
from fedmc.core.shard import CSR, ItemMajor, item_major
from fedmc.core.small_data import SMALL, rows_by_counting
from fedmc.data.ratings import Ratings
from fedmc.errors import DataError


@dataclass(frozen=True, kw_only=True)
class ClientLayout:
    """The sizes and facts of a federation's data that every party knows before training:
    what :class:`FederatedData` and :class:`DataOutline` share.

    Attributes
    ----------
    client_ptr
        ``int64`` array of length ``n_clients + 1``: client ``c`` owns users
        ``client_ptr[c]:client_ptr[c+1]``.
    n_items
        Number of items (columns).
    user_index
        For every federated row, the user's dense index in the source ``Ratings``.
    user_ids
        For every federated row, the user's raw id (as in the source file).
    item_ids
        For every item column, its raw id: the item vocabulary a fitted model maps raw ids
        with.
    normalizer
        The map from original ratings to the normalized scale the algorithms train on.
    value_range
        Smallest and largest training rating (original scale), for clipping predictions.
    name
        The data set's name.
    """

    client_ptr: np.ndarray
    n_items: int
    user_index: np.ndarray
    user_ids: np.ndarray
    item_ids: np.ndarray
    normalizer: Normalizer
    value_range: tuple[float, float] = (-np.inf, np.inf)
    name: str = "ratings"

    @property
    def n_users(self) -> int:
        """Number of users over all clients."""
        return int(len(self.user_index))

    @property
    def n_clients(self) -> int:
        """Number of clients ``p``."""
        return int(len(self.client_ptr) - 1)

    def federation_info(self) -> FederationInfo:
        """The facts every party of this federation knows before training."""
        return FederationInfo(self.n_clients, self.n_items, self.normalizer, self.value_range,
                              self.client_ptr)


@dataclass(frozen=True, kw_only=True)
class DataOutline(ClientLayout):
    """What the driver of a population whose shards loaded their own ratings knows of the data
    (:mod:`fedmc.data.shard_source`): :class:`FederatedData`'s facts but the ratings, and
    their numbers. It has no validation cut."""

    n_train_ratings: int
    n_test_ratings: int
    validation: None = None


@dataclass(frozen=True, kw_only=True)
class FederatedData(ClientLayout):
    """Training and test ratings of ``n_clients`` clients in the batched layout
    (:class:`ClientLayout` for the facts every party knows).

    Attributes
    ----------
    train, test
        CSR matrices over users in federated order (see module docstring).
    validation
        The validation cut the clients keep back from their training ratings (a CSR like
        ``test``; ``--validation-fraction``), or None: what early stopping and tuning choose
        on, never the test ratings.
    """

    train: CSR
    test: CSR
    validation: CSR | None = None

    @property
    def n_train_ratings(self) -> int:
        """Number of training ratings."""
        return self.train.nnz

    @property
    def n_test_ratings(self) -> int:
        """Number of test ratings."""
        return self.test.nnz

    @property
    def client_rating_ptr(self) -> np.ndarray:
        """Client ``c``'s training ratings are ``ptr[c]:ptr[c+1]`` of ``train``."""
        return self.train.indptr[self.client_ptr]

    @cached_property
    def item_major(self) -> ItemMajor:
        """The training ratings regrouped by client and item (built once, on first use)."""
        return item_major(self.train, self.client_ptr, self.n_items)

    def client_of_row(self) -> np.ndarray:
        """Client of every federated row."""
        return np.repeat(np.arange(self.n_clients, dtype=np.int32), np.diff(self.client_ptr))

    def client_rows(self, client: int) -> slice:
        """The federated rows of ``client``'s users."""
        return slice(int(self.client_ptr[client]), int(self.client_ptr[client + 1]))

    def client_shard(self, client: int) -> FederatedData:
        """What ``client`` holds itself: its users' training and test ratings, as a federation
        of one client (the other clients' rows are not in it).

        The item indices and raw item ids, the normalizer and the rating range are shared
        set-up information.
        """
        return self.clients_shard(client, client + 1)

    def clients_shard(self, first: int, stop: int) -> FederatedData:
        """What the clients ``first`` to ``stop - 1`` hold, as a federation of those clients
        (:meth:`client_shard` of each, together: a shard of a sharded simulation)."""
        rows = slice(int(self.client_ptr[first]), int(self.client_ptr[stop]))
        return FederatedData(
            train=self.train.row_block(rows),
            test=self.test.row_block(rows),
            client_ptr=self.client_ptr[first:stop + 1] - self.client_ptr[first],
            n_items=self.n_items,
            user_index=self.user_index[rows],
            user_ids=self.user_ids[rows],
            item_ids=self.item_ids,
            normalizer=self.normalizer,
            value_range=self.value_range,
            name=self.name,
            validation=None if self.validation is None else self.validation.row_block(rows),
        )

    @cached_property
    def known_items(self) -> CSR:
        """Every row's training and validation items (:meth:`every_training_rating`'s rows): a
        user's history, which its test lists leave out as its validation lists leave out its
        training items alone (so that no validation list depends on a test item). Built once,
        on first use."""
        return self.every_training_rating().train

    def every_training_rating(self) -> FederatedData:
        """The same clients with their validation cut put back among their training ratings
        (each row's ratings in item order) and no cut: the data of a model trained on every
        training rating, as loaded without a cut. A normalizer fitted on the training values
        (``center``, ``zscore``) is fitted again on all of them, and the rating range spans
        them all."""
        if self.validation is None:
            return self
        a, b = self.train, self.validation
        rows = np.concatenate([a.rows(), b.rows()])
        items = np.concatenate([a.indices, b.indices])
        order = np.lexsort((items, rows))
        old = self.normalizer
        values = np.concatenate([a.values, b.values])[order]
        cut = old.inverse(b.values)
        lo, hi = self.value_range
        value_range = (min(lo, float(cut.min(initial=lo))), max(hi, float(cut.max(initial=hi))))
        train = CSR(a.indptr + b.indptr, items[order], values)
        merged = replace(self, train=train, validation=None, value_range=value_range)
        if old.kind in ("none", "public"):  # a map no rating enters: the values stand
            return merged
        ratings = old.inverse(values)
        norm = Normalizer.fit(ratings, old.kind)
        return replace(merged, normalizer=norm,
                       train=train._replace(values=norm.transform(ratings)),
                       test=self.test._replace(values=norm.transform(old.inverse(
                           self.test.values))))

    def validation_shard(self) -> FederatedData:
        """The same clients with their validation cut in the place of their test ratings:
        what an evaluation on the validation cut reads (:mod:`fedmc.federation.validation`)."""
        if self.validation is None:
            raise DataError("these data have no validation cut (`validation_fraction`)")
        return replace(self, test=self.validation, validation=None)

    @classmethod
    def build(
        cls,
        train: Ratings,
        test: Ratings,
        client_of_user: np.ndarray,
        normalizer: Normalizer | None = None,
    ) -> FederatedData:
        """Group users by client and build the CSR matrices.

        Parameters
        ----------
        train, test
            A split of one ``Ratings`` (same shape).
        client_of_user
            Client of every user (from :func:`fedmc.data.partition.partition_users`).
        normalizer
            Fitted on the training values; identity when omitted.
        """
        if train.shape != test.shape:
            raise DataError(f"train shape {train.shape} differs from test shape {test.shape}")
        rows = FederatedRows(client_of_user, train.n_users)
        normalizer = normalizer or Normalizer()
        everything = np.zeros(0, dtype=np.bool_)
        return rows.assemble(
            _csr(train, everything, True, rows.row_of_user, normalizer),
            _csr(test, everything, True, rows.row_of_user, normalizer),
            train, normalizer, _value_range(train.values),
        )

    @classmethod
    def from_split(
        cls,
        ratings: Ratings,
        is_test: np.ndarray,
        client_of_user: np.ndarray,
        normalize: NormalizeKind = "none",
        scale: RatingScale | None = None,
        *,
        is_validation: np.ndarray | None = None,
    ) -> FederatedData:
        """:meth:`build` from all ratings and the test mask of a split, with the normalizer
        fitted on the training values.

        A public rating ``scale`` (every rating must lie in it) is the rating range, instead
        of the smallest and largest training rating; ``normalize="public"`` needs one and
        reads no rating (:meth:`Normalizer.public`). ``is_validation`` marks the training
        ratings kept back as the validation cut: they are neither trained on nor seen by the
        normalizer.

        No train and test copies of the ratings are made: the two CSR matrices are built
        straight from ``ratings``, so the peak memory is the ratings plus the CSRs (a third
        less than copying first on MovieLens- or Netflix-sized sets).
        """
        rows = FederatedRows(client_of_user, ratings.n_users)
        if scale is not None:
            scale = check_scale(scale)
            _check_in_scale(ratings, scale)
        held = is_test if is_validation is None else is_test | is_validation
        train_values = ratings.values[~held]
        normalizer = Normalizer.fit(train_values, normalize, scale)
        value_range = scale if scale is not None else _value_range(train_values)
        del train_values
        data = rows.assemble(
            _csr(ratings, held, False, rows.row_of_user, normalizer),
            _csr(ratings, is_test, True, rows.row_of_user, normalizer),
            ratings, normalizer, value_range,
        )
        if is_validation is None:
            return data
        return replace(data, validation=_csr(ratings, is_validation, True, rows.row_of_user,
                                             normalizer))


def _check_in_scale(ratings: Ratings, scale: RatingScale) -> None:
    """Every rating lies in the declared scale, else a one-line :class:`DataError`."""
    if ratings.n_ratings == 0:
        return
    lo, hi = float(ratings.values.min()), float(ratings.values.max())
    if lo < scale[0] or hi > scale[1]:
        raise DataError(f"{ratings.name}: ratings range over [{lo:g}, {hi:g}], outside the "
                        f"rating scale {scale[0]:g},{scale[1]:g}")


def _value_range(train_values: np.ndarray) -> tuple[float, float]:
    """Smallest and largest training rating, or the whole line when there is none."""
    if len(train_values) == 0:
        return (-np.inf, np.inf)
    return (float(train_values.min()), float(train_values.max()))


class FederatedRows:
    """The federated row order of a partition: users grouped by client (stable)."""

    def __init__(self, client_of_user: np.ndarray, n_users: int) -> None:
        client_of_user = np.asarray(client_of_user)
        if len(client_of_user) != n_users:
            raise DataError(
                f"partition covers {len(client_of_user)} users, the data has {n_users}"
            )
        n_clients = int(client_of_user.max()) + 1 if len(client_of_user) else 0
        # stable order: by client, then by user index
        self.user_index = np.lexsort((np.arange(n_users), client_of_user)).astype(np.int64)
        self.row_of_user = np.empty(n_users, dtype=np.int64)
        self.row_of_user[self.user_index] = np.arange(n_users)
        counts = np.bincount(client_of_user, minlength=n_clients)
        if np.any(counts == 0):
            raise DataError(f"client {int(np.flatnonzero(counts == 0)[0])} has no user")
        self.client_ptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)

    def assemble(self, train: CSR, test: CSR, source: Ratings, normalizer: Normalizer,
                 value_range: tuple[float, float]) -> FederatedData:
        return FederatedData(
            train=train,
            test=test,
            client_ptr=self.client_ptr,
            n_items=source.n_items,
            user_index=self.user_index,
            user_ids=_raw_ids(source.user_ids, source.n_users)[self.user_index],
            item_ids=_raw_ids(source.item_ids, source.n_items),
            normalizer=normalizer,
            value_range=value_range,
            name=source.name,
        )


def _raw_ids(ids: np.ndarray | None, n: int) -> np.ndarray:
    """The raw ids of a vocabulary of ``n``; ratings built from dense indices alone (no raw
    ids) use the indices as ids."""
    return np.arange(n, dtype=np.int64) if ids is None else np.asarray(ids)


def _csr(r: Ratings, mask: np.ndarray, want: bool, row_of_user: np.ndarray,
         normalizer: Normalizer) -> CSR:
    """The ratings of ``r`` whose ``mask`` entry is ``want`` (all when ``mask`` is empty)."""
    layout = rows_by_counting if len(r.users) <= SMALL else _counting_sort
    indptr, indices, values = layout(r.users, r.items, r.values, mask, want, row_of_user,
                                     normalizer.mean, normalizer.scale)
    return CSR(indptr=indptr, indices=indices, values=values)


@numba.njit(nogil=True, cache=True)
def _counting_sort(users, items, values, mask, want, row_of_user, mean, scale):
    """CSR rows ``row_of_user[users]`` in one counting-sort pass (stable within a row), of the
    ratings ``q`` with ``mask[q] == want`` (all of them when ``mask`` is empty).

    Values are normalized on the way (``(v - mean) / scale``). No full-size index array is
    built, so memory stays at the output's size even for 100M ratings.
    """
    n_rows = row_of_user.shape[0]
    every = mask.shape[0] == 0
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    for q in range(users.shape[0]):
        if every or mask[q] == want:
            indptr[row_of_user[users[q]] + 1] += 1
    for t in range(n_rows):
        indptr[t + 1] += indptr[t]
    fill = indptr[:-1].copy()
    out_items = np.empty(indptr[n_rows], dtype=np.int32)
    out_values = np.empty(indptr[n_rows], dtype=np.float64)
    for q in range(users.shape[0]):
        if not (every or mask[q] == want):
            continue
        t = row_of_user[users[q]]
        k = fill[t]
        out_items[k] = items[q]
        out_values[k] = (values[q] - mean) / scale
        fill[t] = k + 1
    return indptr, out_items, out_values

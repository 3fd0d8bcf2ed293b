"""The uncompiled paths of small data (a first run compiles less) build what the
compiled kernels build, bit for bit: the synthetic generator's draws
(:mod:`fedmc.data.synthetic_arrays`) and the two layouts (:mod:`fedmc.core.small_data`)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedmc.core import small_data
from fedmc.core.shard import _item_major
from fedmc.data import synthetic_arrays
from fedmc.data.federated import _counting_sort
from fedmc.data.synthetic import checked_plan, synthetic_ratings

SHAPES = [
    {"n_users": 3_000, "n_items": 1_500, "n_ratings": 200_000},  # the offline default's
    {"n_users": 123, "n_items": 45, "n_ratings": 2_345, "seed": 7},
    {"n_users": 50, "n_items": 40, "n_ratings": 1_500, "seed": 2, "user_exponent": 0.6},
    {"n_users": 600, "n_items": 300, "n_ratings": 30_000, "seed": 11, "noise": 0.0},
]


@pytest.mark.parametrize("shape", SHAPES)
def test_the_uncompiled_generator_draws_what_the_kernel_draws(shape, monkeypatch):
    calls = []
    clocks = synthetic_arrays._by_clocks
    monkeypatch.setattr(synthetic_arrays, "_by_clocks",
                        lambda *args: calls.append(1) or clocks(*args))
    mine = synthetic_ratings(**shape)
    assert calls, "no user heavy enough for the clocks: both schemes should be drawn"
    monkeypatch.setattr(synthetic_arrays, "MAX_CELLS", 0)  # the compiled kernel
    kernel = synthetic_ratings(**shape)
    for name in ("users", "items", "values"):
        a, b = getattr(mine, name), getattr(kernel, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name


def test_the_uncompiled_generator_draws_any_users_as_the_kernel_does(monkeypatch):
    """A subset of the users (a shard's, :mod:`fedmc.data.shard_source`): their rows of the
    whole set, numbered in the order given, by either path."""
    plan = checked_plan(**SHAPES[2])
    users = np.array([0, 3, 4, 17, 30, 49])
    mine = plan.ratings(users)
    monkeypatch.setattr(synthetic_arrays, "MAX_CELLS", 0)  # the compiled kernel
    kernel = plan.ratings(users)
    whole = plan.ratings()
    rows = np.isin(whole.users, users)
    for name in ("users", "items", "values"):
        a, b = getattr(mine, name), getattr(kernel, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    assert np.array_equal(mine.items, whole.items[rows])
    assert np.array_equal(mine.values, whole.values[rows])
    assert np.array_equal(users[mine.users], whole.users[rows])


def _both(ratings, mask, want, row_of_user, mean, scale):
    args = (ratings.users, ratings.items, ratings.values, mask, want, row_of_user, mean, scale)
    return small_data.rows_by_counting(*args), _counting_sort(*args)


def _same(mine, kernel):
    assert len(mine) == len(kernel)
    for a, b in zip(mine, kernel, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 30), st.integers(1, 20), st.integers(0, 3), st.booleans(),
       st.integers(0, 2**31))
def test_the_uncompiled_layouts_equal_the_kernels(n_users, n_items, n_clients, masked, seed):
    rng = np.random.default_rng(seed)
    cells = rng.choice(n_users * n_items, size=rng.integers(0, n_users * n_items + 1),
                       replace=False)
    order = rng.permutation(len(cells))  # ratings in any order
    users = (cells[order] // n_items).astype(np.int32)
    items = (cells[order] % n_items).astype(np.int32)
    values = rng.integers(1, 6, len(cells)).astype(np.float64)
    mask = rng.random(len(cells)) < 0.3 if masked else np.zeros(0, dtype=bool)
    row_of_user = rng.permutation(n_users).astype(np.int64)
    ratings = type("R", (), {"users": users, "items": items, "values": values})
    for want in (True, False):
        mine, kernel = _both(ratings, mask, want, row_of_user, 3.0, 1.5)
        _same(mine, kernel)
    indptr, indices, vals = kernel
    cuts = np.sort(rng.choice(np.arange(1, n_users), size=min(n_clients, n_users - 1),
                              replace=False))
    client_ptr = np.concatenate([[0], cuts, [n_users]]).astype(np.int64)
    _same(small_data.by_client_and_item(indptr, indices, vals, client_ptr, n_items),
          _item_major(indptr, indices, vals, client_ptr, n_items))


def test_the_default_data_take_the_uncompiled_layouts(monkeypatch):
    """The offline default's layouts, then the same built by the kernels."""
    from fedmc.run.data import DataSettings, federated_data

    mine = federated_data(DataSettings())[0]
    monkeypatch.setattr(small_data, "SMALL", 0)
    import fedmc.core.shard as shard
    import fedmc.data.federated as federated

    monkeypatch.setattr(shard, "SMALL", 0)
    monkeypatch.setattr(federated, "SMALL", 0)
    kernel = federated_data(DataSettings())[0]
    for part in ("train", "test"):
        _same(tuple(getattr(mine, part)), tuple(getattr(kernel, part)))
    _same(tuple(mine.item_major), tuple(kernel.item_major))

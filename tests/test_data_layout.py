"""Split, partition, normalization and the federated CSR layout."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedmc.data import (
    FederatedData,
    Normalizer,
    Ratings,
    partition_users,
    random_split,
    user_holdout_split,
)
from fedmc.errors import ConfigError


def random_ratings(m=30, n=20, nnz=200, seed=0) -> Ratings:
    rng = np.random.default_rng(seed)
    flat = rng.choice(m * n, size=nnz, replace=False)
    return Ratings(users=(flat // n).astype(np.int32), items=(flat % n).astype(np.int32),
                   values=rng.integers(1, 6, nnz).astype(float), n_users=m, n_items=n)


@settings(max_examples=50, deadline=None)
@given(n_users=st.integers(1, 300), data=st.data(),
       kind=st.sampled_from(["random", "contiguous", "powerlaw"]))
def test_partition_keeps_every_user(n_users, data, kind):
    p = data.draw(st.integers(1, n_users))
    client = partition_users(n_users, p, kind, seed=1)
    sizes = np.bincount(client, minlength=p)
    assert len(client) == n_users and sizes.sum() == n_users and sizes.min() >= 1
    if kind != "powerlaw":
        assert sizes.max() - sizes.min() <= 1


def test_partition_kinds():
    assert np.array_equal(partition_users(5, 2, "contiguous"), [0, 0, 0, 1, 1])
    assert np.array_equal(partition_users(4, 99, "user"), [0, 1, 2, 3])
    sizes = np.bincount(partition_users(1000, 10, "powerlaw", seed=0))
    assert sizes[0] > 5 * sizes[-1]
    with pytest.raises(ConfigError, match="only 3 users"):
        partition_users(3, 4)


def test_random_split_is_exact_and_seeded():
    r = random_ratings()
    tr, te = random_split(r, 0.2, seed=5)
    assert te.n_ratings == 40 and tr.n_ratings == 160
    pairs = set(zip(tr.users, tr.items, strict=True)) | set(zip(te.users, te.items, strict=True))
    assert len(pairs) == 200
    tr2, _ = random_split(r, 0.2, seed=5)
    tr3, _ = random_split(r, 0.2, seed=6)
    assert np.array_equal(tr.values, tr2.values)
    assert not np.array_equal(tr.users, tr3.users) or not np.array_equal(tr.items, tr3.items)


def test_user_holdout_keeps_a_training_rating_per_user():
    r = random_ratings()
    tr, te = user_holdout_split(r, 0.5, seed=0)
    assert tr.n_ratings + te.n_ratings == r.n_ratings
    have = np.bincount(r.users, minlength=r.n_users) > 0
    train_deg = np.bincount(tr.users, minlength=r.n_users)
    assert np.all(train_deg[have] >= 1)
    assert np.all(np.bincount(te.users, minlength=r.n_users) <= np.floor(
        0.5 * np.bincount(r.users, minlength=r.n_users)))


def test_normalizer_round_trip_and_fit_on_train_only():
    v = np.array([1.0, 2.0, 3.0, 5.0])
    for kind in ("none", "center", "zscore"):
        nm = Normalizer.fit(v, kind)
        assert np.allclose(nm.inverse(nm.transform(v)), v)
    z = Normalizer.fit(v, "zscore").transform(v)
    assert z.mean() == pytest.approx(0) and z.std() == pytest.approx(1)


def test_federated_layout_holds_exactly_the_ratings():
    r = random_ratings()
    tr, te = random_split(r, 0.25, seed=0)
    client = partition_users(r.n_users, 4, "random", seed=3)
    norm = Normalizer.fit(tr.values, "zscore")
    fd = FederatedData.build(tr, te, client, norm)
    assert fd.n_clients == 4 and fd.n_users == r.n_users
    rows = fd.train.rows()
    users = fd.user_index[rows]
    got = sorted(zip(users, fd.train.indices, norm.inverse(fd.train.values), strict=True))
    want = sorted(zip(tr.users, tr.items, tr.values, strict=True))
    assert [(a, b) for a, b, _ in got] == [(a, b) for a, b, _ in want]
    assert np.allclose([c for *_, c in got], [c for *_, c in want])
    # each client's users are one contiguous block
    assert np.array_equal(client[fd.user_index], fd.client_of_row())
    assert fd.value_range == (tr.values.min(), tr.values.max())


def test_item_major_regroups_each_clients_ratings_by_item():
    r = random_ratings(m=40, n=15, nnz=300, seed=2)
    client = partition_users(r.n_users, 5, "random", seed=1)
    fd = FederatedData.build(r, r.subset(np.arange(3)), client, Normalizer())
    im = fd.item_major
    rows = fd.train.rows()
    for c in range(fd.n_clients):
        q0, q1 = fd.client_rating_ptr[c], fd.client_rating_ptr[c + 1]
        want = sorted(zip(fd.train.indices[q0:q1], rows[q0:q1], fd.train.values[q0:q1],
                          strict=True))
        got = []
        groups = range(im.client_ptr[c], im.client_ptr[c + 1])
        assert list(im.item[list(groups)]) == sorted(set(fd.train.indices[q0:q1]))
        for g in groups:
            for q in range(im.ptr[g], im.ptr[g + 1]):
                got.append((im.item[g], im.row[q], im.values[q]))
        assert got == want

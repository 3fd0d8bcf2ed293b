"""The synthetic generator: exact shape, no duplicates, determinism, degree and value
distributions, and a low-rank signal that a rank-5 factorization can learn."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from fedmc.data.ratings import Ratings
from fedmc.data.split import random_split
from fedmc.data.synthetic import (
    _GOLDEN,
    PRESETS,
    _alias_table,
    _max_rejection_degree,
    _mix64,
    _sample_clocks,
    _sample_rejection,
    _user_degrees,
    synthetic_dataset,
    synthetic_ratings,
)
from fedmc.errors import ConfigError, DataError

# Netflix's shape scaled down 100x in users and 10x in items: the same code path as the
# "synthetic-netflix" preset (both sampling schemes are used), in a fraction of a second.
SMALL_NETFLIX = {"n_users": 4_802, "n_items": 1_777, "n_ratings": 1_004_805, "min_user_ratings": 20}


@pytest.fixture(scope="module")
def preset() -> Ratings:
    return synthetic_dataset("synthetic")


@pytest.fixture(scope="module")
def small_netflix() -> Ratings:
    return synthetic_ratings(**SMALL_NETFLIX, seed=3)


def pair_keys(r: Ratings) -> np.ndarray:
    return r.users.astype(np.int64) * r.n_items + r.items


def test_mix64_is_splitmix64():
    # the first output of the reference SplitMix64 generator seeded with 0
    assert int(_mix64(_GOLDEN)) == 0xE220A8397B1DCDAF


def test_preset_shapes(preset):
    assert (preset.n_users, preset.n_items, preset.n_ratings) == (3_000, 1_500, 200_000)
    assert preset.name == "synthetic"
    assert preset.users.dtype == np.int32 and preset.items.dtype == np.int32
    assert preset.values.dtype == np.float64
    np.testing.assert_array_equal(preset.user_ids, np.arange(1, 3_001))
    np.testing.assert_array_equal(preset.item_ids, np.arange(1, 1_501))
    netflix = PRESETS["synthetic-netflix"]
    assert (netflix["n_users"], netflix["n_items"], netflix["n_ratings"]) == (
        480_189,
        17_770,
        100_480_507,
    )


def test_unknown_name_lists_presets():
    with pytest.raises(DataError, match="synthetic, synthetic-ml20m, synthetic-netflix, "
                                        "synthetic-netflix-3x"):
        synthetic_dataset("netflix")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"n_users": 10, "n_items": 10, "n_ratings": 101},  # more than n_users * 0.9 n_items
        {"n_users": 10, "n_items": 10, "n_ratings": 30, "min_user_ratings": 4},
        {"n_users": 10, "n_items": 10, "n_ratings": 50, "rank": 0},
        {"n_users": 10, "n_items": 10, "n_ratings": 50, "noise": -1.0},
        {"n_users": 10, "n_items": 10, "n_ratings": 50, "max_user_fraction": 0.0},
        {"n_users": 10, "n_items": 10_000, "n_ratings": 50, "item_exponent": 1e3},
    ],
)
def test_bad_settings_raise(kwargs):
    with pytest.raises(ConfigError):
        synthetic_ratings(**kwargs)


def test_same_seed_same_arrays_different_seed_differs(small_netflix):
    again = synthetic_ratings(**SMALL_NETFLIX, seed=3)
    for name in ("users", "items", "values"):
        np.testing.assert_array_equal(getattr(again, name), getattr(small_netflix, name))
    other = synthetic_ratings(**SMALL_NETFLIX, seed=4)
    assert not np.array_equal(other.items, small_netflix.items)
    assert not np.array_equal(other.values, small_netflix.values)


def test_bit_identical_whatever_the_number_of_threads(small_netflix, monkeypatch):
    monkeypatch.setenv("NUMBA_NUM_THREADS", "1")  # fedmc.core.parallel reads it per call
    single = synthetic_ratings(**SMALL_NETFLIX, seed=3)
    np.testing.assert_array_equal(single.items, small_netflix.items)
    np.testing.assert_array_equal(single.values, small_netflix.values)


@pytest.mark.parametrize(
    ("which", "n_ratings"), [("preset", 200_000), ("small_netflix", 1_004_805)]
)
def test_exact_count_no_duplicates_sorted(which, n_ratings, request):
    r = request.getfixturevalue(which)
    assert r.n_ratings == n_ratings
    assert np.all(np.diff(pair_keys(r)) > 0)  # sorted by (user, item), hence no pair twice


def test_exact_count_for_odd_sizes():
    r = synthetic_ratings(123, 45, 2_345, seed=7)
    assert r.n_ratings == 2_345
    assert len(np.unique(pair_keys(r))) == 2_345


def test_degrees_respect_bounds(small_netflix):
    degrees = np.bincount(small_netflix.users, minlength=small_netflix.n_users)
    assert degrees.sum() == SMALL_NETFLIX["n_ratings"]
    assert degrees.min() >= 20
    assert degrees.max() <= int(0.9 * SMALL_NETFLIX["n_items"])
    # some users are heavy enough for the exponential-clock scheme
    weights = (np.arange(1, 1_778) + 0.025 * 1_777) ** -2.0
    assert degrees.max() > _max_rejection_degree(weights)


@pytest.mark.parametrize("which", ["preset", "small_netflix"])
def test_degrees_are_heavy_tailed(which, request):
    r = request.getfixturevalue(which)
    user_degrees = np.bincount(r.users, minlength=r.n_users)
    item_degrees = np.bincount(r.items, minlength=r.n_items)
    assert user_degrees.max() >= 10 * np.median(user_degrees)
    assert item_degrees.max() >= 10 * np.median(item_degrees)
    # most users are light: the median is well below the mean
    assert np.median(user_degrees) < 0.7 * user_degrees.mean()


def test_values_look_like_movielens(preset):
    v = preset.values
    assert set(np.unique(v)) == {1.0, 2.0, 3.0, 4.0, 5.0}
    assert 3.45 <= v.mean() <= 3.7
    assert 1.0 <= v.std() <= 1.2
    share = np.bincount(v.astype(np.int64), minlength=6)[1:] / len(v)
    assert share[3] == share.max()  # 4 stars is the most common rating
    assert share[0] < share[1] < share[2]


def als_rmse(train: Ratings, test: Ratings, rank: int = 5, reg: float = 5.0) -> float:
    """Test RMSE of a biased rank-``rank`` factorization fitted by 12 sweeps of ALS."""
    mu = train.values.mean()
    n = train.n_ratings
    k1 = rank + 1

    def solve(rows, cols, n_rows, other, other_bias):
        # least squares for [factors, bias] of each row, with the other side fixed
        features = np.hstack([other, np.ones((len(other), 1))])[cols]
        target = train.values - mu - other_bias[cols]
        sums = sp.csr_matrix((np.ones(n), (rows, np.arange(n))), shape=(n_rows, n))
        gram = sums @ (features[:, :, None] * features[:, None, :]).reshape(n, -1)
        gram = gram.reshape(n_rows, k1, k1) + reg * np.eye(k1)
        w = np.linalg.solve(gram, (sums @ (features * target[:, None]))[..., None])[..., 0]
        return w[:, :rank], w[:, rank]

    q = np.random.default_rng(0).normal(0.0, 0.1, (train.n_items, rank))
    item_bias = np.zeros(train.n_items)
    for _ in range(12):
        p, user_bias = solve(train.users, train.items, train.n_users, q, item_bias)
        q, item_bias = solve(train.items, train.users, train.n_items, p, user_bias)
    u, i = test.users, test.items
    pred = mu + user_bias[u] + item_bias[i] + np.sum(p[u] * q[i], axis=1)
    return float(np.sqrt(np.mean((np.clip(pred, 1, 5) - test.values) ** 2)))


def test_low_rank_signal_is_learnable():
    r = synthetic_ratings(600, 300, 30_000, seed=11)
    train, test = random_split(r, 0.1, seed=1)
    mean_rmse = float(np.sqrt(np.mean((train.values.mean() - test.values) ** 2)))
    model_rmse = als_rmse(train, test)
    assert 0.95 < mean_rmse < 1.2
    assert model_rmse < 0.85 * mean_rmse
    # ... but not beyond the noise (0.8 plus rounding)
    assert model_rmse > 0.75


def test_noise_free_data_is_much_easier():
    kwargs = {"n_users": 600, "n_items": 300, "n_ratings": 30_000, "seed": 11}
    train, test = random_split(synthetic_ratings(**kwargs, noise=0.0), 0.1, seed=1)
    assert als_rmse(train, test) < 0.6


def test_sampling_schemes_agree_in_distribution():
    # inclusion frequencies of rejection sampling and exponential clocks, 20 items choose 5
    weights = (np.arange(1, 21) + 0.5) ** -1.5
    prob, alias = _alias_table(weights)
    mark = np.zeros(20, dtype=np.uint8)
    clocks = np.empty(20)
    out = np.empty(5, dtype=np.int32)
    reps = 10_000
    by_rejection = np.zeros(20)
    by_clocks = np.zeros(20)
    for rep in range(reps):
        state = np.uint64(_mix64(np.uint64(rep)))
        _sample_rejection(state, 5, prob, alias, mark, out)
        assert np.all(np.diff(out) > 0)
        by_rejection[out] += 1
        _sample_clocks(state, 5, weights, clocks, out)
        assert np.all(np.diff(out) > 0)
        by_clocks[out] += 1
    assert not mark.any()
    np.testing.assert_allclose(by_rejection / reps, by_clocks / reps, atol=0.03)
    assert by_rejection[0] > 3 * by_rejection[-1]  # popular items are chosen more often


def test_alias_table_reproduces_weights():
    weights = np.array([5.0, 1.0, 0.0, 2.0, 0.5])
    prob, alias = _alias_table(weights)
    implied = prob.copy()
    np.add.at(implied, alias, 1.0 - prob)
    np.testing.assert_allclose(implied / len(weights), weights / weights.sum())


@settings(max_examples=60, deadline=None)
@given(
    x=st.lists(st.floats(0.0, 1e6), min_size=1, max_size=40),
    min_degree=st.integers(1, 5),
    extra_cap=st.integers(0, 50),
    fill=st.floats(0.0, 1.0),
)
def test_user_degrees_sum_exactly_within_bounds(x, min_degree, extra_cap, fill):
    n = len(x)
    max_degree = min_degree + extra_cap
    n_ratings = n * min_degree + int(round(fill * n * extra_cap))
    degrees = _user_degrees(np.array(x) + 1e-9, n_ratings, min_degree, max_degree)
    assert degrees.sum() == n_ratings
    assert degrees.min() >= min_degree
    assert degrees.max() <= max_degree


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.5, 3.0]) | st.floats(0, 10), min_size=1,
                max_size=60), st.data())
def test_kth_smallest_matches_sorting(values, data):
    from fedmc.data.synthetic import _kth_smallest

    a = np.array(values)
    k = data.draw(st.integers(0, len(a) - 1))
    assert _kth_smallest(a.copy(), k) == np.sort(a)[k]

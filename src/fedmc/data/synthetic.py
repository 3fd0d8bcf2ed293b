"""Synthetic star ratings with heavy-tailed degrees and a low-rank signal.

The generator imitates the shape of MovieLens and Netflix data without downloading them:

* **User degrees** (ratings per user) are ``min_user_ratings`` plus an extra drawn from a
  Pareto (Lomax) law, ``P(extra > t) = (1 + t / scale) ** -user_exponent`` (a few users rate
  thousands of items, most rate tens), capped at ``max_user_fraction * n_items``, with the
  scale chosen so that the degrees add up to exactly ``n_ratings``.
* **Item popularity** follows a Zipf-Mandelbrot law: the item of popularity rank ``r``
  (``r = 1..n_items``, ranks assigned to items at random) has weight
  ``(r + item_offset * n_items) ** -item_exponent``. The offset gives a flat head, so the
  blockbuster items hold a fraction of a percent of all ratings, as in the real data.
* Each user rates ``d_u`` **distinct** items drawn by popularity without replacement
  (successive sampling): rejection sampling from a Walker alias table, or, for users so heavy
  that rejection could be slow, the equivalent exponential-clock (Gumbel-top-``k``) scheme.
* **Values**: ``clip(round(mean + b_u + c_j + x_u . y_j + noise * e_uj), 1, 5)`` with user and
  item biases ``b_u, c_j``, rank-``rank`` factors ``x_u, y_j`` and standard normal ``e_uj``.

Randomness inside the Numba kernels comes from a counter-based hash (the SplitMix64
finalizer) keyed by the seed, the user and the item, so the output is bit-identical for a
seed whatever the number of threads. Ratings come out sorted by user, then item. Data of at
most :data:`fedmc.core.small_data.SMALL` ratings (the offline default's) are drawn from the
same streams in NumPy (:mod:`fedmc.data.synthetic_arrays`): the same ratings without compiling
the kernel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

from fedmc.core.kernels import heap_sort
from fedmc.core.parallel import parallel_for
from fedmc.core.small_data import SMALL
from fedmc.data import synthetic_arrays
from fedmc.data.ratings import Ratings
from fedmc.data.synthetic_arrays import GOLDEN as _GOLDEN
from fedmc.data.synthetic_arrays import ITEM_MUL as _ITEM_MUL
from fedmc.data.synthetic_arrays import LOW32 as _LOW32
from fedmc.data.synthetic_arrays import MUL1 as _MUL1
from fedmc.data.synthetic_arrays import MUL2 as _MUL2
from fedmc.errors import ConfigError, DataError

#: Standard deviation of the user biases ``b_u``.
USER_BIAS_STD = 0.4
#: Standard deviation of the item biases ``c_j``.
ITEM_BIAS_STD = 0.5
#: Variance of the interaction ``x_u . y_j`` (whatever the rank).
INTERACTION_VAR = 0.35

#: Shapes and degree settings of the named presets (see :func:`synthetic_dataset`).
PRESETS: dict[str, dict] = {
    "synthetic": {
        "n_users": 3_000,
        "n_items": 1_500,
        "n_ratings": 200_000,
        "min_user_ratings": 10,
    },
    "synthetic-netflix": {
        "n_users": 480_189,
        "n_items": 17_770,
        "n_ratings": 100_480_507,
        "min_user_ratings": 20,
    },
    "synthetic-netflix-3x": {
        "n_users": 3 * 480_189,
        "n_items": 17_770,
        "n_ratings": 3 * 100_480_507,
        "min_user_ratings": 20,
    },
    "synthetic-ml20m": {
        "n_users": 138_493,
        "n_items": 26_744,
        "n_ratings": 20_000_263,
        "min_user_ratings": 20,
    },
}

# A user rates by rejection sampling unless the expected number of draws could exceed
# ``_CLOCK_COST * n_items``; then exponential clocks over all items are cheaper (one clock
# costs about as much as ``_CLOCK_COST`` draws).
_CLOCK_COST = 8
# Rejection sampling lists the chosen items by scanning all items when
# ``_SCAN_DIVISOR * d_u >= n_items``, and by sorting them otherwise.
_SCAN_DIVISOR = 8
# Work units (chunks of users with about equal numbers of ratings) per kernel call.
_N_CHUNKS = 256

_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_S32 = np.uint64(32)
_S11 = np.uint64(11)
_TWO_M53 = 2.0**-53
_TWO_M32 = 2.0**-32


@njit(nogil=True, cache=True)
def _mix64(z: np.uint64) -> np.uint64:
    """SplitMix64 finalizer: a bijective 64-bit hash with full avalanche."""
    z = (z ^ (z >> _S30)) * _MUL1
    z = (z ^ (z >> _S27)) * _MUL2
    return z ^ (z >> _S31)


@njit(nogil=True, cache=True)
def _user_key(key: np.uint64, u: int) -> np.uint64:
    """The starting state of user ``u``'s random stream under ``key``."""
    return _mix64(key ^ _mix64(np.uint64(u) * _GOLDEN + _GOLDEN))


@njit(nogil=True, cache=True)
def _alias_draw(z: np.uint64, prob: np.ndarray, alias: np.ndarray) -> int:
    """An index from a Walker alias table, using the two 32-bit halves of ``z``."""
    n = np.uint64(prob.shape[0])
    j = np.int64(((z >> _S32) * n) >> _S32)
    if (z & _LOW32) * _TWO_M32 < prob[j]:
        return int(j)
    return alias[j]


@njit(nogil=True, cache=True)
def _sample_rejection(
    state: np.uint64,
    d: int,
    prob: np.ndarray,
    alias: np.ndarray,
    mark: np.ndarray,
    out: np.ndarray,
) -> None:
    """Write ``d`` distinct items drawn by weight without replacement into ``out``, sorted.

    ``mark`` must be all zero on entry and is all zero again on return.
    """
    count = 0
    while count < d:
        state += _GOLDEN
        j = _alias_draw(_mix64(state), prob, alias)
        if mark[j] == 0:
            mark[j] = 1
            out[count] = j
            count += 1
    n_items = mark.shape[0]
    if d * _SCAN_DIVISOR >= n_items:
        count = 0
        for j in range(n_items):
            if mark[j]:
                mark[j] = 0
                out[count] = j
                count += 1
    else:
        for k in range(d):
            mark[out[k]] = 0
        heap_sort(out)


@njit(nogil=True, cache=True)
def _sample_clocks(
    state: np.uint64, d: int, weights: np.ndarray, clocks: np.ndarray, out: np.ndarray
) -> None:
    """Write the ``d`` items with the earliest exponential clocks ``E_j / w_j`` into ``out``.

    This is the same distribution as successive sampling without replacement. Items come out
    sorted; exact ties at the ``d``-th clock go to the lowest indices.
    """
    n_items = weights.shape[0]
    for j in range(n_items):
        state += _GOLDEN
        uniform = ((_mix64(state) >> _S11) + np.uint64(1)) * _TWO_M53  # in (0, 1]
        clocks[j] = -math.log(uniform) / weights[j]
    threshold = _kth_smallest(clocks.copy(), d - 1)
    ties = d  # how many items with clock == threshold to take: d minus the earlier ones
    for j in range(n_items):
        if clocks[j] < threshold:
            ties -= 1
    count = 0
    for j in range(n_items):
        if clocks[j] < threshold or (clocks[j] == threshold and ties > 0):
            if clocks[j] == threshold:
                ties -= 1
            out[count] = j
            count += 1


@njit(nogil=True, cache=True)
def _kth_smallest(a: np.ndarray, k: int) -> float:
    """The ``k``-th smallest entry (0-based) of ``a``, reordering ``a`` (quickselect).

    Written out because Numba's ``np.partition`` takes several seconds to compile, which a
    first ``fedmc run`` would pay.
    """
    lo = 0
    hi = a.shape[0] - 1
    while lo < hi:
        pivot = a[(lo + hi) // 2]
        i = lo
        j = hi
        while i <= j:
            while a[i] < pivot:
                i += 1
            while a[j] > pivot:
                j -= 1
            if i <= j:
                a[i], a[j] = a[j], a[i]
                i += 1
                j -= 1
        if k <= j:
            hi = j
        elif k >= i:
            lo = i
        else:
            return a[k]
    return a[k]


@njit(nogil=True, cache=True)
def _std_normal(z: np.uint64) -> float:
    """A standard normal deviate from one 64-bit hash (Box-Muller on its 32-bit halves)."""
    u1 = ((z >> _S32) + np.uint64(1)) * _TWO_M32  # in (0, 1]
    u2 = (z & _LOW32) * _TWO_M32
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


@njit(nogil=True, cache=True)
def _generate(
    c0: int,
    c1: int,
    user_list: np.ndarray,
    offsets: np.ndarray,
    chunk_bounds: np.ndarray,
    sample_key: np.uint64,
    noise_key: np.uint64,
    max_rejection_degree: int,
    weights: np.ndarray,
    prob: np.ndarray,
    alias: np.ndarray,
    user_bias: np.ndarray,
    item_bias: np.ndarray,
    user_factors: np.ndarray,
    item_factors: np.ndarray,
    mean: float,
    noise: float,
    users_out: np.ndarray,
    items_out: np.ndarray,
    values_out: np.ndarray,
) -> None:
    """Fill the output arrays for the chunks ``c0:c1`` of the users ``user_list``
    (``chunk_bounds`` index it; run over all of them by
    :func:`fedmc.core.parallel.parallel_for`): the ``i``-th listed user owns rows
    ``offsets[i]:offsets[i + 1]``."""
    n_items = weights.shape[0]
    rank = user_factors.shape[1]
    for c in range(c0, c1):
        mark = np.zeros(n_items, dtype=np.uint8)
        clocks = np.empty(n_items, dtype=np.float64)
        for i in range(chunk_bounds[c], chunk_bounds[c + 1]):
            u = user_list[i]
            start = offsets[i]
            end = offsets[i + 1]
            d = end - start
            if d == 0:
                continue
            out = items_out[start:end]
            if d <= max_rejection_degree:
                _sample_rejection(_user_key(sample_key, u), d, prob, alias, mark, out)
            else:
                _sample_clocks(_user_key(sample_key, u), d, weights, clocks, out)
            noise_state = _user_key(noise_key, u)
            base = mean + user_bias[u]
            for k in range(start, end):
                j = items_out[k]
                score = base + item_bias[j]
                for f in range(rank):
                    score += user_factors[u, f] * item_factors[j, f]
                score += noise * _std_normal(_mix64(noise_state ^ (np.uint64(j) * _ITEM_MUL)))
                values_out[k] = min(5.0, max(1.0, np.floor(score + 0.5)))
                users_out[k] = i


def _alias_table(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Walker's alias table of ``weights``: acceptance probabilities and aliases."""
    n = len(weights)
    scaled = weights * (n / weights.sum())
    prob = np.ones(n)
    alias = np.arange(n, dtype=np.int64)
    small = [int(i) for i in np.flatnonzero(scaled < 1.0)]
    large = [int(i) for i in np.flatnonzero(scaled >= 1.0)]
    while small and large:
        s = small.pop()
        g = large[-1]
        prob[s] = scaled[s]
        alias[s] = g
        scaled[g] -= 1.0 - scaled[s]
        if scaled[g] < 1.0:
            small.append(large.pop())
    return prob, alias


def _max_rejection_degree(weights: np.ndarray) -> int:
    """The largest degree for which :func:`_sample_rejection` is expected to be the cheaper.

    With ``k`` items chosen, a draw is accepted with probability at least ``R_k``, the
    weight share of the ``n - k`` lightest items; so choosing ``d`` items takes at most
    ``sum(1 / R_k for k < d)`` draws on average.
    """
    lightest_first = np.sort(weights)
    remaining = np.cumsum(lightest_first)[::-1] / lightest_first.sum()  # R_0, ..., R_{n-1}
    expected_draws = np.cumsum(1.0 / remaining)
    return int(np.searchsorted(expected_draws, _CLOCK_COST * len(weights), side="right"))


def _user_degrees(x: np.ndarray, n_ratings: int, min_degree: int, max_degree: int) -> np.ndarray:
    """Degrees ``min_degree + a_u`` with ``a_u`` proportional to ``x_u``, capped, summing exactly.

    The real-valued shares ``min(lam * x_u, cap)`` are water-filled so that they add up to the
    extra ratings, then rounded down, and the remaining ratings go to the users with the
    largest fractional parts (largest-remainder rounding).
    """
    n = len(x)
    extra = n_ratings - n * min_degree
    cap = max_degree - min_degree
    order = np.argsort(-x, kind="stable")
    xs = x[order]
    tail = np.cumsum(xs[::-1])[::-1]  # tail[k] = sum of xs[k:]
    n_capped = np.arange(n)
    lam = (extra - n_capped * cap) / tail
    # the fewest capped users that leave every other share within the cap
    feasible = np.flatnonzero(lam * xs <= cap)
    k = int(feasible[0]) if len(feasible) else n
    shares = np.full(n, float(cap))
    if k < n:
        shares[k:] = np.minimum(lam[k] * xs[k:], cap)
    alloc = np.floor(shares).astype(np.int64)
    remainder = extra - int(alloc.sum())
    fraction = np.where(alloc < cap, shares - alloc, -1.0)
    alloc[np.argsort(-fraction, kind="stable")[:remainder]] += 1
    degrees = np.empty(n, dtype=np.int64)
    degrees[order] = min_degree + alloc
    return degrees


def _chunk_bounds(offsets: np.ndarray, n_chunks: int) -> np.ndarray:
    """User boundaries of up to ``n_chunks`` chunks with about equal numbers of ratings."""
    targets = np.linspace(0, offsets[-1], n_chunks + 1)
    bounds = np.searchsorted(offsets, targets, side="left")
    bounds[0], bounds[-1] = 0, len(offsets) - 1
    return np.unique(bounds)


def synthetic_ratings(*args: Any, **kwargs: Any) -> Ratings:
    """Generate low-rank 1..5 star ratings with power-law user and item degrees: the ratings of
    every user of :func:`checked_plan`'s plan (its parameters)."""
    return checked_plan(*args, **kwargs).ratings()


def checked_plan(
    n_users: int,
    n_items: int,
    n_ratings: int,
    rank: int = 5,
    seed: int = 0,
    *,
    min_user_ratings: int | None = None,
    max_user_fraction: float = 0.9,
    user_exponent: float = 1.8,
    item_exponent: float = 2.0,
    item_offset: float = 0.025,
    mean: float = 3.7,
    noise: float = 0.8,
    name: str = "synthetic",
) -> SyntheticPlan:
    """The plan of low-rank 1..5 star ratings with power-law user and item degrees: what
    :func:`synthetic_ratings` generates (:meth:`SyntheticPlan.ratings`).

    Parameters
    ----------
    n_users, n_items
        Matrix shape.
    n_ratings
        Exact number of ratings; no (user, item) pair occurs twice.
    rank
        Rank of the interaction term ``x_u . y_j`` (at least 1).
    seed
        Seed; the same seed gives bit-identical arrays, whatever the number of threads.
    min_user_ratings
        Every user has at least this many ratings. ``None``: ``n_ratings / (8 n_users)``
        rounded down, between 1 and 20.
    max_user_fraction
        No user rates more than ``floor(max_user_fraction * n_items)`` items (at least
        ``min_user_ratings``).
    user_exponent
        Tail exponent ``a > 0`` of the extra user degrees, ``P(extra > t) ~ t^-a`` before
        the cap; smaller is heavier-tailed.
    item_exponent
        Zipf exponent ``s >= 0`` of item popularity; 0 makes all items equally popular.
    item_offset
        Zipf-Mandelbrot offset, as a fraction of ``n_items``, that flattens the head.
    mean
        Global mean of the underlying scores before noise, rounding and clipping.
    noise
        Standard deviation of the Gaussian noise added to each score.
    name
        The ``name`` of the returned ratings.

    Returns
    -------
    SyntheticPlan
        Whose ratings are ``int32`` users and items, ``float64`` values in ``{1, 2, 3, 4,
        5}``, sorted by user then item, with ``user_ids = 1..n_users`` and ``item_ids =
        1..n_items``; their ``meta`` holds the generator settings; the true factors are not
        kept.

    Raises
    ------
    ConfigError
        A setting is out of range, or ``n_ratings`` cannot be reached within the degree
        bounds.
    """
    if n_users < 1 or n_items < 1:
        raise ConfigError(f"need at least one user and one item, got {n_users} x {n_items}")
    if rank < 1:
        raise ConfigError(f"rank must be at least 1, got {rank}")
    if user_exponent <= 0 or item_exponent < 0 or item_offset < 0:
        raise ConfigError(
            "user_exponent must be positive and item_exponent, item_offset non-negative, got "
            f"{user_exponent}, {item_exponent}, {item_offset}"
        )
    if noise < 0:
        raise ConfigError(f"noise must be non-negative, got {noise}")
    if not 0.0 < max_user_fraction <= 1.0:
        raise ConfigError(f"max_user_fraction must lie in (0, 1], got {max_user_fraction}")
    if min_user_ratings is None:
        min_user_ratings = min(20, max(1, n_ratings // (8 * n_users)))
    if not 1 <= min_user_ratings <= n_items:
        raise ConfigError(
            f"min_user_ratings must lie in [1, n_items = {n_items}], got {min_user_ratings}"
        )
    max_degree = max(min_user_ratings, math.floor(max_user_fraction * n_items))
    if not n_users * min_user_ratings <= n_ratings <= n_users * max_degree:
        raise ConfigError(
            f"{n_ratings} ratings cannot be spread over {n_users} users with between "
            f"{min_user_ratings} and {max_degree} ratings each"
        )

    return SyntheticPlan.of(
        n_users, n_items, n_ratings, rank, seed, min_user_ratings=min_user_ratings,
        max_degree=max_degree, user_exponent=user_exponent, item_exponent=item_exponent,
        item_offset=item_offset, mean=mean, noise=noise, name=name)


@dataclass(frozen=True)
class SyntheticPlan:
    """Everything of a synthetic data set but its ratings: the users' degrees, the item
    weights and every user's and item's draws. :meth:`ratings` generates the ratings of all
    users or of some (the same ratings either way: each user's come from streams of its own),
    so a shard of a population generates its own users alone
    (:mod:`fedmc.data.shard_load`).

    Attributes
    ----------
    offsets
        User ``u``'s ratings are ``offsets[u]:offsets[u + 1]`` of the whole set (sorted by
        user, then item).
    """

    n_items: int
    offsets: np.ndarray
    sample_key: np.uint64
    noise_key: np.uint64
    weights: np.ndarray
    prob: np.ndarray
    alias: np.ndarray
    max_rejection_degree: int
    user_bias: np.ndarray
    item_bias: np.ndarray
    user_factors: np.ndarray
    item_factors: np.ndarray
    mean: float
    noise: float
    name: str
    meta: dict

    @classmethod
    def of(cls, n_users: int, n_items: int, n_ratings: int, rank: int, seed: int, *,
           min_user_ratings: int, max_degree: int, user_exponent: float,
           item_exponent: float, item_offset: float, mean: float, noise: float,
           name: str) -> SyntheticPlan:
        """The plan of :func:`synthetic_ratings`'s (checked) settings."""
        sample_seq, noise_seq, degree_seq, value_seq = np.random.SeedSequence(seed).spawn(4)
        rng = np.random.default_rng(degree_seq)
        degrees = _user_degrees(
            rng.pareto(user_exponent, n_users), n_ratings, min_user_ratings, max_degree
        )
        offsets = np.zeros(n_users + 1, dtype=np.int64)
        np.cumsum(degrees, out=offsets[1:])
        popularity_rank = rng.permutation(n_items) + 1.0
        log_weights = -item_exponent * np.log(popularity_rank + item_offset * n_items)
        weights = np.exp(log_weights - log_weights.max())  # the most popular item weighs 1
        if weights.min() == 0.0:
            raise ConfigError(
                f"item_exponent {item_exponent} is too large: the weights of the least "
                "popular items underflow to zero"
            )
        prob, alias = _alias_table(weights)
        rng = np.random.default_rng(value_seq)
        factor_std = (INTERACTION_VAR / rank) ** 0.25
        meta = {
            "generator": "fedmc.data.synthetic",
            "seed": seed,
            "rank": rank,
            "min_user_ratings": min_user_ratings,
            "max_user_ratings": max_degree,
            "user_exponent": user_exponent,
            "item_exponent": item_exponent,
            "item_offset": item_offset,
            "mean": mean,
            "noise": noise,
        }
        return cls(
            n_items=n_items,
            offsets=offsets,
            sample_key=np.uint64(sample_seq.generate_state(1, np.uint64)[0]),
            noise_key=np.uint64(noise_seq.generate_state(1, np.uint64)[0]),
            weights=weights,
            prob=prob,
            alias=alias,
            max_rejection_degree=_max_rejection_degree(weights),
            user_bias=rng.normal(0.0, USER_BIAS_STD, n_users),
            item_bias=rng.normal(0.0, ITEM_BIAS_STD, n_items),
            user_factors=rng.normal(0.0, factor_std, (n_users, rank)),
            item_factors=rng.normal(0.0, factor_std, (n_items, rank)),
            mean=float(mean),
            noise=float(noise),
            name=name,
            meta=meta,
        )

    @property
    def n_users(self) -> int:
        return len(self.offsets) - 1

    @property
    def n_ratings(self) -> int:
        return int(self.offsets[-1])

    @property
    def user_ids(self) -> np.ndarray:
        """The users' raw ids, ``1..n_users``."""
        return np.arange(1, self.n_users + 1)

    @property
    def item_ids(self) -> np.ndarray:
        """The items' raw ids, ``1..n_items``."""
        return np.arange(1, self.n_items + 1)

    def ratings(self, users: np.ndarray | None = None) -> Ratings:
        """The ratings of ``users`` (increasing user indices; None: every user), sorted by
        user then item: the rows of those users in the whole set, the users numbered
        ``0..len(users) - 1`` in the order given and their raw ids (``1..n_users``) kept."""
        user_list = (np.arange(self.n_users, dtype=np.int64) if users is None
                     else np.asarray(users, dtype=np.int64))
        degrees = self.offsets[user_list + 1] - self.offsets[user_list]
        offsets = np.zeros(len(user_list) + 1, dtype=np.int64)
        np.cumsum(degrees, out=offsets[1:])
        n = int(offsets[-1])
        draws = (self.sample_key, self.noise_key, self.max_rejection_degree, self.weights,
                 self.prob, self.alias, self.user_bias, self.item_bias, self.user_factors,
                 self.item_factors, self.mean, self.noise)
        if n <= SMALL and len(user_list) * self.n_items <= synthetic_arrays.MAX_CELLS:
            users_out, items, values = synthetic_arrays.draw_ratings(user_list, offsets, *draws)
        else:
            users_out = np.empty(n, dtype=np.int32)
            items = np.empty(n, dtype=np.int32)
            values = np.empty(n, dtype=np.float64)
            chunks = _chunk_bounds(offsets, _N_CHUNKS)
            parallel_for(_generate, len(chunks) - 1, user_list, offsets, chunks, *draws,
                         users_out, items, values)
        return Ratings(
            users=users_out,
            items=items,
            values=values,
            n_users=len(user_list),
            n_items=self.n_items,
            user_ids=self.user_ids[user_list],
            item_ids=self.item_ids,
            name=self.name,
            meta=self.meta,
        )


def synthetic_dataset(name: str, seed: int = 0) -> Ratings:
    """Generate a named synthetic data set.

    Parameters
    ----------
    name
        ``"synthetic"``: 3,000 users x 1,500 items x 200,000 ratings (ML-1M-like density
        and degree shape, small enough for 100 federated rounds in seconds; the offline
        default). ``"synthetic-netflix"``: 480,189 users x 17,770 items x 100,480,507
        ratings, the shape of the Netflix Prize data (about 1.6 GB of arrays).
        ``"synthetic-netflix-3x"``: three times its users and ratings (1,440,567 users x 17,770
        items x 301,441,521 ratings): a population beyond one process's memory here, for
        shards that generate their own users (``--backend ray``, ``docs/ray.md``).
        ``"synthetic-ml20m"``: 138,493 users x 26,744 items x 20,000,263 ratings, the shape of
        MovieLens 20M (as interactions with ``--implicit``: federated ALS's scale test).
    seed
        Seed; the same seed gives bit-identical ratings.

    Raises
    ------
    DataError
        ``name`` is not one of the presets.
    """
    return synthetic_plan(name, seed).ratings()


def synthetic_plan(name: str, seed: int = 0) -> SyntheticPlan:
    """The plan of the named synthetic data set (:func:`synthetic_dataset`'s), its ratings
    not generated yet."""
    if name not in PRESETS:
        raise DataError(
            f"unknown synthetic data set {name!r}; valid names: {', '.join(sorted(PRESETS))}"
        )
    return checked_plan(**PRESETS[name], seed=seed, name=name)

"""The synthetic generator's draws in NumPy, for data small enough
(:data:`fedmc.core.small_data.SMALL` ratings) that compiling its Numba kernel
(:func:`fedmc.data.synthetic._generate`, about 2 s on a 2-core machine) would cost more than
the draws: the offline default's first run.

The same counter-based streams in the same order give the same ratings, bit for bit: each
user's items drawn by rejection from the alias table (every user at once, a block of draws at
a time; a draw past the user's last item is never used) or, for the heaviest users, by
exponential clocks; the values from the same sums in the same order, the logarithms and
cosines taken by Python's ``math`` (the C library's, as the compiled kernel's) rather than
NumPy's vectorized ones, which may differ in the last bit. ``tests/test_small_data.py``
checks the two paths against each other.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

MAX_CELLS = 20_000_000
"""The largest ``n_users * n_items`` drawn here (a byte a cell marks the items drawn)."""
_BLOCK = 64
"""The fewest draws per user in a step of the rejection sampling (more: twice the median number
of items the users still lack, up to :data:`_MAX_BLOCK`)."""
_MAX_BLOCK = 4096

# the streams' constants (the compiled kernels take theirs from here): SplitMix64's increment
# and multipliers, the item's multiplier of the noise stream, the low half of a 64-bit word
GOLDEN = np.uint64(0x9E3779B97F4A7C15)
MUL1 = np.uint64(0xBF58476D1CE4E5B9)
MUL2 = np.uint64(0x94D049BB133111EB)
ITEM_MUL = np.uint64(0xD6E8FEB86659FD93)
LOW32 = np.uint64(0xFFFFFFFF)


def _mix64(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer of every entry (``uint64``, wrapping)."""
    z = (z ^ (z >> np.uint64(30))) * MUL1
    z = (z ^ (z >> np.uint64(27))) * MUL2
    return z ^ (z >> np.uint64(31))


def _user_keys(key: np.uint64, users: np.ndarray) -> np.ndarray:
    """The starting states of the users' streams under ``key``."""
    return _mix64(np.full(len(users), key) ^ _mix64(users.astype(np.uint64) * GOLDEN + GOLDEN))


def _libm(function: Callable[[float], float], x: np.ndarray) -> np.ndarray:
    """``function`` (``math.log``, ``math.cos``) of every entry, by the C library."""
    return np.fromiter(map(function, x.tolist()), dtype=np.float64, count=len(x))


def draw_ratings(user_list: np.ndarray, offsets: np.ndarray, sample_key: np.uint64,
                 noise_key: np.uint64, max_rejection_degree: int, weights: np.ndarray,
                 prob: np.ndarray, alias: np.ndarray, user_bias: np.ndarray,
                 item_bias: np.ndarray, user_factors: np.ndarray, item_factors: np.ndarray,
                 mean: float, noise: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The users, items and values :func:`fedmc.data.synthetic._generate` writes: the ``i``-th
    listed user ``user_list[i]``'s ratings in rows ``offsets[i]:offsets[i + 1]``, numbered
    ``i`` (sorted by user, then item)."""
    n_users, n_items = len(offsets) - 1, len(weights)
    degrees = np.diff(offsets)
    drawn = np.zeros((n_users, n_items), dtype=bool)
    light = np.flatnonzero((degrees > 0) & (degrees <= max_rejection_degree))
    _by_rejection(drawn, light, degrees[light], _user_keys(sample_key, user_list[light]), prob,
                  alias)
    heavy = np.flatnonzero(degrees > max_rejection_degree)
    for i, state in zip(heavy.tolist(), _user_keys(sample_key, user_list[heavy]).tolist(),
                        strict=True):
        drawn[i, _by_clocks(np.uint64(state), int(degrees[i]), weights)] = True
    users, items = np.nonzero(drawn)  # by user, then item
    u = user_list[users]
    score = (mean + user_bias[u]) + item_bias[items]
    for f in range(user_factors.shape[1]):
        score = score + user_factors[u, f] * item_factors[items, f]
    states = _user_keys(noise_key, user_list)[users]
    z = _mix64(states ^ (items.astype(np.uint64) * ITEM_MUL))
    u1 = ((z >> np.uint64(32)) + np.uint64(1)) * 2.0**-32  # in (0, 1]
    u2 = (z & LOW32) * 2.0**-32
    normal = np.sqrt(-2.0 * _libm(math.log, u1)) * _libm(math.cos, 2.0 * math.pi * u2)
    values = np.minimum(5.0, np.maximum(1.0, np.floor(score + noise * normal + 0.5)))
    return users.astype(np.int32), items.astype(np.int32), values


def _by_rejection(drawn: np.ndarray, users: np.ndarray, degrees: np.ndarray,
                  keys: np.ndarray, prob: np.ndarray, alias: np.ndarray) -> None:
    """Mark ``degrees[k]`` distinct items of user ``users[k]`` in ``drawn``: the first distinct
    draws of its stream from the alias table (:func:`fedmc.data.synthetic._sample_rejection`)."""
    n = np.uint64(len(prob))
    count = np.zeros(len(users), dtype=np.int64)
    done = 0
    while len(users):
        block = int(min(_MAX_BLOCK, max(_BLOCK, 2 * np.median(degrees - count))))
        step = np.arange(done + 1, done + block + 1, dtype=np.uint64)
        z = _mix64(keys[:, None] + step * GOLDEN)
        j = (((z >> np.uint64(32)) * n) >> np.uint64(32)).astype(np.int64)
        items = np.where((z & LOW32) * 2.0**-32 < prob[j], j, alias[j])
        # a draw counts where its item is new to the user: not drawn before this block, and
        # its first occurrence in the block; and only up to the user's degree
        cell = users[:, None] * len(prob) + items
        first = np.zeros(cell.size, dtype=bool)
        first[np.unique(cell.ravel(), return_index=True)[1]] = True
        new = first.reshape(cell.shape) & ~drawn[users[:, None], items]
        new &= np.cumsum(new, axis=1) <= (degrees - count)[:, None]
        drawn[np.broadcast_to(users[:, None], cell.shape)[new], items[new]] = True
        count += new.sum(axis=1)
        done += block
        going = count < degrees
        users, degrees, keys, count = users[going], degrees[going], keys[going], count[going]


def _by_clocks(state: np.uint64, d: int, weights: np.ndarray) -> np.ndarray:
    """The ``d`` items with the earliest exponential clocks of one user's stream
    (:func:`fedmc.data.synthetic._sample_clocks`: ties at the ``d``-th go to the lowest
    indices)."""
    n = len(weights)
    z = _mix64(state + np.arange(1, n + 1, dtype=np.uint64) * GOLDEN)
    uniform = ((z >> np.uint64(11)) + np.uint64(1)) * 2.0**-53  # in (0, 1]
    clocks = -_libm(math.log, uniform) / weights
    threshold = np.partition(clocks, d - 1)[d - 1]
    below = clocks < threshold
    ties = np.flatnonzero(clocks == threshold)[:d - int(below.sum())]
    return np.sort(np.concatenate([np.flatnonzero(below), ties]))

"""Partition users into clients. No user is ever dropped."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from fedmc.errors import ConfigError

if TYPE_CHECKING:  # NumPy is imported where the arrays are: run settings read this module
    import numpy as np

PartitionKind = Literal["random", "contiguous", "powerlaw", "user"]


def partition_users(
    n_users: int,
    n_clients: int,
    kind: PartitionKind = "random",
    seed: int = 0,
    powerlaw_exponent: float = 1.5,
) -> np.ndarray:
    """Assign each of ``n_users`` users to one of ``n_clients`` clients.

    Parameters
    ----------
    n_users
        Number of users (rows of the rating matrix).
    n_clients
        Number of clients ``p``; every client gets at least one user. Ignored for ``"user"``
        (one user per client, ``p = n_users``).
    kind
        ``"random"``: a seeded random permutation cut into ``p`` near-equal blocks (sizes
        differ by at most one; the remainder is spread, never dropped). ``"contiguous"``: users
        ``0..`` in order, near-equal blocks. ``"powerlaw"``: block sizes proportional to
        ``k^(-exponent)`` for ``k = 1..p``, users in random order. ``"user"``: one per client.
    seed
        Seed for the random kinds.

    Returns
    -------
    numpy.ndarray
        ``int32`` array of length ``n_users``: the client of each user.
    """
    import numpy as np

    if kind == "user":
        return np.arange(n_users, dtype=np.int32)
    if n_clients < 1:
        raise ConfigError(f"the number of clients must be at least 1, got {n_clients}")
    if n_clients > n_users:
        raise ConfigError(
            f"{n_clients} clients but only {n_users} users: every client needs at least one user"
        )
    rng = np.random.default_rng(seed)
    if kind == "contiguous":
        order = np.arange(n_users)
        sizes = _equal_sizes(n_users, n_clients)
    elif kind == "random":
        order = rng.permutation(n_users)
        sizes = _equal_sizes(n_users, n_clients)
    elif kind == "powerlaw":
        order = rng.permutation(n_users)
        sizes = _powerlaw_sizes(n_users, n_clients, powerlaw_exponent)
    else:
        raise ConfigError(f"unknown partition kind {kind!r}: use random|contiguous|powerlaw|user")
    client = np.empty(n_users, dtype=np.int32)
    client[order] = np.repeat(np.arange(n_clients, dtype=np.int32), sizes)
    return client


def _equal_sizes(n: int, k: int) -> np.ndarray:
    import numpy as np

    base, extra = divmod(n, k)
    sizes = np.full(k, base, dtype=np.int64)
    sizes[:extra] += 1
    return sizes


def _powerlaw_sizes(n: int, k: int, exponent: float) -> np.ndarray:
    """Sizes >= 1 summing to ``n``, proportional to ``rank^-exponent`` (largest first)."""
    import numpy as np

    weights = np.arange(1, k + 1, dtype=float) ** (-exponent)
    spare = n - k  # every client gets one user first
    raw = weights / weights.sum() * spare
    sizes = np.floor(raw).astype(np.int64)
    remainder = spare - sizes.sum()
    sizes[np.argsort(-(raw - sizes), kind="stable")[:remainder]] += 1
    return sizes + 1

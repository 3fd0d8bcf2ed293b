"""Shared fixtures: tiny federated problems built from dense matrices."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from fedmc.data import FederatedData, Normalizer, Ratings

# The command line runs a rank without compiled specialized kernels on the generic ones and
# compiles the others in a background process (fedmc.run.precompile): tests compile in the
# foreground, so no process outlives them and results do not depend on what was compiled.
os.environ.setdefault("FEDMC_KERNELS", "specialized")

# Licensed real data: $FEDMC_DATA when set, else the checkout's sibling ../shared/data.
SHARED_DATA = Path(os.environ.get("FEDMC_DATA")
                   or Path(__file__).resolve().parents[1].parent / "shared" / "data")


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


@pytest.fixture
def tiny():
    return tiny_federated()[0]


def require_shared_data(*parts: str) -> Path:
    """Path under the real-data folder (:data:`SHARED_DATA`); skip the test when it is
    absent (a folder without the files a test needs counts as absent: name the files)."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} not present (licensed data is not part of the repository)")
    return path


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--slow", action="store_true",
                     help="also run the tests marked slow (CI leaves them out)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked slow run only with ``--slow``."""
    if config.getoption("--slow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


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

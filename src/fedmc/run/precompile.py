"""Kernels specialized for a rank, compiled once in the background.

The factor algorithms' kernels are compiled once per rank: the rank is a compile-time constant
in them (:func:`fedmc.core.kernels.rank_token`), which makes them about twice as fast, and costs
8-12 s of compilation on a 2-core machine the first time a rank is used. The command line does
not make a user wait for that: a run at a rank whose specialized kernels are not compiled yet
runs on the generic kernels (compiled once for every rank) and afterwards starts
``python -m fedmc.run.precompile ALGORITHM PARAMS`` in the background, which compiles the
specialized kernels into Numba's cache on a tiny problem and leaves a marker; later runs at that
rank use them. ``config.json`` records which kernels a run used (``kernels``); the two agree to
rounding.

The very first run of an algorithm compiles its generic kernels too. So that it does not
compile them after the data's own (the synthetic generator's), one after the other, the runner
starts ``python -m fedmc.run.precompile ALGORITHM PARAMS --generic`` as soon as it knows the
run's settings (:func:`compile_generic_alongside`): the child compiles the generic kernels into
Numba's cache on a tiny problem while the run loads its data, and the run waits for it before
training and loads them from the cache.

Markers live in ``$XDG_CACHE_HOME/fedmc/kernels/<fingerprint>/``, where the fingerprint
covers the Python and Numba versions and the size and time of every source file of the
kernels, so an edited or upgraded package starts afresh.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import numba
import numpy as np

import fedmc
from fedmc.algorithms.registry import AlgorithmSpec, spec
from fedmc.data.catalog import user_cache_dir


def kernels_of(entry: AlgorithmSpec, cfg: Any) -> tuple[str, int] | None:
    """Which specialized kernels a run uses: the protocol algorithm that runs ``cfg`` (its
    name: FedMC-ADMM's two consensus modes run different kernels) and the rank token's width
    (factor columns with the bias columns); None for algorithms whose kernels take no rank
    token (the spec's ``rank_token``: ALS, the Boolean ones, fedals on interactions)."""
    if not entry.rank_token(cfg):
        return None
    return entry.algorithm_for(cfg).name, cfg.layout.width


def fingerprint() -> str:
    """A digest of what decides whether Numba's cached kernels are still valid."""
    root = Path(fedmc.__file__).parent
    digest = hashlib.sha256(f"{platform.python_version()} {numba.__version__}".encode())
    for path in sorted(root.rglob("*.py")):
        stat = path.stat()
        digest.update(f"{path.relative_to(root)} {stat.st_size} {stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


GENERIC = "generic"
"""The marker's width for the generic kernels (compiled once for every rank)."""


def _marker(algorithm: str, width: int | str) -> Path:
    return user_cache_dir() / "kernels" / fingerprint() / f"{algorithm}-{width}"


def is_compiled(algorithm: str, width: int | str) -> bool:
    """Whether the kernels of the protocol algorithm named ``algorithm``, specialized for
    ``width`` (or the generic ones: :data:`GENERIC`), are in Numba's cache."""
    return _marker(algorithm, width).exists()


def mark_compiled(algorithm: str, width: int | str) -> None:
    """Remember that ``algorithm``'s specialized kernels for ``width`` (or its generic ones:
    :data:`GENERIC`) are compiled."""
    path = _marker(algorithm, width)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    except OSError:  # a read-only home: later runs use the generic kernels, nothing breaks
        pass


def compile_in_background(algorithm: str, params: dict[str, Any]) -> None:
    """Start a detached, low-priority process that compiles ``algorithm``'s specialized
    kernels for the settings ``params`` (it outlives this process and prints nothing)."""
    subprocess.Popen(
        [sys.executable, "-m", "fedmc.run.precompile", algorithm, json.dumps(params)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True, preexec_fn=lambda: os.nice(10),
    )


def compile_generic_alongside(algorithm: str, params: dict[str, Any]) -> subprocess.Popen:
    """Start a child process that compiles ``algorithm``'s generic kernels for the settings
    ``params`` (module docstring); the caller waits for it before it trains. The child is in
    this process's group: a Ctrl-C at the terminal stops it too."""
    return subprocess.Popen(
        [sys.executable, "-m", "fedmc.run.precompile", algorithm, json.dumps(params), GENERIC],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


WARM_UP_LIMIT = 120.0
"""Seconds a run waits for :func:`compile_generic_alongside`'s child at most (it compiles in
about 10 s on a 2-core machine); past them the child is stopped and the run compiles what it
still needs itself."""


def wait_for(child: subprocess.Popen) -> None:
    """Wait for a child of :func:`compile_generic_alongside`, at most :data:`WARM_UP_LIMIT`
    seconds (then stop it: a kernel it left half-compiled is compiled by the run)."""
    try:
        child.wait(timeout=WARM_UP_LIMIT)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def _tiny_data(width: int):
    """A small random rating set on which every kernel of a run at ``width`` compiles."""
    from fedmc.data import FederatedData, Ratings
    from fedmc.data.split import random_test_mask

    rng = np.random.default_rng(0)
    n = 2 * width + 20
    users, items = np.nonzero(rng.random((n, n)) < 0.3)
    ratings = Ratings(users.astype(np.int32), items.astype(np.int32),
                      rng.integers(1, 6, len(users)).astype(float), n, n)
    client = np.arange(n) % 4
    return FederatedData.from_split(ratings, random_test_mask(ratings, 0.2, 0), client, "zscore")


def compile_now(algorithm: str, params: dict[str, Any], generic: bool = False) -> None:
    """Compile ``algorithm``'s specialized kernels for ``params`` (with ``generic``, its
    generic ones) and mark them compiled."""
    from fedmc.core.kernels import use_generic_kernels
    from fedmc.estimators import estimator_class

    kernels = kernels_of(spec(algorithm), spec(algorithm).Config(**params))
    if kernels is None:
        return
    use_generic_kernels(kernels[1], generic)
    estimator_class(algorithm)(**params, rounds=2, active=2).fit(_tiny_data(kernels[1]))
    mark_compiled(kernels[0], GENERIC if generic else kernels[1])


if __name__ == "__main__":
    compile_now(sys.argv[1], json.loads(sys.argv[2]), generic=sys.argv[3:] == [GENERIC])

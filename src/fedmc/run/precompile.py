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
starts ``python -m fedmc.run.precompile ALGORITHM PARAMS generic`` as soon as it knows the
run's settings (:func:`compile_generic_alongside`): the child compiles the generic kernels into
Numba's cache on a tiny problem while the run loads its data, and the run waits for it before
training (:func:`finish_warming`) and loads them from the cache. An algorithm whose spec offers
a ``round_warm_up`` (FedMC-ADMM) splits them where the run may use more than one core: the
child (``generic-round``) compiles the larger half of a round's client step, the heaviest
part, by that spec's first call, while the run, its data loaded, compiles the rest itself
(``generic-setup``: a tiny federation's set-up exchange and evaluation, then the client step's
other half and the server's step by the spec's second call) in the time it would otherwise
wait. A second child for
that part would cost more than it saves on two cores: another process's imports and Numba's
start-up (about 1 s of CPU), and the data's layout kernel compiled twice. The two halves share
no compiled code (a helper kernel is compiled into every kernel that calls it and cached with
it, never on its own: :mod:`fedmc.core.kernels`), so what each process compiles does not
depend on how far the other has got: a first run's numbers are the same every time.
A run that evaluates top-N lists compiles their kernels too while it waits
(:func:`compile_ranking`): no child does.

Markers live in ``$XDG_CACHE_HOME/fedmc/kernels/<fingerprint>/``, where the fingerprint
covers the Python and Numba versions and the size and time of every source file of the
kernels, so an edited or upgraded package starts afresh.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numba
import numpy as np

import fedmc
from fedmc.algorithms.registry import AlgorithmSpec, load, spec
from fedmc.core.parallel import threads
from fedmc.data.catalog import user_cache_dir


def kernels_of(entry: AlgorithmSpec, cfg: Any) -> tuple[str, int] | None:
    """Which specialized kernels a run uses: the protocol algorithm that runs ``cfg`` (its
    name: FedMC-ADMM's two consensus modes run different kernels) and the rank token's width
    (factor columns with the bias columns); None for algorithms whose kernels take no rank
    token (the spec's ``rank_token``: ALS, the Boolean ones, fedals on interactions)."""
    if not entry.rank_token(cfg):
        return None
    return entry.algorithm_for(cfg).name, cfg.layout.width


def generic_key(entry: AlgorithmSpec, cfg: Any) -> str | None:
    """The name under which the kernels a run of ``cfg`` compiles once for every rank are
    marked compiled (its protocol algorithm's), or None where no child compiles them beside
    the loading (a centralized or a Boolean algorithm: their kernels are few)."""
    if not entry.federated or entry.data_kind != "ratings":
        return None
    return str(entry.algorithm_for(cfg).name)


def fingerprint() -> str:
    """A digest of what decides whether Numba's cached kernels are still valid."""
    root = Path(fedmc.__file__).parent
    digest = hashlib.sha256(f"{platform.python_version()} {numba.__version__}".encode())
    for path in sorted(root.rglob("*.py")):
        stat = path.stat()
        digest.update(f"{path.relative_to(root)} {stat.st_size} {stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


GENERIC = "generic"
"""The marker's width for the generic kernels (compiled once for every rank), and the part of
them a child compiles: all."""
SETUP = "generic-setup"
"""The part of the generic kernels the run compiles itself beside :data:`ROUND`'s child: every
one but :data:`ROUND`'s."""
ROUND = "generic-round"
"""The part of the generic kernels a child compiles beside :data:`SETUP`'s: the larger half of
a round's client step (the spec's ``round_warm_up``, its first call)."""


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


def compile_in_background(algorithm: str, params: dict[str, Any], one_user: bool) -> None:
    """Start a detached, low-priority process that compiles ``algorithm``'s specialized
    kernels for the settings ``params`` (on clients of one user each with ``one_user``, as the
    run's: :func:`compile_now`; it outlives this process and prints nothing)."""
    _yielding(subprocess.Popen(
        [sys.executable, "-m", "fedmc.run.precompile", algorithm, json.dumps(params),
         *_shape_flag(one_user)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    ))


def _yielding(child: subprocess.Popen) -> None:
    """Lower ``child``'s priority (nice 10), after its start: a ``preexec_fn`` is not safe in
    a process with threads (a run trains in a worker thread, its kernels on a pool)."""
    if hasattr(os, "setpriority"):
        with contextlib.suppress(OSError):  # gone already: nothing to lower
            os.setpriority(os.PRIO_PROCESS, child.pid, 10)


def round_warm_up(entry: AlgorithmSpec, cfg: Any
                  ) -> tuple[Callable[[], None], Callable[[], None]] | None:
    """The spec's two calls that compile a round of ``cfg`` in two parts, if any (:data:`ROUND`'s
    and the end of :data:`SETUP`'s)."""
    return None if entry.round_warm_up is None else load(entry.round_warm_up)(cfg)


@dataclass(frozen=True)
class Warming:
    """The generic kernels being compiled beside a run's loading
    (:func:`compile_generic_alongside`): its ``children``, and the part the run compiles
    itself once its data are loaded (:data:`SETUP`, or None)."""

    algorithm: str
    params: dict[str, Any]
    one_user: bool
    children: list[subprocess.Popen]
    own_part: str | None


ONE_USER = "--one-user"
"""The child's flag for a run whose clients hold one user each (``partition="user"``)."""


def _shape_flag(one_user: bool) -> list[str]:
    return [ONE_USER] if one_user else []


def compile_generic_alongside(algorithm: str, params: dict[str, Any], one_user: bool) -> Warming:
    """Start the child process that compiles ``algorithm``'s generic kernels for the settings
    ``params``, on clients of one user each with ``one_user`` (module docstring: all of them,
    or :data:`ROUND`'s part where the process may use more than one core, :data:`SETUP`'s being
    left to the run); the caller calls
    :func:`finish_warming` before it trains. The child is in this process's group: a Ctrl-C at
    the terminal stops it too."""
    entry = spec(algorithm)
    split = threads() > 1 and round_warm_up(entry, entry.Config(**params)) is not None
    child = subprocess.Popen(
        [sys.executable, "-m", "fedmc.run.precompile", algorithm, json.dumps(params),
         ROUND if split else GENERIC, *_shape_flag(one_user)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return Warming(algorithm, params, one_user, [child], SETUP if split else None)


WARM_UP_LIMIT = 120.0
"""Seconds a run waits for :func:`compile_generic_alongside`'s child at most (it compiles in
about 10 s on a 2-core machine); past them it is stopped and the run compiles what it still
needs itself."""


def finish_warming(warming: Warming) -> None:
    """Compile the run's own part of :func:`compile_generic_alongside`'s kernels, then wait for
    its child, at most :data:`WARM_UP_LIMIT` seconds in all (then stop it: a kernel it left
    half-compiled is compiled by the run)."""
    deadline = time.monotonic() + WARM_UP_LIMIT
    if warming.own_part is not None:
        compile_now(warming.algorithm, warming.params, warming.own_part, warming.one_user)
    for child in warming.children:
        try:
            child.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def compile_ranking(interactions: bool, one_user: bool, k: int) -> None:
    """Compile the top-``k`` evaluation a run makes of its published model
    (:func:`fedmc.core.ranking.top_k_metrics`) on tiny data: a run that waits for
    :func:`compile_generic_alongside`'s child does it meanwhile (no child compiles it)."""
    from fedmc.core.ranking import top_k_metrics

    data = _tiny_data(4, interactions, one_user)
    rng = np.random.default_rng(0)
    top_k_metrics(data, rng.random((data.n_users, 4)), rng.random((data.n_items, 4)), k)


def _tiny_data(width: int, interactions: bool, one_user: bool):
    """A small random rating set (or set of interactions: every value 1, not normalized) on
    which every kernel of a run at ``width`` compiles: in four clients, or in clients of one
    user each (``one_user``: an algorithm may take other kernels, or refuse several users a
    client)."""
    from fedmc.data import FederatedData, Ratings
    from fedmc.data.split import random_test_mask

    rng = np.random.default_rng(0)
    n = 2 * width + 20
    users, items = np.nonzero(rng.random((n, n)) < 0.3)
    values = (np.ones(len(users)) if interactions
              else rng.integers(1, 6, len(users)).astype(float))
    ratings = Ratings(users.astype(np.int32), items.astype(np.int32), values, n, n)
    client = np.arange(n) if one_user else np.arange(n) % 4
    return FederatedData.from_split(ratings, random_test_mask(ratings, 0.2, 0), client,
                                    "none" if interactions else "zscore")


def compile_now(algorithm: str, params: dict[str, Any], part: str | None = None,
                one_user: bool = False) -> None:
    """Compile ``algorithm``'s specialized kernels for ``params`` and mark them compiled; with
    ``part`` (:data:`GENERIC`, :data:`SETUP` or :data:`ROUND`) that part of its generic ones
    instead (marked compiled when it is all of them). ``one_user``: the run's clients hold one
    user each (``partition="user"``)."""
    from fedmc.core.kernels import use_generic_kernels

    entry = spec(algorithm)
    cfg = entry.Config(**params)
    kernels = kernels_of(entry, cfg)
    key = generic_key(entry, cfg)
    if kernels is None and (part is None or key is None):
        return  # no rank token: its kernels are its generic ones, compiled only with a part
    if kernels is not None:
        use_generic_kernels(kernels[1], part is not None)
    warm_up = round_warm_up(entry, cfg) if part in (ROUND, SETUP) else None
    if part == ROUND and warm_up is not None:
        warm_up[0]()
        return
    # not for ROUND's: 0.1 s on its critical path
    from fedmc.federation.settings import Schedule
    from fedmc.run.spec import RunSpec
    from fedmc.run.train import train

    interactions = entry.needs_interactions is not None and entry.needs_interactions(cfg)
    data = _tiny_data(kernels[1] if kernels else 16, interactions, one_user)
    rounds = 0 if part == SETUP else 2
    # every client each round: some settings need it (federated ALS's item step by exchanges)
    train(RunSpec(algorithm=algorithm, params=params, schedule=Schedule(rounds=rounds)), data)
    if part == SETUP and warm_up is not None:
        warm_up[1]()
    if part == GENERIC:  # all of them (the run marks them once it has its other part)
        mark_compiled(entry.algorithm_for(cfg).name, GENERIC)
    elif part is None and kernels is not None:
        mark_compiled(*kernels)


if __name__ == "__main__":
    args = [arg for arg in sys.argv[1:] if arg != ONE_USER]
    compile_now(args[0], json.loads(args[1]), args[2] if len(args) > 2 else None,
                ONE_USER in sys.argv)
    # the kernels are in the cache: a run waiting for this process need not wait for the
    # interpreter's tear-down (about 0.4 s with Numba loaded)
    os._exit(0)

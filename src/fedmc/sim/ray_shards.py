"""The shards of a sharded simulation (:mod:`fedmc.sim.sharded`) as Ray actors: ``--backend
ray``.

Each shard is an actor (:class:`fedmc.sim.sharded.ShardHost`) holding its clients' data and
state, built once from what the driver sends it (or generated there:
:mod:`fedmc.run.shard_load`); a message and the aggregator are put in Ray's object
store once per exchange and read by every actor, and each actor returns one sum of its
clients' uploads. Ray is an optional dependency (``pip install 'fedmc[ray]'``): nothing else
imports this module.

Without an address Ray starts on this machine (its workers are processes of this machine);
with one (``--ray-address``: ``auto``, or the head's ``HOST:PORT``) the run joins that cluster
(``docs/ray.md``).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from typing import Any

from fedmc.errors import ConfigError
from fedmc.sim.sharded import ShardHost


def require_ray(option: str) -> Any:
    """The ``ray`` module, or exit 2 saying that ``option`` needs it and how to install it."""
    # a signal is fedmc's to report (exit 130/143), not Ray's to answer with a stack dump
    os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")
    try:
        import ray
    except ImportError:
        raise ConfigError(f"{option} needs Ray: pip install 'fedmc[ray]'") from None
    return ray


_RAY_HELD = threading.Event()  # never set: the thread that started Ray waits on it


def start_ray(ray: Any, address: str | None, cpus: int | None = None) -> None:
    """``ray.init`` in a thread that lives as long as this process: the processes of a Ray
    that ``ray.init`` starts on this machine end when the thread that started them ends
    (Linux's parent-death signal is a thread's), and a command runs each stage of its work in
    a worker thread of its own (:func:`fedmc.cli.interrupts.in_worker`). ``cpus``: the CPUs
    a Ray started here offers (None: this machine's)."""
    # its notes (the run's signals are heard by fedmc's main thread; token authentication is
    # on) would interleave with the run's output
    logging.getLogger("ray").setLevel(logging.ERROR)
    outcome: list[BaseException | None] = []
    started = threading.Event()

    def hold() -> None:
        try:
            ray.init(address=address, num_cpus=cpus, include_dashboard=False,
                     log_to_driver=False, configure_logging=False)
            outcome.append(None)
        except BaseException as exc:  # handed to the caller
            outcome.append(exc)
        started.set()
        _RAY_HELD.wait()

    threading.Thread(target=hold, name="fedmc-ray", daemon=True).start()
    started.wait()
    if isinstance(outcome[0], (ConnectionError, ValueError, RuntimeError)):
        where = f"--ray-address {address}" if address else "a local Ray"
        raise ConfigError(f"{where}: Ray did not start ({outcome[0]})") from None
    if outcome[0] is not None:
        raise outcome[0]


class RayActors:
    """Shards as Ray actors, one CPU each (:class:`fedmc.sim.sharded.Workers`).

    Parameters
    ----------
    address
        The cluster to join (None: start Ray on this machine, offering at least ``workers``
        CPUs: more shards than cores share them).
    workers
        How many shards the run places: a cluster with fewer CPUs than that is refused (one
        line, exit 2), as its actors would wait for a CPU forever.
    """

    def __init__(self, address: str | None = None, workers: int = 2) -> None:
        ray = self.ray = require_ray("--backend ray")
        if not ray.is_initialized():  # (RAY_ADDRESS: Ray joins that cluster, as an address)
            joins = address is not None or os.environ.get("RAY_ADDRESS")
            start_ray(ray, address, None if joins else max(workers, os.cpu_count() or 1))
        cpus = int(ray.cluster_resources().get("CPU", 0))
        if cpus < workers:
            where = f"the cluster at --ray-address {address}" if address else "this Ray"
            raise ConfigError(f"--workers {workers}: {where} offers {cpus} CPUs, and each "
                              f"shard takes one")
        # one CPU each, and one kernel thread (fedmc.core.parallel.threads): not the machine's
        self.actor = ray.remote(num_cpus=1, runtime_env={
            "env_vars": {"NUMBA_NUM_THREADS": "1"}})(ShardHost)

    def host(self) -> Any:
        return self.actor.remote()

    def call(self, hosts: Sequence[Any], method: str, args: Sequence[tuple[Any, ...]],
             ) -> list[Any]:
        put: dict[int, Any] = {}  # an argument all the shards receive: in the store once

        def stored(value: Any) -> Any:
            if id(value) not in put:
                put[id(value)] = self.ray.put(value)
            return put[id(value)]

        shared = len(args) > 1 and all(a is args[0] for a in args)
        return self.ray.get([
            getattr(host, method).remote(*(stored(v) for v in a) if shared else a)
            for host, a in zip(hosts, args, strict=True)])

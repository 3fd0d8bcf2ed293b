"""``fedmc federate local --simulation``: fedmc's ServerApp and ClientApp on Flower's
simulation engine.

Flower's simulation runs a ServerApp in this process and the ClientApp of every *virtual*
SuperNode in a few Ray actors (``flwr[simulation]``, here the ``fedmc[ray]`` extra), with no
SuperLink and no node processes: one virtual node per client, whatever their number.
:class:`VirtualNodes` gives virtual node ``i`` (Flower's ``partition-id``) the node
configuration of client ``i`` of the split (:func:`fedmc.deploy.local.node_config`: its files,
its state folder) and the run's configuration, then hands every message to fedmc's ClientApp
unchanged (:mod:`fedmc.flower.client_app`). An actor serves the virtual nodes in turn: it
reads a client's data and states from its folder for every message and keeps nothing of it
afterwards (another actor may have served the client since, and an actor that kept every
client it served held 9 GB on ML-1M's 6,040). The ServerApp is fedmc's round loop
(:func:`fedmc.flower.server_app.serve`). So the run exchanges the same Flower messages, plain
or under SecAgg+, as a real deployment, and gives ``fedmc run``'s history
(``tests/test_federate_simulation.py``).

Flower 1.42 marks :func:`flwr.simulation.run_simulation` deprecated in favour of ``flwr run``
with a simulation federation; it is the call that takes a ServerApp and a ClientApp as
objects, which this driver needs (the run's settings travel with them).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from flwr.app import Context, Message
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from fedmc.deploy.local import PROGRESS_POLL, complete_lines, node_config, prepared
from fedmc.errors import ConfigError, FedMCError
from fedmc.flower.compat import RunNotRunningException, parse_config_args
from fedmc.flower.defaults import NODE_CPUS
from fedmc.flower.settings import FederatedRun
from fedmc.run.data import DataSettings
from fedmc.sim.ray_shards import require_ray, start_ray


class VirtualNodes(ClientApp):
    """The ClientApp of every virtual node (module docstring): node ``partition-id`` is
    client ``partition-id`` of the split in ``split``, its state in ``state/client-ID``."""

    def __init__(self, split: Path, state: Path, run_config: dict[str, Any]) -> None:
        super().__init__()
        self.split, self.state, self.run_config = split, state, run_config

    def __call__(self, message: Message, context: Context) -> Message:
        from fedmc.flower.client_app import app, forget_client

        client = int(context.node_config["partition-id"])
        node = parse_config_args([node_config(self.split, client,
                                              self.state / f"client-{client}")])
        try:  # Flower refuses a context whose run configuration changed: the client's own
            return app(message, Context(context.run_id, context.node_id, node, context.state,
                                        self.run_config))
        finally:  # the actors take the virtual nodes in turn: the client is read for each
            forget_client(context.run_id, client)  # message, and none stays in memory


def run_simulated(run: FederatedRun, data: DataSettings, work: Path, node_cpus: float = NODE_CPUS,
                  on_event: Callable[[dict[str, Any]], None] | None = None) -> None:
    """Split ``data`` into ``work/split`` and run ``run`` on Flower's simulation engine, one
    virtual node per client, each taking ``node_cpus`` of Ray's CPUs while it answers;
    ``on_event`` gets every line of the server's ``progress.jsonl`` as it is written.

    Raises
    ------
    ConfigError
        Ray (Flower's simulation engine) is not installed.
    FedMCError
        The run failed (what the ServerApp raised, also in ``status.json``).
    """
    ray = require_ray("--simulation")
    from flwr.simulation import run_simulation

    split = work / "split"
    run, manifest = prepared(run, data, split)
    server = ServerApp()
    stopped = threading.Event()
    failures: list[FedMCError] = []

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        from fedmc.flower.server_app import serve

        try:
            serve(cast(Grid, _Stoppable(grid, stopped)), run)
        except RunNotRunningException:  # interrupted: said by the command, recorded in
            if not stopped.is_set():   # status.json
                raise
        except FedMCError as exc:  # said in one line by the caller, not by Flower's log
            failures.append(exc)

    logging.getLogger("flwr").setLevel(logging.ERROR)  # its deprecation notice: in the docs
    if not ray.is_initialized():  # started here, Ray leaves this process's signal handlers
        start_ray(ray, None)  # as they are (Flower's start would make SIGTERM an exit 15)
    done = threading.Event()
    follower = threading.Thread(target=_follow, args=(run.out / "progress.jsonl", done,
                                                      on_event), daemon=True)
    follower.start()
    try:
        run_simulation(server, VirtualNodes(split, work / "state", run.run_config()),
                       manifest.n_clients,
                       backend_config={"client_resources": {"num_cpus": node_cpus}})
    finally:  # ended, failed or interrupted (Flower handles the signals): the ServerApp's
        stopped.set()  # thread, which Flower does not wait for then, stops at its next call
        done.set()
        follower.join()
    if failures:
        raise failures[0]
    progress = run.out / "progress.jsonl"
    if not progress.exists() or '"done"' not in progress.read_text():
        raise ConfigError(f"the simulated federation did not finish: {run.out}/status.json "
                          f"says why")


class _Stoppable:
    """The simulation's grid, refusing every call once ``stopped`` is set: the ServerApp's
    thread then ends as a stopped run does (``status.json`` says ``stopped``) instead of
    waiting for nodes that are gone, and the process can exit."""

    def __init__(self, grid: Grid, stopped: threading.Event) -> None:
        self._grid, self._stopped = grid, stopped

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._grid, name)
        if not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            if self._stopped.is_set():
                raise RunNotRunningException("the simulation was interrupted")
            return attribute(*args, **kwargs)

        return call


def _follow(progress: Path, done: threading.Event,
            on_event: Callable[[dict[str, Any]], None] | None) -> None:
    """Hand every new line of ``progress`` to ``on_event`` until ``done`` (then the rest)."""
    seen = 0
    while True:
        finished = done.is_set()
        lines = complete_lines(progress) if progress.exists() else []
        for line in lines[seen:]:
            if on_event is not None:
                on_event(json.loads(line))
        seen = len(lines)
        if finished:
            return
        done.wait(PROGRESS_POLL)

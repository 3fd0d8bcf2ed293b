"""``fedmc federate local``: a real deployment on this machine.

A SuperLink and one SuperNode per client, each a separate process in a session of its own,
on free localhost ports, insecure, with a private ``FLWR_HOME``; the run is submitted with
``flwr run`` and followed through the server's ``progress.jsonl``. Every process of the
deployment is stopped when the federation closes (SIGTERM, SIGKILL after a grace period), also
on Ctrl-C, SIGTERM or failure: the processes started here with their process groups, and the
ones the SuperLink starts in sessions of their own (its SuperExec, which starts the ServerApp,
``flwr-serverapp``), found by a marker in their environment (``FEDMC_DEPLOYMENT``; on Linux,
through ``/proc``). SIGINT and SIGTERM wait while a process is being started or the
deployment stopped, so none escapes.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from fedmc.deploy.app import write_app, write_run_config
from fedmc.deploy.split import client_files, validation_file, write_split
from fedmc.errors import FedMCError
from fedmc.flower.manifest import Manifest
from fedmc.flower.server_app import preflight
from fedmc.flower.settings import FederatedRun
from fedmc.run.data import DataSettings

MARKER = "FEDMC_DEPLOYMENT"
GRACE = 5.0
START_TIMEOUT = 60.0
PROGRESS_POLL = 0.02  # seconds between reads of the progress file (events reach on_event promptly)


def complete_lines(path: Path) -> list[str]:
    """The lines of ``path`` that the writer has finished (each ends with a newline): a line
    still being written is left for a later read. No file: none."""
    if not path.exists():
        return []
    text = path.read_text()
    return text[:text.rfind("\n") + 1].splitlines()


class FederationError(FedMCError):
    """A local deployment did not start or its run failed."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node_config(split: Path, client: int, state: Path) -> str:
    """The ``--node-config`` of ``client`` for the files of ``fedmc federate split``."""
    train, test = client_files(split, client)
    parts = [f"client={client}", f'manifest="{split / "manifest.json"}"',
             f'ratings="{train}"', f'state="{state}"']
    for key, path in (("test", test), ("validation", validation_file(split, client))):
        if path.exists():
            parts.append(f'{key}="{path}"')
    return " ".join(parts)


class LocalFederation:
    """A SuperLink and SuperNodes on this machine (module docstring).

    Parameters
    ----------
    work
        A folder for ``FLWR_HOME``, the logs (``logs/``) and the nodes' state (``state/``).
    split
        The files of ``fedmc federate split``.
    stock_nodes
        Run Flower's ``flower-supernode`` (a new ClientApp process per message) instead of
        ``fedmc federate node``.
    """

    def __init__(self, work: Path, split: Path, stock_nodes: bool = False) -> None:
        self.work = work.resolve()
        self.split = split.resolve()
        self.stock_nodes = stock_nodes
        self.n_clients = len(json.loads((self.split / "manifest.json").read_text())
                             ["client_rows"]) - 1
        self.port = 0
        self.processes: dict[str, subprocess.Popen] = {}
        self.marker = uuid.uuid4().hex
        home = self.work / "flwr-home"
        home.mkdir(parents=True, exist_ok=True)
        (self.work / "logs").mkdir(exist_ok=True)
        self.env = {**os.environ, MARKER: self.marker,
                    "FLWR_HOME": str(home), "FLWR_TELEMETRY_ENABLED": "0",
                    "FLWR_DISABLE_UPDATE_CHECK": "1", "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": "0.5",
                    "FLWR_LOG_LEVEL": "WARNING",  # Flower's commands beside this Python first:
                    "PATH": os.pathsep.join([str(Path(sys.executable).parent),
                                             os.environ.get("PATH", "")])}

    def __enter__(self) -> LocalFederation:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    @property
    def address(self) -> str:
        """The SuperLink's ``HOST:PORT``."""
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start the SuperLink and every node; return once the SuperLink answers."""
        self.port = free_port()
        (self.work / "flwr-home" / "config.toml").write_text(
            f'[superlink]\ndefault = "local"\n\n[superlink.local]\n'
            f'address = "{self.address}"\ninsecure = true\n')
        self.spawn("superlink", ["flower-superlink", "--insecure", "--host", "127.0.0.1",
                                 "--port", str(self.port),
                                 "--disable-runtime-dependency-installation"])
        self._wait_healthy()
        for c in range(self.n_clients):
            self.start_node(c)

    def start_node(self, client: int) -> None:
        """Start (or restart) the node of ``client``."""
        config = node_config(self.split, client, self.work / "state" / f"client-{client}")
        if self.stock_nodes:
            cmd = ["flower-supernode", "--insecure", "--superlink", self.address,
                   "--port", str(free_port()), "--node-config", config]
        else:
            cmd = [sys.executable, "-m", "fedmc", "federate", "node", "--insecure",
                   "--superlink", self.address, "--node-config", config]
        self.spawn(f"node-{client}", cmd)

    def spawn(self, name: str, cmd: list[str]) -> subprocess.Popen:
        """Start ``cmd`` in a session of its own, its output in ``logs/NAME.log`` (a signal
        waits until the process is recorded, so :meth:`stop` finds it)."""
        with signals_deferred(), open(self.work / "logs" / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
            self.processes[name] = proc
        return proc

    def kill(self, name: str) -> None:
        """SIGKILL one process (and its children), as a crash would."""
        proc = self.processes.pop(name)
        _signal_group(proc, signal.SIGKILL)
        proc.wait()

    def submit(self, app: Path, run_config: Path) -> int:
        """``flwr run``: the run's id."""
        done = self._flwr(["run", str(app), "local", "--run-config", str(run_config),
                           "--format", "json"])
        run_id = done.get("run-id")
        if not done.get("success") or run_id is None:
            raise FederationError(f"flwr run failed: {done}")
        return int(run_id)

    def wait(self, run_id: int, progress: Path,
             on_event: Callable[[dict[str, Any]], None] | None = None,
             check_every: float = 5.0) -> None:
        """Follow ``progress`` until the run is done (``on_event`` gets every new line);
        raise if the run fails or a node or the SuperLink exits. The run's status is asked
        (``flwr ls``, a second or two during which no line is read) only after ``check_every``
        seconds without a new line, so events reach ``on_event`` promptly while the run
        progresses."""
        seen = 0
        next_check = time.monotonic() + check_every
        while True:
            lines = complete_lines(progress)
            for line in lines[seen:]:
                event = json.loads(line)
                if on_event is not None:
                    on_event(event)
                if event["event"] == "done":
                    return
            if len(lines) > seen:
                next_check = time.monotonic() + check_every
            seen = len(lines)
            if time.monotonic() > next_check:
                self._check(run_id)
                next_check = time.monotonic() + check_every
            time.sleep(PROGRESS_POLL)

    def stop(self) -> None:
        """Stop every process of the deployment (module docstring): SIGTERM, then SIGKILL
        after a grace period; a signal that comes meanwhile waits until all are gone."""
        with signals_deferred():
            self._signal_all(signal.SIGTERM)
            deadline = time.monotonic() + GRACE
            for proc in self.processes.values():
                try:
                    proc.wait(max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
            while self._marked() and time.monotonic() < deadline:
                time.sleep(PROGRESS_POLL)
            for _ in range(10):  # a process started meanwhile is found again
                if not self._signal_all(signal.SIGKILL):
                    break
                time.sleep(PROGRESS_POLL)
            for proc in self.processes.values():
                proc.wait()
            self.processes.clear()

    def _signal_all(self, sig: signal.Signals) -> bool:
        """Send ``sig`` to the process group of every process started here and of every
        process with this deployment's marker; whether any was alive."""
        groups = {proc.pid for proc in self.processes.values() if proc.poll() is None}
        for pid in self._marked():
            try:
                groups.add(os.getpgid(pid))
            except ProcessLookupError:
                continue
        groups.discard(os.getpgrp())  # never this command's own group
        alive = False
        for pgid in groups:
            try:
                os.killpg(pgid, sig)
                alive = True
            except (ProcessLookupError, PermissionError):
                pass
        return alive

    def _marked(self) -> list[int]:
        """Processes whose environment holds this deployment's marker."""
        return marked_processes(f"{MARKER}={self.marker}")

    def _check(self, run_id: int) -> None:
        for name, proc in self.processes.items():
            if proc.poll() is not None:
                what = "the SuperLink" if name == "superlink" else name
                raise FederationError(f"{what} exited ({proc.returncode}); see "
                                      f"{self.work / 'logs' / name}.log")
        runs = self._flwr(["ls", "local", "--run-id", str(run_id), "--format", "json"])
        status = runs["runs"][0]["status"] if runs.get("runs") else "unknown"
        if status.startswith("finished") and status != "finished:completed":
            details = runs["runs"][0].get("status-details", "")
            raise FederationError(f"run {run_id} {status}: {details}")

    def _flwr(self, args: list[str]) -> dict[str, Any]:
        done = subprocess.run(["flwr", *args], env=self.env, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=120)
        text = done.stdout[done.stdout.find("{"):]
        try:
            return json.loads(text)
        except ValueError:
            raise FederationError(f"flwr {args[0]} failed: {done.stdout}{done.stderr}") from None

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.processes["superlink"].poll() is not None:
                break
            try:
                with urllib.request.urlopen(f"http://{self.address}/health", timeout=1):
                    return
            except OSError:
                time.sleep(PROGRESS_POLL)
        raise FederationError(f"the SuperLink did not start; see "
                              f"{self.work / 'logs' / 'superlink.log'}")


def run_local(run: FederatedRun, data: DataSettings, work: Path, stock_nodes: bool = False,
              on_event: Callable[[dict[str, Any], LocalFederation], None] | None = None,
              ) -> None:
    """Split ``data`` into ``work/split``, check the run's settings against it as the server
    will (:func:`fedmc.flower.server_app.preflight`), start a local deployment, run ``run`` on
    it and stop every process; ``on_event`` gets every line of the server's
    ``progress.jsonl`` with the federation (to report progress, or to kill and restart nodes
    in a test)."""
    split = work / "split"
    run, _ = prepared(run, data, split)
    run_config = write_run_config(work / "run.toml", run.run_config())
    with LocalFederation(work, split, stock_nodes) as fed:
        fed.start()
        run_id = fed.submit(write_app(work / "app"), run_config)
        fed.wait(run_id, run.out / "progress.jsonl",
                 None if on_event is None else (lambda event: on_event(event, fed)))


def prepared(run: FederatedRun, data: DataSettings, split: Path,
             ) -> tuple[FederatedRun, Manifest]:
    """``run`` on ``data`` split into ``split`` (its manifest there, its out claimed by the
    caller), its settings checked against the split as the server will
    (:func:`fedmc.flower.server_app.preflight`) before anything starts; the split's
    manifest."""
    run = run.model_copy(update={"manifest": (split / "manifest.json").resolve(),
                                 "out": run.out.resolve(), "overwrite": True})  # claimed
    run.config()  # bad parameters fail before anything starts
    run.privacy()
    manifest = write_split(data, split, boolean=run.algorithm.data_kind == "boolean")
    preflight(run, manifest)
    return run, manifest


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM back during the block, then handle the first that came as
    usual (in the main thread; elsewhere signals are not delivered anyway)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        caught.append(signum)

    previous = {s: signal.signal(s, hold) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if caught:
            signal.raise_signal(caught[0])


def marked_processes(marker: str) -> list[int]:
    """The processes of this user whose environment holds ``marker`` (``NAME=VALUE``), read
    from ``/proc`` (none where there is no ``/proc``)."""
    needle = marker.encode() + b"\0"
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if needle in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:  # gone, or another user's
            continue
    return found


def _signal_group(proc: subprocess.Popen, sig: signal.Signals) -> None:
    """Send ``sig`` to the process group of ``proc`` (the session it leads: its children
    too, even after ``proc`` itself has exited)."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass

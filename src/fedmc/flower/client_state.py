"""A client's private state, committed in two phases and kept on the node's disk.

A client step makes a *pending* state; it becomes the *committed* state only when the server
confirms that the exchange's sum included this client's reply: every message names the last
exchange of its recipient that the server included, and the pending state is committed if it
belongs to that exchange and dropped otherwise (exchanges are numbered in increasing order and
a client has at most one pending state, so this one number decides). A reply lost on the way,
a client dropped by secure aggregation, or a node killed mid-exchange therefore never leaves
client and server out of step: the pending state is dropped and the client goes on from the
state the server's sums reflect.

Both states are written to ``FOLDER/committed.pkl`` and ``FOLDER/pending.pkl`` (atomically,
before the reply leaves), so a node restarted after a crash resumes where the server believes
it is. The files name the run they belong to (the run's key, which the server makes afresh
for every submitted run and keeps in its checkpoint for a resume): a folder left by another run
starts afresh. When a run has ended the server tells its clients (:meth:`StateStore.finish`):
the states are removed and the key recorded in ``FOLDER/finished``, and a node asked to take
part in a run under that key again refuses (:class:`RunFinished`).
"""

from __future__ import annotations

import copy
import os
import pickle
import secrets
import tempfile
from pathlib import Path
from typing import Any

from fedmc.errors import ConfigError
from fedmc.flower.wire import NO_EXCHANGE

FINISHED = "finished"
"""The file of a state folder that lists the keys of the runs that have ended, one a line."""


class RunFinished(ConfigError):
    """A node was asked to take part in a run it has already finished."""


class StateStore:
    """The committed state and at most one pending state of one client of one run.

    Parameters
    ----------
    folder
        The node's state folder (its node configuration's ``state``).
    run
        The run's key; files of another run are ignored and replaced.

    Raises
    ------
    RunFinished
        The run ``run`` has already finished on this folder.
    """

    def __init__(self, folder: Path, run: str) -> None:
        self.folder = folder
        self.run = run
        folder.mkdir(parents=True, exist_ok=True)
        if run in finished_runs(folder):
            raise RunFinished(f"{folder}: run {run} has already finished here; a finished run "
                              f"is never continued (submit a new run)")
        committed: tuple[int, Any] = self._read("committed") or (NO_EXCHANGE, None)
        self._committed_at, self._committed = committed
        pending = self._read("pending")
        self._pending: tuple[int, Any] | None = pending
        self._secret: int | None = None

    @property
    def committed(self) -> Any:
        """The committed state (None before the first commit)."""
        return self._committed

    @property
    def held_exchange(self) -> int:
        """The latest exchange this folder holds a state of (pending or committed;
        :data:`NO_EXCHANGE` for the initial state). It never lags behind the last exchange
        whose reply the server included (the pending state is on disk before the reply
        leaves), so a node claiming a client with a smaller one holds a copy of an earlier
        folder (:meth:`fedmc.flower.grid_clients.GridClients.admit`)."""
        return self._committed_at if self._pending is None else self._pending[0]

    @property
    def pending_exchange(self) -> int:
        """The exchange whose result is pending, or :data:`NO_EXCHANGE`."""
        return NO_EXCHANGE if self._pending is None else self._pending[0]

    @property
    def noise_secret(self) -> int:
        """This client's secret in this run: 128 random bits from the operating system, made
        on first use and kept beside the states (``FOLDER/secret.pkl``, readable by its owner
        only). It seeds the client's shares of the DP noise, so an exchange repeated (a secure
        sum redone after an overflow, or the round a resumed run runs again) adds the same
        share again instead of releasing a second draw."""
        if self._secret is None:
            self._secret = self._read("secret")
        if self._secret is None:
            self._secret = secrets.randbits(128)
            self._write("secret", self._secret)
        return self._secret

    def start(self, state: Any) -> None:
        """Commit the initial state (when there is none yet)."""
        if self._committed is None:
            self._committed = state
            self._write("committed", (NO_EXCHANGE, state))

    def working_copy(self) -> Any:
        """A copy of the committed state for a client step to change."""
        return copy.deepcopy(self._committed)

    def propose(self, exchange: int, state: Any) -> None:
        """Keep ``state`` as the pending result of ``exchange`` (on disk before returning)."""
        if self._pending is not None:
            raise ConfigError(f"exchange {exchange} arrived before exchange "
                              f"{self._pending[0]} was decided")
        self._pending = (exchange, state)
        self._write("pending", self._pending)

    def decide(self, included: int) -> None:
        """Commit the pending state if it belongs to ``included``, the client's last exchange
        that the server included in a sum; drop it otherwise."""
        if self._pending is None:
            return
        if self._pending[0] == included:
            self._committed_at, self._committed = self._pending
            self._write("committed", self._pending)
        self._pending = None
        (self.folder / "pending.pkl").unlink(missing_ok=True)

    def finish(self) -> None:
        """The run has ended: record its key as finished and remove its states and secret."""
        with open(self.folder / FINISHED, "a") as fh:
            fh.write(self.run + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        for name in ("committed", "pending", "secret"):
            (self.folder / f"{name}.pkl").unlink(missing_ok=True)
        self._committed = self._pending = self._secret = None
        self._committed_at = NO_EXCHANGE

    def _read(self, name: str) -> Any:
        path = self.folder / f"{name}.pkl"
        if not path.exists():
            return None
        with open(path, "rb") as fh:
            run, value = pickle.load(fh)
        return value if run == self.run else None

    def _write(self, name: str, value: Any) -> None:
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=self.folder)
        try:
            with os.fdopen(fd, "wb") as fh:
                pickle.dump((self.run, value), fh, protocol=pickle.HIGHEST_PROTOCOL)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.folder / f"{name}.pkl")
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def finished_runs(folder: Path) -> set[str]:
    """The keys of the runs that have finished on the state folder ``folder``."""
    path = folder / FINISHED
    return set(path.read_text().split()) if path.exists() else set()


def identity(folder: Path) -> str:
    """A random token naming the state folder ``folder`` (made on first use, kept in
    ``FOLDER/identity``, readable by its owner only). A node restarted on the same folder
    presents the same token; a second node claiming the same client from a folder of its own
    presents another, so a server without a roster can tell the two apart
    (:mod:`fedmc.flower.grid_clients`)."""
    path = folder / "identity"
    folder.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    with os.fdopen(fd, "w") as fh:
        fh.write(secrets.token_hex(16) + "\n")
    return path.read_text().strip()

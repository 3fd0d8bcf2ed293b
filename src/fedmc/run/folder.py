"""A run's output folder: checked before any work, locked while in use, written atomically.

``fedmc run --out DIR`` claims ``DIR`` before it loads any data (:meth:`RunFolder.claim`):
it refuses a path that is a file or cannot be written, an earlier run's folder unless
``overwrite`` is set (and then removes that run's files first, so nothing of it can be taken
for the new run's output), and a folder another process holds (an ``fcntl`` lock on
``DIR/.lock``). ``status.json`` says ``running``, then ``finished`` or ``interrupted``; the
files of a finished run are written with :func:`fedmc.files.write_atomic`.

A command that can continue where it stopped (``fedmc tune``: its study) names itself
(``command``): ``status.json`` records it, and the folder of an interrupted run of the same
command (``interrupted``, or ``running`` with no process holding its lock: one killed without a
word) is claimed again with its files kept; an interrupted run of another command is refused
as any earlier run is.
"""

from __future__ import annotations

import fcntl
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from fedmc.errors import ConfigError
from fedmc.files import strict_json, write_atomic

STATUS_FILE = "status.json"
LOCK_FILE = ".lock"
#: The files a run writes (and ``fedmc evaluate``'s report on its model); an ``--overwrite``
#: removes them before the new run starts.
RUN_FILES = ("config.json", "history.csv", "summary.json", "model.npz", "model.json",
             "evaluation.json", STATUS_FILE)


class RunFolder:
    """The output folder of one run, held (locked) from :meth:`claim` to :meth:`release`.

    Parameters
    ----------
    path
        The folder; None picks a new folder ``runs/<time>-<label>`` (``-2``, ``-3``, ... when
        that name is taken, so two runs started in the same second never share one).
    label
        The default folder name's tail (algorithm and data).
    overwrite
        Replace an earlier run in ``path`` (else that is an error).
    files
        The files a run of this kind writes (``fedmc audit`` writes others than ``fedmc run``):
        their presence marks an earlier run; an ``overwrite`` removes them first.
    command
        The command of a run that can continue an interrupted one (module docstring); None: a
        run that always starts afresh.
    """

    def __init__(self, path: Path | None, label: str, overwrite: bool = False,
                 files: tuple[str, ...] = RUN_FILES, command: str | None = None):
        self.path = path
        self.label = label
        self.overwrite = overwrite
        self.files = files
        self.command = command
        self.resumed = False  # whether claim() took up an interrupted run of this command
        self._lock: IO[str] | None = None
        self._created = False

    def claim(self) -> Path:
        """Check, create and lock the folder; raise :class:`ConfigError` when it is unusable."""
        path = self.path if self.path is not None else _new_default_folder(self.label)
        if path.exists() and not path.is_dir():
            raise ConfigError(f"--out {path} is a file, not a folder")
        self._created = self.path is None or not path.exists()
        had_lock = (path / LOCK_FILE).exists()
        try:
            path.mkdir(parents=True, exist_ok=True)
            self._lock = open(path / LOCK_FILE, "a")  # noqa: SIM115 (held until release)
        except OSError as exc:
            raise ConfigError(f"--out {path}: cannot write there ({exc.strerror})") from None
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._close()
            raise ConfigError(f"--out {path} is in use by another run") from None
        earlier = [name for name in self.files if (path / name).exists()]
        left = _status(path) if earlier else {}
        self.resumed = bool(earlier) and not self.overwrite and self.command is not None and (
            left.get("status") in ("interrupted", "running")
            and left.get("command") == self.command)
        if earlier and not self.overwrite and not self.resumed:
            if not had_lock:  # refused: the folder stays as it was
                (path / LOCK_FILE).unlink()
            self._close()
            raise ConfigError(_refusal(path, earlier, left, self.command is not None))
        for name in [] if self.resumed else earlier:
            (path / name).unlink()
        self.path = path
        self.set_status("running")
        return path

    def set_status(self, status: str) -> None:
        """Record ``running``, ``finished`` or ``interrupted`` in ``status.json`` (with the
        command, when the run has one)."""
        assert self.path is not None
        details = {} if self.command is None else {"command": self.command}
        write_status(self.path / STATUS_FILE, status, **details)

    def release(self, status: str) -> None:
        """Record the final ``status`` (``finished`` or ``interrupted``) and drop the lock."""
        if self._lock is None:
            return
        try:
            self.set_status(status)
        finally:
            self._close()

    def abandon(self) -> None:
        """Undo :meth:`claim` after an error: the folder is as it was (the run's files that
        exist now are this run's: :meth:`claim` removed or refused any earlier ones), or, for a
        run that continued an interrupted one, interrupted again with its files kept."""
        if self._lock is None or self.path is None:
            return
        if self.resumed:
            self.release("interrupted")
            return
        for name in {*self.files, STATUS_FILE}:
            (self.path / name).unlink(missing_ok=True)
        (self.path / LOCK_FILE).unlink(missing_ok=True)
        self._close()
        if self._created:
            self.path.rmdir()

    def _close(self) -> None:
        if self._lock is not None:
            self._lock.close()  # closing the file releases the flock
            self._lock = None


def write_status(path: Path, status: str, **details: str) -> None:
    """Write a ``status.json`` at ``path`` (atomically): the status, this process's pid, the
    time and ``details`` (a reason, say)."""
    write_atomic(path, strict_json({
        "status": status, "pid": os.getpid(),
        "time": datetime.now(UTC).isoformat(timespec="seconds"), **details}))


def _status(path: Path) -> dict[str, object]:
    """The ``status.json`` in ``path`` (empty when there is none or it is unreadable)."""
    try:
        status = json.loads((path / STATUS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return status if isinstance(status, dict) else {}


def _refusal(path: Path, earlier: list[str], left: dict[str, object], resumable: bool) -> str:
    """Why ``path`` cannot be claimed without ``--overwrite``: an earlier run's files
    ``earlier`` (``left``: its ``status.json``); for a command that resumes, what would."""
    if resumable and left.get("status") in ("interrupted", "running"):
        return (f"--out {path} holds an interrupted run of another command "
                f"({left.get('command') or 'not recorded'}); rerun that command to continue "
                "it, pass --overwrite to replace it or choose another --out")
    return (f"--out {path} already holds a run ({', '.join(earlier)}); pass --overwrite to "
            "replace it or choose another --out")


def _new_default_folder(label: str) -> Path:
    """A folder ``runs/<time>-<label>[-n]`` that did not exist, created by this call."""
    base = Path("runs") / f"{datetime.now():%Y%m%d-%H%M%S}-{label}"
    base.parent.mkdir(parents=True, exist_ok=True)
    for n in range(1, 10_000):
        path = base if n == 1 else base.with_name(f"{base.name}-{n}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise ConfigError(f"no free folder name next to {base}; pass --out")

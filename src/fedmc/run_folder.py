"""The output folder of a run: checked before any work, locked while a run owns it, and marked
with the run's status, so that an interrupted or failed run is never taken for a finished one.

A folder holds one run. ``status.json`` says ``running``, ``finished``, ``interrupted`` or
``failed``; ``summary.json`` is written only by a finished run. A run refuses a folder that
holds an earlier run unless told to replace it (``--overwrite``: the earlier run's files are
removed before any work), and a folder that another live run holds (``.fedmc.lock`` with that
run's process id; a lock left by a dead process is taken over). The files themselves are
written atomically (:func:`fedmc.files.write_atomic`).
"""

from __future__ import annotations

import json
import os
import shutil
from datetime import datetime
from pathlib import Path

from fedmc.errors import ConfigError

RUN_FILES = ("config.json", "history.csv", "summary.json", "model.npz", "model.json",
             "status.json")
LOCK = ".fedmc.lock"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RunFolder:
    """A run's claim on its output folder (:meth:`claim`), released with a final status."""

    def __init__(self, path: Path, created: bool) -> None:
        self.path = path
        self.created = created

    @classmethod
    def claim(cls, path: Path | None, default_name: str, overwrite: bool = False) -> RunFolder:
        """Check and lock ``path`` (or a new folder ``runs/<time>-<default_name>``, made unique)
        before any work; mark it ``running``.

        Raises
        ------
        ConfigError
            ``path`` is a file, cannot be created or written, holds an earlier run (without
            ``overwrite``), or is held by another live run.
        """
        created = path is None or not path.exists()
        if path is None:
            path = _new_folder(Path("runs") / f"{datetime.now():%Y%m%d-%H%M%S}-{default_name}")
        if path.exists() and not path.is_dir():
            raise ConfigError(f"--out {path} is a file, not a folder")
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create --out {path}: {exc.strerror}") from None
        if not os.access(path, os.W_OK | os.X_OK):
            raise ConfigError(f"--out {path} is not writable")
        folder = cls(path, created)
        folder._lock()
        try:
            earlier = [name for name in RUN_FILES if (path / name).exists()]
            if earlier and not overwrite:
                raise ConfigError(f"--out {path} holds an earlier run ({', '.join(earlier)}); "
                                  f"choose another folder or add --overwrite to replace it")
            for name in earlier:
                (path / name).unlink()
            folder.mark("running")
        except BaseException:
            folder._unlock()
            raise
        return folder

    def mark(self, status: str, **details: object) -> None:
        """Write ``status.json`` (``running``, ``finished``, ``interrupted``, ``failed``)."""
        from fedmc.files import write_atomic

        body = {"status": status, "time": datetime.now().isoformat(timespec="seconds"),
                **details}
        write_atomic(self.path / "status.json", json.dumps(body, indent=2) + "\n")

    def release(self, status: str, **details: object) -> None:
        """Mark the final ``status`` and give up the lock."""
        try:
            self.mark(status, **details)
        finally:
            self._unlock()

    def fail(self, exc: BaseException) -> None:
        """Give up after an error: a folder this run created goes (nothing half-written is
        left), an existing one is marked ``failed`` with the reason."""
        if self.created and {p.name for p in self.path.iterdir()} <= {"status.json", LOCK}:
            shutil.rmtree(self.path, ignore_errors=True)
            return
        self.release("failed", reason=" ".join(str(exc).split()) or type(exc).__name__)

    def _lock(self) -> None:
        lock = self.path / LOCK
        for _ in range(2):
            try:
                fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                try:
                    pid = int(lock.read_text().strip() or 0)
                except (OSError, ValueError):
                    pid = 0
                if pid and _alive(pid):
                    raise ConfigError(f"--out {self.path} is in use by another run (process "
                                      f"{pid})") from None
                lock.unlink(missing_ok=True)  # left by a run that died: take it over
                continue
            except OSError as exc:
                raise ConfigError(f"--out {self.path} is not writable: {exc.strerror}") from None
            with os.fdopen(fd, "w") as fh:
                fh.write(f"{os.getpid()}\n")
            return
        raise ConfigError(f"--out {self.path}: another run took it at the same moment")

    def _unlock(self) -> None:
        (self.path / LOCK).unlink(missing_ok=True)


def _new_folder(path: Path) -> Path:
    """Create ``path``, or ``path-2``, ``path-3``, ... when it exists (two runs started in the
    same second get a folder each: creating a folder is atomic)."""
    n = 1
    while True:
        candidate = path if n == 1 else path.with_name(f"{path.name}-{n}")
        try:
            candidate.mkdir(parents=True)
        except FileExistsError:
            n += 1
            continue
        except OSError as exc:
            raise ConfigError(f"cannot create {candidate}: {exc.strerror}") from None
        return candidate


__all__ = ["LOCK", "RUN_FILES", "RunFolder"]

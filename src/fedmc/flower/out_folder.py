"""The ServerApp's output folder (``out``): where it is, whether a run may write there, and
what ``status.json`` says of the run.

Relative ``out`` and ``manifest`` paths in a run configuration are taken relative to the
folder named in :data:`RUNS_ENV`, which ``fedmc federate server`` sets (its ``--runs``,
default the folder it was started in); a ServerApp beside another SuperLink takes only
absolute ones (:func:`resolved`). A new run refuses an ``out`` that holds a run (any of
:data:`RUN_FILES`) unless ``overwrite`` is set, which removes that run's files first; a
resumed run continues the one there (:func:`claim`). While the run lasts ``status.json`` says
``running`` (with the run's key and the ServerApp's pid), then ``finished``, ``stopped``
(``flwr stop``, a signal) or ``failed`` with its reason in one line (:func:`recorded`); a
process killed before it could record the end gets ``failed`` from its watch
(:mod:`fedmc.flower.sentinel`) within a second; a run configuration that does not parse
leaves ``failed`` with the key it got wrong, in a new out folder (:func:`refused`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, cast

from fedmc.errors import ConfigError
from fedmc.flower.compat import RunNotRunningException
from fedmc.flower.sentinel import watch
from fedmc.flower.settings import FederatedRun
from fedmc.run.folder import RUN_FILES as SIMULATION_FILES
from fedmc.run.folder import STATUS_FILE, write_status

RUNS_ENV = "FEDMC_RUNS"
"""The environment variable that names the folder relative ``out`` and ``manifest`` paths
are taken in (``fedmc federate server`` sets it)."""
CHECKPOINT = "checkpoint.pkl"
"""The server's checkpoint in the out folder while a run is in progress (removed when it ends:
it holds the server's secrets, the random stream and who took part)."""
RUN_FILES = (*SIMULATION_FILES, "progress.jsonl", CHECKPOINT)
"""The files of a federated run in its out folder (their presence marks a run there)."""


def resolved(run: FederatedRun) -> FederatedRun:
    """``run`` with its ``out`` and ``manifest`` absolute (module docstring).

    Raises
    ------
    ConfigError
        A relative path without :data:`RUNS_ENV`.
    """
    paths = {}
    for name in ("out", "manifest"):
        path = getattr(run, name)
        located = _located(path)
        if located is None:
            raise ConfigError(f"{name} = {str(path)!r} is relative, and this SuperLink names "
                              f"no folder to take it in ({RUNS_ENV}, set by fedmc federate "
                              f"server): give an absolute path")
        paths[name] = located
    return run.model_copy(update=paths)


def _located(path: Path) -> Path | None:
    """``path`` absolute: as it is, or taken in the folder :data:`RUNS_ENV` names; None for a
    relative path where it names none."""
    base = os.environ.get(RUNS_ENV)
    if not path.is_absolute() and not base:
        return None
    return (Path(base or "/") / path).resolve()


def refused(config: Mapping[str, Any], exc: ConfigError) -> None:
    """Leave ``status.json`` saying ``failed``, with ``exc`` as its reason, in the out folder
    of a run configuration that did not parse: where its ``out`` can be read (a path, taken as
    :func:`resolved` takes it) and that folder holds no run (an earlier run's status is not
    replaced; the ServerApp's log has the line either way)."""
    out = config.get("out")
    folder = _located(Path(out)) if isinstance(out, str) and out else None
    if folder is None or any((folder / name).exists() for name in RUN_FILES):
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_status(folder / STATUS_FILE, "failed", reason=_reason(exc))
    except OSError:  # a folder it may not write: the log says it
        return


def claim(run: FederatedRun) -> None:
    """Make ``run.out`` ready for ``run``: a new run refuses a folder that holds a run unless
    ``run.overwrite`` (then that run's files are removed); a resumed run takes it as it is.

    Raises
    ------
    ConfigError
        ``out`` holds a run and neither ``overwrite`` nor ``resume`` is set.
    """
    if run.resume:
        return
    earlier = [name for name in RUN_FILES if (run.out / name).exists()]
    if earlier and not run.overwrite:
        raise ConfigError(f"out {run.out} already holds a run ({', '.join(earlier)}): choose "
                          f"another out, or set overwrite = true to replace it")
    for name in earlier:
        (run.out / name).unlink()
    run.out.mkdir(parents=True, exist_ok=True)


@contextmanager
def recorded(run: FederatedRun, key: str) -> Iterator[None]:
    """``status.json`` of the run in ``run.out`` while the block runs (module docstring),
    watched by :mod:`fedmc.flower.sentinel` for the process's death."""
    write_status(run.out / STATUS_FILE, "running", key=key)
    sentinel = watch(run.out / STATUS_FILE, key)
    try:
        yield
    except (RunNotRunningException, KeyboardInterrupt, SystemExit) as exc:
        write_status(run.out / STATUS_FILE, "stopped", reason=_reason(exc) or "stopped")
        raise
    except BaseException as exc:
        write_status(run.out / STATUS_FILE, "failed", reason=_reason(exc))
        raise
    else:
        write_status(run.out / STATUS_FILE, "finished", key=key)
    finally:
        cast(IO[bytes], sentinel.stdin).close()  # the end is recorded: the watch ends
        sentinel.wait()


def _reason(exc: BaseException) -> str:
    """An exception as one line."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__

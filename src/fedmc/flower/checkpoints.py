"""The server's checkpoint of a federation (``checkpoint.pkl`` in the run's out folder):
written after every round by a callback of the round loop (:class:`CheckpointWriter`), read back
by ``fedmc federate resume``. It holds the server's secrets (a private run's random stream,
who took part): never published, removed when the run ends."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from fedmc.core.protocol import Algorithm
from fedmc.errors import ConfigError
from fedmc.federation.callbacks import Callback
from fedmc.federation.loop import Checkpoint
from fedmc.federation.validation import EarlyStop
from fedmc.files import write_atomic
from fedmc.flower.out_folder import CHECKPOINT
from fedmc.flower.settings import FederatedRun

Saved = tuple[dict[str, Any], Checkpoint, EarlyStop | None]
"""What ``checkpoint.pkl`` holds: the run configuration, the loop's checkpoint and the run's
early-stopping watcher as it was then."""


class CheckpointWriter(Callback):
    """Writes the checkpoint after every round's exchange in ``out``, with the run
    configuration it belongs to and the run's early-stopping watcher ``stop``, atomically;
    never one whose model is not finite (the run stops; the last checkpoint stays). The run's
    algorithm, ``Config`` and configuration are built once, by the caller."""

    def __init__(self, out: Path, run_config: dict[str, Any], algorithm: Algorithm,
                 cfg: Any, stop: EarlyStop | None = None) -> None:
        self.out, self.run_config, self.algorithm, self.cfg = out, run_config, algorithm, cfg
        self.stop = stop

    def after_exchange(self, round: int, checkpoint: Callable[[], Checkpoint]) -> None:
        taken = checkpoint()
        model = self.algorithm.model(self.cfg, taken.server)
        if not all(np.isfinite(a).all() for a in model.values()):
            raise ConfigError(f"the server's model is not finite after round {round}: "
                              f"not checkpointed, the run stops")
        saved: Saved = (self.run_config, taken, self.stop)
        write_atomic(self.out / CHECKPOINT, lambda fh: pickle.dump(
            saved, fh, protocol=pickle.HIGHEST_PROTOCOL), private=True)


def stored_run_config(path: Path) -> dict[str, Any]:
    """The run configuration of the checkpoint at ``path`` (``fedmc federate resume``).

    Raises
    ------
    ConfigError
        No checkpoint there.
    """
    return _load_checkpoint(path)[0]


def _load_checkpoint(path: Path) -> Saved:
    if not path.is_file():
        raise ConfigError(f"{path}: no checkpoint to resume from (a run writes one after every "
                          "round and removes it when it ends)")
    with open(path, "rb") as fh:
        saved = pickle.load(fh)
    if not isinstance(saved, tuple) or len(saved) != 3:
        raise ConfigError(f"{path}: a checkpoint of another fedmc version: cannot resume it")
    return saved


def read_checkpoint(run: FederatedRun) -> tuple[Checkpoint, EarlyStop | None]:
    """The checkpoint in ``run.out`` and the run's early-stopping watcher then; it must be
    that of the same run (its settings and run key; ``resume`` aside).

    Raises
    ------
    ConfigError
        No checkpoint there, or one of another run.
    """
    path = run.out / CHECKPOINT
    config, checkpoint, stop = _load_checkpoint(path)
    mine = {**run.run_config(), "resume": False}
    if {**config, "resume": False} != mine:
        changed = sorted(k for k in mine if config.get(k) != mine[k] and k != "resume")
        raise ConfigError(f"{path}: the checkpoint of another run (differs in "
                          f"{', '.join(changed)})")
    return checkpoint, stop

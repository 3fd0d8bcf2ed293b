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
from fedmc.files import write_atomic
from fedmc.flower.out_folder import CHECKPOINT
from fedmc.flower.settings import FederatedRun


class CheckpointWriter(Callback):
    """Writes the checkpoint after every round's exchange in ``out``, with the run
    configuration it belongs to, atomically; never one whose model is not finite (the run
    stops; the last checkpoint stays). The run's algorithm, ``Config`` and configuration are
    built once, by the caller."""

    def __init__(self, out: Path, run_config: dict[str, Any], algorithm: Algorithm,
                 cfg: Any) -> None:
        self.out, self.run_config, self.algorithm, self.cfg = out, run_config, algorithm, cfg

    def after_exchange(self, round: int, checkpoint: Callable[[], Checkpoint]) -> None:
        taken = checkpoint()
        model = self.algorithm.model(self.cfg, taken.server)
        if not all(np.isfinite(a).all() for a in model.values()):
            raise ConfigError(f"the server's model is not finite after round {round}: "
                              f"not checkpointed, the run stops")
        write_atomic(self.out / CHECKPOINT, lambda fh: pickle.dump(
            (self.run_config, taken), fh, protocol=pickle.HIGHEST_PROTOCOL), private=True)


def stored_run_config(path: Path) -> dict[str, Any]:
    """The run configuration of the checkpoint at ``path`` (``fedmc federate resume``).

    Raises
    ------
    ConfigError
        No checkpoint there.
    """
    return _load_checkpoint(path)[0]


def _load_checkpoint(path: Path) -> tuple[dict[str, Any], Checkpoint]:
    if not path.is_file():
        raise ConfigError(f"{path}: no checkpoint to resume from (a run writes one after every "
                          "round and removes it when it ends)")
    with open(path, "rb") as fh:
        return pickle.load(fh)


def read_checkpoint(run: FederatedRun) -> Checkpoint:
    """The checkpoint in ``run.out``, which must be that of the same run (its settings and
    run key; ``resume`` aside).

    Raises
    ------
    ConfigError
        No checkpoint there, or one of another run.
    """
    path = run.out / CHECKPOINT
    config, checkpoint = _load_checkpoint(path)
    mine = {**run.run_config(), "resume": False}
    if {**config, "resume": False} != mine:
        changed = sorted(k for k in mine if config.get(k) != mine[k] and k != "resume")
        raise ConfigError(f"{path}: the checkpoint of another run (differs in "
                          f"{', '.join(changed)})")
    return checkpoint

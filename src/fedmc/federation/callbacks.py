"""What the round loop tells those who watch it: one protocol, :class:`Callback`.

The loop (:func:`fedmc.federation.loop.run_rounds`) calls every callback it was given

* :meth:`Callback.begin` before its first round (any may say the run has already stopped);
* :meth:`Callback.after_round` once a round's row is final (its evaluation written, or the
  round not evaluated: ``row`` None), round 0 (the model before training) included; a callback
  returning True asks the loop to stop before its next round (early stopping, a search's
  pruning);
* :meth:`Callback.after_exchange` right after each round's exchange, with a way to take the
  loop's :class:`~fedmc.federation.loop.Checkpoint` (a real federation's server writes it).

One class per concern: progress displays (:class:`Progress`, which wraps a function of
``(round, row or None)``), early stopping (:class:`fedmc.federation.validation.EarlyStop`),
a search's pruning (:class:`fedmc.tune.pruning.Pruning`), a federation's checkpoints and its
progress log (:mod:`fedmc.flower.checkpoints`, :mod:`fedmc.flower.progress_log`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from fedmc.federation.loop import Checkpoint

ProgressFunction = Callable[[int, dict[str, float] | None], None]
"""A function told ``(round, row or None)`` after every round from 1 on (a progress bar)."""


@dataclass(frozen=True)
class RoundEnd:
    """A round whose row is final: ``row`` (the history's, None where the round was not
    evaluated), the ``model`` it evaluated (empty in a private run, whose rows hold no
    metrics, and where the round was not evaluated) and whether any client ``answered`` the
    evaluation (a federation may lose them all)."""

    round: int
    row: dict[str, float] | None
    model: Mapping[str, np.ndarray]
    answered: bool


class Callback:
    """A watcher of the round loop; each method does nothing unless a subclass says."""

    def begin(self, start: int) -> bool:
        """The loop starts at round ``start`` (1, or the round after a resumed checkpoint's);
        True: it stops before that round (a resumed run that had stopped)."""
        return False

    def after_round(self, end: RoundEnd) -> bool:
        """Round ``end.round``'s row is final; True asks the loop to stop."""
        return False

    def after_exchange(self, round: int, checkpoint: Callable[[], Checkpoint]) -> None:
        """Round ``round``'s exchange is done; ``checkpoint()`` is the loop's state now."""


class Progress(Callback):
    """A progress function (:data:`ProgressFunction`) as a callback: told every round from 1
    on."""

    def __init__(self, function: ProgressFunction) -> None:
        self.function = function

    def after_round(self, end: RoundEnd) -> bool:
        if end.round > 0:
            self.function(end.round, end.row)
        return False


RoundCallback = Callback | ProgressFunction | Sequence[Callback]
"""What a caller may hand the loop: a :class:`Callback`, several, or a progress function."""


def callbacks_of(given: RoundCallback | None) -> list[Callback]:
    """``given`` as a list of callbacks (a progress function wrapped in :class:`Progress`)."""
    if given is None:
        return []
    if isinstance(given, Callback):
        return [given]
    if isinstance(given, Sequence):
        return list(given)
    return [Progress(given)]

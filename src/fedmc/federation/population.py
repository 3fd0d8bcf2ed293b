"""The clients of a run as the round loop sees them: a population that carries out messages,
and what an exchange brings back.

Every driver supplies a :class:`ClientPopulation`: the simulation's batched and per-client
populations (:mod:`fedmc.sim.clients`) and a real federation's clients on Flower
(``fedmc.flower.grid_clients``). The loop (:mod:`fedmc.federation.loop`) sends a message with
:meth:`ClientPopulation.exchange`; the population runs the client steps (wherever its clients
live), has each upload prepared as the run's aggregator says (:mod:`fedmc.federation.
aggregator`: clipping under DP) and returns the :class:`Exchange`, whose sum the aggregator
formed or secure aggregation returned. What is released to the server step is then decided by
the aggregator alone (:meth:`fedmc.federation.aggregator.Aggregator.release`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np

from fedmc.core.protocol import Message
from fedmc.core.uploads import Summed

if TYPE_CHECKING:
    from fedmc.federation.aggregator import Aggregator

Party = Literal["server", "clients"]


@dataclass(frozen=True)
class Placement:
    """Who draws each kind of noise in a population (:mod:`fedmc.federation.aggregator`).

    Attributes
    ----------
    local_noise
        The algorithm's own local DP noise (RFRec's Eq. 9, Felb's Sec. 3.3): ``"clients"``
        add it to their uploads themselves (a real federation); ``"server"``: the simulation
        draws the sum of the cohort's noise on the sum, which has the same distribution.
    user_dp
        User-level DP noise on the sum: ``"server"`` adds it (central DP; in simulation, the
        same distribution as the shares); ``"clients"`` add shares of it inside secure
        aggregation (distributed DP), the server only the shares of lost members.
    uploads_seen
        Whether the server process receives each client's upload (a plain real federation:
        it sums them itself), so that user-level DP holds against everyone but it. A
        simulation's server step is handed sums only, as a secure sum's is: the guarantee
        against the server it reports is that of a deployment under secure aggregation.
    """

    local_noise: Party = "server"
    user_dp: Party = "server"
    uploads_seen: bool = False


SIMULATED = Placement()
"""Every noise drawn on the sum by the server's stream: the simulation's placement."""


def federation_placement(secure: bool) -> Placement:
    """Who draws which noise in a real federation: the clients their own local noise; under
    secure aggregation (``secure``) also their shares of the user-level DP noise (distributed
    DP), otherwise the server adds it (central DP: the server process sees every upload
    anyway)."""
    return Placement("clients", "clients" if secure else "server", uploads_seen=not secure)


@dataclass(frozen=True)
class Exchange:
    """What one message brought back to the server.

    Attributes
    ----------
    summed
        The cohort sum of the uploads that arrived, as the clients sent them (with their own
        noise where the population's :class:`Placement` has them add it).
    bytes_up
        Bytes the clients sent.
    message
        The message as it was carried out: ``compute`` and ``upload`` hold only the clients
        whose replies were included (the message itself when none was lost).
    sums
        The evaluation sums of the model the exchange carried (``exchange(..., evaluate=)``),
        taken by every client before its step; None when it carried none.
    dp_share
        The share of the user-level DP noise's variance that the clients added to ``summed``
        themselves (distributed DP: the members whose shares are in the sum; 0 otherwise).
    """

    summed: Summed
    bytes_up: int
    message: Message
    sums: dict[str, float] | None = None
    dp_share: float = 0.0


def carried_out(msg: Message, included: np.ndarray) -> Message:
    """``msg`` as it was carried out when only the clients ``included`` answered: ``compute``
    and ``upload`` keep those clients (``msg`` itself when every client answered)."""
    if np.isin(msg.compute, included).all():
        return msg
    return Message(msg.round, msg.phase, msg.compute[np.isin(msg.compute, included)],
                   msg.upload[np.isin(msg.upload, included)], msg.arrays, msg.flags)


class ClientPopulation(Protocol):
    """The clients of a run.

    ``folds_evaluation``: True for a population whose exchanges cost far more than the clients'
    work (a real federation, where every exchange is a round trip through the SuperLink). The
    loop then evaluates a round's model along with the next round's message
    (``exchange(msg, aggregator, evaluate=model)``) instead of in an exchange of its own; the
    history is the same either way. ``placement``: who draws which noise
    (:class:`Placement`).
    """

    folds_evaluation: bool

    @property
    def placement(self) -> Placement:
        """Who draws which noise (an attribute or a property)."""
        ...

    def exchange(self, msg: Message, aggregator: Aggregator,
                 evaluate: Mapping[str, np.ndarray] | None = None) -> Exchange:
        """Deliver ``msg``; the sum of the uploads that came back, each prepared and summed as
        ``aggregator`` says. With ``evaluate``, every client first adds its evaluation sums
        under that model (on its state before the step) to :attr:`Exchange.sums`."""
        ...

    def evaluate(self, model: Mapping[str, np.ndarray]) -> dict[str, float]:
        """Every client's evaluation sums under the published ``model``, added up."""
        ...

    def user_factors(self) -> np.ndarray:
        """All user factors in federated row order (simulation only)."""
        ...

    def snapshot(self) -> Any:
        """What the population keeps that a resumed run needs (the clients' states in a
        simulation; the server's view of its clients in a federation), as it is now: pickle it
        at once (:class:`fedmc.federation.loop.Checkpoint`)."""
        ...

    def restore(self, snapshot: Any) -> None:
        """Take up a :meth:`snapshot`."""
        ...

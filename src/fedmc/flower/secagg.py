"""Secure aggregation: every upload and every evaluation summed by SecAgg+, so the server
learns only cohort sums.

Flower's SecAgg+ (``SecAggPlusWorkflow`` on the server, ``secaggplus_mod`` on the clients)
sums integer vectors under pairwise and private masks, in four exchanges (setup, share keys,
collect masked vectors, unmask). It takes floats through fixed-point quantization: a value in
``[-clip, clip]`` becomes an integer in ``[0, T]``, rounded stochastically, and values outside
are clipped without a word. Here nothing is clipped silently:

* every named array (an upload, or one evaluation sum) is scaled by its own power of two
  ``2^-e`` before quantization with ``clip = 1``, so it needs ``|x| < 2^e``;
* each client adds to the secure vector, per name, a flag (its values exceed the range) and a
  one-hot histogram of the binary exponent of its largest magnitude; their sums reveal how
  many clients overflowed and how large the cohort's values are, nothing else;
* if any client overflowed, the sum is thrown away and the exchange is repeated with the
  exponents the histograms show (clients redo the step from their committed state); the next
  exchange of the same name starts from the cohort's largest exponent plus
  :data:`HEADROOM`, so its values may grow fourfold before a repeat (each repeat costs the
  four stages again).

Under user-level DP the sum is the Skellam mechanism's integer sum (:mod:`fedmc.privacy.
skellam`): every member sends its upload in integer units plus its integer share of the noise,
modulo ``M = 2^30`` (:meth:`fedmc.federation.aggregator.Aggregator.member_integers`), as the
values ``w / 2^29 - 1`` in ``[-1, 1)``, which the stock quantizer maps back to exactly ``w``
(``(v + 1) 2^29`` is an integer: its stochastic rounding leaves it alone). The secure sum of the
``w`` comes back exactly (the float mean the workflow returns times the members, read to the
nearest integer: its error is below ``n 2^-22`` units); reduced modulo ``M`` it is the
mechanism's noised sum. Nothing else is sent: no flag, no histogram, no repeat; the scale comes
from public settings, and a sum beyond the field wraps (post-processing of the noised sum: no
privacy lost; the scale makes it vanishingly rare). A private run takes no evaluation; a
reproducible one evaluates in a secure sum of its own before the step
(:meth:`fedmc.flower.grid_clients.GridClients.exchange`).

The server scales each sum back with the exponents it sent, never with what a client reports,
and never unmasks a sum that would hold the uploads of fewer than two clients
(:class:`RobustSecAggPlusWorkflow` halts before the unmask stage): such a sum would be one
client's upload.

Precision: with ``T = 2^30`` a quantum is ``2^(e-29)``, at most ``2^-26`` (1.5e-8) of the
largest value in the cohort (``2^(e-3) <= max |x| < 2^(e-2)`` after an adjustment, ``e`` two
more than the binary exponent of ``max |x|``); each client's stochastic rounding errs by less
than one quantum,
so an entry of a sum of ``n`` uploads is within ``n * 2^(e-29)`` of the exact sum (typically
``sqrt(n)/2`` quanta). The modulus is a power of two above ``n (T + 1)``.

Dropouts: the stock workflow aborts the round when a node is lost in its first two stages
("Not enough shares to recover secret"): its unmask stage still expects secret shares of
nodes that never shared their keys, and would remove pairwise masks with them that no one
added. :class:`RobustSecAggPlusWorkflow` forgets such nodes after each of those stages, so a
node lost at any stage only leaves the sum (a node lost in the unmask stage stays in it: its
masked vector arrived and the others hold its shares).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.common import (
    Code,
    FitIns,
    FitRes,
    Status,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from flwr.server import LegacyContext
from flwr.server.workflow import SecAggPlusWorkflow

from fedmc.core.protocol import Message as ProtocolMessage
from fedmc.core.uploads import Summed, secure_sum
from fedmc.errors import ConfigError
from fedmc.flower.compat import (
    MAIN_CONFIGS_RECORD,
    MAIN_PARAMS_RECORD,
    WorkflowKey,
    WorkflowState,
    fitres_to_recorddict,
    recorddict_to_fitins,
)
from fedmc.flower.transport import PromptGrid
from fedmc.flower.wire import Envelope
from fedmc.privacy.skellam import MODULUS

if TYPE_CHECKING:
    from fedmc.flower.client_app import Party
    from fedmc.flower.compat import Strategy
    from fedmc.flower.grid_clients import GridClients

QUANTIZATION = 2**30  # the largest power of two the stock quantizer's int32 holds
CLIP = 1.0
LOWEST_EXPONENT = -100
EXPONENTS = 200  # histogram buckets: exponent LOWEST_EXPONENT + b for b >= 1; b = 0: all zero
ATTEMPTS = 3
EVALUATION = "evaluation:"  # names of the evaluation sums a client step carries
HEADROOM = 2  # bits between the largest magnitude seen and the range of the next exchange
MIN_UPLOADERS = 2  # a secure sum of fewer uploads would be one client's upload
HALF_FIELD = MODULUS // 2  # a member's integer w in [0, M) travels as w / HALF_FIELD - 1


class RobustSecAggPlusWorkflow(SecAggPlusWorkflow):
    """SecAgg+ that survives the loss of a node at any stage (module docstring), and never
    unmasks a sum that holds the uploads of fewer than two of ``uploaders`` (node ids: the
    members whose vectors carry an upload, the others add zeros or only evaluation sums):
    such a sum would be one client's upload.
    """

    def __init__(self, *args: Any, uploaders: frozenset[int] = frozenset(),
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.uploaders = uploaders

    def setup_stage(self, grid: Any, context: LegacyContext, state: WorkflowState) -> bool:
        """The stock setup stage, then forget the nodes that did not answer it."""
        if not super().setup_stage(grid, context, state) and not state.nid_to_neighbours:
            return False  # nothing was sent: fewer than two clients
        return self._forget_lost(state)

    def share_keys_stage(self, grid: Any, context: LegacyContext,
                         state: WorkflowState) -> bool:
        """The stock share-keys stage (whose threshold check still counts the lost nodes),
        then forget the nodes that shared no keys."""
        super().share_keys_stage(grid, context, state)
        return self._forget_lost(state)

    def collect_masked_vectors_stage(self, grid: Any, context: LegacyContext,
                                     state: WorkflowState) -> bool:
        """The stock stage; halt before the unmask stage when the masked vectors that came
        hold the uploads of fewer than two clients (but some)."""
        if not super().collect_masked_vectors_stage(grid, context, state):
            return False
        arrived = len(self.uploaders & state.active_node_ids)
        return arrived == 0 or arrived >= MIN_UPLOADERS

    def _forget_lost(self, state: WorkflowState) -> bool:
        """Nodes outside ``active_node_ids`` never shared keys: no one masked with them, so
        the unmask stage must neither ask for their shares nor remove masks with them."""
        alive = set(state.active_node_ids)
        state.sampled_node_ids = alive
        state.nid_to_neighbours = {nid: nbrs & alive for nid, nbrs in
                                   state.nid_to_neighbours.items() if nid in alive}
        return self._check_threshold(state)


@dataclass(frozen=True)
class _Node:
    """The stand-in of a legacy ``ClientProxy``: the workflow only reads ``node_id``."""

    node_id: int


@dataclass
class _Strategy:
    """The two strategy methods the workflow calls: hand out the prepared instructions, and
    keep the aggregate with the nodes it came from."""

    instructions: dict[int, FitIns]
    mean: list[np.ndarray] | None = None
    results: list[tuple[_Node, FitRes]] = field(default_factory=list)

    def configure_fit(self, server_round: int, parameters: Any,
                      client_manager: Any) -> list[tuple[_Node, FitIns]]:
        return [(_Node(node), fitins) for node, fitins in self.instructions.items()]

    def aggregate_fit(self, server_round: int, results: list[tuple[_Node, FitRes]],
                      failures: list[Any]) -> tuple[None, dict]:
        self.results = results
        if results:
            self.mean = parameters_to_ndarrays(results[0][1].parameters)
        return None, {}


def secure_mean(grid: Any, instructions: dict[int, FitIns], timeout: float | None,
                workflow: type[SecAggPlusWorkflow] = RobustSecAggPlusWorkflow,
                uploaders: frozenset[int] = frozenset(),
                ) -> tuple[list[np.ndarray] | None, list[tuple[int, FitRes]]]:
    """One SecAgg+ round over the nodes of ``instructions`` (every weight 1): the mean of the
    vectors that were included (None when the round failed, or, for the robust workflow,
    when fewer than two of ``uploaders`` would be in it) and each included node's ``FitRes``
    (its metrics are in clear; its parameters are the aggregate)."""
    strategy = _Strategy(instructions)
    state = RecordDict({MAIN_CONFIGS_RECORD: ConfigRecord({WorkflowKey.CURRENT_ROUND: 0}),
                        MAIN_PARAMS_RECORD: ArrayRecord()})
    # the workflow calls the two methods _Strategy has, no other of a Strategy's
    context = LegacyContext(Context(0, 0, {}, state, {}), strategy=cast("Strategy", strategy))
    n = len(instructions)
    modulus = 1 << (QUANTIZATION.bit_length() + n.bit_length() + 1)  # > n (T + 1)
    guard = {"uploaders": uploaders} if uploaders else {}
    workflow(num_shares=1.0, reconstruction_threshold=0.5, max_weight=1.0, clipping_range=CLIP,
             quantization_range=QUANTIZATION, modulus_range=modulus,
             timeout=timeout, **guard)(grid, context)
    return strategy.mean, [(node.node_id, res) for node, res in strategy.results]


def encode(values: Mapping[str, np.ndarray | float], exponents: Mapping[str, int],
           ) -> tuple[list[np.ndarray], list[str]]:
    """A client's secure vector: each named array scaled by ``2^-e``, then one overflow flag
    and one exponent histogram per name (module docstring); and the names in order."""
    names = sorted(values)
    vector, flags = [], np.zeros(len(names))
    histogram = np.zeros((len(names), EXPONENTS))
    for i, name in enumerate(names):
        x = np.atleast_1d(np.asarray(values[name], dtype=np.float64)).ravel()
        largest = float(np.max(np.abs(x))) if x.size else 0.0
        if not math.isfinite(largest):
            raise ConfigError(f"upload {name!r} is not finite")
        e = exponents.get(name, 0)
        vector.append(np.ldexp(x, -e))
        flags[i] = float(largest >= 2.0**e)
        histogram[i, _bucket(largest)] = 1.0
    return [*vector, flags, histogram], names


def encode_integers(values: Mapping[str, np.ndarray]) -> tuple[list[np.ndarray], list[str]]:
    """A member's secure vector under user-level DP: its integers ``w`` in ``[0, M)`` (its
    upload and noise share modulo the field) as ``w / 2^29 - 1``, which the quantizer maps
    back to ``w`` exactly (module docstring); and the names in order."""
    names = sorted(values)
    return [np.ravel(values[name]) / HALF_FIELD - 1.0 for name in names], names


def decode_integers(total: np.ndarray, members: int) -> np.ndarray:
    """The sum of the members' integers from the workflow's total (its mean times the
    ``members``): each member's ``w`` arrived as ``w / 2^29 - 1`` (:func:`encode_integers`)."""
    return np.rint((total + members) * HALF_FIELD)


def _bucket(largest: float) -> int:
    """Histogram bucket of a client's largest magnitude (0: all zero)."""
    if largest == 0.0:
        return 0
    return int(np.clip(math.frexp(largest)[1] - LOWEST_EXPONENT, 1, EXPONENTS - 1))


def _exponents(histogram: np.ndarray, names: list[str]) -> dict[str, int]:
    """The largest exponent each name's histogram shows, plus :data:`HEADROOM`."""
    out = {}
    for name, counts in zip(names, histogram, strict=True):
        seen = np.flatnonzero(np.rint(counts) > 0)
        if len(seen) and seen[-1] > 0:
            out[name] = int(seen[-1]) + LOWEST_EXPONENT + HEADROOM
    return out


@dataclass(frozen=True)
class SecureExchange:
    """What a secure client step brought back: the sum of the uploads, the clients whose step
    it included, the bytes sent, the summed evaluation it carried with the clients it
    included (None without one), and the share of the DP noise's variance the members added
    (the included share of them; 0 without distributed DP)."""

    summed: Summed
    included: list[int]
    nbytes: int
    sums: dict[str, float] | None
    evaluated: list[int]
    dp_share: float = 0.0


class SecureSum:
    """The secure exchanges of :class:`fedmc.flower.grid_clients.GridClients`: client steps
    whose uploads, and evaluations whose sums, only SecAgg+ adds up."""

    def __init__(self, max_norm: float = math.inf) -> None:
        self.exponents: dict[str, dict[str, int]] = {"step": {}, "evaluate": {}}
        self.max_norm = max_norm

    def exchange(self, clients: GridClients, number: int, msg: ProtocolMessage,
                 shapes: Mapping[str, tuple[int, ...]],
                 model: Mapping[str, np.ndarray] | None = None,
                 dp: Mapping[str, Any] | None = None) -> SecureExchange:
        """The client step of ``msg.compute`` (clients that do not upload add zeros) and, with
        ``model``, every client's evaluation of it, in one secure sum. ``dp``: the
        user-level DP settings the members are told
        (:meth:`fedmc.federation.aggregator.Aggregator.secure_settings`; then no ``model``):
        the sum is the Skellam mechanism's integer sum, each member adding its share of the
        noise; a member lost leaves its share out (:attr:`SecureExchange.dp_share`)."""
        if dp and model is not None:
            raise ValueError("an integer secure sum carries no evaluation")
        members = msg.compute if model is None else clients.everyone
        dp = dict(dp or {})
        sums, included, nbytes = self._run(clients, number, msg, members, "step", model, dp)
        computing = set(msg.compute.tolist())
        computed = [c for c in included if c in computing]
        weight = dict(zip(*np.unique(msg.upload, return_counts=True), strict=True))
        arrays = {name: sums[name].reshape(shape) if name in sums else np.zeros(shape)
                  for name, shape in shapes.items()}
        evaluation = None if model is None else {
            name[len(EVALUATION):]: float(v[0]) for name, v in sums.items()
            if name.startswith(EVALUATION)}
        return SecureExchange(secure_sum(arrays, int(sum(weight.get(c, 0) for c in computed))),
                              computed, nbytes, evaluation, included,
                              len(included) / len(members) if dp else 0.0)

    def evaluate(self, clients: GridClients, number: int, msg: ProtocolMessage,
                 model: Mapping[str, np.ndarray]) -> tuple[dict[str, float], list[int]]:
        """Every client's evaluation of ``model``: the summed sums and the included clients."""
        learned = self.exponents["step"].items()  # scales of evaluations carried by steps
        for name, e in learned:
            if name.startswith(EVALUATION):
                self.exponents["evaluate"].setdefault(name[len(EVALUATION):], e)
        sums, included, _ = self._run(clients, number, msg, clients.everyone, "evaluate",
                                      model)
        return {name: float(v[0]) for name, v in sums.items()}, included

    def _run(self, clients: GridClients, number: int, msg: ProtocolMessage,
             members: np.ndarray, kind: str, model: Mapping[str, np.ndarray] | None,
             dp: Mapping[str, Any] | None = None,
             ) -> tuple[dict[str, np.ndarray], list[int], int]:
        exponents = self.exponents[kind]
        for _ in range(ATTEMPTS):
            nodes = clients.nodes(members)
            client_of = {node: c for c, node in nodes.items()}
            sent = dict(exponents)  # the scales the clients apply: the server's own record
            fitins = _fitins(clients.envelope(number, msg, nodes, model, kind=kind,
                                              exponents=sent, **(dp or {})))
            instructions = dict.fromkeys(nodes.values(), fitins)
            uploaders = frozenset(nodes[c] for c in np.unique(msg.upload).tolist()
                                  if c in nodes) if kind == "step" else frozenset()
            mean, results = (None, []) if len(nodes) < 2 else secure_mean(
                PromptGrid(clients.grid), instructions,
                clients.timeout_for(nodes.values(), msg.phase), uploaders=uploaders)
            silent = sorted(client_of[node] for node in
                            set(client_of) - {node for node, _ in results})
            if silent:  # lost in one of SecAgg+'s stages (a timeout, a node gone)
                clients.note(number, msg.round, "timed out", silent, "no part in the secure "
                             f"sum within its stages (clients {silent})")
            if mean is None:
                return {}, [], 0
            clients.warm.update((node, msg.phase) for node, _ in results)
            names = _agreed_names(results)
            integer = bool(dp)  # no flags, no histogram, no repeat
            if names is None or len(mean) != len(names) + (0 if integer else 2):
                clients.note(number, msg.round, "refused", members, "the members disagree on "
                             "the parts of the secure vector: nobody is included")
                return {}, [], 0
            total = [a * len(results) for a in mean]
            if integer:
                sums = {name: decode_integers(total[i], len(results))
                        for i, name in enumerate(names)}
            else:
                flags, histogram = total[len(names)], total[len(names) + 1]
                exponents.update(_exponents(histogram, names))
                self._cap(exponents, msg)
                sums = {name: np.ldexp(total[i], sent.get(name, 0))
                        for i, name in enumerate(names)}
            if integer or np.rint(flags).max(initial=0) == 0:
                included = sorted(client_of[node] for node, _ in results)
                size = sum(a.size for a in mean)
                return sums, included, 8 * size * len(results)
        clients.note(number, msg.round, "refused", members, f"the secure sum still overflows "
                     f"after {ATTEMPTS} attempts (a member beyond its range): nobody is "
                     f"included")
        return {}, [], 0

    def _cap(self, exponents: dict[str, int], msg: ProtocolMessage) -> None:
        """Keep the uploads' scales within what clients clipped to ``max_norm`` can need
        (every entry of an upload at most its multiplicity times the bound), so that a member
        that claims more cannot widen the range the sum admits: the exchange fails instead."""
        if not math.isfinite(self.max_norm) or not len(msg.upload):
            return
        most = int(np.unique(msg.upload, return_counts=True)[1].max())
        cap = math.frexp(most * self.max_norm)[1] + HEADROOM
        for name, e in exponents.items():
            if not name.startswith(EVALUATION):
                exponents[name] = min(e, cap)


def _agreed_names(results: list[tuple[int, FitRes]]) -> list[str] | None:
    """The names of the secure vector's parts, which every included client must report alike
    (they are summed part by part); None when they do not, or one reports none."""
    try:
        names = [json.loads(str(res.metrics["names"])) for _, res in results]
    except (KeyError, ValueError):
        return None
    if any(n != names[0] for n in names) or not isinstance(names[0], list):
        return None
    return [str(n) for n in names[0]]


def _fitins(envelope: Envelope) -> FitIns:
    payload = envelope.payload()
    return FitIns(ndarrays_to_parameters([payload[name] for name in sorted(payload)]),
                  {"header": envelope.header(), "payload": json.dumps(sorted(payload))})


def unpack_secure(msg: Message) -> Envelope:
    """The exchange that a message of the masked-vector stage carries."""
    fitins = recorddict_to_fitins(msg.content, keep_input=True)
    names = json.loads(str(fitins.config["payload"]))
    payload = dict(zip(names, parameters_to_ndarrays(fitins.parameters), strict=True))
    return Envelope.from_header(str(fitins.config["header"]), payload)


def contribute(msg: Message, envelope: Envelope, party: Party) -> Message:
    """A client's answer in the masked-vector stage (``msg``, which carries ``envelope``):
    its evaluation sums, if the message carries a model, and its step's uploads times its
    multiplicity (zeros when it does not upload), or only its evaluation sums, as a secure
    vector."""
    exponents = envelope.extra["exponents"]
    values: dict[str, np.ndarray | float]
    if envelope.extra["kind"] == "step":
        values = {} if envelope.model is None else {
            EVALUATION + name: v for name, v in party.evaluate(envelope).items()}
        uploads, weight = ({}, 0) if party.client not in envelope.message.compute else \
            party.step(envelope)
        values.update({name: weight * uploads[name].weighted_sum(np.ones(1))
                       if weight and name in uploads else np.zeros(shape)
                       for name, shape in party.shapes.items()})
        if party.dp_noise(envelope):  # user-level DP: integers and a noise share
            arrays = {name: np.asarray(values[name]) for name in party.shapes}
            vector, order = encode_integers(party.secure_integers(envelope, arrays))
            return _answer(msg, vector, order)
    else:
        values = dict(party.evaluate(envelope))
    return _answer(msg, *encode(values, exponents))


def _answer(msg: Message, vector: list[np.ndarray], order: list[str]) -> Message:
    """The masked-vector stage's reply carrying ``vector`` (its parts named by ``order``)."""
    fitres = FitRes(Status(Code.OK, ""), ndarrays_to_parameters(vector), 1,
                    {"names": json.dumps(order)})
    return Message(fitres_to_recorddict(fitres, keep_input=True), reply_to=msg)

"""The protocol's messages, uploads and evaluation sums as Flower records.

Server to client (every exchange): an ``ArrayRecord`` ``"arrays"`` (the message's arrays) and
a ``ConfigRecord`` ``"fedmc"`` whose ``"header"`` is a JSON text (:class:`Envelope`): the
exchange number, the round, the phase, the flags, the message's ``compute``/``upload`` client
lists and, for every recipient, its last exchange that the server included in a sum (how a
client learns whether to commit its pending state, :mod:`fedmc.flower.client_state`). Every
recipient gets the same records, so Flower stores and pushes them once per exchange (its
objects are content-addressed): only the message envelopes differ. Client to
server: an ``ArrayRecord`` ``"uploads"`` (each upload of a batch of one: its dense part and/or
rows) or a ``ConfigRecord`` ``"sums"`` (evaluation). Secure aggregation carries the same
header and arrays in its legacy records (:mod:`fedmc.flower.secagg`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

from fedmc.core.protocol import Message
from fedmc.core.uploads import RowPatch, Stacked, Uploads

HEADER = "fedmc"
NO_EXCHANGE = -1


@dataclass(frozen=True)
class Envelope:
    """One exchange as a client receives it.

    Attributes
    ----------
    exchange
        The exchange's number (increasing over the run).
    message
        The protocol message (its arrays travel separately).
    included
        For each recipient, its last exchange whose reply the server included (clients
        missing from it: :data:`NO_EXCHANGE`).
    extra
        Anything else the exchange needs (secure aggregation's scales, say).
    """

    exchange: int
    message: Message
    included: Mapping[int, int] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)

    def included_of(self, client: int) -> int:
        """The last exchange of ``client`` that the server included."""
        return self.included.get(client, NO_EXCHANGE)

    def header(self) -> str:
        """Everything but the arrays, as JSON."""
        m = self.message
        return json.dumps({
            "exchange": self.exchange, "round": m.round, "phase": m.phase,
            "compute": m.compute.tolist(), "upload": m.upload.tolist(),
            "flags": {k: float(v) for k, v in m.flags.items()},
            "arrays": sorted(m.arrays), "included": {str(c): e for c, e in self.included.items()},
            "extra": dict(self.extra),
        })

    @classmethod
    def from_header(cls, header: str, arrays: Mapping[str, np.ndarray]) -> Envelope:
        """The envelope of a JSON header and its arrays."""
        h = json.loads(header)
        msg = Message(round=h["round"], phase=h["phase"],
                      compute=np.asarray(h["compute"], dtype=np.int64),
                      upload=np.asarray(h["upload"], dtype=np.int64),
                      arrays=dict(arrays), flags=h["flags"])
        return cls(h["exchange"], msg, {int(c): e for c, e in h["included"].items()},
                   h["extra"])

    def array_names(self) -> list[str]:
        """The names of the message's arrays in the order they travel."""
        return sorted(self.message.arrays)


def pack_message(envelope: Envelope) -> RecordDict:
    """The records of an exchange for one recipient."""
    return RecordDict({HEADER: ConfigRecord({"header": envelope.header()}),
                       "arrays": pack_arrays(envelope.message.arrays)})


def unpack_message(content: RecordDict) -> Envelope:
    """The exchange in ``content``."""
    return Envelope.from_header(str(content.config_records[HEADER]["header"]),
                                unpack_arrays(content.array_records["arrays"]))


def pack_arrays(arrays: Mapping[str, np.ndarray]) -> ArrayRecord:
    """Named arrays as an ``ArrayRecord``."""
    return ArrayRecord({name: Array(np.ascontiguousarray(a)) for name, a in arrays.items()})


def unpack_arrays(record: ArrayRecord) -> dict[str, np.ndarray]:
    """The named arrays of an ``ArrayRecord``."""
    return {name: array.numpy() for name, array in record.items()}


def pack_uploads(uploads: Uploads) -> RecordDict:
    """One client's uploads (a batch of one, or of none for a client that computes without
    uploading, e.g. FedMAvg's unsampled clients), its scale (client weight) applied."""
    parts: dict[str, np.ndarray] = {}
    for name, s in uploads.items():
        factor = 1.0 if s.scale is None or not len(s.scale) else float(s.scale[0])
        if s.dense is not None and len(s.dense):
            parts[f"{name}.dense"] = factor * s.dense[0]
        if s.rows is not None:
            parts.update({f"{name}.index": s.rows.index,
                          f"{name}.values": factor * s.rows.values})
    return RecordDict({"uploads": pack_arrays(parts)})


def unpack_uploads(content: RecordDict, shapes: Mapping[str, tuple[int, ...]]) -> Uploads:
    """The uploads of one client's reply, each a batch of one."""
    parts = unpack_arrays(content.array_records["uploads"])
    out: dict[str, Stacked] = {}
    for name, shape in shapes.items():
        dense = parts.get(f"{name}.dense")
        rows = None
        if f"{name}.index" in parts:
            index = parts[f"{name}.index"].astype(np.int64)
            rows = RowPatch(np.array([0, len(index)], dtype=np.int64), index,
                            parts[f"{name}.values"])
        if dense is not None or rows is not None:
            out[name] = Stacked(tuple(shape), None if dense is None else dense[None], rows)
    return out


def pack_sums(sums: Mapping[str, float]) -> RecordDict:
    """A client's evaluation sums."""
    return RecordDict({"sums": ConfigRecord({k: float(v) for k, v in sums.items()})})


def unpack_sums(content: RecordDict) -> dict[str, float]:
    """The evaluation sums of one reply."""
    return {k: float(v) for k, v in content.config_records["sums"].items()}

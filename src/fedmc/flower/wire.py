"""The protocol's messages, uploads and evaluation sums as Flower records.

Server to client (every exchange): an ``ArrayRecord`` ``"arrays"`` (the message's arrays and
those of the model to evaluate, :meth:`Envelope.payload`) and a ``ConfigRecord`` ``"fedmc"``
whose ``"header"`` is a JSON text (:class:`Envelope`): the run's key, the exchange number, the
round, the phase, the flags, the message's ``compute``/``upload`` client lists, the model to
evaluate, if any, and, for every recipient, its last exchange that the server included in a sum
(how a client learns whether to commit its pending state, :mod:`fedmc.flower.client_state`).
Every recipient gets the same records, so Flower stores and pushes them once per exchange: only
the message envelopes differ. Client to server: an ``ArrayRecord`` ``"uploads"`` (each upload
of a batch of one: its dense part and/or rows, or the rows' factors where the client sends
those, :class:`fedmc.core.uploads.OuterFactors` and factored
:class:`fedmc.core.uploads.ScaledRows`, or a Gram's packed upper triangle,
:class:`fedmc.core.gram_rows.GramRows`) and/or a ``ConfigRecord`` ``"sums"``
(evaluation). What a client sends is checked as it is unpacked (:func:`unpack_uploads`,
:func:`unpack_sums`): a reply that is not finite or has the wrong shape raises
:class:`RefusedReply`, and the server leaves that client out. Secure aggregation carries the
same header and arrays in its legacy records (:mod:`fedmc.flower.secagg`). On the way, every
content is packed into one record (:mod:`fedmc.flower.compact`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

from fedmc.core.gram_rows import GramRows
from fedmc.core.protocol import Message
from fedmc.core.uploads import (
    OuterFactors,
    RowPatch,
    ScaledRows,
    Stacked,
    TriangleRows,
    Uploads,
)

HEADER = "fedmc"
NO_EXCHANGE = -1
PARTS = ("dense", "index", "values", "terms", "vec", "a", "b", "vectors", "upper", "cols",
         "entries")
FACTORS = ("terms", "vec", "a", "b", "vectors")  # the parts of OuterFactors ("terms": per row)
TRIANGLE = ("upper", "cols", "entries")  # a Gram's packed upper triangle ("upper": per row)


class RefusedReply(ValueError):
    """A client's reply that the server does not take (not finite, wrong shape, wrong type)."""


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
    model
        The published model each recipient evaluates (on its state before any step the
        message asks for), or None. Its arrays travel once: one equal to the message's array
        of the same name is not sent again.
    key
        The run's key: the clients keep their states under it
        (:mod:`fedmc.flower.client_state`).
    """

    exchange: int
    message: Message
    included: Mapping[int, int] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)
    model: Mapping[str, np.ndarray] | None = None
    key: str = ""

    def included_of(self, client: int) -> int:
        """The last exchange of ``client`` that the server included."""
        return self.included.get(client, NO_EXCHANGE)

    def header(self) -> str:
        """Everything but the arrays, as JSON."""
        m = self.message
        return json.dumps({
            "key": self.key, "exchange": self.exchange, "round": m.round, "phase": m.phase,
            "compute": m.compute.tolist(), "upload": m.upload.tolist(),
            "flags": {k: float(v) for k, v in m.flags.items()},
            "arrays": sorted(m.arrays), "included": {str(c): e for c, e in self.included.items()},
            "extra": dict(self.extra), "model": self.model_keys,
        })

    @cached_property
    def model_keys(self) -> dict[str, str] | None:
        """Where each array of the model travels: under the message array it equals, or under
        ``model/NAME``."""
        if self.model is None:
            return None
        sent = self.message.arrays
        return {name: name if name in sent and np.array_equal(sent[name], a) else f"model/{name}"
                for name, a in self.model.items()}

    def payload(self) -> dict[str, np.ndarray]:
        """Every array that travels, by the name it travels under."""
        model = self.model or {}
        extra = {key: model[name] for name, key in (self.model_keys or {}).items() if key != name}
        return {**self.message.arrays, **extra}

    @classmethod
    def from_header(cls, header: str, payload: Mapping[str, np.ndarray]) -> Envelope:
        """The envelope of a JSON header and its :meth:`payload`."""
        h = json.loads(header)
        msg = Message(round=h["round"], phase=h["phase"],
                      compute=np.asarray(h["compute"], dtype=np.int64),
                      upload=np.asarray(h["upload"], dtype=np.int64),
                      arrays={name: payload[name] for name in h["arrays"]}, flags=h["flags"])
        model = (None if h["model"] is None else
                 {name: payload[key] for name, key in h["model"].items()})
        return cls(h["exchange"], msg, {int(c): e for c, e in h["included"].items()},
                   h["extra"], model, h["key"])


def pack_key(key: str, refused: Collection[str] = (), probe: str = "") -> RecordDict:
    """The record of a query (``query``, ``query.done``, ``query.probe``): the run's key, the
    tags of the processes the server has refused (:func:`refused_tags`) and, for a probe, the
    tag of the process it looks for."""
    record = ConfigRecord({"key": key})
    if refused:
        record["refused"] = sorted(refused)
    if probe:
        record["probe"] = probe
    return RecordDict({HEADER: record})


def process_tag(process: str) -> str:
    """What the server may show of a node process's nonce: a hash of it. The nonce itself
    goes only from the process to the server (TLS), so whoever sees a tag (a copy of the node
    pulling a message meant for another process) cannot present the nonce."""
    return hashlib.sha256(process.encode()).hexdigest()[:32]


def refused_tags(content: RecordDict) -> list[str]:
    """The tags of the processes the server refused, as a query names them (an exchange
    names them in :attr:`Envelope.extra`, ``refused``)."""
    record = content.config_records.get(HEADER)
    return [] if record is None else [str(t) for t in record.get("refused", [])]  # type: ignore[union-attr]


def probed_tag(content: RecordDict) -> str:
    """The tag of the process a ``query.probe`` looks for."""
    record = content.config_records.get(HEADER)
    return "" if record is None else str(record.get("probe", ""))


def run_key(content: RecordDict) -> str:
    """The run's key in a record of :func:`pack_key` (empty when it has none)."""
    record = content.config_records.get(HEADER)
    return "" if record is None else str(record.get("key", ""))


def pack_message(envelope: Envelope) -> RecordDict:
    """The record of an exchange (the same for every recipient)."""
    return RecordDict({HEADER: ConfigRecord({"header": envelope.header()}),
                       "arrays": pack_arrays(envelope.payload())})


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


def pack_reply(uploads: Uploads | None = None,
               sums: Mapping[str, float] | None = None, process: str = "") -> RecordDict:
    """A client's reply: its uploads (a batch of one, or of none for a client that computes
    without uploading, e.g. FedMAvg's unsampled clients), its scale (client weight) applied,
    and/or its evaluation sums; ``process`` names the process that answers
    (:func:`reply_process`)."""
    content = RecordDict()
    if process:
        content[HEADER] = ConfigRecord({"process": process})
    if uploads is not None:
        parts: dict[str, np.ndarray] = {}
        for name, s in uploads.items():
            factor = 1.0 if s.scale is None or not len(s.scale) else float(s.scale[0])
            if s.dense is not None and len(s.dense):
                parts[f"{name}.dense"] = factor * s.dense[0]
            if isinstance(s.rows, ScaledRows) and s.rows.factored:
                r = s.rows
                parts.update({f"{name}.index": r.index, f"{name}.b": factor * r.b,
                              f"{name}.vectors": r.vectors})
            elif isinstance(s.rows, OuterFactors):
                f = s.rows
                parts.update({f"{name}.index": f.index, f"{name}.terms": np.diff(f.term_ptr),
                              f"{name}.vec": f.vec, f"{name}.b": factor * f.b,
                              f"{name}.vectors": f.vectors})
                if f.gram:
                    parts[f"{name}.a"] = factor * f.a
            elif isinstance(s.rows, GramRows):
                upper, cols, entries = s.rows.upper_triangle()
                parts.update({f"{name}.index": s.rows.index, f"{name}.upper": upper,
                              f"{name}.cols": cols, f"{name}.entries": factor * entries})
            elif s.rows is not None:
                parts.update({f"{name}.index": s.rows.index,
                              f"{name}.values": factor * s.rows.values})
        content["uploads"] = pack_arrays(parts)
    if sums is not None:
        content["sums"] = ConfigRecord({k: float(v) for k, v in sums.items()})
    return content


def reply_process(content: RecordDict) -> str:
    """The nonce of the process that sent a reply of :func:`pack_reply` (empty if none)."""
    record = content.config_records.get(HEADER)
    return "" if record is None else str(record.get("process", ""))


def unpack_uploads(content: RecordDict, shapes: Mapping[str, tuple[int, ...]]) -> Uploads:
    """The uploads of one client's reply, each a batch of one; :class:`RefusedReply` unless
    every part is an upload of ``shapes`` in its shape, finite, its rows distinct and in
    range."""
    if "uploads" not in content.array_records:
        raise RefusedReply("the reply carries no uploads")
    parts = unpack_arrays(content.array_records["uploads"])
    known = {f"{name}.{part}" for name in shapes for part in PARTS}
    if set(parts) - known:
        raise RefusedReply(f"unknown upload parts {sorted(set(parts) - known)}")
    out: dict[str, Stacked] = {}
    for name, shape in shapes.items():
        dense = parts.get(f"{name}.dense")
        if dense is not None:
            dense = _finite(f"{name}.dense", dense, tuple(shape))[None]
        rows = _rows(name, parts, tuple(shape))
        if dense is not None or rows is not None:
            out[name] = Stacked(tuple(shape), dense, rows)
    return out


def _rows(name: str, parts: Mapping[str, np.ndarray], shape: tuple[int, ...],
          ) -> RowPatch | OuterFactors | ScaledRows | None:
    """The sparse rows of upload ``name``, if it has any: distinct row indices below
    ``shape[0]``, one finite row of ``shape[1:]`` each, or their factors
    (:func:`_factors`)."""
    index, values = parts.get(f"{name}.index"), parts.get(f"{name}.values")
    factored = any(f"{name}.{part}" in parts for part in FACTORS)
    triangle = any(f"{name}.{part}" in parts for part in TRIANGLE)
    if triangle and (values is not None or factored):
        raise RefusedReply(f"upload {name!r} has a Gram's triangle and other rows")
    factored = factored or triangle
    if index is None and values is None and not factored:
        return None
    if index is None or (values is None and not factored):
        missing = "indices" if index is None else "values"
        raise RefusedReply(f"upload {name!r} has rows without {missing}")
    if values is not None and factored:
        raise RefusedReply(f"upload {name!r} has both rows and their factors")
    if index.ndim != 1 or index.dtype.kind not in "iu":
        raise RefusedReply(f"upload {name!r}: row indices must be a vector of integers")
    if len(index) and (index.min() < 0 or index.max() >= shape[0]):
        raise RefusedReply(f"upload {name!r}: row indices outside 0..{shape[0] - 1}")
    if len(np.unique(index)) != len(index):
        raise RefusedReply(f"upload {name!r}: repeated row indices")
    ptr = np.array([0, len(index)], dtype=np.int64)
    if triangle:
        return _triangle(name, parts, shape, ptr, index.astype(np.int64))
    if factored and not any(f"{name}.{part}" in parts for part in ("terms", "vec", "a")):
        return _scaled(name, parts, shape, ptr, index.astype(np.int64))
    if factored:
        return _factors(name, parts, shape, ptr, index.astype(np.int64))
    assert values is not None  # rows without their factors carry values (checked above)
    values = _finite(f"{name}.values", values, (len(index), *shape[1:]))
    return RowPatch(ptr, index.astype(np.int64), values)


def _scaled(name: str, parts: Mapping[str, np.ndarray], shape: tuple[int, ...],
            ptr: np.ndarray, index: np.ndarray) -> ScaledRows:
    """Rows that are multiples of the client's one vector
    (:class:`fedmc.core.uploads.ScaledRows`): the finite ``vectors`` (one, of ``shape[1]``
    numbers) and a finite ``b`` per row."""
    vectors, b = parts.get(f"{name}.vectors"), parts.get(f"{name}.b")
    if vectors is None or b is None:
        raise RefusedReply(f"upload {name!r} has scaled rows without "
                           f"{'vectors' if vectors is None else 'b'}")
    if len(shape) != 2 or vectors.shape != (1, shape[1]):
        raise RefusedReply(f"upload {name!r}: vectors {vectors.shape} are not one vector of "
                           f"{shape[1:]}")
    return ScaledRows(ptr, index, _finite(f"{name}.b", b, (len(index),)),
                      _finite(f"{name}.vectors", vectors, vectors.shape), factored=True)


def _factors(name: str, parts: Mapping[str, np.ndarray], shape: tuple[int, ...],
             ptr: np.ndarray, index: np.ndarray) -> OuterFactors:
    """The factors of upload ``name``'s rows (:class:`fedmc.core.uploads.OuterFactors`): a
    count of terms per row, each term's vector (a row of the finite ``vectors``, whose length
    ``d`` makes rows of ``shape[1] = d (d + 1) / 2 + d``, or of ``d`` without the Gram part)
    and its finite ``a`` (with the Gram part only) and ``b``."""
    vectors = parts.get(f"{name}.vectors", np.zeros(0))
    d = vectors.shape[1] if vectors.ndim == 2 else -1
    gram = len(shape) == 2 and d * (d + 1) // 2 + d == shape[1]
    if not gram and (len(shape) != 2 or d != shape[1]):
        raise RefusedReply(f"upload {name!r}: vectors {vectors.shape} do not make rows of "
                           f"{shape[1:]}")
    needed = [part for part in FACTORS if gram or part != "a"]
    missing = [part for part in needed if f"{name}.{part}" not in parts]
    if missing:
        raise RefusedReply(f"upload {name!r} has factors without {', '.join(missing)}")
    if not gram and f"{name}.a" in parts:
        raise RefusedReply(f"upload {name!r}: rows of {shape[1]} have no Gram weights a")
    terms, vec = parts[f"{name}.terms"], parts[f"{name}.vec"]
    _counts(name, (("terms", terms, len(index)), ("vec", vec, None)))
    if terms.sum() != len(vec) or (len(vec) and vec.max() >= len(vectors)):
        raise RefusedReply(f"upload {name!r}: the terms do not match their vectors")
    term_ptr = np.concatenate(([0], np.cumsum(terms))).astype(np.int64)
    b = _finite(f"{name}.b", parts[f"{name}.b"], (len(vec),))
    a = _finite(f"{name}.a", parts[f"{name}.a"], (len(vec),)) if gram else np.zeros_like(b)
    return OuterFactors(ptr, index, term_ptr, vec.astype(np.int64), a, b,
                        _finite(f"{name}.vectors", vectors, vectors.shape), gram)


def _triangle(name: str, parts: Mapping[str, np.ndarray], shape: tuple[int, ...],
              ptr: np.ndarray, index: np.ndarray) -> TriangleRows:
    """The rows of a symmetric ``n x n`` upload sent as its packed upper triangle
    (:class:`fedmc.core.gram_rows.GramRows`): per row, in increasing order, its count of
    entries ``upper``, then each entry's column ``l >= j`` (increasing, itself a row sent)
    and its finite value; the rows formed with the mirrored entries."""
    missing = [part for part in TRIANGLE if f"{name}.{part}" not in parts]
    if missing:
        raise RefusedReply(f"upload {name!r} has a triangle without {', '.join(missing)}")
    if len(shape) != 2 or shape[0] != shape[1]:
        raise RefusedReply(f"upload {name!r}: a triangle makes square uploads, not {shape}")
    upper, cols = parts[f"{name}.upper"], parts[f"{name}.cols"]
    _counts(name, (("upper", upper, len(index)), ("cols", cols, None)))
    if np.any(np.diff(index) <= 0) or upper.sum() != len(cols):
        raise RefusedReply(f"upload {name!r}: rows not increasing, or counts that do not "
                           "match the columns")
    row = np.repeat(np.arange(len(index)), upper)
    cols = cols.astype(np.int64)
    key = row * shape[1] + cols
    at = np.searchsorted(index, cols)
    if np.any(cols < index[row]) or np.any(np.diff(key) <= 0) or np.any(at >= len(index)) \
            or np.any(index[np.minimum(at, len(index) - 1)] != cols):
        raise RefusedReply(f"upload {name!r}: a column outside its row's upper triangle or "
                           "the rows sent")
    entries = _finite(f"{name}.entries", parts[f"{name}.entries"], (len(cols),))
    values = np.zeros((len(index), shape[1]))
    values[row, cols] = entries
    off = cols != index[row]
    values[at[off], index[row][off]] = entries[off]
    return TriangleRows(ptr, index, values, entries=len(cols))


def _counts(name: str, checked: tuple[tuple[str, np.ndarray, int | None], ...]) -> None:
    """Refuse upload ``name`` unless every ``(part, array, length)`` is a vector of integers
    >= 0, of ``length`` entries (one per row) where given."""
    for part, ints, length in checked:
        if ints.ndim != 1 or ints.dtype.kind not in "iu" or (ints.size and ints.min() < 0) \
                or (length is not None and len(ints) != length):
            raise RefusedReply(f"upload {name!r}: {part} must be a vector of integers >= 0"
                               + ("" if length is None else ", one per row"))


def _finite(part: str, a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``a`` as float64 if it is a real array of ``shape`` with finite entries."""
    if a.shape != shape or a.dtype.kind not in "fiu":
        raise RefusedReply(f"upload part {part!r} is {a.dtype} {a.shape}, expected float "
                           f"{shape}")
    a = a.astype(np.float64, copy=False)
    if not np.isfinite(a).all():
        raise RefusedReply(f"upload part {part!r} is not finite")
    return a


def unpack_sums(content: RecordDict) -> dict[str, float]:
    """The evaluation sums of one reply; :class:`RefusedReply` when it has none or one is
    not finite."""
    if "sums" not in content.config_records:
        raise RefusedReply("the reply carries no evaluation sums")
    sums = {}
    for key, value in content.config_records["sums"].items():
        if not isinstance(value, int | float) or not np.isfinite(value):
            raise RefusedReply(f"evaluation sum {key!r} is not a finite number")
        sums[key] = float(value)
    return sums

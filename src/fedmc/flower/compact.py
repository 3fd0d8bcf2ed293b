"""Every message as one record: fewer objects, so fewer requests to the SuperLink.

Flower moves a message as a tree of content-addressed objects (the message, its record dict,
each record, each array and each chunk of an array), and nodes and the ServerApp push and
pull each object with its own HTTP request to the single SuperLink process, which spends
several milliseconds of CPU on each (here, with ten nodes, it is the bottleneck of a round).
:func:`pack` turns a message's whole content into one ``ConfigRecord`` holding its protobuf
bytes, so any message is three objects (message, record dict, record) whatever it carries:
fedmc's own records, or the legacy records and per-node keys and shares of SecAgg+.

Both ends do it: :func:`fedmc.flower.transport.send_and_receive` packs what the server sends
and unpacks the replies; :func:`compact_mod`, the outermost mod of fedmc's ClientApp, unpacks
what a client receives before any other mod (SecAgg+'s) or handler sees it and packs its reply,
so it also works under a stock ``flower-supernode``. Identical contents still pack to identical
records, which Flower stores and pushes once for all recipients.
"""

from __future__ import annotations

from typing import cast

from flwr.app import ConfigRecord, Context, Message, RecordDict

from fedmc.flower.compat import (
    ClientAppCallable,
    RecordDictProto,
    recorddict_from_proto,
    recorddict_to_proto,
)

PACKED = "fedmc.packed"


def pack(content: RecordDict) -> RecordDict:
    """``content`` as one record of its protobuf bytes."""
    blob = recorddict_to_proto(content).SerializeToString()
    return RecordDict({PACKED: ConfigRecord({"content": blob})})


def unpack(content: RecordDict) -> RecordDict:
    """The content :func:`pack` packed (``content`` itself if it is not packed)."""
    if PACKED not in content.config_records:
        return content
    proto = RecordDictProto()
    proto.ParseFromString(cast(bytes, content.config_records[PACKED]["content"]))
    return recorddict_from_proto(proto)


def packed(message: Message) -> Message:
    """``message`` with its content packed (errors carry none)."""
    if message.has_content():
        message.content = pack(message.content)
    return message


def unpacked(message: Message) -> Message:
    """``message`` with its content unpacked."""
    if message.has_content():
        message.content = unpack(message.content)
    return message


def compact_mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """A ClientApp mod: unpack the message, pack the reply."""
    return packed(call_next(unpacked(msg), context))

"""Batch message bodies as SEND_BATCH_MESSAGE (and C's SEND_MESSAGE_V2 with m=1) carry them.

Each entry: TOTALSIZE int32 (= 22 + body + properties), MAGIC int32 (0), BODYCRC int32 (0),
FLAG int32, BODYLEN int32 + body, PROPLEN int16 + properties. The broker recomputes CRCs
and takes topic, queue, sysflag, hosts and born time from the request header.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from ledgermq.errors import LocalProtocolError, PropertiesTooLargeError, RemoteProtocolError

_ENTRY_HEAD = struct.Struct(">iiiii")  # totalsize magic crc flag bodylen
_SHORT = struct.Struct(">h")
ENTRY_OVERHEAD = _ENTRY_HEAD.size + _SHORT.size


@dataclass(frozen=True, slots=True)
class BatchEntry:
    flag: int
    body: bytes
    properties: str


def encode_batch(entries: Iterable[BatchEntry]) -> bytes:
    rows = list(entries)
    return encode_entries([e.body for e in rows], [e.properties.encode() for e in rows], [e.flag for e in rows])


def encode_entries(bodies: Sequence[bytes], properties: Sequence[bytes], flags: Sequence[int] | None = None) -> bytes:
    """A batch body from columns (bodies, encoded property texts, flags; all 0 when None):
    one entry per row, with one join for the batch."""
    head, short, overhead = _ENTRY_HEAD.pack, _SHORT.pack, ENTRY_OVERHEAD
    parts: list[bytes] = []
    append = parts.append
    for i, (body, props) in enumerate(zip(bodies, properties, strict=True)):
        if len(props) > 32767:
            raise PropertiesTooLargeError(f"batch entry properties are {len(props)} bytes, more than 32767")
        try:
            append(head(overhead + len(body) + len(props), 0, 0, 0 if flags is None else flags[i], len(body)))
        except struct.error as exc:
            raise LocalProtocolError(f"a batch entry field is out of range: {exc}") from exc
        append(body)
        append(short(len(props)))
        append(props)
    return b"".join(parts)


def iter_batch(body: bytes | memoryview) -> Iterator[BatchEntry]:
    """Decode a batch body, rejecting any entry whose lengths disagree."""
    view = memoryview(body)
    pos = 0
    while pos < len(view):
        if len(view) - pos < ENTRY_OVERHEAD:
            raise RemoteProtocolError(f"batch entry at {pos} is truncated")
        total, _magic, _crc, flag, body_len = _ENTRY_HEAD.unpack_from(view, pos)
        if total < ENTRY_OVERHEAD or pos + total > len(view) or body_len < 0:
            raise RemoteProtocolError(f"batch entry at {pos} has size {total}")
        p = pos + _ENTRY_HEAD.size
        if p + body_len + 2 > pos + total:
            raise RemoteProtocolError(f"batch entry at {pos}: body overruns the entry")
        entry_body = bytes(view[p : p + body_len])
        p += body_len
        props_len = _SHORT.unpack_from(view, p)[0]
        p += 2
        if props_len < 0 or p + props_len != pos + total:
            raise RemoteProtocolError(f"batch entry at {pos}: size disagrees with its fields")
        props = bytes(view[p : p + props_len]).decode("utf-8", "replace")
        yield BatchEntry(flag, entry_body, props)
        pos += total

"""Sans-I/O codec of ledgermq's HA handshake, which runs before RocketMQ's HA stream.

A ledgermq slave opens with a *hello* instead of a bare offset report, and the master
answers before anything else flows (``epochs.reconcile`` decides the answer):

* hello, slave -> master: int64 ``HELLO_MAGIC`` (negative, so never a valid 4.x report),
  int32 length, then that many bytes of JSON ``{"version": 1, "epoch": E, "epochId": I,
  "maxOffset": X, "minOffset": N}`` (the slave holds ``[N, X)``; X is always a record boundary);
* answer, master -> slave: a frame header whose offset is ``ANSWER_MAGIC`` (negative, so
  never a valid 4.x transfer), the int32 size, then JSON: ``{"decision": "agree",
  "offset": P, "epochs": [[e, start], ...]}``, ``{"decision": "fetch", "start": A, "end": B}``
  or ``{"decision": "refuse", "reason": "..."}``;
* after a fetch the slave sends ``[A, B)`` of its commit log as ordinary HA frames
  (``codec.frame_buffers``) and then a header-only frame at the offset where it stopped;
  the master answers again.

After an agreement both ends speak RocketMQ 4.x's HA protocol unchanged. A master that
reads a non-negative first report has a 4.x slave (a Java broker) and serves it the 4.x
way, checking the report against its own record boundaries.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import orjson

from ledgermq.errors import RemoteProtocolError
from ledgermq.ha.codec import HEADER, REPORT
from ledgermq.ha.epochs import Agree, Decision, EpochLog, Fetch, Refuse, validate_pairs

HELLO_MAGIC = -0x4C4D51_48454C4C  # "LMQ" "HELL"
ANSWER_MAGIC = -0x4C4D51_414E5357  # "LMQ" "ANSW"
VERSION = 1
LENGTH = struct.Struct(">i")
MAX_HANDSHAKE_BODY = 1024 * 1024


class HandshakeError(RemoteProtocolError):
    """The peer's handshake does not decode."""


def encode_hello(epoch: int, max_offset: int, min_offset: int = 0, epoch_ident: int = 0) -> bytes:
    body = orjson.dumps(
        {"version": VERSION, "epoch": epoch, "epochId": epoch_ident, "maxOffset": max_offset, "minOffset": min_offset}
    )
    return REPORT.pack(HELLO_MAGIC) + LENGTH.pack(len(body)) + body


@dataclass(frozen=True, slots=True)
class Hello:
    epoch: int  # of the slave's last byte
    epoch_ident: int
    max_offset: int  # the slave's log end, a record boundary
    min_offset: int  # where the slave's log starts


def decode_hello(body: bytes) -> Hello:
    doc = _load(body)
    values = [doc.get("epoch"), doc.get("epochId", 0), doc.get("maxOffset"), doc.get("minOffset", 0)]
    ints = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
    if len(ints) != 4 or min(ints) < 0:
        raise HandshakeError(f"hello without a valid epoch, epochId, maxOffset and minOffset: {doc!r}")
    epoch, ident, max_offset, min_offset = ints
    return Hello(epoch, ident, max_offset, min(min_offset, max_offset))


Check = tuple[int, int]  # (offset a, CRC32 of the master's bytes [a, agreed offset))


def encode_answer(decision: Decision, epochs: EpochLog, check: Check | None = None) -> bytes:
    """``check`` lets the slave verify, before it truncates anything, that the bytes just
    below the agreed offset are the same on both: epoch numbers alone cannot tell this
    master's log from an unrelated one (another group's master, a wiped store)."""
    doc: dict[str, Any]
    if isinstance(decision, Agree):
        doc = {"decision": "agree", "offset": decision.offset, "epochs": epochs.pairs()}
        if check is not None:
            doc["check"] = list(check)
    elif isinstance(decision, Fetch):
        doc = {"decision": "fetch", "start": decision.start, "end": decision.end}
    else:
        doc = {"decision": "refuse", "reason": decision.reason}
    body = orjson.dumps(doc)
    return HEADER.pack(ANSWER_MAGIC, len(body)) + body


def decode_answer(body: bytes) -> tuple[Decision, EpochLog | None, Check | None]:
    doc = _load(body)
    kind = doc.get("decision")
    try:
        if kind == "agree":
            offset = doc["offset"]
            if not isinstance(offset, int) or offset < 0:
                raise HandshakeError(f"agreement on a bad offset {offset!r}")
            check = doc.get("check")
            if check is not None and not (
                isinstance(check, list) and len(check) == 2 and all(isinstance(v, int) for v in check)
            ):
                raise HandshakeError(f"bad check {check!r}")
            return Agree(offset), validate_pairs(doc.get("epochs", [])), (check[0], check[1]) if check else None
        if kind == "fetch":
            start, end = doc["start"], doc["end"]
            if not isinstance(start, int) or not isinstance(end, int) or not 0 <= start < end:
                raise HandshakeError(f"fetch of a bad range {start!r}..{end!r}")
            return Fetch(start, end), None, None
        if kind == "refuse":
            return Refuse(str(doc.get("reason", "no reason given"))), None, None
    except (KeyError, ValueError) as exc:
        raise HandshakeError(f"bad handshake answer {doc!r}: {exc}") from exc
    raise HandshakeError(f"unknown handshake decision {kind!r}")


def check_length(size: int) -> int:
    if not 0 <= size <= MAX_HANDSHAKE_BODY:
        raise HandshakeError(f"handshake body of {size} bytes (max {MAX_HANDSHAKE_BODY})")
    return size


def _load(body: bytes) -> dict[str, Any]:
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise HandshakeError(f"handshake body is not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise HandshakeError("handshake body is not a JSON object")
    return doc

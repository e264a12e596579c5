"""Sans-I/O codec of ledgermq's HA handshake, which runs before RocketMQ's HA stream.

A ledgermq slave opens with a *hello* instead of a bare offset report, and the master
answers before anything else flows (``epochs.reconcile`` decides the answer):

* hello, slave -> master: int64 ``HELLO_MAGIC`` (negative, so never a valid 4.x report),
  int32 length, then that many bytes of JSON ``{"version": 1, "epoch": E, "epochId": I,
  "maxOffset": X, "minOffset": N}`` (the slave holds ``[N, X)``; X is always a record
  boundary), and ``"damaged": [[a, b], ...]`` when the slave's store holds ranges it found
  corrupt (a master that predates the field ignores it: unknown fields are ignored), and
  ``"brokerId": K`` from a slave in controller mode (its controller-assigned id: the
  master's SyncStateSet is kept by broker id);
* answer, master -> slave: a frame header whose offset is ``ANSWER_MAGIC`` (negative, so
  never a valid 4.x transfer), the int32 size, then JSON: ``{"decision": "agree",
  "offset": P, "epochs": [[e, start], ...]}``, ``{"decision": "fetch", "start": A, "end": B}``
  or ``{"decision": "refuse", "reason": "..."}``; an agreement may list the slave's damaged
  ranges the master cannot repair (``"repairRefused": [{"start", "end", "reason"}]``) and
  says where the master's log starts (``"logStart": S``): damage the slave holds wholly
  below S was expired by the group, and the slave lets it go (store/damage_expiry.py);
* after a fetch the slave sends ``[A, B)`` of its commit log as ordinary HA frames
  (``codec.frame_buffers``) and then a header-only frame at the offset where it stopped;
  the master answers again. A fetch takes back a lost tail, or (``"repair": true``) a
  range below the master's end that is damaged in the master's log;
* ``{"decision": "repair", "start": S, "end": E, "low": L, "high": H}`` (only to a slave
  whose hello listed damage): the master sends ``[L, H)`` of its log the same way (frames,
  then a header-only frame where it stopped); the slave checks that the bytes outside
  ``[S, E)`` equal its own and rewrites ``[S, E)``. The master answers again.

After an agreement both ends speak RocketMQ 4.x's HA protocol unchanged. A master that
reads a non-negative first report has a 4.x slave (a Java broker) and serves it the 4.x
way, checking the report against its own record boundaries.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from ledgermq.errors import RemoteProtocolError
from ledgermq.ha.codec import HEADER, REPORT
from ledgermq.ha.epochs import Agree, Decision, EpochLog, Fetch, Refuse, validate_pairs
from ledgermq.ha.repair import MAX_RANGES, Range, Transfer, Unrepaired, normalize

HELLO_MAGIC = -0x4C4D51_48454C4C  # "LMQ" "HELL"
ANSWER_MAGIC = -0x4C4D51_414E5357  # "LMQ" "ANSW"
VERSION = 1
LENGTH = struct.Struct(">i")
MAX_HANDSHAKE_BODY = 1024 * 1024


class HandshakeError(RemoteProtocolError):
    """The peer's handshake does not decode."""


def encode_hello(
    epoch: int,
    max_offset: int,
    min_offset: int = 0,
    epoch_ident: int = 0,
    damaged: Sequence[Range] = (),
    broker_id: int | None = None,
) -> bytes:
    doc: dict[str, Any] = {
        "version": VERSION,
        "epoch": epoch,
        "epochId": epoch_ident,
        "maxOffset": max_offset,
        "minOffset": min_offset,
    }
    if damaged:  # only then: the hello of a healthy slave stays byte for byte what it was
        doc["damaged"] = [list(r) for r in damaged[:MAX_RANGES]]
    if broker_id is not None:  # likewise: only in controller mode
        doc["brokerId"] = broker_id
    body = orjson.dumps(doc)
    return REPORT.pack(HELLO_MAGIC) + LENGTH.pack(len(body)) + body


@dataclass(frozen=True, slots=True)
class Hello:
    epoch: int  # of the slave's last byte
    epoch_ident: int
    max_offset: int  # the slave's log end, a record boundary
    min_offset: int  # where the slave's log starts
    damaged: tuple[Range, ...] = ()  # ranges of [min_offset, max_offset) the slave holds corrupt
    broker_id: int | None = None  # controller mode: the slave's controller-assigned id


def decode_hello(body: bytes) -> Hello:
    doc = _load(body)
    values = [doc.get("epoch"), doc.get("epochId", 0), doc.get("maxOffset"), doc.get("minOffset", 0)]
    ints = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
    if len(ints) != 4 or min(ints) < 0:
        raise HandshakeError(f"hello without a valid epoch, epochId, maxOffset and minOffset: {doc!r}")
    epoch, ident, max_offset, min_offset = ints
    damaged = _ranges(doc.get("damaged", []), "damaged")
    if damaged and damaged[-1][1] > max_offset:
        raise HandshakeError(f"hello lists damaged range {list(damaged[-1])} beyond the slave's end {max_offset}")
    broker_id = doc.get("brokerId")
    if broker_id is not None and (not _ints(broker_id) or broker_id < 1):
        raise HandshakeError(f"hello with a bad brokerId {broker_id!r}")
    return Hello(epoch, ident, max_offset, min(min_offset, max_offset), damaged, broker_id)


@dataclass(frozen=True, slots=True)
class Give:
    """The master sends [low, high) of its log for the slave to rewrite [start, end) in it."""

    start: int
    end: int
    low: int
    high: int

    @classmethod
    def of(cls, t: Transfer) -> Give:
        return cls(t.start, t.end, t.low, t.high)


Answer = Decision | Give


Check = tuple[int, int]  # (offset a, CRC32 of the master's bytes [a, agreed offset))


@dataclass(frozen=True, slots=True)
class Reply:
    """A decoded answer, with what only some decisions carry."""

    decision: Answer
    epochs: EpochLog | None = None  # agree
    check: Check | None = None  # agree
    refused: tuple[Unrepaired, ...] = ()  # agree: the slave's damage this master cannot repair
    repair: bool = False  # fetch: for a damaged range of the master's, not a lost tail
    log_start: int | None = None  # agree: where the master's log starts (None: a master before the field)


def encode_answer(
    decision: Answer,
    epochs: EpochLog,
    check: Check | None = None,
    *,
    refused: Sequence[Unrepaired] = (),
    repair: bool = False,
    log_start: int | None = None,
) -> bytes:
    """``check`` lets the slave verify, before it truncates anything, that the bytes just
    below the agreed offset are the same on both: epoch numbers alone cannot tell this
    master's log from an unrelated one (another group's master, a wiped store)."""
    doc: dict[str, Any]
    if isinstance(decision, Agree):
        doc = {"decision": "agree", "offset": decision.offset, "epochs": epochs.pairs()}
        if check is not None:
            doc["check"] = list(check)
        if refused:
            doc["repairRefused"] = [{"start": u.start, "end": u.end, "reason": u.reason} for u in refused]
        if log_start is not None:
            doc["logStart"] = log_start
    elif isinstance(decision, Fetch):
        doc = {"decision": "fetch", "start": decision.start, "end": decision.end}
        if repair:
            doc["repair"] = True
    elif isinstance(decision, Give):
        doc = {"decision": "repair", "start": decision.start, "end": decision.end}
        doc.update(low=decision.low, high=decision.high)
    else:
        doc = {"decision": "refuse", "reason": decision.reason}
    body = orjson.dumps(doc)
    return HEADER.pack(ANSWER_MAGIC, len(body)) + body


def decode_answer(body: bytes) -> Reply:
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
            log_start = doc.get("logStart")
            if log_start is not None and (not _ints(log_start) or log_start < 0):
                raise HandshakeError(f"agreement with a bad log start {log_start!r}")
            return Reply(
                Agree(offset),
                validate_pairs(doc.get("epochs", [])),
                (check[0], check[1]) if check else None,
                _refusals(doc.get("repairRefused", [])),
                log_start=log_start,
            )
        if kind == "fetch":
            start, end = doc["start"], doc["end"]
            if not _ints(start, end) or not 0 <= start < end:
                raise HandshakeError(f"fetch of a bad range {start!r}..{end!r}")
            return Reply(Fetch(start, end), repair=doc.get("repair") is True)
        if kind == "repair":
            start, end, low, high = doc["start"], doc["end"], doc["low"], doc["high"]
            if not _ints(start, end, low, high) or not 0 <= low <= start < end <= high:
                raise HandshakeError(f"repair of a bad range [{start!r}, {end!r}) within [{low!r}, {high!r})")
            return Reply(Give(start, end, low, high))
        if kind == "refuse":
            return Reply(Refuse(str(doc.get("reason", "no reason given"))))
    except (KeyError, ValueError, TypeError) as exc:
        raise HandshakeError(f"bad handshake answer {doc!r}: {exc}") from exc
    raise HandshakeError(f"unknown handshake decision {kind!r}")


def check_length(size: int) -> int:
    if not 0 <= size <= MAX_HANDSHAKE_BODY:
        raise HandshakeError(f"handshake body of {size} bytes (max {MAX_HANDSHAKE_BODY})")
    return size


def _ints(*values: object) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) for v in values)


def _ranges(raw: object, what: str) -> tuple[Range, ...]:
    """Sorted, disjoint [a, b) pairs from JSON, or HandshakeError naming ``what``."""
    if not isinstance(raw, list) or len(raw) > MAX_RANGES:
        raise HandshakeError(f"{what} is not a list of at most {MAX_RANGES} ranges")
    pairs: list[Range] = []
    for item in raw:
        if not (isinstance(item, list) and len(item) == 2 and _ints(*item) and 0 <= item[0] < item[1]):
            raise HandshakeError(f"{what}: {item!r} is not a range [start, end)")
        pairs.append((item[0], item[1]))
    return tuple(normalize(pairs))


def _refusals(raw: object) -> tuple[Unrepaired, ...]:
    if not isinstance(raw, list):
        raise HandshakeError(f"repairRefused is not a list: {raw!r}")
    out: list[Unrepaired] = []
    for item in raw:
        if not isinstance(item, dict) or not _ints(item.get("start"), item.get("end")):
            raise HandshakeError(f"repairRefused: {item!r} is not a range with a reason")
        out.append(Unrepaired(item["start"], item["end"], str(item.get("reason", ""))))
    return tuple(out)


def _load(body: bytes) -> dict[str, Any]:
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise HandshakeError(f"handshake body is not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise HandshakeError("handshake body is not a JSON object")
    return doc

"""Reading records back out of the commit log: validation and dispatch facts.

``check_record`` is the one function recovery, the reput service and slaves use to walk
the commit log. It is pure (a buffer in, a verdict out) and stricter than RocketMQ's
``checkMessageAndReturnSize``: besides magic, size and body CRC it requires the record to
name its own physical offset and a non-empty, NUL-free, UTF-8 topic and NUL-free UTF-8
properties, so a torn write that left zero-filled pages behind a valid-looking header is
rejected too. ``check_text=False`` skips those text checks: the reput service dispatches
complete records (possibly from a Java master whose properties contain NUL), and recovery
re-checks a TORN_TEXT record that is followed by a valid one (so it was not torn). The
format has no checksum over topic and properties, so random damage confined to them can
still pass; zero-filled loss at the tail cannot.
"""

from __future__ import annotations

import mmap
import struct
import zlib
from dataclasses import dataclass

from ledgermq.protocol import message as M
from ledgermq.protocol import properties as P
from ledgermq.protocol import sysflag as SF
from ledgermq.protocol.javahash import tag_hash

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
TIMER_TOPIC = "rmq_sys_wheel_timer"  # store/timer/: the unit's tag code is its slot time


def timer_tags_code(timer_out_ms: str | None) -> int:
    """A timer record's tag code: its TIMER_OUT_MS, or 0 (due at once) when missing or bad."""
    digits = timer_out_ms[1:] if timer_out_ms and timer_out_ms[0] == "-" else timer_out_ms
    if timer_out_ms and digits and digits.isascii() and digits.isdigit():
        return int(timer_out_ms)
    return 0


# What records are read from: a segment's mapping, or bytes copied out of one.
RecordBuffer = mmap.mmap | bytes | bytearray | memoryview

_SIZE_MAGIC = struct.Struct(">ii")
_CORE = struct.Struct(">iiiiiqqiq")  # up to and including BORNTIMESTAMP
_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")
_SHORT = struct.Struct(">h")


@dataclass(slots=True)
class DispatchRequest:
    """What the consume queue and the index need from one record."""

    topic: str
    queue_id: int
    commit_log_offset: int
    size: int
    tags_code: int
    store_timestamp: int
    queue_offset: int
    sysflag: int
    keys: str | None
    uniq_key: str | None
    prepared_transaction_offset: int
    properties: str = ""  # the record's properties text, for dispatch hooks (property filters)


class Verdict:
    """Non-record outcomes of ``check_record``."""

    __slots__ = ("reason", "size")

    def __init__(self, size: int, reason: str) -> None:
        self.size = size
        self.reason = reason

    def __repr__(self) -> str:
        return f"Verdict({self.reason!r}, size={self.size})"


END_OF_DATA = "end of data"
BLANK = "blank (end of segment)"
INCOMPLETE = "record not completely written yet"
TORN_TEXT = "topic or properties hold NUL or non-UTF-8 bytes (torn write?)"


_Frame = tuple[int, int, int, int, int, int, int, bytes, int, int]


def _frame(
    buf: RecordBuffer, pos: int, limit: int, expected_offset: int, check_crc: bool, capacity: int | None
) -> _Frame | Verdict:
    """The fixed fields and the topic of the record at ``pos``, its sizes checked against
    each other: (total, queue id, queue offset, physical offset, sysflag, store timestamp,
    prepared offset, topic bytes, where the properties length is, record end)."""
    if limit - pos < 8:
        return Verdict(0, END_OF_DATA)
    total, magic = _SIZE_MAGIC.unpack_from(buf, pos)
    if magic == M.BLANK_MAGIC_CODE:
        return Verdict(total, BLANK)
    if total == 0 and magic == 0:
        return Verdict(0, END_OF_DATA)
    if magic != M.MESSAGE_MAGIC_CODE:
        return Verdict(0, f"bad magic {magic & 0xFFFFFFFF:#x}")
    if total < M.record_length(0, 1, 0) or total > (limit if capacity is None else capacity) - pos:
        return Verdict(0, f"size {total} does not fit")
    if total > limit - pos:
        return Verdict(0, INCOMPLETE)
    (_t, _m, crc, queue_id, _flag, queue_offset, phys, sysflag, _born) = _CORE.unpack_from(buf, pos)
    if phys != expected_offset:
        return Verdict(0, f"record claims offset {phys}, found at {expected_offset}")
    p = pos + M.BORNHOST_POS + (20 if sysflag & SF.BORNHOST_V6 else 8)
    store_ts = _LONG.unpack_from(buf, p)[0]
    p += 8 + (20 if sysflag & SF.STOREHOST_V6 else 8) + 4
    prepared = _LONG.unpack_from(buf, p)[0]
    p += 8
    body_len = _INT.unpack_from(buf, p)[0]
    p += 4
    end = pos + total
    if body_len < 0 or p + body_len + 3 > end:
        return Verdict(0, f"body length {body_len} overruns the record")
    if check_crc and zlib.crc32(buf[p : p + body_len]) & 0x7FFFFFFF != crc:
        return Verdict(0, "body CRC mismatch")
    p += body_len
    topic_len = buf[p]
    topic_b = bytes(buf[p + 1 : p + 1 + topic_len])
    p += 1 + topic_len
    if topic_len == 0 or p + 2 > end:
        return Verdict(0, "topic is empty or overruns the record")
    props_len = _SHORT.unpack_from(buf, p)[0]
    p += 2
    if props_len < 0 or p + props_len != end:
        return Verdict(0, f"size {total} disagrees with its fields")
    return total, queue_id, queue_offset, phys, sysflag, store_ts, prepared, topic_b, p, end


@dataclass(slots=True)
class Placement:
    """Where a stored message belongs: what moving queue offsets past it needs."""

    topic: str
    queue_id: int
    queue_offset: int
    sysflag: int
    store_timestamp: int
    size: int


def read_placement(buf: RecordBuffer, pos: int, limit: int, expected_offset: int) -> Placement | Verdict:
    """``check_record`` without the CRC, the text checks and the properties: a Raft entry's
    message is validated as one record and placed in its queue on every write, where the
    properties (keys, tags) are not needed yet; the reput reads them at dispatch."""
    frame = _frame(buf, pos, limit, expected_offset, False, None)
    if isinstance(frame, Verdict):
        return frame
    total, queue_id, queue_offset, _phys, sysflag, store_ts, _prepared, topic_b, _p, _end = frame
    return Placement(topic_b.decode("utf-8", "replace"), queue_id, queue_offset, sysflag, store_ts, total)


def check_record(
    buf: RecordBuffer,
    pos: int,
    limit: int,
    expected_offset: int,
    *,
    check_crc: bool = True,
    delay_levels_ms: list[int] | None = None,
    capacity: int | None = None,
    check_text: bool = True,
) -> DispatchRequest | Verdict:
    """Validate the record at ``pos`` (bytes available up to ``limit``).

    ``capacity`` is where the segment ends; a record that fits there but not yet within
    ``limit`` is ``INCOMPLETE`` (a slave received part of it), not corrupt.

    Returns a DispatchRequest, ``Verdict(remaining, BLANK)`` at a segment's blank end,
    ``Verdict(0, END_OF_DATA)`` where nothing was written, or ``Verdict(0, reason)``
    for anything torn or corrupt.
    """
    frame = _frame(buf, pos, limit, expected_offset, check_crc, capacity)
    if isinstance(frame, Verdict):
        return frame
    total, queue_id, queue_offset, phys, sysflag, store_ts, prepared, topic_b, p, end = frame
    if check_text and b"\x00" in topic_b:
        return Verdict(0, TORN_TEXT)
    props_b = bytes(buf[p:end])
    if check_text and b"\x00" in props_b:
        return Verdict(0, TORN_TEXT)
    try:  # both are written as UTF-8; anything else is damage the body CRC cannot see
        topic = topic_b.decode()
        props = props_b.decode()
    except UnicodeDecodeError:
        if check_text:
            return Verdict(0, TORN_TEXT)
        topic = topic_b.decode("utf-8", "replace")
        props = props_b.decode("utf-8", "replace")
    tags = P.get_property(props, P.TAGS)
    tags_code = tag_hash(tags) if tags else 0
    if topic == TIMER_TOPIC:
        tags_code = timer_tags_code(P.get_property(props, P.TIMER_OUT_MS))
    if topic == SCHEDULE_TOPIC and delay_levels_ms:
        level = P.get_property(props, P.DELAY)
        if level and level.isdigit() and int(level) > 0:
            tags_code = store_ts + delay_levels_ms[min(int(level), len(delay_levels_ms)) - 1]
    return DispatchRequest(
        topic=topic,
        queue_id=queue_id,
        commit_log_offset=phys,
        size=total,
        tags_code=tags_code,
        store_timestamp=store_ts,
        queue_offset=queue_offset,
        sysflag=sysflag,
        keys=P.get_property(props, P.KEYS),
        uniq_key=P.get_property(props, P.UNIQ_KEY),
        properties=props,
        prepared_transaction_offset=prepared,
    )


def whole_records_end(buf: RecordBuffer, base_offset: int, segment_size: int, *, check_crc: bool = True) -> int:
    """How many leading bytes of ``buf`` (commit-log bytes from ``base_offset``) are whole,
    valid records, a segment's blank end included.

    Replication uses it wherever bytes must end on a record boundary: a slave trims a
    partly received record before it tells its master where it stands, and a recovering
    master takes back only whole records from a slave. It stops at the first record that
    is incomplete, torn or claims another offset, so nothing after damage is ever taken.
    """
    pos = 0
    limit = len(buf)
    while pos < limit:
        offset = base_offset + pos
        to_segment_end = segment_size - offset % segment_size
        verdict = check_record(
            buf, pos, min(limit, pos + to_segment_end), offset, check_crc=check_crc, capacity=pos + to_segment_end
        )
        if isinstance(verdict, DispatchRequest):
            pos += verdict.size
        elif verdict.reason == BLANK and pos + to_segment_end <= limit:
            pos += to_segment_end
        else:
            break
    return pos


_RECORD_HEAD = struct.Struct(">ii20xq")  # TOTALSIZE, MAGICCODE, ..., PHYSICALOFFSET (bytes 28-35)
RECORD_HEAD_SIZE = _RECORD_HEAD.size


def starts_record(head: RecordBuffer, offset: int) -> bool | None:
    """Whether commit-log bytes at ``offset`` begin a record naming ``offset`` as its own
    position, or a segment's blank end; None when ``head`` is too short to tell.

    Replication checks this where a copy starts: a position inside a record means the two
    logs do not agree there."""
    if len(head) < RECORD_HEAD_SIZE:
        return None
    _size, magic, physical = _RECORD_HEAD.unpack_from(head, 0)
    return bool(magic == M.BLANK_MAGIC_CODE or (magic == M.MESSAGE_MAGIC_CODE and physical == offset))

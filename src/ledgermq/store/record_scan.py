"""Dispatch facts of a run of stored records, read in one pass over the bytes.

A replica (an HA slave, a DLedger follower) did not write its records itself, so its
reput must read each one back for its consume-queue unit and index entries. Doing that
with ``dispatch.check_record`` cost about 35 Python calls and a ``DispatchRequest`` per
record: seven struct reads, the whole properties text decoded and searched three times,
the topic decoded again. ``scan_records`` reads the same facts with one precompiled
struct per record (every fixed field up to the body length at once), takes the topic from
a small cache of its bytes, and looks up TAGS, KEYS and UNIQ_KEY with ``bytes.rfind`` on
the raw properties, decoding only the values found. A record is one plain tuple (``Row``).

It accepts exactly the records ``check_record(check_crc=False, check_text=False)``
accepts, with the same facts (tests/store/test_record_scan.py holds the two against each
other): it stops *before* anything else (a blank, the end of the data, a record not yet
complete, a bad one) and the caller asks ``check_record`` there, so every verdict about a
record that is not sound comes from one place. No CRC is computed, as with
``check_record(check_crc=False)``: the reput never checked bodies; reads check what they
serve (store/reads.py) and replication checks what it copies.

Where ledgermq/_recordc.c is built, its ``scan_records`` reads the run first, a tenth of
the time per record, and this module's loop goes on from wherever it stopped.
"""

from __future__ import annotations

import mmap
import struct
from typing import Final

from ledgermq import speedups
from ledgermq.protocol import message as M
from ledgermq.protocol import properties as P
from ledgermq.protocol import sysflag as SF
from ledgermq.protocol.javahash import tag_hash
from ledgermq.store.dispatch import SCHEDULE_TOPIC, TIMER_TOPIC, DispatchRequest, timer_tags_code

ScanBuffer = mmap.mmap | bytes
"""What records are scanned in: a segment's mapping or bytes (slices of either are bytes)."""

# Every fixed field up to BODYLENGTH, the hosts skipped, for each (born v6, store v6).
_HOST = {False: "8x", True: "20x"}
_HEADS: Final = tuple(
    struct.Struct(">iiiiiqqiq" + _HOST[born] + "q" + _HOST[store] + "iqi")
    for born in (False, True)
    for store in (False, True)
)
_HEAD: Final = _HEADS[0]  # both hosts IPv4: nearly every record
_HEAD_SIZE: Final = _HEAD.size
_V6: Final = SF.BORNHOST_V6 | SF.STOREHOST_V6
_SHORT: Final = struct.Struct(">h")
_MIN_TOTAL: Final = M.record_length(0, 1, 0)  # check_record's smallest record
_MAGIC: Final = M.MESSAGE_MAGIC_CODE

# Row fields, by position.
SIZE: Final = 0
QUEUE_ID: Final = 1
QUEUE_OFFSET: Final = 2
PHYS: Final = 3
SYSFLAG: Final = 4
STORE_TS: Final = 5
PREPARED: Final = 6
TAGS_CODE: Final = 7
TOPIC: Final = 8
UNIQ: Final = 9
KEYS: Final = 10
PROPS: Final = 11
Row = tuple[int, int, int, int, int, int, int, int, str, "bytes | None", "bytes | None", bytes]
"""One sound record: its size, queue id, queue offset, physical offset, sysflag, store
time, prepared transaction offset, tag code, topic, and the raw bytes of its UNIQ_KEY and
KEYS values (None when absent or empty) and of its whole properties text."""

_TAGS: Final = b"TAGS\x01"
_KEYS: Final = b"KEYS\x01"
_UNIQ: Final = b"UNIQ_KEY\x01"
_SEP: Final = 2  # PROPERTY_SEPARATOR as a byte
_SPECIAL_TOPICS: Final = frozenset((TIMER_TOPIC, SCHEDULE_TOPIC))  # tag codes that are times
_CACHE_MAX: Final = 4096  # topics and tags remembered; both repeat endlessly

_topics: dict[bytes, str] = {}
_tag_codes: dict[bytes, int] = {}


def prop_value(props: bytes, needle: bytes) -> bytes | None:
    """The raw value of the property ``needle`` names (its key and NAME_VALUE_SEPARATOR), or
    None; like ``properties.get_property``, the last non-empty value of a repeated key wins."""
    end = len(props)
    n = len(needle)
    while True:
        at = props.rfind(needle, 0, end)
        if at < 0:
            return None
        if at == 0 or props[at - 1] == _SEP:
            begin = at + n
            stop = props.find(b"\x02", begin)
            value = props[begin:] if stop < 0 else props[begin:stop]
            if value:
                return value
        end = at + n - 1


def _topic(raw: bytes) -> str:
    topic = _topics.get(raw)
    if topic is None:
        if len(_topics) >= _CACHE_MAX:
            _topics.clear()
        topic = _topics[raw] = raw.decode("utf-8", "replace")
    return topic


def _tag_code(tags: bytes) -> int:
    """A TAGS value's tag code, cached (a cached 0 reads as a miss and is worked out again)."""
    code = tag_hash(tags.decode("utf-8", "replace"))
    if len(_tag_codes) >= _CACHE_MAX:
        _tag_codes.clear()
    _tag_codes[tags] = code
    return code


def _special_tags_code(topic: str, props: bytes, tags_code: int, store_ts: int, delay_levels_ms: list[int]) -> int:
    """A timer record's slot time, a delayed record's due time (as ``check_record``)."""
    if topic == TIMER_TOPIC:
        value = None if not props else prop_value(props, P.TIMER_OUT_MS.encode() + b"\x01")
        return timer_tags_code(value.decode("utf-8", "replace") if value is not None else None)
    if delay_levels_ms:
        raw = prop_value(props, P.DELAY.encode() + b"\x01")
        level = raw.decode("utf-8", "replace") if raw is not None else ""
        if level.isdigit() and int(level) > 0:
            return store_ts + delay_levels_ms[min(int(level), len(delay_levels_ms)) - 1]
    return tags_code


def scan_records(
    buf: ScanBuffer,
    pos: int,
    limit: int,
    base_offset: int,
    capacity: int,
    max_records: int,
    delay_levels_ms: list[int],
) -> tuple[list[Row], int]:
    """The sound records from ``pos`` (at commit-log offset ``base_offset + pos``) with bytes
    up to ``limit`` in a segment of ``capacity`` bytes, at most ``max_records`` of them, and
    the position after the last one. It stops before any record it cannot vouch for; the
    caller reads that one with ``check_record``.

    Where ledgermq/_recordc.c is built (ledgermq/speedups.py), its ``scan_records`` reads
    the leading run of records (about a tenth of the Python loop's time per record) and the
    Python loop goes on from where it stopped: it stops at anything it does not read,
    whatever the Python loop then makes of it, so the rows and end are the same either way
    (tests/store/test_record_scan_c.py holds the two against each other)."""
    c = speedups.recordc
    if c is None or (type(buf) is not bytes and type(buf) is not mmap.mmap):  # slices of others are not bytes
        return _python_scan_records(buf, pos, limit, base_offset, capacity, max_records, delay_levels_ms)
    rows: list[Row]
    rows, pos = c.scan_records(
        buf, pos, limit, base_offset, capacity, max_records, delay_levels_ms, _SPECIAL_TOPICS, _special_tags_code
    )
    if len(rows) >= max_records:
        return rows, pos
    return _python_scan_records(buf, pos, limit, base_offset, capacity, max_records, delay_levels_ms, rows)


def _python_scan_records(
    buf: ScanBuffer,
    pos: int,
    limit: int,
    base_offset: int,
    capacity: int,
    max_records: int,
    delay_levels_ms: list[int],
    rows: list[Row] | None = None,
) -> tuple[list[Row], int]:
    """``scan_records`` in Python, after ``rows`` (what the C path read before ``pos``)."""
    if rows is None:
        rows = []
    append = rows.append
    head_unpack = _HEAD.unpack_from
    short_unpack = _SHORT.unpack_from
    topics = _topics
    tag_codes = _tag_codes
    room = (limit if limit < capacity else capacity) - pos  # what a record may span
    while len(rows) < max_records and room >= _HEAD_SIZE:
        (total, magic, _crc, queue_id, _flag, queue_offset, phys, sysflag, _born, store_ts, _reconsume, prepared,
         body_len) = head_unpack(buf, pos)  # fmt: skip
        if magic != _MAGIC or total > room or total < _MIN_TOTAL or phys != base_offset + pos:
            break
        if sysflag & _V6:
            head = _HEADS[(2 if sysflag & SF.BORNHOST_V6 else 0) + (1 if sysflag & SF.STOREHOST_V6 else 0)]
            if head.size > total:
                break
            (_t, _m, _c, _q, _f, _qo, _ph, _s, _b, store_ts, _r, prepared, body_len) = head.unpack_from(buf, pos)
            p = pos + head.size + body_len
        else:
            p = pos + _HEAD_SIZE + body_len
        end = pos + total
        if body_len < 0 or p + 3 > end:
            break
        topic_len = buf[p]
        q = p + 1 + topic_len
        if topic_len == 0 or q + 2 > end or short_unpack(buf, q)[0] != end - q - 2:
            break
        topic_b = buf[p + 1 : q]
        topic = topics.get(topic_b) or _topic(topic_b)
        props = buf[q + 2 : end]
        # The last occurrence of each key, when it starts a pair and has a value, is what
        # ``prop_value`` returns; anything else takes its loop.
        at = props.rfind(_TAGS)
        if at < 0:
            tags_code = 0
        else:
            stop = props.find(b"\x02", at + 5)
            tags: bytes | None = props[at + 5 : stop] if stop >= 0 else props[at + 5 :]
            if not tags or (at and props[at - 1] != _SEP):
                tags = prop_value(props, _TAGS)
            tags_code = 0 if tags is None else (tag_codes.get(tags) or _tag_code(tags))
        at = props.rfind(_UNIQ)
        if at < 0:
            uniq: bytes | None = None
        else:
            stop = props.find(b"\x02", at + 9)
            uniq = props[at + 9 : stop] if stop >= 0 else props[at + 9 :]
            if not uniq or (at and props[at - 1] != _SEP):
                uniq = prop_value(props, _UNIQ)
        keys = None if props.rfind(_KEYS) < 0 else prop_value(props, _KEYS)
        if topic in _SPECIAL_TOPICS:
            tags_code = _special_tags_code(topic, props, tags_code, store_ts, delay_levels_ms)
        append((total, queue_id, queue_offset, phys, sysflag, store_ts, prepared, tags_code, topic, uniq, keys, props))
        pos = end
        room -= total
    return rows, pos


def _text(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode("utf-8", "replace")


def request_of(row: Row) -> DispatchRequest:
    """The ``DispatchRequest`` ``check_record`` gives for the record of ``row``: for the
    few who need one (a dispatch hook, a failure's message)."""
    return DispatchRequest(
        row[TOPIC],
        row[QUEUE_ID],
        row[PHYS],
        row[SIZE],
        row[TAGS_CODE],
        row[STORE_TS],
        row[QUEUE_OFFSET],
        row[SYSFLAG],
        _text(row[KEYS]),
        _text(row[UNIQ]),
        row[PREPARED],
        row[PROPS].decode("utf-8", "replace"),
    )

"""Cheap checks of stored records on the read path, and finding the next sound record.

``stored_record_problem`` is what every read that hands a record to a consumer runs:
size, magic, the record's own physical offset, that its fields add up to its size, and
the body CRC. It costs a few struct unpacks and one ``zlib.crc32`` (C) per record.

``next_sound_record`` is how recovery tells rot in the middle of the log from a torn
tail: after a record fails, it searches (``bytes.find`` on the magic, in C) for the next
position where a complete record validates and names that position as its own.
"""

from __future__ import annotations

import mmap
import struct
import zlib

from ledgermq.protocol import message as M
from ledgermq.protocol import sysflag as SF
from ledgermq.store.dispatch import BLANK, DispatchRequest, RecordBuffer, Verdict, check_record

Searchable = mmap.mmap | bytes | bytearray

_CORE = struct.Struct(">iiiiiqqi")  # TOTALSIZE .. SYSFLAG
_INT = struct.Struct(">i")
_SHORT = struct.Struct(">h")
_MIN_RECORD = M.record_length(0, 1, 0)
_MESSAGE_MAGIC = struct.pack(">i", M.MESSAGE_MAGIC_CODE)
_BLANK_MAGIC = struct.pack(">i", M.BLANK_MAGIC_CODE)


def stored_record_problem(buf: RecordBuffer, pos: int, size: int, offset: int) -> str | None:
    """Why the ``size``-byte record at ``pos`` of ``buf`` (stored at commit-log ``offset``)
    must not be served, or None when it is sound."""
    if size < _MIN_RECORD or pos + size > len(buf):
        return f"record of {size} bytes at {offset} is out of bounds"
    total, magic, crc, _qid, _flag, _qoff, phys, sysflag = _CORE.unpack_from(buf, pos)
    if magic != M.MESSAGE_MAGIC_CODE:
        return f"bad magic {magic & 0xFFFFFFFF:#x} at {offset}"
    if total != size:
        return f"record at {offset} says {total} bytes, its queue unit {size}"
    if phys != offset:
        return f"record claims offset {phys}, found at {offset}"
    p = pos + M.BORNHOST_POS + (20 if sysflag & SF.BORNHOST_V6 else 8) + 8
    p += (20 if sysflag & SF.STOREHOST_V6 else 8) + 4 + 8
    body_len = _INT.unpack_from(buf, p)[0]
    p += 4
    end = pos + size
    if body_len < 0 or p + body_len + 3 > end:
        return f"record at {offset}: body length {body_len} overruns the record"
    if zlib.crc32(buf[p : p + body_len]) & 0x7FFFFFFF != crc:
        return f"record at {offset}: body CRC mismatch"
    p += body_len
    p += 1 + buf[p]
    if p + 2 > end or p + 2 + _SHORT.unpack_from(buf, p)[0] != end:
        return f"record at {offset}: its fields disagree with its size {size}"
    return None


def stored_run_problem(run: bytes, offset: int) -> str | None:
    """``stored_record_problem`` for each of the adjacent records of ``run`` (one read of
    the commit log from ``offset``), walking by their own sizes to exactly its end."""
    pos = 0
    end = len(run)
    while pos < end:
        if end - pos < _MIN_RECORD:
            return f"run from {offset}: {end - pos} trailing bytes are no record"
        size = _INT.unpack_from(run, pos)[0]
        problem = stored_record_problem(run, pos, size, offset + pos)
        if problem is not None:
            return problem
        pos += size
    return None


def next_sound_record(
    buf: Searchable, start: int, limit: int, base_offset: int, *, check_crc: bool = True
) -> int | None:
    """The first position >= ``start`` in ``buf[:limit]`` (a segment whose byte 0 is at
    commit-log ``base_offset``; ``limit`` is its size) where a complete, sound record
    naming its own offset starts, or the segment's blank end marker; None if none."""
    at = start
    while True:
        hit = buf.find(_MESSAGE_MAGIC, at + 4, limit)
        blank = buf.find(_BLANK_MAGIC, at + 4, limit)
        if blank >= 0 and (hit < 0 or blank < hit):
            cand = blank - 4
            size = _INT.unpack_from(buf, cand)[0]
            if cand >= start and cand + size == limit:
                return cand
            at = blank - 3
            continue
        if hit < 0:
            return None
        cand = hit - 4
        if cand >= start:
            v = check_record(buf, cand, limit, base_offset + cand, check_crc=check_crc, check_text=False)
            if isinstance(v, DispatchRequest):
                return cand
            if isinstance(v, Verdict) and v.reason == BLANK:
                return cand
        at = hit - 3


def records_around(buf: Searchable, limit: int, base_offset: int, lo: int, hi: int) -> tuple[int, int]:
    """The segment-relative span of whole records covering bytes [lo, hi) of a segment
    (``buf``, ``limit`` bytes, starting at commit-log ``base_offset``): from the start of
    the record holding ``lo`` to the next sound record at or after ``hi`` (or the
    segment's end). A digest block that fails names bytes, not records; damage is
    registered on record boundaries so a repair can be checked record by record."""
    pos = 0
    start = lo
    while pos < lo:  # walk our records (over damage, by resync) to the one holding ``lo``
        v = check_record(buf, pos, limit, base_offset + pos, check_text=False)
        if isinstance(v, DispatchRequest):
            if pos + v.size > lo:
                break
            pos += v.size
            continue
        if isinstance(v, Verdict) and v.reason == BLANK:
            break
        nxt = next_sound_record(buf, pos + 1, limit, base_offset)
        if nxt is None or nxt > lo:
            break
        pos = nxt
    start = min(pos, lo)
    end = next_sound_record(buf, max(hi, start + 1), limit, base_offset)
    return start, limit if end is None else end

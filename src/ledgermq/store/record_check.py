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
    body = buf[p : p + body_len] if body_len <= _COPY_BODY_MAX else memoryview(buf)[p : p + body_len]
    if zlib.crc32(body) & _CRC_MASK != crc:
        return f"record at {offset}: body CRC mismatch"
    p += body_len
    p += 1 + buf[p]
    if p + 2 > end or p + 2 + _SHORT.unpack_from(buf, p)[0] != end:
        return f"record at {offset}: its fields disagree with its size {size}"
    return None


def _body_len_at(sysflag: int) -> int:
    """Where BODYLENGTH sits in a record, by its host-size flags."""
    born = 20 if sysflag & SF.BORNHOST_V6 else 8
    store = 20 if sysflag & SF.STOREHOST_V6 else 8
    return M.BORNHOST_POS + born + 8 + store + 4 + 8


_HOST_FLAGS = SF.BORNHOST_V6 | SF.STOREHOST_V6
_BODY_LEN_AT = {flags: _body_len_at(flags) for flags in (0, SF.BORNHOST_V6, SF.STOREHOST_V6, _HOST_FLAGS)}
_MAGIC = M.MESSAGE_MAGIC_CODE
_CRC_MASK = 0x7FFFFFFF
# Bodies up to this size are sliced out of the bytes for their CRC (copying 1 KiB costs
# less than making a memoryview slice); larger ones are read through a memoryview.
_COPY_BODY_MAX = 2048
# TOTALSIZE, MAGICCODE, BODYCRC, PHYSICALOFFSET, SYSFLAG and (IPv4 hosts) BODYLENGTH at 84.
_V4_HEAD = struct.Struct(">iii16xqi44xi")
assert _V4_HEAD.size == _BODY_LEN_AT[0] + 4


def stored_run_problem(run: bytes, offset: int) -> str | None:
    """``stored_record_problem`` for each of the adjacent records of ``run`` (one read of
    the commit log from ``offset``), walking by their own sizes to exactly its end.

    The pull path: the same checks, inlined (a function call and four struct unpacks per
    record were most of the cost), over the bytes that are served; a record that fails
    any check is handed to ``stored_record_problem`` for the reason."""
    end = len(run)
    view = memoryview(run)
    head = _V4_HEAD.unpack_from
    int_at = _INT.unpack_from
    short_at = _SHORT.unpack_from
    crc32 = zlib.crc32
    pos = 0
    while pos < end:
        if end - pos < _MIN_RECORD:
            return f"run from {offset}: {end - pos} trailing bytes are no record"
        total, magic, crc, phys, sysflag, body_len = head(run, pos)
        rec_end = pos + total
        if magic != _MAGIC or phys != offset + pos or total < _MIN_RECORD or rec_end > end:
            return stored_record_problem(run, pos, total, offset + pos) or f"record at {offset + pos} does not fit"
        p = pos + _BODY_LEN_AT[sysflag & _HOST_FLAGS]
        if sysflag & _HOST_FLAGS:  # IPv6 hosts: BODYLENGTH sits further on
            body_len = int_at(run, p)[0]
        p += 4
        if body_len < 0 or p + body_len + 3 > rec_end:
            return stored_record_problem(run, pos, total, offset + pos)
        body = run[p : p + body_len] if body_len <= _COPY_BODY_MAX else view[p : p + body_len]
        if crc32(body) & _CRC_MASK != crc:
            return stored_record_problem(run, pos, total, offset + pos)
        p += body_len
        p += 1 + run[p]
        if p + 2 > rec_end or p + 2 + short_at(run, p)[0] != rec_end:
            return stored_record_problem(run, pos, total, offset + pos)
        pos = rec_end
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


def bad_records(buf: Searchable, limit: int, base_offset: int, start: int, end: int) -> list[tuple[int, int, str]]:
    """The runs of ``buf[start:end)`` (a segment of ``limit`` bytes at commit-log
    ``base_offset``; ``start`` a record boundary) that are no sound record, as
    segment-relative ``(run start, run end, reason)``: each failing record from its start
    to the next sound record (which the walk goes on from). Sound records, and a blank
    end marker, are left out; the topic and properties must be UTF-8 without NUL here,
    which a stored record always is, so a changed byte there is caught where it can be."""
    runs: list[tuple[int, int, str]] = []
    pos = start
    while pos < end:
        v = check_record(buf, pos, limit, base_offset + pos, check_text=True)
        if isinstance(v, DispatchRequest):
            pos += v.size
            continue
        if v.reason == BLANK:
            break
        nxt = next_sound_record(buf, pos + 1, limit, base_offset)
        stop = limit if nxt is None else nxt
        runs.append((pos, stop, v.reason))
        pos = stop
    return runs

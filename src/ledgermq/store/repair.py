"""Validating a replica's bytes before they repair a damaged commit-log range.

Nothing is written unless everything checks out: each segment the bytes touch is read
with the replica's bytes laid over ours, and walked record by record from a known
record boundary (the start of the bytes when a record starts there, a boundary an
earlier repair ended in, or a walk from the segment's start). Every complete record that
overlaps the new bytes must be sound (magic, size, its own physical offset, body CRC,
its fields adding up); a segment's blank end marker must end exactly at the segment's
end. Where the segment has a digest, every digest block the new bytes complete must
match it, unless our damaged bytes match it (the digest was taken after the rot): then
the digest goes and the record checks decide. A block that would still not match has its
other records registered as damaged too (the scrub registers only the records of a
differing block that fail their own checks), so the next repair brings all of it. A
record that starts in the new bytes but ends after them is checked by the next repair
(its boundary is remembered).
"""

from __future__ import annotations

import logging
import zlib
from dataclasses import dataclass, field

from ledgermq.errors import CorruptRangeError
from ledgermq.store.commitlog import CommitLog
from ledgermq.store.damage import DamageRegistry
from ledgermq.store.digests import SegmentDigests
from ledgermq.store.dispatch import BLANK, INCOMPLETE, DispatchRequest, check_record, starts_record
from ledgermq.store.mapped_file import MappedFile
from ledgermq.store.record_check import next_sound_record, records_around

log = logging.getLogger(__name__)


@dataclass(slots=True)
class RepairPlan:
    """What a validated repair will dispatch, and the record boundaries it learnt."""

    records: list[DispatchRequest] = field(default_factory=list)
    boundaries: dict[int, int] = field(default_factory=dict)  # repair end -> record start at or before it


def validate_repair(
    commitlog: CommitLog,
    damage: DamageRegistry,
    digests: SegmentDigests,
    start: int,
    data: memoryview,
    delay_levels_ms: list[int],
    hints: dict[int, int],
) -> RepairPlan:
    """Check ``data`` as the commit log's bytes at ``start``; CorruptRangeError if unsound."""
    end = start + len(data)
    plan = RepairPlan()
    pos = start
    while pos < end:
        mf = commitlog.queue.find(pos)
        if mf is None or not mf.pin():
            raise CorruptRangeError(start, end, f"no segment holds offset {pos}")
        try:
            hi = min(end, mf.end_offset)
            _check_segment(mf, damage, digests, start, end, pos, data[pos - start : hi - start],
                           delay_levels_ms, hints, plan)  # fmt: skip
        finally:
            mf.unpin()
        pos = hi
    return plan


def _anchor(mf: MappedFile, lo: int, part: memoryview, hints: dict[int, int]) -> int:
    """A segment-relative record boundary at or before ``lo``: where a record naming its
    own offset starts in the new bytes, where an earlier repair's last record started, or
    found by walking our records from the segment's start (a damaged range's start is not
    always a boundary: a segment cut short loses bytes mid-record)."""
    base = mf.start_offset
    if starts_record(bytes(part[:36]), base + lo) or lo == 0:
        return lo
    hint = hints.get(base + lo)
    if hint is not None and base <= hint <= base + lo:
        return hint - base
    pos = 0
    while pos < lo:  # walk our own records (resyncing over damage) up to ``lo``
        v = check_record(mf.mm, pos, mf.size, base + pos, check_text=False)
        if isinstance(v, DispatchRequest):
            if pos + v.size > lo:
                return pos
            pos += v.size
            continue
        head = mf.read(pos, 36)
        if starts_record(head, base + pos) and pos + int.from_bytes(head[:4], "big", signed=True) > lo:
            return pos  # a record whose header is sound and whose rest the new bytes bring
        nxt = next_sound_record(mf.mm, pos + 1, mf.size, base)
        if nxt is None or nxt > lo:
            return lo  # nothing sound before ``lo`` to anchor on: the bytes must start a record
        pos = nxt
    return pos


def _check_segment(
    mf: MappedFile,
    damage: DamageRegistry,
    digests: SegmentDigests,
    start: int,
    end: int,
    at: int,
    part: memoryview,
    delay_levels_ms: list[int],
    hints: dict[int, int],
    plan: RepairPlan,
) -> None:
    base = mf.start_offset
    lo = at - base
    hi = lo + len(part)
    anchor = _anchor(mf, lo, part, hints)
    window = bytearray(mf.read(anchor, lo - anchor))
    window += part
    limit = len(window)
    capacity = mf.size - anchor
    pos = 0
    data_from = lo - anchor
    boundary = base + anchor
    while pos < limit:
        offset = base + anchor + pos
        v = check_record(window, pos, limit, offset, delay_levels_ms=delay_levels_ms, capacity=capacity,
                         check_text=False)  # fmt: skip
        if isinstance(v, DispatchRequest):
            if pos + v.size > data_from:
                plan.records.append(v)
            pos += v.size
            boundary = base + anchor + pos
            continue
        if v.reason == INCOMPLETE:
            break  # a record continues after the new bytes: the next repair checks it
        if v.reason == BLANK:
            if anchor + pos + v.size != mf.size:
                raise CorruptRangeError(start, end, f"blank marker at {offset} does not end its segment")
            boundary = base + mf.size
            break
        if pos < data_from:  # our own bytes before the repair are damaged too: skip them
            nxt = next_sound_record(window, pos + 1, limit, base + anchor)
            if nxt is None or nxt < data_from:
                if nxt is None:
                    break
                pos = nxt
                continue
            raise CorruptRangeError(start, end, f"the bytes do not continue our records at {base + anchor + nxt}")
        raise CorruptRangeError(start, end, f"replica's bytes are not a sound record at {offset}: {v.reason}")
    plan.boundaries[base + hi] = boundary
    _check_digest(mf, damage, digests, start, end, lo, part)


def _check_digest(
    mf: MappedFile, damage: DamageRegistry, digests: SegmentDigests, start: int, end: int, lo: int, part: memoryview
) -> None:
    digest = digests.get(mf.start_offset)
    if digest is None:
        return
    block_size, crcs = digest
    hi = lo + len(part)
    for blk in range(lo // block_size, -(-hi // block_size)):
        b_lo, b_hi = blk * block_size, min((blk + 1) * block_size, mf.size)
        outside_damaged = any(
            damage.overlapping(mf.start_offset + a, mf.start_offset + b) is not None
            for a, b in ((b_lo, lo), (hi, b_hi))
            if a < b
        )
        if outside_damaged:
            continue  # the rest of this block is still damaged: a later repair completes it
        block = bytearray(mf.read(b_lo, b_hi - b_lo))
        if zlib.crc32(block) == crcs[blk]:
            # Our damaged bytes are what the digest says: it was taken after the rot (between
            # sealing and the digest's write), so it cannot judge the replica's bytes. It goes;
            # the record checks above did, and the scrub digests the segment again after a
            # clean walk.
            log.error(
                "commit-log segment %d's digest was taken over damaged bytes (block [%d, %d)): dropping it",
                mf.start_offset,
                mf.start_offset + b_lo,
                mf.start_offset + b_hi,
            )
            digests.forget(mf.start_offset)
            return
        s, e = max(lo, b_lo), min(hi, b_hi)
        block[s - b_lo : e - b_lo] = part[s - lo : e - lo]
        if zlib.crc32(block) != crcs[blk]:
            what = f"block [{mf.start_offset + b_lo}, {mf.start_offset + b_hi}) would not match its digest"
            _widen_to_block(mf, damage, b_lo, b_hi, what)
            raise CorruptRangeError(start, end, what)


def _widen_to_block(mf: MappedFile, damage: DamageRegistry, b_lo: int, b_hi: int, what: str) -> None:
    """The scrub registered only the records of a differing block that failed their own
    checks (store/scrub.py); if the block still differs with the replica's bytes over
    them, a byte only the digest covers changed elsewhere in it (or the replica's bytes
    are what is wrong). Either way the block's other records can no longer be trusted:
    register all of them, so the next repair brings the whole block."""
    start, end = records_around(mf.mm, mf.size, mf.start_offset, b_lo, b_hi)
    damage.report(mf.start_offset + start, mf.start_offset + end, f"repair: {what} with the replica's bytes")

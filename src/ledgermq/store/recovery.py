"""Crash recovery: make the store hold exactly the records that were completely written.

Normal (the last run removed its abort file) and abnormal recovery are one procedure that
differs only in where the commit-log scan starts and whether it re-dispatches:

1. Each consume queue finds its last valid unit and drops anything after it.
2. Pick the first commit-log segment to scan: after a clean stop, the last three (as
   RocketMQ); after a crash, the newest segment whose first record is older than the
   checkpoint says is safely flushed (store time <= min(physic, logics[, index]) - 3 s),
   or earlier if an index file had to be dropped.
3. Scan forward, validating each record (magic, size, own offset, CRC, topic and
   properties); after a crash, dispatch each valid record again (``redispatch``: a unit
   that exists is compared with its record and rewritten if it disagrees).
   When a record fails, look for the next sound record (this segment, then later ones):
   if there is one, the bytes between are corruption in the middle of the log: they are
   registered as a damaged range (refused until a replica repairs them) and the scan goes
   on after them. Only a failure with nothing sound after it is a torn tail.
4. Cut the commit log after the last valid record: torn tails disappear.
5. Cut consume-queue units that point at or beyond that end.
6. Rebuild the per-queue next-offset table and each queue's minimum.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass

from ledgermq.protocol import message as M
from ledgermq.store.checkpoint import Checkpoint
from ledgermq.store.commitlog import CommitLog, queue_key
from ledgermq.store.damage import DamageRegistry
from ledgermq.store.digests import SegmentDigests
from ledgermq.store.dispatch import BLANK, END_OF_DATA, TORN_TEXT, DispatchRequest, Verdict, check_record
from ledgermq.store.index import IndexService
from ledgermq.store.mapped_file import MappedFile
from ledgermq.store.queue_table import ConsumeQueueTable
from ledgermq.store.record_check import next_sound_record
from ledgermq.store.reput import redispatch

log = logging.getLogger(__name__)

_STORE_TS_V4 = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class RecoveryResult:
    abnormal: bool
    scan_start: int  # commit-log offset the scan started at
    valid_end: int  # offset just after the last complete record
    dirty_tail: bool  # non-zero bytes (a torn or corrupt record) followed the valid end
    segments_dropped: int  # whole segments after the valid end that were deleted
    records_scanned: int
    records_redispatched: int
    stop_reason: str  # why the scan stopped ("end of data" after a clean run)
    reput_from: int  # where the reput service picks up


def _first_store_ts(mf: MappedFile) -> int:
    _total, magic = struct.unpack_from(">ii", mf.mm, 0)
    if magic != M.MESSAGE_MAGIC_CODE:
        return -1
    sysflag = struct.unpack_from(">i", mf.mm, M.SYSFLAG_POS)[0]
    return int(_STORE_TS_V4.unpack_from(mf.mm, M.store_timestamp_pos(sysflag))[0])


def _scan_start_index(files: list[MappedFile], abnormal: bool, safe_ts: int, rebuild_from: int | None) -> int:
    if not abnormal:
        return max(0, len(files) - 3)
    start = 0
    for i in range(len(files) - 1, -1, -1):
        ts = _first_store_ts(files[i])
        if 0 < ts <= safe_ts:
            start = i
            break
    if rebuild_from is not None:
        while start > 0 and files[start].start_offset > rebuild_from:
            start -= 1
    return start


def recover(
    commitlog: CommitLog,
    queues: ConsumeQueueTable,
    index: IndexService | None,
    checkpoint: Checkpoint,
    *,
    abnormal: bool,
    check_crc: bool,
    delay_levels_ms: list[int],
    index_rebuild_from: int | None = None,
    damage: DamageRegistry | None = None,
    digests: SegmentDigests | None = None,
    durable_only_to_checkpoint: bool = False,
) -> RecoveryResult:
    """``durable_only_to_checkpoint`` (ASYNC_FLUSH): after a crash, nothing newer than the
    checkpoint's flushed record was promised durable, and the kernel writes dirty pages
    back in any order, so a bad record newer than that followed by sound ones is a torn
    write, not rot: it is cut as a torn tail (a slave gives back what it holds of it,
    docs/replication.md), not registered as damage no replica may ever hold."""
    # 1. Consume queues trim themselves to their last valid unit.
    for cq in queues.all():
        cq.recover()

    files = commitlog.queue.files
    if not files:
        return RecoveryResult(abnormal, 0, 0, False, 0, 0, 0, END_OF_DATA, 0)

    # 2. Where to start scanning.
    safe_ts = checkpoint.min_timestamp(with_index=index is not None)
    start_idx = _scan_start_index(files, abnormal, safe_ts, index_rebuild_from)
    scan_start = files[start_idx].start_offset

    # 3. Scan, validate and (after a crash) re-dispatch; damage with sound records after
    #    it is registered and skipped, not cut (store/damage.py).
    scan = _Scan(queues, index, abnormal, check_crc, delay_levels_ms)
    if abnormal and durable_only_to_checkpoint:
        scan.torn_after_ts = checkpoint.physic_ts
    valid_end, stop_reason = scan.run(files, start_idx, damage)
    scanned, redispatched, last_ts = scan.scanned, scan.redispatched, scan.last_ts
    if stop_reason not in (END_OF_DATA,):
        log.warning("commit log recovery cut a torn tail at %d: %s (nothing sound follows)", valid_end, stop_reason)

    # 4. Cut the commit log after the last valid record.
    dirty = _dirty_after(commitlog, valid_end)
    dropped = sum(1 for mf in files if mf.start_offset > valid_end)
    commitlog.queue.truncate_after(valid_end)
    if damage is not None:
        damage.drop_from(valid_end)
    if digests is not None:
        digests.forget_from(valid_end)

    # 5. Cut consume-queue units the commit log no longer backs.
    for cq in queues.all():
        cq.truncate_dirty(valid_end)

    # 6. Next offsets per queue, and minimums after retention.
    low = commitlog.min_offset
    commitlog.queue_offsets = {}
    for cq in queues.all():
        commitlog.queue_offsets[queue_key(cq.topic, cq.queue_id)] = cq.max_offset
        cq.correct_min_offset(low)
    commitlog.last_store_timestamp = last_ts

    reput_from = valid_end if abnormal else min(max(queues.max_physic_offset(), low), valid_end)
    return RecoveryResult(
        abnormal,
        scan_start,
        valid_end,
        dirty,
        dropped,
        scanned,
        redispatched,
        stop_reason,
        reput_from,
    )


class _Scan:
    """Step 3: walk the segments from ``start_idx``, count (and after a crash re-dispatch)
    each sound record, and step over damage that has sound records after it."""

    def __init__(
        self,
        queues: ConsumeQueueTable,
        index: IndexService | None,
        redispatching: bool,
        check_crc: bool,
        delay_levels_ms: list[int],
    ) -> None:
        self.queues = queues
        self.index = index
        self.redispatching = redispatching
        self.check_crc = check_crc
        self.delay_levels_ms = delay_levels_ms
        self.scanned = self.redispatched = self.last_ts = 0
        # A bad record after a sound one at least this new (store time) is a torn write, not
        # rot (set after a crash under ASYNC_FLUSH: see recover()).
        self.torn_after_ts: int | None = None

    def run(self, files: list[MappedFile], start_idx: int, damage: DamageRegistry | None) -> tuple[int, str]:
        """The offset just after the last sound record, and why the scan stopped there."""
        valid_end = files[start_idx].start_offset
        idx, pos = start_idx, 0
        while idx < len(files):
            mf = files[idx]
            if mf.start_offset != valid_end:
                return valid_end, f"segment {mf.path.name} does not follow offset {valid_end}"
            pos, reason = self._segment(mf, pos)
            if pos < mf.size and damage is not None and not self._torn_write():
                resumed = _resume_after_damage(files, idx, pos, self.check_crc)
                if resumed is not None:  # sound records follow: rot in the middle, not a torn tail
                    nxt_idx, nxt_pos = resumed
                    damage.report(mf.start_offset + pos, files[nxt_idx].start_offset + nxt_pos, f"recovery: {reason}")
                    idx, pos = nxt_idx, nxt_pos
                    valid_end = files[idx].start_offset
                    continue
            valid_end = mf.start_offset + pos
            if pos < mf.size:
                return valid_end, reason  # data ends (or breaks) inside this segment
            idx, pos = idx + 1, 0
        return valid_end, END_OF_DATA

    def _segment(self, mf: MappedFile, pos: int) -> tuple[int, str]:
        """Walk ``mf`` from ``pos``: where its sound records end and why (the segment's size
        after a blank end marker)."""
        while True:
            v = check_record(mf.mm, pos, mf.size, mf.start_offset + pos,
                             check_crc=self.check_crc, delay_levels_ms=self.delay_levels_ms)  # fmt: skip
            if isinstance(v, DispatchRequest):
                self._take(v)
                pos += v.size
                continue
            assert isinstance(v, Verdict)
            if v.reason == TORN_TEXT:
                accepted = _genuine_despite_text(mf, pos, self.check_crc, self.delay_levels_ms)
                if accepted is not None:  # a valid record follows: not torn, just unusual text
                    self._take(accepted)
                    pos += accepted.size
                    continue
            return (mf.size if v.reason == BLANK else pos), v.reason

    def _torn_write(self) -> bool:
        return self.torn_after_ts is not None and self.last_ts >= self.torn_after_ts

    def _take(self, req: DispatchRequest) -> None:
        self.scanned += 1
        self.last_ts = req.store_timestamp
        if self.redispatching:
            redispatch(req, self.queues, self.index)
            self.redispatched += 1


def _genuine_despite_text(
    mf: MappedFile, pos: int, check_crc: bool, delay_levels_ms: list[int]
) -> DispatchRequest | None:
    """The record at ``pos`` if it is sound apart from its text and a sound record or the
    segment's blank end follows it (a torn write has nothing valid after it)."""
    v = check_record(mf.mm, pos, mf.size, mf.start_offset + pos, check_crc=check_crc,
                     delay_levels_ms=delay_levels_ms, check_text=False)  # fmt: skip
    if not isinstance(v, DispatchRequest):
        return None
    nxt = pos + v.size
    after = check_record(mf.mm, nxt, mf.size, mf.start_offset + nxt, check_crc=check_crc, check_text=False)
    if isinstance(after, DispatchRequest) or (isinstance(after, Verdict) and after.reason == BLANK):
        return v
    return None


def _resume_after_damage(files: list[MappedFile], idx: int, pos: int, check_crc: bool) -> tuple[int, int] | None:
    """Where the next sound record after a failure at ``files[idx]`` byte ``pos`` starts
    (this segment, then the first record of each later one), or None: a torn tail."""
    mf = files[idx]
    nxt = next_sound_record(mf.mm, pos + 1, mf.size, mf.start_offset, check_crc=check_crc)
    if nxt is not None:
        return idx, nxt
    for later in range(idx + 1, len(files)):
        f = files[later]
        v = check_record(f.mm, 0, f.size, f.start_offset, check_crc=check_crc, check_text=False)
        if isinstance(v, DispatchRequest) or (isinstance(v, Verdict) and v.reason == BLANK):
            return later, 0
        found = next_sound_record(f.mm, 1, f.size, f.start_offset, check_crc=check_crc)
        if found is not None:
            return later, found
    return None


def _dirty_after(commitlog: CommitLog, offset: int) -> bool:
    """Did anything but zeros follow the valid end (a torn or corrupt record)?"""
    mf = commitlog.queue.find(offset)
    if mf is None:
        return False
    pos = offset - mf.start_offset
    return bool(mf.mm[pos : min(pos + 4096, mf.size)].strip(b"\x00"))

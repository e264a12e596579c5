"""Consume queues: per (topic, queue id), 20-byte units pointing into the commit log.

Unit layout (big-endian)::

    0  8  commit-log physical offset
    8  4  record size (TOTALSIZE)
    12 8  tag hash (Java String.hashCode of TAGS; for SCHEDULE_TOPIC_XXXX the due time)

Logical offset ``k`` lives at byte ``20k`` of the queue's byte space, which is split
into segments of ``mappedFileSizeConsumeQueue`` bytes under
``consumequeue/<topic>/<queueId>/<20-digit byte offset>``. A queue is derived data: the
reput service writes it from the commit log, and recovery trims or rebuilds it.

A queue that starts at a logical offset above zero (its head was never dispatched here,
e.g. a slave that joined late) is padded with "pre-blank" units (offset 0, size
Integer.MAX_VALUE), as RocketMQ does, so byte position still equals 20 * offset.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable
from pathlib import Path

from ledgermq.store.mapped_file import MappedFile, SegmentGoneError
from ledgermq.store.mapped_file_queue import MappedFileQueue

log = logging.getLogger(__name__)

UNIT = struct.Struct(">qiq")
UNIT_SIZE = UNIT.size  # 20
_PRE_BLANK = UNIT.pack(0, 0x7FFFFFFF, 0)


class ConsumeQueue:
    def __init__(self, topic: str, queue_id: int, root: Path, segment_size: int) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.files = MappedFileQueue(root / topic / str(queue_id), segment_size)
        self.segment_size = segment_size
        self.max_physic_offset = -1  # end (offset + size) of the newest unit
        self.min_logic_offset = 0  # in bytes
        self.last_store_timestamp = 0

    # -- recovery --------------------------------------------------------------------
    def load(self) -> None:
        self.files.load()

    def recover(self) -> None:
        """Find the last valid unit (offset >= 0 and size > 0) and drop what follows."""
        files = self.files.files
        if not files:
            return
        end = files[0].start_offset
        for mf in files[max(0, len(files) - 3) :]:
            pos = 0
            mm = mf.mm
            while pos < mf.size:
                offset, size, _tags = UNIT.unpack_from(mm, pos)
                if offset < 0 or size <= 0:
                    break
                if size != 0x7FFFFFFF:
                    self.max_physic_offset = offset + size
                pos += UNIT_SIZE
            end = mf.start_offset + pos
            if pos < mf.size:
                break
        self.files.truncate_after(end)

    def truncate_dirty(self, phy_offset: int) -> None:
        """Drop units pointing at or beyond ``phy_offset`` (the commit log lost them)."""
        files = self.files.files
        cut: int | None = None
        for mf in reversed(files):
            pos = mf.wrote - UNIT_SIZE
            while pos >= 0:
                offset, size, _tags = UNIT.unpack_from(mf.mm, pos)
                if size == 0x7FFFFFFF or offset + size <= phy_offset:
                    break  # pre-blank padding is never beyond anything
                cut = mf.start_offset + pos
                pos -= UNIT_SIZE
            if pos >= 0:
                break
        if cut is not None:
            self.files.truncate_after(cut)
            self._reset_max_physic_offset()

    def _reset_max_physic_offset(self) -> None:
        self.max_physic_offset = -1
        last = self.files.last()
        if last is not None and last.wrote >= UNIT_SIZE:
            offset, size, _ = UNIT.unpack_from(last.mm, last.wrote - UNIT_SIZE)
            if size != 0x7FFFFFFF:
                self.max_physic_offset = offset + size

    # -- writes ----------------------------------------------------------------------
    def put(self, offset: int, size: int, tags_code: int, cq_offset: int, store_ts: int) -> bool:
        """Append the unit for logical offset ``cq_offset``; idempotent for replays.

        Returns False only if the unit could not be placed (a gap the caller must see).
        """
        if offset + size <= self.max_physic_offset:
            return True  # already dispatched (recovery replays from a safe point)
        expect = cq_offset * UNIT_SIZE
        mf = self.files.last_for_write(start_if_empty=expect)
        if mf.first_create_in_queue and mf.wrote == 0 and expect > mf.start_offset:
            self.min_logic_offset = expect
            blanks = (expect - mf.start_offset) // UNIT_SIZE
            mf.append(_PRE_BLANK * blanks)
        current = mf.write_offset
        if expect < current:
            return True
        if expect != current:
            log.error(
                "%s-%d: unit for offset %d but the queue ends at %d; not dispatched",
                self.topic,
                self.queue_id,
                cq_offset,
                current // UNIT_SIZE,
            )
            return False
        mf.append(UNIT.pack(offset, size, tags_code))
        self.max_physic_offset = offset + size
        if store_ts > self.last_store_timestamp:
            self.last_store_timestamp = store_ts
        return True

    def flush(self) -> None:
        self.files.flush()

    # -- reads -----------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        return max(self.min_logic_offset, self.files.min_offset()) // UNIT_SIZE

    @property
    def max_offset(self) -> int:
        return self.files.max_offset() // UNIT_SIZE

    def read_units(self, index: int, max_units: int) -> bytes:
        """Raw units from logical ``index`` on, within one segment, at most ``max_units``."""
        pos = index * UNIT_SIZE
        mf = self.files.find(pos)
        if mf is None or not mf.pin():
            return b""
        try:
            rel = pos - mf.start_offset
            n = max(0, min(max_units * UNIT_SIZE, mf.wrote - rel))
            return mf.read(rel, n - n % UNIT_SIZE)
        except SegmentGoneError:
            return b""
        finally:
            mf.unpin()

    def unit(self, index: int) -> tuple[int, int, int] | None:
        raw = self.read_units(index, 1)
        if not raw:
            return None
        offset, size, tags = UNIT.unpack(raw)
        return int(offset), int(size), int(tags)

    def offset_by_time(self, timestamp: int, store_time_of: Callable[[int, int], int]) -> int:
        """The logical offset RocketMQ 4.x answers for SEARCH_OFFSET_BY_TIMESTAMP.

        A message stored exactly at ``timestamp`` if there is one (the first such);
        otherwise the nearer of the two neighbours (the older on a tie); the oldest
        message if all are newer, the newest if all are older; 0 for an empty queue.
        Binary search with store times read from the commit log.
        """
        low, high = self.min_offset, self.max_offset
        if low >= high:
            return 0
        lo, hi = low, high  # find the first offset stored at or after the timestamp
        while lo < hi:
            mid = (lo + hi) // 2
            u = self.unit(mid)
            ts = store_time_of(u[0], u[1]) if u else -1
            if ts < timestamp:
                lo = mid + 1
            else:
                hi = mid
        if lo == high:
            return high - 1  # every message is older
        after = self.unit(lo)
        after_ts = store_time_of(after[0], after[1]) if after else -1
        if after_ts == timestamp or lo == low:
            return lo
        before = self.unit(lo - 1)
        before_ts = store_time_of(before[0], before[1]) if before else -1
        return lo if abs(timestamp - before_ts) > abs(after_ts - timestamp) else lo - 1

    # -- retention -------------------------------------------------------------------
    def correct_min_offset(self, phy_min: int) -> None:
        """Move the logical minimum past units whose messages were deleted."""
        first = self.files.first()
        if first is None:
            return
        pos = max(self.min_logic_offset - first.start_offset, 0)
        while pos < first.wrote:
            offset, size, _ = UNIT.unpack_from(first.mm, pos)
            if size != 0x7FFFFFFF and offset >= phy_min:
                break
            pos += UNIT_SIZE
        self.min_logic_offset = first.start_offset + pos

    def delete_expired(self, phy_min: int) -> int:
        """Delete whole segments whose last unit points below ``phy_min``."""

        def expired(mf: MappedFile) -> bool:
            offset, _size, _ = UNIT.unpack_from(mf.mm, mf.size - UNIT_SIZE)  # last unit of a full segment
            return bool(offset < phy_min)

        # Like RocketMQ, wait up to a minute for pulls still reading an expired segment.
        removed = self.files.delete_first_while(expired, max_files=1 << 30, force_after_s=60)
        if removed:
            self.correct_min_offset(phy_min)
        return len(removed)

    def close(self) -> None:
        self.files.close()


class ConsumeQueueTable:
    """All consume queues of a store, created on first dispatch."""

    def __init__(self, root: Path, segment_size: int) -> None:
        self.root = root
        self.segment_size = segment_size
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}

    def load(self) -> None:
        if not self.root.exists():
            return
        for topic in sorted(os.listdir(self.root)):
            tdir = self.root / topic
            if not tdir.is_dir():
                continue
            for qname in sorted(os.listdir(tdir)):
                if qname.isdigit() and (tdir / qname).is_dir():
                    cq = ConsumeQueue(topic, int(qname), self.root, self.segment_size)
                    try:
                        cq.load()
                    except BaseException:
                        self.close()
                        raise
                    self.queues[(topic, int(qname))] = cq

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.queues.get((topic, queue_id))

    def find_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self.queues.get((topic, queue_id))
        if cq is None:
            cq = ConsumeQueue(topic, queue_id, self.root, self.segment_size)
            self.queues = {**self.queues, (topic, queue_id): cq}
        return cq

    def all(self) -> list[ConsumeQueue]:
        return list(self.queues.values())

    def max_physic_offset(self) -> int:
        return max((cq.max_physic_offset for cq in self.queues.values()), default=-1)

    def flush(self) -> None:
        for cq in self.all():
            cq.flush()

    def close(self) -> None:
        for cq in self.all():
            cq.close()

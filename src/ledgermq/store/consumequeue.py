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

The files are RocketMQ's, but how they are held is not: segments are read and written
with pread/pwrite through descriptors borrowed from one bounded ``OpenFiles`` cache,
nothing is opened at start-up, and the directory entries of new segments are made
durable by the flush (``DirSync``), so the number of queues bounds neither the open
files nor the time it takes to make a message readable.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ledgermq.failpoints import failpoint
from ledgermq.store.damage import DamageRegistry
from ledgermq.store.mapped_file import SegmentGoneError, segment_name
from ledgermq.store.open_files import OpenFiles
from ledgermq.store.queue_files import DirSync, QueueFiles, SegmentCreator
from ledgermq.store.queue_gaps import QueueIntegrityStats, placeholder_unit
from ledgermq.store.queue_segment import QueueSegment

log = logging.getLogger(__name__)

UNIT = struct.Struct(">qiq")
Unit = tuple[int, int, int, int, int, int]
"""(commit-log offset, size, tag code, queue offset, store time, the caller's tag): one
unit for ``put_units``; the last field is not written (the reput's record number)."""
UNIT_SIZE = UNIT.size  # 20
_PRE_BLANK = UNIT.pack(0, 0x7FFFFFFF, 0)
_SCAN_CHUNK = UNIT_SIZE * 4096  # units read at a time when walking a segment
_FIRST_CHUNK = UNIT_SIZE * 204  # within one 4 KiB page
_PAGE = 4096
_ZEROS = bytes(_PAGE)
DEFAULT_OPEN_FILES = 1024


class UnitsNotWritten(Exception):
    """``put_units`` placed the first ``placed`` units only; ``__cause__`` says why."""

    def __init__(self, placed: int) -> None:
        super().__init__(f"{placed} units placed")
        self.placed = placed


def _units(seg: QueueSegment, start: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """(position, offset, size, tags) of the units in ``[start, end)`` of ``seg``."""
    pos = start
    step = _FIRST_CHUNK  # most scans stop within the first page (a queue's few units)
    while pos < end:
        chunk = seg.read(pos, min(step, end - pos))
        step = min(step * 4, _SCAN_CHUNK)
        n = len(chunk) - len(chunk) % UNIT_SIZE
        if n <= 0:
            return
        for i, (offset, size, tags) in enumerate(UNIT.iter_unpack(chunk[:n])):
            yield pos + i * UNIT_SIZE, offset, size, tags
        pos += n


class ConsumeQueue:
    def __init__(
        self,
        topic: str,
        queue_id: int,
        root: Path,
        segment_size: int,
        open_files: OpenFiles | None = None,
        creator: SegmentCreator | None = None,
        damage: DamageRegistry | None = None,
        stats: QueueIntegrityStats | None = None,
    ) -> None:
        self.topic = topic
        self.queue_id = queue_id
        # Damaged commit-log ranges explain gaps in dispatch (store/queue_gaps.py).
        self.damage = damage
        self.stats = stats or QueueIntegrityStats()
        self.files = QueueFiles(
            os.path.join(root, topic, str(queue_id)),
            segment_size,
            open_files or OpenFiles(DEFAULT_OPEN_FILES),
            creator or SegmentCreator(DirSync()),
        )
        self.segment_size = segment_size
        self.max_physic_offset = -1  # end (offset + size) of the newest unit
        self.min_logic_offset = 0  # in bytes
        self.last_store_timestamp = 0
        # (position, commit-log offset) of the first real unit, as recovery read it: lets
        # the minimum be corrected at start-up without reading the queue again.
        self._recovered_first: tuple[int, int] | None = None
        self._positions_known = False

    # -- positions at a clean stop (queue_positions.py) ----------------------------------
    def position(self) -> list[Any]:
        files = self.files.files
        first_phys = -1
        if files:
            raw = self.read_units(self.min_offset, 1)
            if len(raw) == UNIT_SIZE:
                offset, size, _ = UNIT.unpack(raw)
                first_phys = offset if size != 0x7FFFFFFF else -1
        return [
            self.topic,
            self.queue_id,
            [seg.start_offset for seg in files],
            files[-1].wrote if files else 0,
            self.max_physic_offset,
            self.min_logic_offset,
            first_phys,
            self.last_store_timestamp,
        ]

    def restore(self, entry: list[Any]) -> None:
        """Take the position a clean stop saved (``position``) instead of reading files."""
        starts, last_wrote = entry[2], entry[3]
        segments = []
        for start in starts:
            seg = QueueSegment(
                os.path.join(self.files.directory, segment_name(start)),
                self.segment_size,
                self.files.open_files,
                start=int(start),
            )
            seg.wrote = seg.flushed = self.segment_size
            segments.append(seg)
        if segments:
            segments[-1].wrote = segments[-1].flushed = int(last_wrote)
        self.files.files = segments
        self.max_physic_offset = int(entry[4])
        self.min_logic_offset = int(entry[5])
        self.last_store_timestamp = int(entry[7])
        if segments and int(entry[6]) >= 0:
            self._recovered_first = (self.min_logic_offset - segments[0].start_offset, int(entry[6]))
        self._positions_known = True

    # -- recovery --------------------------------------------------------------------
    def load(self) -> None:
        self.files.load()

    def recover(self) -> None:
        """Find the last valid unit (offset >= 0 and size > 0) and drop what follows."""
        if self._positions_known:
            self._positions_known = False  # from a clean stop's positions file: nothing to find
            return
        files = self.files.files
        if not files or (len(files) == 1 and self._recover_within_first_page(files[0])):
            return
        end = files[0].start_offset
        for seg in files[max(0, len(files) - 3) :]:
            pos = seg.size
            for at, offset, size, _tags in _units(seg, 0, seg.size):
                if offset < 0 or size <= 0:
                    pos = at
                    break
                if size != 0x7FFFFFFF:
                    self.max_physic_offset = offset + size
            end = seg.start_offset + pos
            if pos < seg.size:
                break
        self.files.truncate_after(end)

    def _recover_within_first_page(self, seg: QueueSegment) -> bool:
        """The common case at start-up, in one pread and one lseek: a queue's only segment
        whose units end within its first page, followed by nothing but zeros and a hole.
        A store with 80,000 queues restarts in seconds only if this costs microseconds.
        False (nothing changed but ``max_physic_offset``, which the full scan redoes)
        sends the queue through the full scan."""
        head, hole_after = seg.head(_PAGE)
        n = len(head) - len(head) % UNIT_SIZE
        end = -1
        first: tuple[int, int] | None = None
        for i, (offset, size, _tags) in enumerate(UNIT.iter_unpack(head[:n])):
            if offset < 0 or size <= 0:
                end = i * UNIT_SIZE
                break
            if size != 0x7FFFFFFF:
                self.max_physic_offset = offset + size
                if first is None:
                    first = (i * UNIT_SIZE, offset)
        if end < 0 or not hole_after or head[end:] != _ZEROS[: len(head) - end]:
            return False
        seg.wrote = seg.flushed = end
        self._recovered_first = first
        return True

    def truncate_dirty(self, phy_offset: int) -> None:
        """Drop units pointing at or beyond ``phy_offset`` (the commit log lost them)."""
        if self.max_physic_offset <= phy_offset:
            return  # nothing points beyond it (recover() found the newest unit)
        cut: int | None = None
        for seg in reversed(self.files.files):
            pos = seg.wrote - UNIT_SIZE
            while pos >= 0:
                offset, size, _tags = UNIT.unpack(seg.read(pos, UNIT_SIZE))
                if size == 0x7FFFFFFF or offset + size <= phy_offset:
                    break  # pre-blank padding is never beyond anything
                cut = seg.start_offset + pos
                pos -= UNIT_SIZE
            if pos >= 0:
                break
        if cut is not None:
            self.files.truncate_after(cut)
            self._reset_max_physic_offset()

    def _reset_max_physic_offset(self) -> None:
        self.max_physic_offset = -1
        for seg in reversed(self.files.files):
            if seg.wrote >= UNIT_SIZE:
                offset, size, _ = UNIT.unpack(seg.read(seg.wrote - UNIT_SIZE, UNIT_SIZE))
                if size != 0x7FFFFFFF:
                    self.max_physic_offset = offset + size
                return

    def drop_from(self, cq_offset: int) -> None:
        """Drop the units of logical offsets ``cq_offset`` and later (the queue is about
        to be re-derived from the commit log, store/queue_check.py)."""
        self.files.truncate_after(cq_offset * UNIT_SIZE)
        self._reset_max_physic_offset()

    # -- writes ----------------------------------------------------------------------
    def put(self, offset: int, size: int, tags_code: int, cq_offset: int, store_ts: int) -> bool:
        """Append the unit for logical offset ``cq_offset``; idempotent for replays.

        Returns False only if the unit could not be placed (a gap the caller must see).
        """
        if offset + size <= self.max_physic_offset:
            return True  # already dispatched (recovery replays from a safe point)
        failpoint("consume_queue.before_put")
        expect = cq_offset * UNIT_SIZE
        seg = self.files.last_for_write(start_if_empty=expect)
        if seg.first_create_in_queue and seg.wrote == 0 and expect > seg.start_offset:
            self.min_logic_offset = expect
            blanks = (expect - seg.start_offset) // UNIT_SIZE
            seg.append(_PRE_BLANK * blanks)
        current = seg.write_offset
        if expect < current:
            return True
        if expect != current:
            if not self._fill_gap(current // UNIT_SIZE, cq_offset, offset):
                return False
            seg = self.files.last_for_write()
        seg.append(UNIT.pack(offset, size, tags_code))
        self.max_physic_offset = offset + size
        if store_ts > self.last_store_timestamp:
            self.last_store_timestamp = store_ts
        return True

    def put_units(self, units: Sequence[Unit]) -> None:
        """``put`` for each of ``units`` in order, with one write per run of consecutive
        units that fits in a segment instead of one per unit: the reput hands over the
        units of one pass, which for a queue follow each other (a pwrite costs more than
        the rest of a unit's dispatch). Raises ``UnitsNotWritten`` (with how many units
        were placed, and the cause) if one could not be written."""
        i = 0
        n = len(units)
        try:
            while i < n:
                offset, size, tags_code, cq_offset, store_ts, _tag = units[i]
                if offset + size <= self.max_physic_offset:
                    i += 1
                    continue  # already dispatched (recovery replays from a safe point)
                failpoint("consume_queue.before_put")
                expect = cq_offset * UNIT_SIZE
                seg = self.files.last_for_write(start_if_empty=expect)
                if seg.first_create_in_queue and seg.wrote == 0 and expect > seg.start_offset:
                    self.min_logic_offset = expect
                    seg.append(_PRE_BLANK * ((expect - seg.start_offset) // UNIT_SIZE))
                current = seg.write_offset
                if expect != current:
                    if expect < current or not self._fill_gap(current // UNIT_SIZE, cq_offset, offset):
                        i += 1
                        continue
                    seg = self.files.last_for_write()
                # The run: units that follow this one in the queue and in the commit log
                # and still fit in the segment.
                end = offset + size
                last_ts = store_ts
                j = i + 1
                stop = min(n, i + (seg.size - seg.wrote) // UNIT_SIZE)
                while j < stop:
                    o, sz, _t, q, ts, _tag = units[j]
                    if q != cq_offset + (j - i) or o + sz <= end:
                        break
                    end = o + sz
                    last_ts = max(last_ts, ts)
                    j += 1
                if j == i + 1:
                    data = UNIT.pack(offset, size, tags_code)
                else:
                    data = b"".join([UNIT.pack(u[0], u[1], u[2]) for u in units[i:j]])
                seg.append(data)
                self.max_physic_offset = end
                if last_ts > self.last_store_timestamp:
                    self.last_store_timestamp = last_ts
                i = j
        except Exception as exc:
            raise UnitsNotWritten(i) from exc

    def _fill_gap(self, have: int, want: int, phys: int) -> bool:
        """Queue offsets [have, want) have no units and the record at commit-log ``phys``
        names offset ``want``: give them placeholder units pointing at the damaged range
        between (store/queue_gaps.py) and return True, or log the unexplained gap."""
        placeholder = placeholder_unit(self.damage, self.max_physic_offset, phys)
        if placeholder is None:
            self.stats.add("unexplained_gaps")
            log.error(
                "%s-%d: unit for offset %d but the queue ends at %d and no damaged range explains the gap; "
                "not dispatched",
                self.topic,
                self.queue_id,
                want,
                have,
            )
            return False
        start, size = placeholder
        unit = UNIT.pack(start, size, 0)
        left = want - have
        while left:
            seg = self.files.last_for_write()
            n = min(left, (seg.size - seg.wrote) // UNIT_SIZE)
            seg.append(unit * n)
            left -= n
        self.max_physic_offset = max(self.max_physic_offset, start + size)
        self.stats.add("placeholders", want - have)
        log.error(
            "%s-%d: offsets %d..%d lie in damaged commit-log bytes [%d, %d) and have no units; "
            "they are refused until a replica repairs them",
            self.topic,
            self.queue_id,
            have,
            want - 1,
            start,
            start + size,
        )
        return True

    def rewrite(self, offset: int, size: int, tags_code: int, cq_offset: int, store_ts: int) -> bool:
        """Make the unit of logical offset ``cq_offset`` say (offset, size, tags_code):
        written if the queue ends there, rewritten in place if it disagrees (a placeholder,
        a unit a torn or rotten write left). True if anything changed. Callers hold the
        dispatch lock (the reput's), so no dispatch writes this queue meanwhile."""
        pos = cq_offset * UNIT_SIZE
        if pos >= self.files.max_offset():
            before = self.files.max_offset()
            placed = self.put(offset, size, tags_code, cq_offset, store_ts)
            return placed and self.files.max_offset() > before
        seg = self.files.find(pos)
        if seg is None or pos < self.min_logic_offset:
            return False  # below the queue's minimum: retention's, not ours
        want = UNIT.pack(offset, size, tags_code)
        if seg.read(pos - seg.start_offset, UNIT_SIZE) == want:
            return False
        seg.write_at(pos - seg.start_offset, want)
        if pos + UNIT_SIZE == self.files.max_offset():
            self._reset_max_physic_offset()
        self.stats.add("units_rewritten")
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
        seg = self.files.find(pos)
        if seg is None:
            return b""
        rel = pos - seg.start_offset
        n = max(0, min(max_units * UNIT_SIZE, seg.wrote - rel))
        n -= n % UNIT_SIZE
        if n == 0:
            return b""
        try:
            return seg.read(rel, n)
        except SegmentGoneError:
            return b""

    def unit(self, index: int) -> tuple[int, int, int] | None:
        raw = self.read_units(index, 1)
        if len(raw) < UNIT_SIZE:
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
        known, self._recovered_first = self._recovered_first, None
        if known is not None and known[1] >= phy_min and self.min_logic_offset <= first.start_offset + known[0]:
            self.min_logic_offset = first.start_offset + known[0]  # recovery already read the first unit
            return
        pos = first.wrote
        for at, offset, size, _tags in _units(first, max(self.min_logic_offset - first.start_offset, 0), first.wrote):
            if size != 0x7FFFFFFF and offset >= phy_min:
                pos = at
                break
        self.min_logic_offset = first.start_offset + pos

    def delete_expired(self, phy_min: int) -> int:
        """Delete whole segments whose last unit points below ``phy_min``. A pull still
        reading one keeps its descriptor, so deletion never waits for readers."""

        def expired(seg: QueueSegment) -> bool:
            try:
                offset, _size, _ = UNIT.unpack(seg.read(seg.size - UNIT_SIZE, UNIT_SIZE))
            except (SegmentGoneError, struct.error):
                return False
            return bool(offset < phy_min)

        removed = self.files.delete_first_while(expired)
        if removed:
            self.correct_min_offset(phy_min)
        return len(removed)

    def close(self) -> None:
        self.files.close()

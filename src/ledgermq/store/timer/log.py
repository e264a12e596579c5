"""The timer log (RocketMQ 5 ``TimerLog``): ``storePathRootDir/timerlog/``, segments of
``mappedFileSizeTimerLog`` bytes named by their start offset, like the commit log's.

Each unit is 52 bytes, big-endian: size (4, always 52), the position of the previous unit
of the same slot (8, -1 for the first: each slot's units form a chain backwards from the
wheel's ``last_pos``), magic (4: 1 = a timer, | 2 = roll it back into the wheel), the
time it was filed (8), the slot time minus that (4), the commit-log offset and size of
the message (8 + 4), a hash of its real topic (4; RocketMQ's metrics, 0 here) and a
reserved long (8), where ledgermq keeps the unit's offset in the rmq_sys_wheel_timer
consume queue so recovery knows how far filing got (RocketMQ leaves it 0 and ignores it).
A segment ends with a blank record (size, 0, BLANK_MAGIC) where the next unit does not fit.

Units are appended with ``pwrite`` on the segment's file, not through its mapping: pages
written through a mapping stay in the process's resident set (52 MB per million pending
timers, RssFile) until the segment is unmapped, while pages written to the file are only
page cache. Reads (delivery, recovery) still go through the mapping and fault in just the
pages they need.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ledgermq.store.mapped_file import MappedFile, SegmentGoneError
from ledgermq.store.mapped_file_queue import MappedFileQueue

log = logging.getLogger(__name__)

UNIT = struct.Struct(">iqiqiqiiq")
UNIT_SIZE = UNIT.size  # 52
BLANK = struct.Struct(">iqi")
MIN_BLANK_LEN = BLANK.size  # 16
BLANK_MAGIC_CODE = -875286124  # RocketMQ's 0xBBCCDDEE ^ 1880681586 + 8, as a Java int
MAGIC_DEFAULT = 1
MAGIC_ROLL = 1 << 1
MAGIC_DELETE = 1 << 2


def magic_ok(magic: int) -> bool:
    return magic != 0 and (magic | 0xF) == 0xF


@dataclass(frozen=True, slots=True)
class Unit:
    pos: int
    prev_pos: int
    magic: int
    enqueue_ms: int
    slot_ms: int
    phy: int
    size: int
    queue_offset: int


def _unit(pos: int, raw: tuple[int, int, int, int, int, int, int, int, int]) -> Unit:
    _size, prev, magic, enqueue_ms, delta, phy, size, _hash, queue_offset = raw
    return Unit(pos, prev, magic, enqueue_ms, enqueue_ms + delta, phy, size, queue_offset)


class TimerLog:
    def __init__(self, directory: Path, file_size: int) -> None:
        self.files = MappedFileQueue(directory, file_size)
        self.file_size = file_size

    def load(self) -> None:
        self.files.load()

    @property
    def end(self) -> int:
        last = self.files.last()
        return last.start_offset + last.wrote if last is not None else 0

    @property
    def start(self) -> int:
        first = self.files.first()
        return first.start_offset if first is not None else 0

    def append(self, unit: bytes) -> int:
        """Append one packed unit; return its position."""
        mf = self.files.last_for_write()
        if len(unit) + MIN_BLANK_LEN > mf.size - mf.wrote:
            mf.append_through_fd((BLANK.pack(mf.size - mf.wrote, 0, BLANK_MAGIC_CODE),))
            mf.wrote = mf.size
            mf = self.files.last_for_write()
        return mf.start_offset + mf.append_through_fd((unit,))

    def read(self, pos: int) -> Unit | None:
        mf = self.files.find(pos)
        if mf is None:
            return None
        rel = pos - mf.start_offset
        if rel + UNIT_SIZE > mf.wrote:
            return None
        try:
            raw = UNIT.unpack_from(mf.mm, rel)
        except (ValueError, SegmentGoneError):
            return None
        if raw[0] != UNIT_SIZE or not magic_ok(raw[2]):
            return None
        return _unit(pos, raw)

    def units(self, mf: MappedFile, start: int = 0, end: int | None = None) -> Iterator[Unit]:
        """The units of one segment from ``start`` (a unit boundary) to its blank end or its
        first torn or unwritten unit."""
        limit = mf.size if end is None else end
        pos = start
        while pos + UNIT_SIZE <= limit:
            raw = UNIT.unpack_from(mf.mm, pos)
            if raw[0] != UNIT_SIZE or not magic_ok(raw[2]):
                return
            yield _unit(mf.start_offset + pos, raw)
            pos += UNIT_SIZE

    def recover(self, trusted_to: int) -> list[Unit]:
        """Find where the log really ends (read from ``trusted_to``, the position flushed at
        the last checkpoint, to the first unwritten or torn unit of the last segment), cut
        what follows, and return the units after ``trusted_to`` for the wheel to check."""
        files = self.files.files
        if not files:
            return []
        for mf in files[:-1]:
            mf.wrote = mf.flushed = mf.size  # sealed: each ends with its blank
        seen: list[Unit] = []
        last = files[-1]
        pos = min(last.size, max(0, trusted_to - last.start_offset))
        for mf in files:
            if mf.end_offset <= trusted_to:
                continue
            begin = max(0, trusted_to - mf.start_offset)
            pos = begin - begin % UNIT_SIZE
            for unit in self.units(mf, pos):
                seen.append(unit)
                pos = unit.pos - mf.start_offset + UNIT_SIZE
        if pos + MIN_BLANK_LEN <= last.size and BLANK.unpack_from(last.mm, pos)[2] == BLANK_MAGIC_CODE:
            pos = last.size
        if pos < last.size and any(last.mm[pos : min(last.size, pos + 4096)]):
            log.warning("timer log %s: cut at %d (a torn unit)", last.path.name, pos)
            last.truncate_to(pos)
        last.wrote = last.flushed = pos
        return seen

    def flush(self) -> int:
        return self.files.flush()

    def delete_sealed_while(self, deletable: Callable[[MappedFile], bool]) -> list[int]:
        """Delete leading sealed segments while ``deletable``; their start offsets."""
        removed = self.files.delete_first_while(deletable, max_files=10, force_after_s=0.0)
        return [mf.start_offset for mf in removed]

    def close(self) -> None:
        self.files.close()

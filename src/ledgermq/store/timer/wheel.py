"""The timer wheel file (RocketMQ 5 ``TimerWheel``): ``storePathRootDir/timerwheel``.

``2 * slotsTotal`` slots of 32 bytes, big-endian: the slot's time divided by the
precision (8), the timer-log position of its first and last unit (8 + 8), how many units
it holds (4) and a magic (4, unused). Slot ``i`` serves every time whose
``time / precision % (2 * slotsTotal)`` is ``i``; the stored time says which of those it
currently holds, so a slot whose time differs is empty for the time asked about.

The file is memory-mapped and read and written in place: RocketMQ keeps a second copy of
the whole wheel in memory, ledgermq does not, so the process holds none of it; only the
pages of slots touched recently are resident, and those belong to the page cache.
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from ledgermq.errors import StoreError

SLOT = struct.Struct(">qqqii")  # time / precision, first pos, last pos, num, magic
SLOT_SIZE = SLOT.size  # 32


@dataclass(frozen=True, slots=True)
class Slot:
    time_ms: int
    first_pos: int
    last_pos: int
    num: int


class TimerWheel:
    def __init__(self, path: Path, slots_total: int, precision_ms: int) -> None:
        self.path = path
        self.slots_total = slots_total
        self.precision_ms = precision_ms
        self.length = slots_total * 2 * SLOT_SIZE
        path.parent.mkdir(parents=True, exist_ok=True)
        existed = path.exists() and path.stat().st_size != 0
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            size = os.fstat(self.fd).st_size
            if existed and size != self.length:
                raise StoreError(f"{path} is {size} bytes but a wheel of {slots_total} slots needs {self.length}")
            if size != self.length:
                os.ftruncate(self.fd, self.length)  # sparse: unwritten slots cost no disk or memory
            self.mm = mmap.mmap(self.fd, self.length, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(self.fd)
            raise
        self.existed = existed

    def index(self, time_ms: int) -> int:
        return time_ms // self.precision_ms % (self.slots_total * 2)

    def slot(self, time_ms: int) -> Slot | None:
        """The slot of ``time_ms``, or None when it holds nothing for that time."""
        stored, first, last, num, _magic = SLOT.unpack_from(self.mm, self.index(time_ms) * SLOT_SIZE)
        if stored != time_ms // self.precision_ms:
            return None
        return Slot(stored * self.precision_ms, first, last, num)

    def put(self, time_ms: int, first_pos: int, last_pos: int, num: int) -> None:
        at = self.index(time_ms) * SLOT_SIZE
        SLOT.pack_into(self.mm, at, time_ms // self.precision_ms, first_pos, last_pos, num, 0)

    def clear(self, time_ms: int) -> None:
        SLOT.pack_into(self.mm, self.index(time_ms) * SLOT_SIZE, 0, 0, 0, 0, 0)

    def live_slots(self, from_ms: int) -> list[Slot]:
        """Every slot holding a time at or after ``from_ms`` (a scan of the whole file: for
        recovery, which needs it once)."""
        start = from_ms // self.precision_ms
        out: list[Slot] = []
        for stored, first, last, num, _magic in SLOT.iter_unpack(self.mm):
            if stored >= start and num > 0:
                out.append(Slot(stored * self.precision_ms, first, last, num))
        return out

    def flush(self) -> None:
        self.mm.flush()  # msync: only the dirty pages are written

    def close(self) -> None:
        try:
            self.mm.flush()
        finally:
            self.mm.close()
            os.close(self.fd)

"""The timer wheel file (RocketMQ 5 ``TimerWheel``): ``storePathRootDir/timerwheel``.

``2 * slotsTotal`` slots of 32 bytes, big-endian: the slot's time divided by the
precision (8), the timer-log position of its first and last unit (8 + 8), how many units
it holds (4) and a magic (4, unused). Slot ``i`` serves every time whose
``time / precision % (2 * slotsTotal)`` is ``i``; the stored time says which of those it
currently holds, so a slot whose time differs is empty for the time asked about.

The file is read and written in place, a slot at a time, with ``pread``/``pwrite``: RocketMQ
keeps a second copy of the whole wheel in memory, ledgermq does not, and it does not map the
file either, so none of it counts in the process's resident set. (It was mapped; a million
timers spread over a week touch every page of it, 37 MiB of file RSS, and the scan at
start-up touched them all.) The slots in use stay in the page cache, which the kernel
evicts under pressure; a slot read costs one system call, under a microsecond.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

from ledgermq.errors import StoreError

SLOT = struct.Struct(">qqqii")  # time / precision, first pos, last pos, num, magic
SLOT_SIZE = SLOT.size  # 32
_EMPTY = bytes(SLOT_SIZE)
_SCAN_CHUNK = (1 << 20) // SLOT_SIZE * SLOT_SIZE  # slots read at a time by the full scan


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
        except BaseException:
            os.close(self.fd)
            raise
        self.existed = existed

    def index(self, time_ms: int) -> int:
        return time_ms // self.precision_ms % (self.slots_total * 2)

    def slot(self, time_ms: int) -> Slot | None:
        """The slot of ``time_ms``, or None when it holds nothing for that time."""
        raw = os.pread(self.fd, SLOT_SIZE, self.index(time_ms) * SLOT_SIZE)
        stored, first, last, num, _magic = SLOT.unpack(raw)
        if stored != time_ms // self.precision_ms:
            return None
        return Slot(stored * self.precision_ms, first, last, num)

    def put(self, time_ms: int, first_pos: int, last_pos: int, num: int) -> None:
        at = self.index(time_ms) * SLOT_SIZE
        self._write(at, SLOT.pack(time_ms // self.precision_ms, first_pos, last_pos, num, 0))

    def clear(self, time_ms: int) -> None:
        self._write(self.index(time_ms) * SLOT_SIZE, _EMPTY)

    def _write(self, at: int, raw: bytes) -> None:
        if os.pwrite(self.fd, raw, at) != SLOT_SIZE:
            raise StoreError(f"{self.path}: a short write of slot {at // SLOT_SIZE}")

    def live_slots(self, from_ms: int) -> list[Slot]:
        """Every slot holding a time at or after ``from_ms`` (a scan of the whole file: for
        recovery, which needs it once)."""
        start = from_ms // self.precision_ms
        out: list[Slot] = []
        for at in range(0, self.length, _SCAN_CHUNK):
            raw = os.pread(self.fd, min(_SCAN_CHUNK, self.length - at), at)
            for stored, first, last, num, _magic in SLOT.iter_unpack(raw):
                if stored >= start and num > 0:
                    out.append(Slot(stored * self.precision_ms, first, last, num))
        return out

    def flush(self) -> None:
        os.fdatasync(self.fd)  # only the dirty pages are written

    def close(self) -> None:
        try:
            self.flush()
        finally:
            os.close(self.fd)

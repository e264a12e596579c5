"""The timer checkpoint (RocketMQ 5 ``TimerCheckpoint``): ``storePathRootDir/config/timercheck``.

A page whose first 56 bytes are RocketMQ's, big-endian longs: lastReadTimeMs (the next
slot to deliver: every earlier one has been delivered), lastTimerLogFlushPos (the timer
log is durable up to here), lastTimerQueueOffset (rmq_sys_wheel_timer's consume queue is
filed up to here), masterTimerQueueOffset (a master: the same; a slave: its master's,
the most it may file) and the data version (state version, timestamp, counter). The
same 56 bytes are the body of GET_TIMER_CHECK_POINT. ledgermq adds one long at byte 56,
which RocketMQ does not read: the timer-log position of the last unit of slot
lastReadTimeMs already delivered (-1: none), so a restart does not deliver that slot's
first part again. The page is written whole, atomically (temp file, fsync, rename).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace
from pathlib import Path

from ledgermq.atomic_file import write_atomic

WIRE = struct.Struct(">qqqqqqq")  # the 56 bytes RocketMQ reads and sends
_DONE = struct.Struct(">q")
PAGE = 4096


@dataclass(frozen=True, slots=True)
class CheckpointData:
    read_ms: int = 0
    log_flush_pos: int = 0
    queue_offset: int = 0
    master_queue_offset: int = 0
    state_version: int = 0
    timestamp: int = 0
    counter: int = 0
    done_pos: int = -1

    def encode(self) -> bytes:
        """The 56-byte wire form (GET_TIMER_CHECK_POINT's body)."""
        return WIRE.pack(
            self.read_ms,
            self.log_flush_pos,
            self.queue_offset,
            self.master_queue_offset,
            self.state_version,
            self.timestamp,
            self.counter,
        )

    @classmethod
    def decode(cls, data: bytes) -> CheckpointData:
        """The wire form; RocketMQ before 5.1 sends only the first 32 bytes."""
        if len(data) >= WIRE.size:
            return cls(*WIRE.unpack_from(data))
        if len(data) >= 32:
            return cls(*struct.unpack_from(">qqqq", data))
        raise ValueError(f"a timer checkpoint is at least 32 bytes, got {len(data)}")


class TimerCheckpointFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.existed = False

    def load(self) -> CheckpointData:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return CheckpointData()
        self.existed = True
        found = CheckpointData.decode(data)
        if len(data) >= WIRE.size + _DONE.size:
            found = replace(found, done_pos=_DONE.unpack_from(data, WIRE.size)[0])
        return found

    def save(self, data: CheckpointData) -> None:
        page = bytearray(PAGE)
        page[: WIRE.size] = data.encode()
        _DONE.pack_into(page, WIRE.size, data.done_pos)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, bytes(page))

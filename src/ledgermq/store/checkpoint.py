"""The store checkpoint: how far each kind of data is known to be durable, by store time.

File ``<root>/checkpoint``, 4096 bytes, big-endian int64 milliseconds::

    0   physicMsgTimestamp   newest commit-log record that was flushed
    8   logicsMsgTimestamp   newest record whose consume-queue unit was flushed
    16  indexMsgTimestamp    newest record whose index entries were flushed

Same layout as RocketMQ 4.x, so either can open the other's store; unlike RocketMQ we
replace the file atomically instead of rewriting a mapping in place, so a crash mid-write
leaves the previous checkpoint, never a torn one.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from ledgermq.atomic_file import write_atomic

FILE_SIZE = 4096
_FIELDS = struct.Struct(">qqq")
# RocketMQ steps back 3 s from the checkpoint before picking where abnormal recovery starts.
RECOVERY_MARGIN_MS = 3000


@dataclass(slots=True)
class Checkpoint:
    path: Path
    physic_ts: int = 0
    logics_ts: int = 0
    index_ts: int = 0

    @classmethod
    def load(cls, path: Path) -> Checkpoint:
        cp = cls(path)
        if path.exists():
            data = path.read_bytes()
            if len(data) >= _FIELDS.size:
                cp.physic_ts, cp.logics_ts, cp.index_ts = _FIELDS.unpack_from(data)
        return cp

    def save(self) -> None:
        buf = bytearray(FILE_SIZE)
        _FIELDS.pack_into(buf, 0, self.physic_ts, self.logics_ts, self.index_ts)
        write_atomic(self.path, bytes(buf))

    def min_timestamp(self, with_index: bool = False) -> int:
        """Store time up to which everything derived is durable, minus RocketMQ's margin."""
        low = min(self.physic_ts, self.logics_ts)
        if with_index:
            low = min(low, self.index_ts)
        return max(low - RECOVERY_MARGIN_MS, 0)

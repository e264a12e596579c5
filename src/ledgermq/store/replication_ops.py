"""The replication side of a native store: what HA slaves and recovering masters do to
the commit log (raw appends at our end, reads for transfer, online truncation by offset,
record boundaries).

``NativeMessageStore`` holds a ``StoreReplication`` and forwards these methods to it (the
HA code calls them on the store). They touch the commit log, the consume queues and the
index under the reput service's lock where dispatch must not run meanwhile. (DLedger
mode replicates by Raft index instead: store/dledger/writes.py.)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

from ledgermq.config import StoreConfig
from ledgermq.errors import StoreError
from ledgermq.store.commitlog import CommitLog, queue_key
from ledgermq.store.core import StoreCore
from ledgermq.store.dispatch import whole_records_end


class StoreReplication:
    """Raw appends, transfer reads and truncation by offset, over a native commit log."""

    def __init__(self, core: StoreCore, commitlog: CommitLog) -> None:
        self.core = core  # its reput is set at start
        self.commitlog = commitlog
        self.queues = core.queues
        self.index = core.index
        self.damage = core.damage

    @property
    def config(self) -> StoreConfig:
        return self.core.config

    def append_raw(self, offset: int, data: bytes | memoryview | Sequence[bytes | memoryview]) -> None:
        """Append a master's commit-log bytes at ``offset`` (= our max offset).

        ``data`` may be several buffers that follow each other in the log."""
        try:
            self.commitlog.append_raw(offset, data)
        except OSError as exc:
            self.core.fail(f"raw append failed: {exc}")
            raise
        reput = self.core.reput
        if reput is not None and not reput.appender_dispatches:  # else a call per append that does nothing
            reput.after_append()

    def adopt_raw_tail(self, timeout: float = 60.0) -> None:
        """After a master took records back with ``append_raw``: dispatch them and continue
        each queue's offsets after them (puts assign queue offsets from that table)."""
        reput = self.core.reput
        if reput is not None and not reput.wait_for(self.commitlog.max_offset, timeout):
            raise StoreError(f"records taken back were not dispatched within {timeout:.0f}s")
        with reput.holding_long() if reput is not None else contextlib.nullcontext():
            for cq in self.queues.all():
                self.commitlog.queue_offsets[queue_key(cq.topic, cq.queue_id)] = cq.max_offset

    def hold_dispatch_while(self, hold: Callable[[], bool] | None) -> None:
        """A replica's HA client: pause background dispatch while ``hold()`` is True (bounded;
        see ``ReputService``), so a bulk copy does not share the interpreter with it."""
        if self.core.reput is not None:
            self.core.reput.hold_off = hold

    def read_commitlog(self, offset: int, max_bytes: int) -> bytes:
        """Commit-log bytes from ``offset`` within one segment (HA transfer);
        CorruptRangeError when they would overlap a damaged range."""
        data = self.commitlog.read_from(offset, max_bytes)
        if data and self.damage.any:
            self.damage.check(offset, offset + len(data))
        return data

    def truncate_after_offset(self, offset: int) -> None:
        """Drop commit-log bytes from ``offset`` on, and the units that point there.

        For a slave realigning with its master while it keeps serving reads: the reput
        service is held off (its lock) so no unit for cut data is written afterwards,
        readers holding cut segments keep them until they let go, and the index forgets
        its progress past the cut (stale entries are filtered out by key on lookup).
        """
        reput = self.core.reput
        with reput.holding_long() if reput is not None else contextlib.nullcontext():
            self.commitlog.truncate_after_offset(offset)
            for cq in self.queues.all():
                cq.truncate_dirty(offset)
                self.commitlog.queue_offsets[queue_key(cq.topic, cq.queue_id)] = cq.max_offset
            if reput is not None and reput.reput_from >= offset:
                reput.reput_from = offset
                reput.stuck_reason = None  # what it could not read is gone; it reads anew
            if self.index is not None:
                self.index.forget_after(offset)

    def whole_records_end(self, start: int | None = None) -> int:
        """The end of the last whole record in the commit log, walking from ``start`` (default:
        where dispatch stands, below which every record is known whole).

        A slave's log may end inside a record (HA frames are cut by size, not by record) or,
        after a bad copy, in bytes that are no record at all; replication agrees on offsets
        only at record boundaries."""
        reput = self.core.reput
        pos = (reput.reput_from if reput is not None else self.commitlog.min_offset) if start is None else start
        end = self.commitlog.max_offset
        segment = self.config.mapped_file_size_commitlog
        while pos < end:
            data = self.commitlog.read_from(pos, min(end - pos, 8 * 1024 * 1024))
            if not data:
                break
            took = whole_records_end(data, pos, segment, check_crc=self.config.check_crc_on_recover)
            if took == 0:
                break
            pos += took
        return min(pos, end)

"""The commit log: every message of every topic, appended in arrival order.

Records never span segments: when the next put does not fit (plus 8 bytes for a blank
marker), the rest of the segment gets a BLANK header (TOTALSIZE = bytes left, magic
0xCBD43194) and the put goes to the next segment. A batch is written contiguously.

Concurrency: one put lock serialises appends (offset assignment and the copy into the
mapping); readers need no lock because they only read below ``max_offset``, which moves
after the bytes are in place.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ledgermq.clock import Clock
from ledgermq.errors import RemoteProtocolError, StoreClosedError, StoreError
from ledgermq.failpoints import failpoint
from ledgermq.protocol import message as M
from ledgermq.protocol.msgid import offset_msg_id
from ledgermq.store.appended import AppendedRecords
from ledgermq.store.dispatch import DispatchRequest
from ledgermq.store.log_start import LogStartRecord
from ledgermq.store.mapped_file import MappedFile, SegmentGoneError
from ledgermq.store.mapped_file_queue import MappedFileQueue
from ledgermq.store.results import AppendResult

_BLANK = struct.Struct(">ii")
_WHOLE_READ_MAX = 2048  # properties_at: up to this record size one read of the whole record is cheaper
BLANK_HEADER_SIZE = _BLANK.size


@dataclass(slots=True)
class EncodedMessage:
    """A record pre-encoded outside the lock; offsets and store time are filled in later."""

    data: bytearray
    queue_key: str  # "topic-queueId", RocketMQ's topicQueueTable key
    takes_queue_offset: bool  # False for PREPARED / ROLLBACK records
    store_host: M.Host  # what the record says, so its offset msg id names the same host
    # What dispatch needs, known at put time (store/appended.py); None: the reput parses the record.
    facts: DispatchRequest | None = None


def queue_key(topic: str, queue_id: int) -> str:
    return f"{topic}-{queue_id}"


class CommitLog:
    """The native commit log: appends (puts, a slave's raw bytes), online truncation by
    offset, and reads. In DLedger mode it only serves what was stored before the switch
    (``DLedgerCommitLog.old_log``)."""

    def __init__(
        self, directory: Path, segment_size: int, clock: Clock, start_record: LogStartRecord | None = None
    ) -> None:
        self.queue = MappedFileQueue(directory, segment_size, clock, start_record)
        self.segment_size = segment_size
        self.clock = clock
        self.put_lock = threading.Lock()
        # Next consume-queue offset per "topic-queueId"; rebuilt from the queues at recovery.
        self.queue_offsets: dict[str, int] = {}
        self.last_store_timestamp = 0
        self.closed = False  # set under the put lock at shutdown: later puts are refused
        # Dispatch facts of what ``append`` wrote, for the reput (store/appended.py).
        self.appended = AppendedRecords()
        # Told of every online truncation (the store forgets damage and digests past it).
        self.on_truncate: Callable[[int], None] | None = None

    def load(self, on_damage: Callable[[int, int, str], object] | None = None) -> None:
        """Map the segments; ``on_damage`` hears of missing or short ones in the middle
        (recreated at full size for a replica to repair; MappedFileQueue.load)."""
        self.queue.load(on_damage)

    # -- offsets ---------------------------------------------------------------------
    # Both read the segment list directly (``SegmentRun.first``/``max_offset`` spelled out):
    # replication and dispatch read ``max_offset`` five to seven times per send, and read
    # this way it is one Python call instead of three.
    @property
    def min_offset(self) -> int:
        files = self.queue.files
        if not files:
            return 0
        first = files[0]
        return first.start_offset if first.available else first.start_offset + first.size

    @property
    def max_offset(self) -> int:
        files = self.queue.files
        if not files:
            return 0
        last = files[-1]
        return last.start_offset + last.wrote

    @property
    def flushed_offset(self) -> int:
        return self.queue.flushed_offset()

    def segment_files(self) -> list[MappedFile]:
        """The segment files, oldest first (tools and metrics list and size them)."""
        return list(self.queue.files)

    # -- appends ---------------------------------------------------------------------
    def append(self, messages: list[EncodedMessage], topic: str, queue_id: int) -> AppendResult:
        """Append one message or one batch; all records land contiguously."""
        if len(messages) == 1:
            data = messages[0].data
            total = len(data)
        else:
            total = sum([len(m.data) for m in messages])
            data = bytearray().join([m.data for m in messages])
        if total + BLANK_HEADER_SIZE > self.segment_size:
            raise StoreError(f"{total} bytes cannot fit in a {self.segment_size}-byte segment")
        with self.put_lock:
            if self.closed:
                raise StoreClosedError("the commit log is shut down")
            mf = self._segment_with_room(total)
            now = self.clock.wall_ms()
            if now < self.last_store_timestamp:
                now = self.last_store_timestamp  # store times never go back within a log
            phys = mf.start_offset + mf.wrote
            first_queue_offset = -1
            offsets = self.queue_offsets
            at = 0
            for m in messages:
                if m.takes_queue_offset:
                    qoff = offsets.get(m.queue_key, 0)
                    offsets[m.queue_key] = qoff + 1
                else:
                    qoff = 0
                if first_queue_offset < 0:
                    first_queue_offset = qoff
                M.set_append_fields(data, at, qoff, phys + at, now)
                facts = m.facts
                if facts is not None:
                    facts.commit_log_offset = phys + at
                    facts.queue_offset = qoff
                    facts.store_timestamp = now
                at += len(m.data)
            failpoint("commitlog.before_append")
            mf.append(data)
            self.last_store_timestamp = now
            appended = self.appended
            for m in messages:
                if m.facts is not None:
                    appended.add(m.facts)
        ids = []
        at = phys
        for m in messages:  # outside the lock: only the offsets it assigned are needed
            ids.append(offset_msg_id(m.store_host, at))
            at += len(m.data)
        return AppendResult(phys, total, ids, now, first_queue_offset, len(messages), topic, queue_id)

    def _segment_with_room(self, size: int) -> MappedFile:
        mf = self.queue.last_for_write()
        if size + BLANK_HEADER_SIZE > mf.remaining():
            rest = mf.remaining()
            header = _BLANK.pack(rest, M.BLANK_MAGIC_CODE)
            mf.write_at(mf.wrote, header[: min(rest, BLANK_HEADER_SIZE)])
            mf.wrote = mf.size
            mf = self.queue.last_for_write()
        return mf

    def append_raw(self, offset: int, data: bytes | memoryview | Sequence[bytes | memoryview]) -> None:
        """Append bytes copied from a master at exactly our end (HA slaves, Raft followers).

        ``data`` is one buffer or several that follow each other in the log (the bodies of
        consecutive HA frames). The bytes are the master's commit log, blanks included, so
        segment boundaries line up by construction; data that would cross one is split.
        """
        parts = (
            [memoryview(data)] if isinstance(data, (bytes, bytearray, memoryview)) else [memoryview(p) for p in data]
        )
        with self.put_lock:
            if self.closed:
                raise StoreClosedError("the commit log is shut down")
            empty = self.queue.empty
            if empty and offset % self.segment_size:
                raise StoreError(f"an empty commit log starts at a segment boundary, not at {offset}")
            if not empty and offset != self.max_offset:
                raise StoreError(f"append at {offset} but the commit log ends at {self.max_offset}")
            parts.reverse()  # consumed from the end
            while parts:
                mf = self.queue.last_for_write(start_if_empty=offset)
                room = mf.remaining()
                take: list[memoryview] = []
                while parts and room:
                    part = parts.pop()
                    if len(part) > room:
                        parts.append(part[room:])
                        part = part[:room]
                    take.append(part)
                    room -= len(part)
                mf.append_through_fd(take)

    def truncate_after_offset(self, offset: int) -> None:
        """Drop the bytes from commit-log ``offset`` on (a slave realigning online); the
        caller also holds the dispatch lock."""
        with self.put_lock:
            self.appended.clear()
            self.queue.truncate_after(offset, online=True)
            if self.on_truncate is not None:
                self.on_truncate(offset)

    # -- reads -----------------------------------------------------------------------
    def read(self, offset: int, size: int) -> bytes | None:
        """``size`` bytes at ``offset``, or None if any of them is gone or unwritten."""
        mf = self.queue.find(offset)
        if mf is None or not mf.pin():
            return None
        try:
            pos = offset - mf.start_offset
            if pos + size > mf.wrote:
                return None
            return mf.read(pos, size)
        except SegmentGoneError:
            return None
        finally:
            mf.unpin()

    def unreadable_reason(self, offset: int, size: int) -> str | None:
        """Why ``read(offset, size)`` found nothing although a consume-queue unit points
        there, when that is only for now (the reader must ask again at the same offset);
        None when the bytes are gone for good (retention deleted their segment: the reader
        moves past them, RocketMQ's MESSAGE_WAS_REMOVING). A native log only ever loses
        bytes to retention."""
        return None

    def properties_at(self, offset: int, size: int) -> str | None:
        """The properties text of the ``size``-byte record at ``offset``, read without its
        body (what a property filter needs to skip a message), or None if it is gone.
        RemoteProtocolError if the record's fields do not add up to ``size``."""
        mf = self.queue.find(offset)
        if mf is None or not mf.pin():
            return None
        try:
            pos = offset - mf.start_offset
            if pos + size > mf.wrote:
                return None
            if size <= _WHOLE_READ_MAX:  # one copy beats two reads for small records
                return M.record_properties_text(mf.read(pos, size))
            tail_at = M.body_end(mf.read(pos, M.MAX_HEAD_SIZE))
            if tail_at >= size:
                raise RemoteProtocolError(f"record at {offset}: body overruns the record")
            return M.properties_after_body(mf.read(pos + tail_at, size - tail_at))
        except SegmentGoneError:
            return None
        finally:
            mf.unpin()

    def read_from(self, offset: int, max_bytes: int) -> bytes:
        """What is stored from ``offset`` to the end of its segment, at most ``max_bytes``.

        Used by HA masters: each transfer stays within one segment, as RocketMQ's does.
        """
        mf = self.queue.find(offset)
        if mf is None or not mf.pin():
            return b""
        try:
            pos = offset - mf.start_offset
            return mf.read(pos, max(0, min(max_bytes, mf.wrote - pos)))
        except SegmentGoneError:
            return b""
        finally:
            mf.unpin()

    def record_at(self, offset: int) -> bytes | None:
        """The whole stored record starting at ``offset``."""
        return record_at(self.read, offset)

    def store_timestamp_at(self, offset: int, size: int) -> int:
        """Store time of the record at ``offset`` or -1 (``pickupStoreTimestamp``)."""
        return store_timestamp_at(self.read, offset, size)

    def close(self) -> None:
        with self.put_lock:
            self.closed = True
            self.queue.close()


ReadAt = Callable[[int, int], bytes | None]
"""``read(offset, size)`` of a commit log: the bytes, or None if any of them is gone."""


def record_at(read: ReadAt, offset: int) -> bytes | None:
    """The whole stored record starting at ``offset``, read through ``read`` (shared by
    both modes' commit logs)."""
    head = read(offset, 8)
    if head is None:
        return None
    size, magic = _BLANK.unpack(head)
    if magic != M.MESSAGE_MAGIC_CODE or size <= 0:
        return None
    return read(offset, size)


def store_timestamp_at(read: ReadAt, offset: int, size: int) -> int:
    """Store time of the ``size``-byte record at ``offset`` or -1 (``pickupStoreTimestamp``)."""
    rec = read(offset, min(size, M.BORNHOST_POS + 20 + 8))
    if rec is None or len(rec) < M.BORNHOST_POS + 16:
        return -1
    sysflag = struct.unpack_from(">i", rec, M.SYSFLAG_POS)[0]
    pos = M.store_timestamp_pos(sysflag)
    if pos + 8 > len(rec):
        return -1
    return int(struct.unpack_from(">q", rec, pos)[0])
